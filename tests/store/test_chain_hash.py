"""The audit chain's record hash is sha256 over the canonical JSON of the record's fields.

`chain_hash` joins that JSON from its parts instead of running the encoder on the list: these
tests hold it to the bytes `canonical_json` (and `json.dumps` with its arguments) gives, for
any text, so records hashed before and after verify alike."""

from __future__ import annotations

import hashlib
import json

from hypothesis import given
from hypothesis import strategies as st

from workflow.messages import canonical_json
from workflow.store.chain import GENESIS, chain_hash

# Any code point but lone surrogates (which no record can hold: it is stored as UTF-8).
_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=200)


def _reference(*fields: object) -> str:
    body = json.dumps(list(fields), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()


@given(
    prev=_TEXT,
    seq=st.integers(min_value=0, max_value=2**53),
    at=_TEXT,
    kind=_TEXT,
    proposal_id=st.none() | _TEXT,
    request_id=st.none() | _TEXT,
    actor=_TEXT,
    data=_TEXT,
)
def test_the_hash_is_over_the_canonical_json_of_the_fields(
    prev: str,
    seq: int,
    at: str,
    kind: str,
    proposal_id: str | None,
    request_id: str | None,
    actor: str,
    data: str,
) -> None:
    fields = (prev, seq, at, kind, proposal_id, request_id, actor, data)
    assert chain_hash(*fields) == _reference(*fields)


def test_text_that_json_escapes_hashes_as_the_encoder_writes_it() -> None:
    data = canonical_json({"reason": 'a "quoted"\\ path\n\ttab \x00\x1f\x7f é ✓ \u2028 😀'})
    fields = (GENESIS, 7, "2026-12-05T08:00:00+00:00", "proposal", "p1", None, "agent", data)
    assert chain_hash(*fields) == _reference(*fields)
    # A known value: a record of an earlier release hashes as it did then.
    known = (GENESIS, 1, "2026-01-01T00:00:00+00:00", "proposal", "p", None, "a", "{}")
    assert (
        chain_hash(*known)
        == hashlib.sha256(
            b'["'
            + GENESIS.encode()
            + b'",1,"2026-01-01T00:00:00+00:00","proposal","p",null,"a","{}"]'
        ).hexdigest()
    )


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=20,
))  # fmt: skip
def test_canonical_json_is_json_dumps_with_sorted_keys(value: object) -> None:
    assert canonical_json(value) == json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
