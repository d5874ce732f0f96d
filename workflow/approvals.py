"""The approval request state machine. Pure: state + input -> new state, no I/O, no clock.

A held request is `pending` until exactly one of: enough distinct authorised approvals
(`approved`, which releases the call), an authorised reject (`rejected`), its TTL passing
(`expired`) or the proposing agent withdrawing it (`cancelled`). Every refused input leaves the
state as it was and says why in a sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from workflow.messages import (
    ApprovalDecision,
    ApprovalRecord,
    ApprovalRequirement,
    DecisionVerdict,
)
from workflow.policy.model import Approver

DEFAULT_MAX_SKEW = timedelta(minutes=5)


class RequestState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class Refusal(StrEnum):
    UNSIGNED = "unsigned"
    BAD_SIGNATURE = "bad_signature"
    UNKNOWN_KEY = "unknown_key"
    REPLAY = "replay"
    STALE = "stale"
    NOT_PENDING = "not_pending"
    EXPIRED = "expired"
    DIGEST_MISMATCH = "digest_mismatch"
    WRONG_WORKSPACE = "wrong_workspace"
    NO_ROLE = "no_role"
    SELF_APPROVAL = "self_approval"
    DUPLICATE_APPROVER = "duplicate_approver"
    NOT_OWNER = "not_owner"


@dataclass(frozen=True, slots=True)
class HeldRequest:
    request_id: str
    proposal_id: str
    agent: str
    workspace: str
    proposal_digest: str
    requirement: ApprovalRequirement
    expires_at: datetime
    state: RequestState = RequestState.PENDING
    approvals: tuple[ApprovalRecord, ...] = ()

    @property
    def approvers(self) -> tuple[str, ...]:
        return tuple(a.approver for a in self.approvals)


@dataclass(frozen=True, slots=True)
class Step:
    """The result of applying one input to a request."""

    request: HeldRequest
    accepted: bool
    message: str
    refusal: Refusal | None = None
    record: ApprovalRecord | None = None
    closed: RequestState | None = None
    """The terminal state this step moved the request into, if it did."""


def _refuse(req: HeldRequest, code: Refusal, message: str) -> Step:
    return Step(request=req, accepted=False, message=message, refusal=code)


@dataclass(frozen=True, slots=True)
class DecisionCheck:
    """What the I/O layer established about a decision before the state machine sees it."""

    signature_valid: bool
    approver: tuple[str, Approver] | None
    nonce_seen: bool
    signed_text: str


def apply_decision(  # noqa: C901 - one check per rule, in a fixed, documented order
    req: HeldRequest,
    decision: ApprovalDecision,
    check: DecisionCheck,
    *,
    now: datetime,
    max_skew: timedelta = DEFAULT_MAX_SKEW,
) -> Step:
    """Apply one approver decision. Checks run in order; the first failing one refuses."""
    if not decision.signature or not decision.key:
        return _refuse(req, Refusal.UNSIGNED, "The decision is not signed; decisions must be.")
    if not check.signature_valid:
        return _refuse(
            req, Refusal.BAD_SIGNATURE, "The decision's signature does not verify against its key."
        )
    if check.approver is None:
        return _refuse(
            req,
            Refusal.UNKNOWN_KEY,
            f"The key {decision.key[:12]}… is not a registered approver.",
        )
    name, approver = check.approver
    if check.nonce_seen:
        return _refuse(req, Refusal.REPLAY, f"The nonce {decision.nonce} was already used.")
    if abs(now - decision.issued_at) > max_skew:
        return _refuse(
            req,
            Refusal.STALE,
            f"The decision was issued at {decision.issued_at.isoformat()}, outside the allowed "
            f"clock skew of {int(max_skew.total_seconds())} s.",
        )
    if req.state is not RequestState.PENDING:
        return _refuse(req, Refusal.NOT_PENDING, f"The request is already {req.state}.")
    if now >= req.expires_at:
        return Step(
            request=replace(req, state=RequestState.EXPIRED),
            accepted=False,
            refusal=Refusal.EXPIRED,
            message="The request expired before the decision arrived; no one answered in time.",
            closed=RequestState.EXPIRED,
        )
    if decision.proposal_digest != req.proposal_digest:
        return _refuse(
            req,
            Refusal.DIGEST_MISMATCH,
            "The decision was made for a different version of the proposal (digest mismatch).",
        )
    if not approver.may_approve_for(req.workspace):
        return _refuse(
            req,
            Refusal.WRONG_WORKSPACE,
            f"Approver {name} may not approve for workspace {req.workspace}.",
        )
    roles = req.requirement.roles
    if roles and not set(roles) & set(approver.roles):
        return _refuse(
            req,
            Refusal.NO_ROLE,
            f"Approver {name} has none of the required roles ({', '.join(roles)}).",
        )
    if name == req.agent or req.agent in approver.agents:
        return _refuse(
            req,
            Refusal.SELF_APPROVAL,
            f"Approver {name} runs agent {req.agent} and cannot decide on its own proposal.",
        )
    if name in req.approvers:
        return _refuse(
            req, Refusal.DUPLICATE_APPROVER, f"Approver {name} has already approved this request."
        )

    record = ApprovalRecord(
        approver=name,
        key=decision.key,
        verdict=decision.verdict,
        reason=decision.reason,
        nonce=decision.nonce,
        issued_at=decision.issued_at,
        signed=check.signed_text,
        signature=decision.signature,
    )
    if decision.verdict is DecisionVerdict.REJECT:
        closed = replace(req, state=RequestState.REJECTED)
        why = f": {decision.reason}" if decision.reason else ""
        return Step(
            closed,
            accepted=True,
            message=f"Rejected by {name}{why}.",
            record=record,
            closed=RequestState.REJECTED,
        )

    approvals = (*req.approvals, record)
    needed = req.requirement.approvals_needed
    if len(approvals) >= needed:
        done = replace(req, approvals=approvals, state=RequestState.APPROVED)
        return Step(
            done,
            accepted=True,
            message=f"Approved by {', '.join(a.approver for a in approvals)}.",
            record=record,
            closed=RequestState.APPROVED,
        )
    return Step(
        replace(req, approvals=approvals),
        accepted=True,
        message=f"Approval {len(approvals)} of {needed} recorded from {name}.",
        record=record,
    )


def expire(req: HeldRequest, *, now: datetime) -> Step | None:
    """Close a pending request whose TTL has passed; None if it is not due."""
    if req.state is not RequestState.PENDING or now < req.expires_at:
        return None
    return Step(
        replace(req, state=RequestState.EXPIRED),
        accepted=True,
        message=f"No approver answered before the request expired at {req.expires_at.isoformat()}.",
        closed=RequestState.EXPIRED,
    )


def cancel(req: HeldRequest, *, agent: str, reason: str = "") -> Step:
    """The proposing agent withdraws its own pending proposal."""
    if agent != req.agent:
        return _refuse(
            req, Refusal.NOT_OWNER, f"Agent {agent} cannot cancel a proposal of agent {req.agent}."
        )
    if req.state is not RequestState.PENDING:
        return _refuse(req, Refusal.NOT_PENDING, f"The request is already {req.state}.")
    why = f": {reason}" if reason else ""
    return Step(
        replace(req, state=RequestState.CANCELLED),
        accepted=True,
        message=f"Cancelled by agent {agent}{why}.",
        closed=RequestState.CANCELLED,
    )
