"""The approval request state machine. Pure: state + input -> new state, no I/O, no clock.

A held request is `pending` until exactly one of: enough distinct authorised approvals
(`approved`, which releases the call), an authorised reject (`rejected`), its TTL passing
(`expired`) or the proposing agent withdrawing it (`cancelled`). Every refused input leaves the
state as it was and says why in a sentence.

A request that reaches `approved` is settled against the policy in force at that moment
(`settle`): the call is re-evaluated by the caller, and the approvals collected so far are
counted again under the current approvers (`satisfies`) with the same eligibility rules as a
new decision — so an approver whose workspace was withdrawn, or who now runs the proposing
agent, no longer counts.

Approvers are seen through two small protocols (`ApproverProfile`, `ApproverDirectory`), which
the policy's models satisfy: this module depends on no policy code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from workflow.messages import (
    ApprovalDecision,
    ApprovalRecord,
    ApprovalRequirement,
    Decision,
    DecisionVerdict,
    PasskeyProof,
    Verdict,
)
from workflow.outcomes import Outcome, RequestState

DEFAULT_MAX_SKEW = timedelta(minutes=5)


class ApproverProfile(Protocol):
    """What the state machine needs to know about a registered approver."""

    @property
    def roles(self) -> Sequence[str]: ...

    def may_approve_for(self, workspace: str) -> bool: ...

    def runs_agent(self, agent: str) -> bool: ...


class ApproverDirectory(Protocol):
    """The registered approvers, found by the public key that signs their decisions."""

    def approver_by_key(self, key: str) -> tuple[str, ApproverProfile] | None: ...


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
    FROZEN = "frozen"
    EDIT_REFUSED = "edit_refused"


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


def _ineligible(
    name: str, approver: ApproverProfile, req: HeldRequest, requirement: ApprovalRequirement
) -> tuple[Refusal, str] | None:
    """Why `approver` may not decide on `req` under `requirement`, or None if they may."""
    return ineligibility(name, approver, req.workspace, req.agent, requirement)


def ineligibility(
    name: str,
    approver: ApproverProfile,
    workspace: str,
    agent: str,
    requirement: ApprovalRequirement,
) -> tuple[Refusal, str] | None:
    """Why `approver` may not decide on a call of `agent` in `workspace` under `requirement`
    (the rule for decisions, and for the grants that stand for one), or None if they may."""
    if not approver.may_approve_for(workspace):
        return (
            Refusal.WRONG_WORKSPACE,
            f"Approver {name} may not approve for workspace {workspace}.",
        )
    roles = requirement.roles
    if roles and not set(roles) & set(approver.roles):
        return (
            Refusal.NO_ROLE,
            f"Approver {name} has none of the required roles ({', '.join(roles)}).",
        )
    if name == agent or approver.runs_agent(agent):
        return (
            Refusal.SELF_APPROVAL,
            f"Approver {name} runs agent {agent} and cannot decide on its own proposal.",
        )
    return None


@dataclass(frozen=True, slots=True)
class DecisionCheck:
    """What the I/O layer established about a decision before the state machine sees it.

    For a passkey-signed decision, `key` names the credential (`passkey:<credential id>`),
    `proof` is what the approval record carries for offline verification, `problem` says why
    the assertion did not verify, and `replay` marks an assertion whose signature counter did
    not advance.
    """

    signature_valid: bool
    approver: tuple[str, ApproverProfile] | None
    nonce_seen: bool
    signed_text: str
    key: str | None = None
    proof: PasskeyProof | None = None
    problem: str | None = None
    replay: bool = False


def apply_decision(
    req: HeldRequest,
    decision: ApprovalDecision,
    check: DecisionCheck,
    *,
    now: datetime,
    max_skew: timedelta = DEFAULT_MAX_SKEW,
    frozen: str | None = None,
) -> Step:
    """Apply one approver decision. Checks run in order; the first failing one refuses.

    `frozen` says why the request is under a freeze (`workflow.policy.freeze`): an approval is
    then refused and the request stays pending; a reject still closes it.
    """
    by_key = bool(decision.signature and decision.key)
    if by_key == (decision.passkey is not None):
        why = "carries two signatures" if by_key else "is not signed"
        return _refuse(req, Refusal.UNSIGNED, f"The decision {why}; decisions carry one.")
    key = decision.key if by_key else check.key
    if not check.signature_valid or not key:
        return _refuse(
            req,
            Refusal.REPLAY if check.replay else Refusal.BAD_SIGNATURE,
            check.problem or "The decision's signature does not verify against its key.",
        )
    if check.approver is None:
        return _refuse(
            req,
            Refusal.UNKNOWN_KEY,
            check.problem or f"The key {key[:20]}… is not a registered approver.",
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
    ineligible = _ineligible(name, approver, req, req.requirement)
    if ineligible is not None:
        return _refuse(req, *ineligible)
    if name in req.approvers:
        return _refuse(
            req, Refusal.DUPLICATE_APPROVER, f"Approver {name} has already approved this request."
        )
    if frozen is not None and decision.verdict is DecisionVerdict.APPROVE:
        return _refuse(
            req,
            Refusal.FROZEN,
            f"{frozen} The request stays pending; approve it again after the thaw.",
        )

    record = ApprovalRecord(
        approver=name,
        key=key,
        verdict=decision.verdict,
        reason=decision.reason,
        nonce=decision.nonce,
        issued_at=decision.issued_at,
        signed=check.signed_text,
        signature=decision.signature if by_key else None,
        passkey=None if by_key else check.proof,
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


def apply_edit(
    req: HeldRequest,
    decision: ApprovalDecision,
    check: DecisionCheck,
    *,
    edited_digest: str,
    edited: Verdict,
    now: datetime,
    max_skew: timedelta = DEFAULT_MAX_SKEW,
    frozen: str | None = None,
) -> Step:
    """Apply an approval of an edited call (edit before approve).

    `edited` is the policy's verdict on the edited call, classified and evaluated like any
    proposal, and `edited_digest` the digest of the edited proposal, which the decision must
    be signed over. The edit releases the call only as the policy allows the edited call:
    never when it denies it, never when it asks for more than one approval (an edit stands
    for one approver's decision), and only by an approver eligible under the edited call's
    requirement. Every other check is the one of a decision (`apply_decision`).
    """
    if decision.verdict is not DecisionVerdict.APPROVE:
        return _refuse(req, Refusal.EDIT_REFUSED, "Only an approval can carry an edited call.")
    if edited.decision is Decision.DENY:
        return _refuse(
            req,
            Refusal.EDIT_REFUSED,
            f"The policy denies the edited call, so it cannot be approved: {edited.reason}",
        )
    requirement = edited.requirement or req.requirement.model_copy(
        update={"quorum": 1, "four_eyes": False}
    )
    if requirement.approvals_needed > 1:
        return _refuse(
            req,
            Refusal.EDIT_REFUSED,
            f"The edited call needs {requirement.approvals_needed} approvals, and an edit stands "
            "for one; reject the call and let the agent propose the edited one.",
        )
    if req.approvals:
        return _refuse(
            req,
            Refusal.EDIT_REFUSED,
            "The request already holds approvals of the call as proposed; an edit would not be "
            "what they approved.",
        )
    target = replace(req, proposal_digest=edited_digest, requirement=requirement)
    step = apply_decision(target, decision, check, now=now, max_skew=max_skew, frozen=frozen)
    if step.closed is None:
        return replace(step, request=req)  # refused: the request as it was
    return step


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


def satisfies(
    req: HeldRequest, requirement: ApprovalRequirement, approvers: ApproverDirectory
) -> bool:
    """Whether the approvals `req` holds meet `requirement` under the current approvers.

    Each approval counts once per approver, and only when its key still belongs to a
    registered approver who may decide on this request now (workspace, role, not running the
    proposing agent): the same rules a new decision must pass.
    """
    counted: set[str] = set()
    for record in req.approvals:
        found = approvers.approver_by_key(record.key) if record.key else None
        if found is None:
            continue
        name, approver = found
        if _ineligible(name, approver, req, requirement) is None:
            counted.add(name)
    return len(counted) >= requirement.approvals_needed


@dataclass(frozen=True, slots=True)
class Close:
    """The request ends in `outcome`; the event carries `verdict` (the re-check's when it
    denied the call, else the verdict the call was held under)."""

    outcome: Outcome
    reason: str
    verdict: Verdict | None = None


@dataclass(frozen=True, slots=True)
class Reopen:
    """The policy now asks for more than the approvals given: the request stays pending under
    the raised requirement, until `expires_at` (its TTL counted from when the call was held,
    never later than the expiry it had)."""

    requirement: ApprovalRequirement
    reason: str
    expires_at: datetime


def held_at(req: HeldRequest) -> datetime:
    """When the request was made: its expiry is always that moment plus its requirement's TTL."""
    return req.expires_at - timedelta(seconds=req.requirement.ttl_seconds)


def reopen(req: HeldRequest, requirement: ApprovalRequirement, reason: str) -> Reopen:
    """Keep `req` pending under `requirement`: a shorter TTL brings the expiry forward (the
    request has been waiting since it was held), a longer one never postpones it."""
    due = held_at(req) + timedelta(seconds=requirement.ttl_seconds)
    return Reopen(requirement, reason, min(req.expires_at, due))


def settle(step: Step, recheck: Verdict | None, approvers: ApproverDirectory) -> Close | Reopen:
    """What a step that closed a request comes to.

    `recheck` is the held call evaluated again under the current policy (the stricter of the
    held and the fresh verdict); it is required when the step approved the request: a denial
    blocks the call as `denied`, a requirement the approvals no longer satisfy reopens it.
    """
    if step.closed is None:
        raise ValueError("settle() takes a step that closed its request")
    outcome = step.closed.outcome
    assert outcome is not None
    if step.closed is not RequestState.APPROVED:
        return Close(outcome, step.message)
    if recheck is None:
        raise ValueError("an approved request is settled against the re-checked verdict")
    if recheck.decision is Decision.DENY:
        # The policy or the tool's definition changed while the call was held.
        return Close(Outcome.DENIED, recheck.reason, recheck)
    if recheck.requirement is not None and not satisfies(
        step.request, recheck.requirement, approvers
    ):
        return reopen(step.request, recheck.requirement, recheck.reason)
    return Close(Outcome.RELEASED, step.message)
