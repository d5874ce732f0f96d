"""Internationalised host names are judged as clients connect to them (issue 13): UTS #46
non-transitional processing, as curl, httpx and browsers do."""

from __future__ import annotations

import idna
import pytest
from hypothesis import given
from hypothesis import strategies as st

from workflow.classify.hosts import host_findings, url_findings

# Names whose IDNA 2003 (Python's codec) form differs from what clients connect to.
DEVIATIONS = ["faß.de", "straße.example", "ςοφία.gr", "a\u200dbc.example"]


def _rules(url: str, trusted: tuple[str, ...]) -> set[str]:
    return {f.rule for f in url_findings(url, trusted, "`web_fetch`")}


@pytest.mark.parametrize("host", DEVIATIONS)
def test_a_deviation_character_is_not_the_trusted_ascii_name(host: str) -> None:
    imitated = host.encode("idna").decode("ascii")  # what the old judgement compared
    rules = _rules(f"https://{host}/x", (imitated,))
    assert "egress.trusted_host" not in rules
    assert "egress.untrusted_host" in rules or "egress.bad_host" in rules


def test_the_name_clients_connect_to_is_the_one_trusted() -> None:
    assert "egress.trusted_host" in _rules("https://faß.de/", ("xn--fa-hia.de",))
    assert "egress.trusted_host" in _rules("https://ＥＸＡＭＰＬＥ.com/", ("example.com",))
    assert "egress.trusted_host" in _rules("https://fass.de/", ("fass.de",))


LABEL = st.text(
    alphabet=st.characters(codec="utf-8", categories=["Ll", "Lu", "Lo", "Nd"]),
    min_size=1,
    max_size=12,
)


@given(LABEL, st.sampled_from(["de", "com", "example"]))
def test_trust_follows_the_uts46_name_of_any_label(label: str, tld: str) -> None:
    host = f"{label}.{tld}"
    try:
        connects_to = idna.encode(host, uts46=True, transitional=False).decode("ascii")
    except (idna.IDNAError, UnicodeError):
        rules = {f.rule for f in host_findings(host, (), "`x`")}
        assert "egress.trusted_host" not in rules
        return
    trusted = {f.rule for f in host_findings(host, (connects_to,), "`x`")}
    assert "egress.trusted_host" in trusted
