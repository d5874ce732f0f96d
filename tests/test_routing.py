"""The router's event builders, pure: the fast path of a read produces the model's bytes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from workflow.classify.engine import classify
from workflow.messages import REQUEST_ID_PREFIX, Proposal
from workflow.policy.engine import evaluate
from workflow.policy.model import default_policy
from workflow.routing import immediate_release, release_id_for, released_event, route
from workflow.subjects import Subjects

SUBJECTS = Subjects("headgate")
POLICY = default_policy()
TOKEN = st.from_regex(r"[A-Za-z0-9_-]{1,40}", fullmatch=True)
IDENT = st.from_regex(r"[A-Za-z0-9_.:@-]{1,80}", fullmatch=True).filter(
    lambda s: not s.startswith(REQUEST_ID_PREFIX)  # request ids have their own namespace
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
MOMENTS = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)


@given(
    pid=IDENT,
    agent=TOKEN,
    workspace=TOKEN,
    path=st.text(min_size=1),
    extra=st.dictionaries(st.text().filter(lambda k: k != "path"), JSON, max_size=4),
    now=MOMENTS,
)
def test_an_immediate_release_is_byte_for_byte_the_released_model(
    pid: str, agent: str, workspace: str, path: str, extra: dict[str, Any], now: datetime
) -> None:
    arguments = {"path": path, **extra}
    proposal = Proposal(
        id=pid, agent=agent, workspace=workspace, tool="read_file", arguments=arguments
    )
    c = classify(proposal, POLICY.classifier_tables())
    verdict = evaluate(proposal, c, POLICY)
    digest = proposal.digest()
    model = released_event(SUBJECTS, proposal, digest, c, verdict, (), now)
    fast = immediate_release(
        SUBJECTS,
        proposal,
        digest,
        release_id_for(pid),
        c.model_dump_json(),
        verdict.model_dump_json(),
        now,
    )
    assert fast == model


def test_the_router_releases_an_allowed_read_with_the_fast_event() -> None:
    proposal = Proposal(id="p1", agent="a", tool="read_file", arguments={"path": "ü/ß.txt"})
    c = classify(proposal, POLICY.classifier_tables())
    verdict = evaluate(proposal, c, POLICY)
    now = datetime(2026, 11, 30, tzinfo=UTC) + timedelta(microseconds=7)
    record = route(SUBJECTS, proposal, proposal.model_dump_json(), c, verdict, now)
    (event,) = record.events
    assert event == released_event(SUBJECTS, proposal, proposal.digest(), c, verdict, (), now)
    assert record.outcome is not None
    assert record.outcome.release_id == release_id_for("p1")
