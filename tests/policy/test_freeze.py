"""Freezes in the pure core: everything consequential in scope is held; pending stays pending."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_approvals import held, signed
from workflow.approvals import Refusal, apply_decision
from workflow.classify.taxonomy import RiskClass, Severity
from workflow.messages import (
    ApprovalRequirement,
    Classification,
    Decision,
    Proposal,
    Verdict,
)
from workflow.outcomes import RequestState
from workflow.policy.freeze import FreezeTerms, frozen_verdict

AT = datetime(2026, 1, 1, tzinfo=UTC)
REQUIREMENT = ApprovalRequirement()

freezes = st.builds(
    FreezeTerms,
    freeze_id=st.just("fz_1"),
    agent=st.sampled_from([None, "a", "b"]),
    workspace=st.sampled_from([None, "w", "x"]),
    all_calls=st.booleans(),
    reason=st.just("incident"),
    by=st.just("alice"),
    at=st.just(AT),
)
proposals = st.builds(
    Proposal,
    id=st.just("p-1"),
    agent=st.sampled_from(["a", "b"]),
    workspace=st.sampled_from(["w", "x"]),
    tool=st.just("t"),
)
classifications = st.builds(
    Classification,
    risk_class=st.sampled_from(list(RiskClass)),
    severity=st.sampled_from(list(Severity)),
)
verdicts = st.builds(
    Verdict,
    decision=st.sampled_from(list(Decision)),
    reason=st.just("r"),
    requirement=st.none() | st.builds(ApprovalRequirement, quorum=st.integers(1, 3)),
)


@settings(max_examples=400, deadline=None)
@given(proposals, classifications, verdicts, st.lists(freezes, max_size=3))
def test_a_freeze_holds_every_consequential_call_in_its_scope(
    proposal: Proposal, cls: Classification, verdict: Verdict, active: list[FreezeTerms]
) -> None:
    result = frozen_verdict(proposal, cls, verdict, active, REQUIREMENT)
    read = cls.risk_class is RiskClass.READ
    covering = [
        f
        for f in active
        if f.agent in (None, proposal.agent)
        and f.workspace in (None, proposal.workspace)
        and (f.all_calls or not read)
    ]
    if verdict.decision is Decision.DENY or not covering:
        assert result is None  # a denial stays one; out of scope nothing changes
        return
    assert result is not None
    assert result.decision is Decision.REQUIRE_APPROVAL
    assert result.requirement is not None
    assert result.trail[-1].step == "freeze"
    # Never looser than the verdict it replaces.
    if verdict.requirement is not None:
        assert result.requirement == verdict.requirement


def test_an_approval_of_a_frozen_request_is_refused_and_the_request_stays_pending() -> None:
    req = held()
    decision, check = signed("alice")
    step = apply_decision(req, decision, check, now=decision.issued_at, frozen="Frozen: x.")
    assert step.refusal is Refusal.FROZEN
    assert step.request.state is RequestState.PENDING
    assert step.request.approvals == ()


def test_a_reject_still_closes_a_frozen_request() -> None:
    decision, check = signed("alice", "reject")
    step = apply_decision(held(), decision, check, now=decision.issued_at, frozen="Frozen: x.")
    assert step.closed is RequestState.REJECTED
