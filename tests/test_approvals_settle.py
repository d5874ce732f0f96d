"""Settling a closed request, pure: the approvals are counted again under the current approvers
with the same eligibility rules as a new decision (tables), and a re-check can deny or reopen."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workflow.approvals import (
    Close,
    HeldRequest,
    Reopen,
    Step,
    satisfies,
    settle,
)
from workflow.messages import (
    ApprovalRecord,
    ApprovalRequirement,
    Decision,
    Verdict,
)
from workflow.outcomes import Outcome, RequestState

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Person:
    """An approver as the state machine sees one (`ApproverProfile`)."""

    roles: Sequence[str] = ("approver",)
    workspaces: Sequence[str] = ("*",)
    agents: Sequence[str] = ()

    def may_approve_for(self, workspace: str) -> bool:
        return "*" in self.workspaces or workspace in self.workspaces

    def runs_agent(self, agent: str) -> bool:
        return agent in self.agents


@dataclass(frozen=True)
class Directory:
    """The registered approvers by key (`ApproverDirectory`); the key is the name here."""

    people: dict[str, Person]

    def approver_by_key(self, key: str) -> tuple[str, Person] | None:
        person = self.people.get(key)
        return (key, person) if person is not None else None


def approval(key: str) -> ApprovalRecord:
    return ApprovalRecord(approver=key, key=key, nonce=f"nonce-{key}-0001", issued_at=NOW)


def request(*keys: str) -> HeldRequest:
    return HeldRequest(
        request_id="rq_1",
        proposal_id="p1",
        agent="builder-7",
        workspace="acme",
        proposal_digest="d" * 64,
        requirement=ApprovalRequirement(),
        expires_at=NOW + timedelta(hours=1),
        approvals=tuple(approval(k) for k in keys),
    )


EVERYONE = {"alice": Person(), "bob": Person(roles=("approver", "dba"))}


@pytest.mark.parametrize(
    ("approvers", "people", "requirement", "met"),
    [
        (["alice"], EVERYONE, ApprovalRequirement(quorum=1), True),
        (["alice", "bob"], EVERYONE, ApprovalRequirement(quorum=2), True),
        (["alice", "bob"], EVERYONE, ApprovalRequirement(quorum=3), False),
        (["alice"], EVERYONE, ApprovalRequirement(four_eyes=True), False),
        (["alice", "alice"], EVERYONE, ApprovalRequirement(quorum=2), False),
        (["alice", "bob"], EVERYONE, ApprovalRequirement(quorum=1, roles=["dba"]), True),
        (["alice", "bob"], EVERYONE, ApprovalRequirement(quorum=2, roles=["dba"]), False),
        (["alice", "bob"], {"bob": EVERYONE["bob"]}, ApprovalRequirement(quorum=2), False),
        (
            ["alice", "bob"],
            {**EVERYONE, "alice": Person(workspaces=("elsewhere",))},
            ApprovalRequirement(quorum=2),
            False,
        ),
        (
            ["alice", "bob"],
            {**EVERYONE, "alice": Person(agents=("builder-7",))},
            ApprovalRequirement(quorum=2),
            False,
        ),
        (
            ["builder-7", "bob"],
            {**EVERYONE, "builder-7": Person()},
            ApprovalRequirement(quorum=2),
            False,
        ),
    ],
    ids=[
        "one-of-one",
        "two-of-two",
        "two-of-three",
        "four-eyes-needs-two",
        "one-approver-counts-once",
        "role-held-by-one",
        "role-held-by-one-of-two-needed",
        "approver-removed",
        "workspace-withdrawn",
        "now-runs-the-agent",
        "approver-named-as-the-agent",
    ],
)
def test_approvals_count_only_when_their_approver_may_still_decide(
    approvers: list[str], people: dict[str, Person], requirement: ApprovalRequirement, met: bool
) -> None:
    assert satisfies(request(*approvers), requirement, Directory(people)) is met


def closed(state: RequestState, *keys: str) -> Step:
    req = replace(request(*keys), state=state)
    return Step(request=req, accepted=True, message=f"closed as {state}", closed=state)


HELD = Verdict(
    decision=Decision.REQUIRE_APPROVAL,
    reason="held for one approval",
    requirement=ApprovalRequirement(quorum=1),
)


@pytest.mark.parametrize(
    ("step", "recheck", "expected"),
    [
        (
            closed(RequestState.REJECTED, "alice"),
            None,
            Close(Outcome.REJECTED, "closed as rejected"),
        ),
        (closed(RequestState.EXPIRED), None, Close(Outcome.EXPIRED, "closed as expired")),
        (closed(RequestState.CANCELLED), None, Close(Outcome.CANCELLED, "closed as cancelled")),
        (
            closed(RequestState.APPROVED, "alice"),
            HELD,
            Close(Outcome.RELEASED, "closed as approved"),
        ),
        (
            closed(RequestState.APPROVED, "alice"),
            Verdict(decision=Decision.DENY, reason="denied now"),
            Close(
                Outcome.DENIED, "denied now", Verdict(decision=Decision.DENY, reason="denied now")
            ),
        ),
        (
            closed(RequestState.APPROVED, "alice"),
            HELD.model_copy(
                update={"requirement": ApprovalRequirement(quorum=2), "reason": "more"}
            ),
            Reopen(ApprovalRequirement(quorum=2), "more", NOW + timedelta(hours=1)),
        ),
        (
            closed(RequestState.APPROVED, "alice"),
            HELD.model_copy(
                update={
                    "requirement": ApprovalRequirement(quorum=2, ttl_seconds=600),
                    "reason": "more, sooner",
                }
            ),
            Reopen(
                ApprovalRequirement(quorum=2, ttl_seconds=600),
                "more, sooner",
                NOW + timedelta(minutes=10),
            ),
        ),
        (
            closed(RequestState.APPROVED, "alice", "bob"),
            HELD.model_copy(update={"requirement": ApprovalRequirement(quorum=2)}),
            Close(Outcome.RELEASED, "closed as approved"),
        ),
    ],
    ids=[
        "rejected",
        "expired",
        "cancelled",
        "approved-and-still-allowed",
        "approved-but-now-denied",
        "approved-but-the-requirement-rose",
        "approved-but-the-requirement-rose-with-a-shorter-ttl",
        "approved-and-the-raised-requirement-met",
    ],
)
def test_a_closed_request_settles_into_one_outcome_or_reopens(
    step: Step, recheck: Verdict | None, expected: Close | Reopen
) -> None:
    assert settle(step, recheck, Directory(EVERYONE)) == expected


def test_an_approval_is_settled_only_against_a_recheck() -> None:
    with pytest.raises(ValueError, match="re-checked verdict"):
        settle(closed(RequestState.APPROVED, "alice"), None, Directory(EVERYONE))
    pending = Step(request=request(), accepted=True, message="noted")
    with pytest.raises(ValueError, match="closed its request"):
        settle(pending, HELD, Directory(EVERYONE))


@given(
    old_ttl=st.integers(min_value=1, max_value=30 * 86400),
    new_ttl=st.integers(min_value=1, max_value=30 * 86400),
)
def test_a_reopened_request_expires_by_its_new_ttl_and_never_later(
    old_ttl: int, new_ttl: int
) -> None:
    """Counted from when the call was held: a shorter TTL brings the expiry forward, a longer
    one never postpones it, and the expiry stays `held at + TTL` of the requirement it keeps."""
    held = replace(
        request("alice"),
        requirement=ApprovalRequirement(ttl_seconds=old_ttl),
        expires_at=NOW + timedelta(seconds=old_ttl),
    )
    raised = ApprovalRequirement(quorum=2, ttl_seconds=new_ttl)
    settled = settle(
        Step(replace(held, state=RequestState.APPROVED), True, "ok", closed=RequestState.APPROVED),
        HELD.model_copy(update={"requirement": raised}),
        Directory(EVERYONE),
    )
    assert isinstance(settled, Reopen)
    assert settled.expires_at == NOW + timedelta(seconds=min(old_ttl, new_ttl))
