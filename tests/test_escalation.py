"""Escalation ladders with an injected clock (no sleeps): which steps fall due, in order, once;
what raise and expire do; what the ladder refuses."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from workflow.approvals import HeldRequest
from workflow.escalation import EscalationSpec, due, held_at
from workflow.messages import ApprovalRecord, ApprovalRequirement
from workflow.outcomes import RequestState

HELD = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
LADDER = EscalationSpec.model_validate(
    {
        "steps": [
            {"after": "15m", "action": "remind"},
            {"after": "30m", "action": "notify", "roles": ["lead"], "channels": ["pager"]},
            {"after": "45m", "action": "raise", "roles": ["lead"], "quorum": 2},
            {"after": "50m", "action": "expire"},
        ]
    }
)


def request(roles: list[str] | None = None, approvals: int = 0) -> HeldRequest:
    records = tuple(
        ApprovalRecord(approver=f"a{i}", nonce=f"nonce-{i:04d}", issued_at=HELD)
        for i in range(approvals)
    )
    return HeldRequest(
        request_id="rq_1", proposal_id="p1", agent="builder-7", workspace="acme",
        proposal_digest="d" * 64,
        requirement=ApprovalRequirement(quorum=1, roles=roles or [], ttl_seconds=3600),
        expires_at=HELD + timedelta(hours=1), approvals=records,
    )  # fmt: skip


def at(minutes: float) -> datetime:
    return HELD + timedelta(minutes=minutes)


@pytest.mark.parametrize(
    ("minutes", "taken", "expected"),
    [
        (14.9, 0, []),
        (15, 0, ["remind"]),
        (29, 1, []),
        (31, 1, ["notify"]),
        (31, 0, ["remind", "notify"]),  # the service was down: both, in order
        (46, 2, ["raise"]),
        (55, 0, ["remind", "notify", "raise", "expire"]),
        (55, 4, []),
        (60, 0, []),  # the TTL came first: expiry is its own outcome
    ],
)
def test_the_steps_that_fell_due_are_taken_in_order_and_once(
    minutes: float, taken: int, expected: list[str]
) -> None:
    steps = due(LADDER, request(), taken=taken, now=at(minutes))
    assert [s.step.action for s in steps] == expected
    assert [s.index for s in steps] == list(range(taken, taken + len(expected)))


def test_held_at_is_the_expiry_minus_the_ttl() -> None:
    assert held_at(request()) == HELD


def test_each_step_says_what_happened_with_the_approvals_so_far() -> None:
    remind, notify, raise_, expire = due(LADDER, request(approvals=0), taken=0, now=at(55))
    assert remind.message == "Reminder: still waiting, 0 of 1 approvals after 15m."
    assert notify.message == "Escalated to role lead, channel pager: 0 of 1 approvals after 30m."
    assert raise_.requirement == ApprovalRequirement(quorum=2, roles=["lead"], ttl_seconds=3600)
    assert raise_.message == (
        "Requirement raised to 2 approvals from role lead: 0 of 1 approvals after 45m."
    )
    assert expire.expires
    assert expire.message == "Expired by the escalation ladder: 0 of 2 approvals after 50m."


def test_raise_only_tightens_and_never_makes_a_request_unapprovable() -> None:
    ladder = EscalationSpec.model_validate(
        {"steps": [{"after": 60, "action": "raise", "roles": ["lead"]}]}
    )
    [same] = due(ladder, request(roles=["lead"]), taken=0, now=at(2))
    assert same.requirement is None
    assert "already asks for as much" in same.message
    [disjoint] = due(ladder, request(roles=["dba"]), taken=0, now=at(2))
    assert disjoint.requirement is None
    assert "share none" in disjoint.message


def test_a_closed_request_does_not_escalate() -> None:
    closed = replace(request(), state=RequestState.APPROVED)
    assert due(LADDER, closed, taken=0, now=at(40)) == []


@given(st.lists(st.floats(min_value=0, max_value=59.9), min_size=1, max_size=8))
def test_ticking_the_clock_takes_every_step_exactly_once(ticks: list[float]) -> None:
    taken: list[int] = []
    for minute in sorted(ticks):
        taken += [s.index for s in due(LADDER, request(), taken=len(taken), now=at(minute))]
    assert taken == list(range(len(taken)))
    last = max(ticks)
    assert len(taken) == sum(1 for s in LADDER.steps if s.after <= last * 60)


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([{"after": "30m", "action": "remind"}, {"after": "15m", "action": "remind"}], "order"),
        ([{"after": "1m", "action": "expire"}, {"after": "2m", "action": "remind"}], "ends"),
        ([{"after": "1m", "action": "notify"}], "roles or channels"),
        ([{"after": "1m", "action": "raise"}], "roles or quorum"),
        ([{"after": "1m", "action": "remind", "roles": ["lead"]}], "takes no roles"),
        ([{"after": "1m", "action": "page"}], "Input should be"),
        ([{"after": "soon", "action": "remind"}], "is not a duration"),
    ],
)
def test_a_wrong_ladder_says_what_is_wrong(steps: list[dict[str, object]], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        EscalationSpec.model_validate({"steps": steps})
