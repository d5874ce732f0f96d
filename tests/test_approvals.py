"""The approval state machine and decision signatures, tested directly (no I/O)."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workflow.approvals import (
    DecisionCheck,
    HeldRequest,
    Refusal,
    apply_decision,
    cancel,
    expire,
)
from workflow.messages import ApprovalDecision, ApprovalRequirement, DecisionVerdict, signed_text
from workflow.outcomes import RequestState
from workflow.policy.schema import Approver
from workflow.signing import ApproverKey, verify_raw, verify_record

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
DIGEST = "d" * 64

KEYS = {name: ApproverKey.generate() for name in ("alice", "bob", "carol", "mallory")}
APPROVERS = {
    "alice": Approver(key=KEYS["alice"].public_key, roles=["approver"], workspaces=["*"]),
    "bob": Approver(key=KEYS["bob"].public_key, roles=["approver", "dba"], workspaces=["acme"]),
    "carol": Approver(
        key=KEYS["carol"].public_key, roles=["approver"], workspaces=["*"], agents=["builder-7"]
    ),
}


def held(quorum: int = 1, four_eyes: bool = False, roles: list[str] | None = None) -> HeldRequest:
    return HeldRequest(
        request_id="rq_1",
        proposal_id="p1",
        agent="builder-7",
        workspace="acme",
        proposal_digest=DIGEST,
        requirement=ApprovalRequirement(quorum=quorum, four_eyes=four_eyes, roles=roles or []),
        expires_at=NOW + timedelta(hours=1),
    )


def signed(
    who: str,
    verdict: str = "approve",
    *,
    digest: str = DIGEST,
    at: datetime = NOW,
    nonce: str | None = None,
) -> tuple[ApprovalDecision, DecisionCheck]:
    d = KEYS[who].sign_decision(
        ApprovalDecision(
            request_id="rq_1",
            proposal_digest=digest,
            verdict=DecisionVerdict(verdict),
            approver=who,
            nonce=nonce or uuid.uuid4().hex,
            issued_at=at,
        )
    )
    return d, check_for(d)


def check_for(d: ApprovalDecision, *, nonce_seen: bool = False) -> DecisionCheck:
    raw = json.loads(d.model_dump_json())
    by_key = {a.key: (n, a) for n, a in APPROVERS.items()}
    return DecisionCheck(
        signature_valid=verify_raw(raw),
        approver=by_key.get(d.key or ""),
        nonce_seen=nonce_seen,
        signed_text=signed_text(raw),
    )


def test_one_approval_releases_a_quorum_of_one() -> None:
    d, c = signed("alice")
    step = apply_decision(held(), d, c, now=NOW)
    assert step.accepted
    assert step.closed is RequestState.APPROVED
    assert step.record is not None
    assert verify_record(step.record)


def test_an_approval_record_verifies_offline_and_detects_edits() -> None:
    d, c = signed("alice")
    record = apply_decision(held(), d, c, now=NOW).record
    assert record is not None
    assert json.loads(record.signed)["proposal_digest"] == DIGEST
    assert not verify_record(record.model_copy(update={"signed": record.signed.replace("d", "e")}))


def test_a_quorum_of_two_needs_two_distinct_approvers() -> None:
    req = held(quorum=2)
    d1, c1 = signed("alice")
    first = apply_decision(req, d1, c1, now=NOW)
    assert first.accepted
    assert first.closed is None
    d2, c2 = signed("alice")
    again = apply_decision(first.request, d2, c2, now=NOW)
    assert again.refusal is Refusal.DUPLICATE_APPROVER
    d3, c3 = signed("bob")
    done = apply_decision(first.request, d3, c3, now=NOW)
    assert done.closed is RequestState.APPROVED
    assert [a.approver for a in done.request.approvals] == ["alice", "bob"]


def test_four_eyes_needs_two_approvers_even_with_quorum_one() -> None:
    d1, c1 = signed("alice")
    step = apply_decision(held(four_eyes=True), d1, c1, now=NOW)
    assert step.accepted
    assert step.closed is None


def test_any_authorised_reject_closes_the_request() -> None:
    d1, c1 = signed("alice")
    step = apply_decision(held(quorum=3), d1, c1, now=NOW)
    d2, c2 = signed("bob", "reject")
    done = apply_decision(step.request, d2, c2, now=NOW)
    assert done.closed is RequestState.REJECTED


def _forged() -> tuple[ApprovalDecision, DecisionCheck]:
    d, _ = signed("alice")
    forged = d.model_copy(update={"reason": "changed after signing"})
    return forged, check_for(forged)


def _unknown_key() -> tuple[ApprovalDecision, DecisionCheck]:
    return signed("mallory")


def _unsigned() -> tuple[ApprovalDecision, DecisionCheck]:
    d, _ = signed("alice")
    bare = d.model_copy(update={"signature": None})
    return bare, check_for(bare)


def _replayed() -> tuple[ApprovalDecision, DecisionCheck]:
    d, _ = signed("alice")
    return d, check_for(d, nonce_seen=True)


@pytest.mark.parametrize(
    ("make", "refusal"),
    [
        (_forged, Refusal.BAD_SIGNATURE),
        (_unknown_key, Refusal.UNKNOWN_KEY),
        (_unsigned, Refusal.UNSIGNED),
        (_replayed, Refusal.REPLAY),
        (lambda: signed("alice", digest="e" * 64), Refusal.DIGEST_MISMATCH),
        (lambda: signed("alice", at=NOW - timedelta(hours=1)), Refusal.STALE),
        (lambda: signed("carol"), Refusal.SELF_APPROVAL),
    ],
    ids=["forged", "unknown-key", "unsigned", "replayed", "edited-proposal", "stale", "self"],
)
def test_an_invalid_decision_is_refused_and_changes_nothing(make: object, refusal: Refusal) -> None:
    assert callable(make)
    d, c = make()
    req = held()
    step = apply_decision(req, d, c, now=NOW)
    assert not step.accepted
    assert step.refusal is refusal
    assert step.request == req
    assert step.closed is None
    assert step.message.endswith(".")


def test_an_approver_for_another_workspace_is_refused() -> None:
    d, c = signed("bob")
    step = apply_decision(replace(held(), workspace="other"), d, c, now=NOW)
    assert step.refusal is Refusal.WRONG_WORKSPACE


def test_an_approver_without_the_required_role_is_refused() -> None:
    d, c = signed("alice")
    step = apply_decision(held(roles=["dba"]), d, c, now=NOW)
    assert step.refusal is Refusal.NO_ROLE
    d2, c2 = signed("bob")
    assert apply_decision(held(roles=["dba"]), d2, c2, now=NOW).accepted


def test_a_decision_after_expiry_does_not_release_and_closes_as_expired() -> None:
    d, c = signed("alice", at=NOW + timedelta(hours=1, seconds=1))
    step = apply_decision(held(), d, c, now=NOW + timedelta(hours=1, seconds=1))
    assert not step.accepted
    assert step.refusal is Refusal.EXPIRED
    assert step.closed is RequestState.EXPIRED


def test_expire_only_closes_a_due_pending_request() -> None:
    assert expire(held(), now=NOW) is None
    step = expire(held(), now=NOW + timedelta(hours=2))
    assert step is not None
    assert step.closed is RequestState.EXPIRED
    assert "expired" in step.message


def test_only_the_proposing_agent_can_cancel() -> None:
    assert cancel(held(), agent="other").refusal is Refusal.NOT_OWNER
    step = cancel(held(), agent="builder-7", reason="plan changed")
    assert step.closed is RequestState.CANCELLED
    assert "plan changed" in step.message


# One input: (approver, verdict) or "expire" or "cancel".
inputs = st.lists(
    st.one_of(
        st.tuples(
            st.sampled_from(["alice", "bob", "carol", "mallory"]),
            st.sampled_from(["approve", "reject"]),
        ),
        st.just("expire"),
        st.just("cancel"),
    ),
    max_size=8,
)


@given(inputs, st.integers(min_value=1, max_value=3), st.booleans())
@settings(max_examples=300, deadline=None)
def test_a_request_reaches_at_most_one_terminal_state(
    steps: list[object], quorum: int, four_eyes: bool
) -> None:
    req = held(quorum=quorum, four_eyes=four_eyes)
    closings = []
    for item in steps:
        if item == "expire":
            step = expire(req, now=NOW + timedelta(hours=2))
            if step is None:
                continue
        elif item == "cancel":
            step = cancel(req, agent="builder-7")
        else:
            assert isinstance(item, tuple)
            d, c = signed(item[0], item[1])
            step = apply_decision(req, d, c, now=NOW)
            if step.record is not None and step.record.verdict == "approve":
                assert step.record.approver != "carol"  # never the agent's own principal
        if step.closed is not None:
            closings.append(step.closed)
        req = step.request
    assert len(closings) <= 1
    if RequestState.APPROVED in closings:
        names = {a.approver for a in req.approvals}
        assert len(names) == len(req.approvals) >= req.requirement.approvals_needed
