"""Edit before approve in the pure core: the edited call is released only as the policy
allows the edited call, with one approval, signed over the edited digest."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_approvals import APPROVERS, KEYS, NOW, check_for, held
from workflow.approvals import Refusal, apply_edit
from workflow.messages import (
    ApprovalDecision,
    ApprovalRequirement,
    Decision,
    DecisionVerdict,
    Verdict,
)
from workflow.outcomes import RequestState

EDITED = "e" * 64


def edit_by(who: str, digest: str = EDITED, verdict: str = "approve") -> ApprovalDecision:
    return KEYS[who].sign_decision(
        ApprovalDecision(
            request_id="rq_1",
            proposal_digest=digest,
            verdict=DecisionVerdict(verdict),
            approver=who,
            nonce=uuid.uuid4().hex,
            issued_at=NOW,
            edited_arguments={"command": "rm -rf build/"},
        )
    )


def held_verdict(**requirement: object) -> Verdict:
    return Verdict(
        decision=Decision.REQUIRE_APPROVAL,
        reason="held",
        requirement=ApprovalRequirement(**requirement),
    )


def test_an_edit_the_policy_leaves_to_one_approval_is_released_signed_over_the_edit() -> None:
    d = edit_by("alice")
    step = apply_edit(held(), d, check_for(d), edited_digest=EDITED, edited=held_verdict(),
                      now=NOW)  # fmt: skip
    assert step.closed is RequestState.APPROVED
    assert step.request.proposal_digest == EDITED
    assert step.record is not None
    assert '"edited_arguments":{"command":"rm -rf build/"}' in step.record.signed


def test_an_edit_signed_over_the_original_digest_is_refused() -> None:
    d = edit_by("alice", digest="d" * 64)
    step = apply_edit(held(), d, check_for(d), edited_digest=EDITED, edited=held_verdict(),
                      now=NOW)  # fmt: skip
    assert step.refusal is Refusal.DIGEST_MISMATCH
    assert step.request == held()


def test_an_edit_to_a_denied_call_or_one_needing_two_approvals_is_refused() -> None:
    d = edit_by("alice")
    denied = Verdict(decision=Decision.DENY, reason="the policy denies it")
    for verdict in (denied, held_verdict(quorum=2), held_verdict(four_eyes=True)):
        step = apply_edit(held(), d, check_for(d), edited_digest=EDITED, edited=verdict, now=NOW)
        assert step.refusal is Refusal.EDIT_REFUSED
        assert step.request.state is RequestState.PENDING


verdicts = st.builds(
    Verdict,
    decision=st.sampled_from(list(Decision)),
    reason=st.just("r"),
    requirement=st.none()
    | st.builds(
        ApprovalRequirement,
        quorum=st.integers(1, 3),
        four_eyes=st.booleans(),
        roles=st.lists(st.sampled_from(["approver", "dba", "sre"]), max_size=2, unique=True),
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    verdicts,
    st.sampled_from(["alice", "bob", "carol", "mallory"]),
    st.integers(1, 3),
    st.booleans(),
    st.booleans(),
)
def test_an_edit_never_releases_a_call_looser_than_the_policy_for_the_edited_call(
    edited: Verdict, who: str, quorum: int, right_digest: bool, frozen: bool
) -> None:
    d = edit_by(who, digest=EDITED if right_digest else "d" * 64)
    step = apply_edit(
        held(quorum=quorum), d, check_for(d), edited_digest=EDITED, edited=edited, now=NOW,
        frozen="Frozen." if frozen else None,
    )  # fmt: skip
    if step.closed is not RequestState.APPROVED:
        assert step.request.state is RequestState.PENDING
        return
    # Released only: as the edited call (its digest signed), not denied, one approval enough,
    # by an approver the edited call's requirement admits, and never while frozen.
    assert right_digest
    assert not frozen
    assert edited.decision is not Decision.DENY
    requirement = edited.requirement
    if requirement is not None:
        assert requirement.approvals_needed == 1
        assert not requirement.roles or set(requirement.roles) & set(APPROVERS[who].roles)
    assert step.request.proposal_digest == EDITED
    assert [a.approver for a in step.request.approvals] == [who]
    assert who in APPROVERS
    assert not APPROVERS[who].runs_agent("builder-7")
