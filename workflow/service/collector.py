"""The decision collector: verify → authorise → apply the approval state machine → commit.

The decisions and cancels of one fetched batch are planned one after the other (each reads its
request and computes its step) and committed together in one transaction, as the intake does
with its batches. A person's approval does not queue behind a flood of reads: the collector's
batch takes the event loop's next turn before the intake's (`ServiceContext.turns`), and the
writer serves its transaction before any intake batch waiting for it
(`Database.transact(urgent=True)`).
Two messages of one batch that touch the same request, nonce or passkey are not planned on
stale reads: the batch so far is committed first. Each step keeps its optimistic version check:
when another replica moved one of the requests meanwhile, the batch's transaction commits
nothing and its messages are applied one by one, each re-reading its request. The events are
published after the commit; the batch then waits once for JetStream to confirm them all and
acks each message whose events are stored.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from nats.aio.msg import Msg
from pydantic import ValidationError

from workflow.approvals import (
    ApproverDirectory,
    ApproverProfile,
    DecisionCheck,
    HeldRequest,
    Refusal,
    Reopen,
    Step,
    apply_decision,
    apply_edit,
    cancel,
    settle,
)
from workflow.canonical import scheme_problem
from workflow.classify.engine import classify
from workflow.effects import (
    AuditEntry,
    DecisionRecord,
    OutboxEvent,
    RecordedNonce,
    StepWrite,
    StoredIntake,
)
from workflow.errors import describe_invalid
from workflow.messages import (
    ApprovalDecision,
    Cancel,
    Classification,
    Proposal,
    Verdict,
    is_token,
    signed_text,
)
from workflow.outcomes import Outcome, RequestState
from workflow.passkeys import Passkey, proof, verify_decision_at
from workflow.policy.engine import evaluate, recheck
from workflow.policy.freeze import FreezeTerms, freezing
from workflow.policy.model import Policy
from workflow.routing import SERVICE_ACTOR, closing_effects, reopened_audit
from workflow.service.context import ServiceContext
from workflow.service.publishing import Sent, send_events, to_resend
from workflow.service.pull import attempts, stream_sequence
from workflow.service.stage import Settle, Unprocessable
from workflow.service.tracing import span_headers
from workflow.signing import verify_raw
from workflow.store.requests import ConcurrentUpdate

log = logging.getLogger("headgate.collector")
STAGE = "collector"
MAX_RACES = 8


After = Callable[[], Awaitable[None]]


@dataclass(slots=True)
class Planned:
    """What one decision or cancel comes to, before its commit."""

    now: datetime
    #: What to commit; None: nothing (a redelivery of a message applied before).
    write: StepWrite | None = None
    #: Events to publish when there is nothing to commit (a redelivery's events).
    events: list[OutboxEvent] = field(default_factory=list)
    #: The requests, nonces and passkeys it read: another message of the batch touching one
    #: of them must be planned after this one is committed.
    keys: frozenset[str] = frozenset()
    #: Run once the write is committed (metrics, log, a passkey's counter).
    committed: After | None = None
    #: Run instead when the commit found its nonce used meanwhile (a replay race).
    replayed: After | None = None

    def to_publish(self) -> list[OutboxEvent]:
        return self.write.events if self.write is not None else self.events


Plan = Callable[[Msg], Awaitable[Planned]]


@dataclass(slots=True)
class BatchReads:
    """What the decisions of one batch read, fetched for all of them at once (one read
    instead of four or five per decision). Valid until the batch's first commit."""

    requests: dict[str, tuple[HeldRequest, int]]
    request_ids: set[str]
    nonces: dict[str, RecordedNonce]
    nonce_keys: set[str]
    parts: dict[str, StoredIntake]
    freezes: list[FreezeTerms]


@dataclass(frozen=True, slots=True)
class Edit:
    """A call as an approver edited it, with the classification and verdict it gets."""

    proposal: Proposal
    classification: Classification
    verdict: Verdict


def _stored_signature(decision: ApprovalDecision) -> str | None:
    """What the decisions table keeps of a decision's signature: the nkeys signature, or a
    digest of a passkey's (an RSA assertion is longer than the column)."""
    if decision.passkey is not None:
        digest = hashlib.sha256(decision.passkey.signature.encode()).hexdigest()
        return f"passkey:{digest}"
    return decision.signature


class PasskeyApprovers:
    """The policy's approvers, found by nkey or by one of their passkeys (`passkey:<id>`)."""

    def __init__(self, policy: Policy, owners: dict[str, str]):
        self.policy = policy
        self.owners = owners

    def approver_by_key(self, key: str) -> tuple[str, ApproverProfile] | None:
        if key.startswith("passkey:"):
            name = self.owners.get(key.removeprefix("passkey:"))
            profile = self.policy.approvers.get(name) if name else None
            return (name, profile) if name and profile is not None else None
        return self.policy.approver_by_key(key)


class Collector:
    def __init__(self, ctx: ServiceContext):
        self.ctx = ctx
        self.settle = Settle(STAGE, ctx.dead, ctx.retry, ctx.metrics)
        self._reads: BatchReads | None = None

    async def __call__(self, msgs: Sequence[Msg]) -> None:
        async with self.ctx.turns.hold(urgent=True):
            sent = await self._apply(msgs)
        for msg, published in sent:
            try:
                ids = await published.confirmed()
            except Exception as exc:
                # Committed: the redelivered decision is recognised and re-publishes its events.
                await self._failed(msg, f"publishing its events failed: {exc!r}")
                continue
            await self.settle.ack(msg)
            self.ctx.marker.add(ids)

    async def _apply(self, msgs: Sequence[Msg]) -> list[tuple[Msg, Sent]]:
        """Plan, commit and send the batch; returns the messages whose events are on their
        way (the others were settled)."""
        batch: list[tuple[Msg, Planned]] = []
        keys: set[str] = set()
        sent: list[tuple[Msg, Sent]] = []
        # A failure here (the database away) fails the batch: its messages are retried.
        self._reads = None
        self._reads = await self._prefetch(msgs)
        for msg in msgs:
            planned = await self._planned(msg)
            if planned is not None and planned.keys & keys:
                # It read what a message planned before it changes: commit those first, then
                # plan it again on what they wrote.
                sent += await self._commit(batch)
                batch, keys = [], set()
                planned = await self._planned(msg)
            if planned is not None:
                batch.append((msg, planned))
                keys |= planned.keys
        sent += await self._commit(batch)
        return sent

    async def _prefetch(self, msgs: Sequence[Msg]) -> BatchReads | None:
        """Read the requests, nonces and stored proposals the batch's decisions need."""
        store = self.ctx.store
        ids: list[str] = []
        nonces: list[str] = []
        for msg in msgs:
            token = self.ctx.subjects.token_after(msg.subject, "decisions")
            if token is None:
                continue
            ids.append(token)
            try:
                nonce = json.loads(msg.data).get("nonce")
            except (ValueError, AttributeError):
                continue
            if isinstance(nonce, str):
                nonces.append(nonce)
        if not ids:
            return None
        reads = await store.decision_reads(ids, nonces)
        return BatchReads(
            requests=reads.requests,
            request_ids=set(ids),
            nonces=reads.nonces,
            nonce_keys=set(nonces),
            parts={p.id: p for p in reads.parts},
            freezes=reads.freezes,
        )

    async def _load(self, request_id: str) -> tuple[HeldRequest, int] | None:
        reads = self._reads
        if reads is not None and request_id in reads.request_ids:
            return reads.requests.get(request_id)
        return await self.ctx.store.requests.load(request_id)

    async def _nonce(self, nonce: str) -> RecordedNonce | None:
        reads = self._reads
        if reads is not None and nonce in reads.nonce_keys:
            return reads.nonces.get(nonce)
        return await self.ctx.store.requests.recorded_nonce(nonce)

    def _plan_for(self, msg: Msg) -> Plan:
        if self.ctx.subjects.token_after(msg.subject, "cancel") is not None:
            return self._cancel
        return self._decision

    async def _planned(self, msg: Msg) -> Planned | None:
        """The plan of one message; None when it was settled instead (dead-lettered or
        retried later)."""
        try:
            return await self._plan_for(msg)(msg)
        except Unprocessable as exc:
            await self.settle.unprocessable(msg, str(exc))
        except Exception as exc:
            await self._failed(msg, str(exc))
        return None

    async def _commit(self, batch: list[tuple[Msg, Planned]]) -> list[tuple[Msg, Sent]]:
        """Commit a batch's plans in one transaction, run what follows each commit, send the
        events; returns the messages whose events were sent."""
        self._reads = None  # what it read changes now
        if not batch:
            return []
        writes = [(p.write, p.now) for _, p in batch if p.write is not None]
        try:
            results = iter(await self.ctx.store.requests.commit_steps(writes))
        except ConcurrentUpdate:
            # Another replica moved one of these requests: nothing was committed. Apply each
            # message alone, re-reading its request, as when it races on its own.
            return [got for msg, _ in batch if (got := await self._alone(msg)) is not None]
        except Exception as exc:
            for msg, _ in batch:
                await self._failed(msg, str(exc))
            return []
        sent: list[tuple[Msg, Sent]] = []
        for msg, planned in batch:
            ok = next(results) if planned.write is not None else True
            got = await self._after(msg, planned, ok)
            if got is not None:
                sent.append(got)
        return sent

    async def _alone(self, msg: Msg) -> tuple[Msg, Sent] | None:
        """Plan and commit one message in a transaction of its own, again when it races."""
        try:
            for _ in range(MAX_RACES):
                planned = await self._plan_for(msg)(msg)
                try:
                    ok = (
                        await self.ctx.store.requests.commit_step(planned.write, planned.now)
                        if planned.write is not None
                        else True
                    )
                except ConcurrentUpdate:
                    continue
                return await self._after(msg, planned, ok)
            raise RuntimeError(f"request changed {MAX_RACES} times while applying {msg.subject}")
        except Unprocessable as exc:
            await self.settle.unprocessable(msg, str(exc))
        except Exception as exc:
            await self._failed(msg, str(exc))
        return None

    async def _after(self, msg: Msg, planned: Planned, ok: bool) -> tuple[Msg, Sent] | None:
        """What follows one message's commit: its hooks, then its events on their way."""
        try:
            if not ok:
                if planned.replayed is not None:
                    await planned.replayed()
                return msg, await send_events(self.ctx.js, [], self.ctx.signer)
            if planned.committed is not None:
                await planned.committed()
            return msg, await send_events(self.ctx.js, planned.to_publish(), self.ctx.signer)
        except Exception as exc:
            await self._failed(msg, str(exc))
            return None

    async def _failed(self, msg: Msg, error: str) -> None:
        token = self.ctx.subjects.token_after(msg.subject, "decisions")
        log.warning(
            "collector: %s failed (%s); will retry",
            msg.subject,
            error,
            extra={"request_id": token, "stage": STAGE},
        )
        await self.settle.failed(msg, error)

    async def _parts(
        self, proposal_id: str
    ) -> tuple[Proposal, Classification, Verdict, dict[str, str]]:
        stored = self._reads.parts.get(proposal_id) if self._reads is not None else None
        if stored is not None:
            parts: tuple[str, str, str, dict[str, str]] | None = (
                stored.payload, stored.classification, stored.verdict, stored.trace or {}
            )  # fmt: skip
        else:
            parts = await self.ctx.store.proposals.parts(proposal_id)
        if parts is None:
            raise RuntimeError(f"request without a stored proposal {proposal_id}")
        payload, classification, verdict, trace = parts
        return (
            Proposal.model_validate_json(payload),
            Classification.model_validate_json(classification),
            Verdict.model_validate_json(verdict),
            trace,
        )

    # ------------------------------------------------------------------ decisions
    async def _decision(self, msg: Msg) -> Planned:
        ctx = self.ctx
        try:
            raw = json.loads(msg.data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise Unprocessable(f"the decision is not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise Unprocessable("the decision must be a JSON object")
        try:
            decision = ApprovalDecision.model_validate(raw)
        except ValidationError as exc:
            error = f"invalid decision: {describe_invalid(exc)}"
            await self._refuse_invalid(raw, error)
            raise Unprocessable(error) from exc
        now = ctx.now()
        token = ctx.subjects.token_after(msg.subject, "decisions")
        if token != decision.request_id:
            return await self._unapplied(
                decision, f"The decision for {decision.request_id} arrived on {msg.subject}."
            )
        loaded = await self._load(decision.request_id)
        if loaded is None:
            return await self._unapplied(
                decision, f"There is no approval request {decision.request_id}."
            )
        held, version = loaded
        recorded = await self._nonce(decision.nonce)
        seen = recorded is not None
        stored_signature = _stored_signature(decision)
        keys = frozenset(
            (f"request:{held.request_id}", f"nonce:{decision.nonce}")
            + ((f"passkey:{decision.passkey.credential_id}",) if decision.passkey else ())
        )
        if recorded is not None and _returned(msg, recorded, stored_signature):
            # The message whose effects were committed, come back (after a crash or a failed
            # publish): re-send what JetStream may not have stored, the events not yet
            # confirmed. Never the confirmed ones: a replayed copy taken for it must not hand
            # subscribers a second release. The same decision arriving as another message is
            # a replay, refused below.
            unconfirmed = await ctx.store.outbox.unconfirmed_for([held.proposal_id])
            events = await to_resend(ctx.js, unconfirmed, now, ctx.signer)
            return Planned(now, events=events, keys=keys)
        used: tuple[str, int] | None = None
        if decision.passkey is not None:
            check, used = await self._passkey_check(raw, decision, seen)
        else:
            # The canonical form once: what the signature is checked over is what the record
            # keeps (a decision without one raises here, as `signed_text` always did).
            text = signed_text(raw)
            check = DecisionCheck(
                signature_valid=verify_raw(raw, text=text),
                approver=ctx.policy.approver_by_key(decision.key) if decision.key else None,
                nonce_seen=seen,
                signed_text=text,
                problem=scheme_problem(raw),
            )
        step, edit = await self._step(held, decision, check, now)
        write = StepWrite(
            request_id=held.request_id,
            expected_version=version if (step.accepted or step.closed) else None,
            new_state=step.request.state if step.request.state != held.state else None,
        )
        if not seen:
            write.decision = DecisionRecord(
                nonce=decision.nonce,
                request_id=decision.request_id,
                approver=check.approver[0] if check.approver else decision.approver,
                key=(decision.key or check.key or "")[:64] or None,
                signature=stored_signature,
                verdict=decision.verdict,
                accepted=step.accepted,
                refusal=step.refusal,
                message=step.message,
                record=step.record.model_dump_json() if step.record else None,
                received_at=now,
                stream_seq=stream_sequence(msg),
            )
        write.audit.append(
            AuditEntry(
                kind="decision.accepted" if step.accepted else "decision.refused",
                actor=check.approver[0] if check.approver else f"unverified:{decision.approver}",
                proposal_id=held.proposal_id,
                request_id=held.request_id,
                data={
                    "verdict": decision.verdict,
                    "nonce": decision.nonce,
                    "key": decision.key or check.key,
                    "refusal": step.refusal,
                    "message": step.message,
                    "decision": raw,
                },
            )
        )
        if step.closed is not None:
            await self._close(held, step, write, edit)
            if write.new_state is RequestState.PENDING:
                write.new_state = None  # still pending, with the raised requirement

        async def replayed() -> None:
            # The nonce was recorded by someone else in between: this copy is a replay.
            await self._refuse_unapplied(decision, f"The nonce {decision.nonce} was already used.")

        async def committed() -> None:
            if used is not None:
                # After the commit: a crash in between leaves the counter behind, which the
                # next assertion (counting higher) repairs, while the nonce already refuses
                # this one.
                await ctx.store.passkeys.used(*used, now)
            self._decided(decision, held, step, write, now)

        return Planned(now, write, keys=keys, committed=committed, replayed=replayed)

    def _decided(
        self, decision: ApprovalDecision, held: HeldRequest, step: Step, write: StepWrite,
        now: datetime,
    ) -> None:  # fmt: skip
        """Count and log a committed decision."""
        ctx = self.ctx
        if step.accepted:
            ctx.metrics.decisions.labels(decision.verdict).inc()
            held_at = held.expires_at - timedelta(seconds=held.requirement.ttl_seconds)
            channel = "passkey" if decision.passkey is not None else "key"
            ctx.metrics.time_to_decision.labels(channel).observe((now - held_at).total_seconds())
        else:
            ctx.metrics.refused.labels(step.refusal or "unknown").inc()
        log.info(
            "decision %s %s: %s",
            decision.verdict,
            "accepted" if step.accepted else f"refused ({step.refusal})",
            step.message,
            extra={
                "request_id": held.request_id,
                "proposal_id": held.proposal_id,
                "agent": held.agent,
                "stage": STAGE,
            },
        )
        self._count_outcome(held, write, now)

    async def _passkey_check(
        self, raw: dict[str, Any], decision: ApprovalDecision, seen: bool
    ) -> tuple[DecisionCheck, tuple[str, int] | None]:
        """Verify a passkey-signed decision against the credential registered for it."""
        assert decision.passkey is not None
        cid = decision.passkey.credential_id
        stored = await self.ctx.store.passkeys.get(cid)
        text = signed_text(raw)
        if stored is None:
            unknown = f"The passkey {cid[:16]}… is not registered with Headgate."
            return DecisionCheck(False, None, seen, text, problem=unknown), None
        passkey = Passkey(
            stored.credential_id, stored.approver, stored.public_key, stored.rp_id,
            stored.sign_count,
        )  # fmt: skip
        result = verify_decision_at(raw, passkey)
        profile = self.ctx.policy.approvers.get(stored.approver)
        problem: str | None = None if result.valid else result.message
        if result.valid and profile is None:
            problem = (
                f"The passkey belongs to {stored.approver}, who is no longer an approver in "
                "the policy."
            )
        check = DecisionCheck(
            signature_valid=result.valid,
            approver=(stored.approver, profile) if profile is not None else None,
            nonce_seen=seen,
            signed_text=text,
            key=f"passkey:{stored.credential_id}",
            proof=proof(decision.passkey, passkey) if result.valid else None,
            problem=problem,
            replay=result.replay,
        )
        return check, ((cid, result.sign_count) if result.valid else None)

    async def _directory(self, held: HeldRequest) -> ApproverDirectory:
        """The policy's approvers, who also answer for the passkeys of the approvals held."""
        cids = [
            a.key.removeprefix("passkey:")
            for a in held.approvals
            if a.key and a.key.startswith("passkey:")
        ]
        owners = await self.ctx.store.passkeys.owners(cids) if cids else {}
        return PasskeyApprovers(self.ctx.policy, owners)

    async def _step(
        self, held: HeldRequest, decision: ApprovalDecision, check: DecisionCheck, now: datetime
    ) -> tuple[Step, Edit | None]:
        """The decision applied to the request (as an edit when it carries edited arguments)."""
        ctx = self.ctx
        # A request under a freeze stays pending: its approvals wait for the thaw.
        freezes = (
            self._reads.freezes if self._reads is not None else await ctx.store.grants.freezes()
        )
        freeze = freezing(held.agent, held.workspace, freezes, read=False)
        frozen = f"Frozen: {freeze.describe()}." if freeze is not None else None
        if decision.edited_arguments is None:
            return apply_decision(held, decision, check, now=now, frozen=frozen), None
        edit = await self._edited(held, decision)
        if isinstance(edit, str):
            return Step(held, accepted=False, message=edit, refusal=Refusal.EDIT_REFUSED), None
        step = apply_edit(
            held, decision, check, edited_digest=edit.proposal.digest(), edited=edit.verdict,
            now=now, frozen=frozen,
        )  # fmt: skip
        return step, edit

    async def _edited(self, held: HeldRequest, decision: ApprovalDecision) -> Edit | str:
        """The edited call, classified and evaluated like any proposal; or why it cannot be."""
        proposal, _, _, _ = await self._parts(held.proposal_id)
        assert decision.edited_arguments is not None
        try:
            edited = Proposal.model_validate(
                {**proposal.model_dump(mode="json", exclude_none=True),
                 "arguments": decision.edited_arguments}
            )  # fmt: skip
        except ValidationError as exc:
            return f"The edited call is not a valid proposal: {describe_invalid(exc)}."
        policy = self.ctx.policy
        classification = classify(edited, policy.tables_for(edited.tool, edited.tool_definition))
        return Edit(edited, classification, evaluate(edited, classification, policy))

    async def _close(
        self, held: HeldRequest, step: Step, write: StepWrite, edit: Edit | None = None
    ) -> None:
        """Add what a closing step comes to (`approvals.settle`) to the write: the terminal
        outcome, or the request kept open under a requirement the current policy raised. An
        edited call is settled, and released, as the edited call."""
        ctx = self.ctx
        proposal, classification, verdict, trace = await self._parts(held.proposal_id)
        if edit is not None and step.closed is RequestState.APPROVED:
            proposal, classification, verdict = edit.proposal, edit.classification, edit.verdict
            write.audit.append(_edited_audit(held, edit, step))
        policy = ctx.policy
        # Taken on every close (approved, rejected, cancelled): the entry is of no more use.
        kept = (
            ctx.held.recall(policy, held.proposal_id, held.proposal_digest)
            if ctx.held is not None
            else None
        )
        checked = None
        if step.closed is RequestState.APPROVED:
            fresh = kept if edit is None else None
            if fresh is None:
                fresh = classify(
                    proposal, policy.tables_for(proposal.tool, proposal.tool_definition)
                )
            checked = recheck(proposal, fresh, verdict, policy)
        settled = settle(step, checked, await self._directory(step.request))
        if isinstance(settled, Reopen):
            write.new_state = RequestState.PENDING
            write.requirement = settled.requirement.model_dump_json()
            if settled.expires_at != held.expires_at:
                write.expires_at = settled.expires_at
            write.audit.append(reopened_audit(held, settled))
            return
        outcome = settled.outcome
        row, event, audit = closing_effects(
            ctx.subjects,
            step.request,
            outcome,
            settled.reason,
            proposal,
            classification,
            settled.verdict or verdict,
            ctx.now(),
            span_headers(f"headgate.{outcome}", trace, proposal_id=proposal.id) if trace else None,
            edited_from=held.proposal_digest if edit is not None else None,
        )
        write.outcome, write.proposal_status = row, (proposal.id, outcome)
        write.events.append(event)
        write.audit.append(audit)

    async def _refuse_invalid(self, raw: dict[str, Any], error: str) -> None:
        """A decision that is not valid (a naive timestamp, a field too long, …) is refused at
        once with the reason, audited under the request it names (when that can be read):
        it changes nothing, and retrying it could not make it valid."""
        approver, request_id = raw.get("approver"), raw.get("request_id")
        name = approver[:128] if isinstance(approver, str) else "?"
        entry = AuditEntry(
            kind="decision.refused",
            actor=f"unverified:{name}",
            request_id=request_id if is_token(request_id) else None,
            data={"refusal": "invalid", "message": f"The decision is {error}."},
        )
        await self.ctx.store.audit.append([entry], self.ctx.now())
        self.ctx.metrics.refused.labels("invalid").inc()

    async def _refuse_unapplied(self, decision: ApprovalDecision, message: str) -> None:
        """`_unapplied`, committed on its own."""
        planned = await self._unapplied(decision, message)
        assert planned.write is not None
        assert planned.committed is not None
        await self.ctx.store.requests.commit_step(planned.write, planned.now)
        await planned.committed()

    async def _unapplied(self, decision: ApprovalDecision, message: str) -> Planned:
        """A decision that does not reach any request: recorded, and it changes nothing."""
        ctx = self.ctx
        now = ctx.now()
        seen = await self._nonce(decision.nonce) is not None
        write = StepWrite(request_id=decision.request_id, expected_version=None)
        if not seen:
            write.decision = DecisionRecord(
                nonce=decision.nonce,
                request_id=decision.request_id,
                approver=decision.approver,
                key=decision.key,
                signature=decision.signature,
                verdict=decision.verdict,
                accepted=False,
                refusal="unknown_request",
                message=message,
                record=None,
                received_at=now,
            )
        write.audit.append(
            AuditEntry(
                kind="decision.refused",
                actor=f"unverified:{decision.approver}",
                request_id=decision.request_id,
                data={"nonce": decision.nonce, "key": decision.key, "message": message},
            )
        )

        async def committed() -> None:
            ctx.metrics.refused.labels("unknown_request").inc()

        keys = frozenset((f"request:{decision.request_id}", f"nonce:{decision.nonce}"))
        return Planned(now, write, keys=keys, committed=committed)

    # ------------------------------------------------------------------ cancellation
    async def _cancel(self, msg: Msg) -> Planned:
        ctx = self.ctx
        try:
            request = Cancel.model_validate_json(msg.data)
        except ValidationError as exc:
            raise Unprocessable(f"invalid cancel: {exc.errors()[0]['msg']}") from exc
        agent = ctx.subjects.token_after(msg.subject, "cancel")
        now = ctx.now()
        loaded = await ctx.store.requests.load_for_proposal(request.proposal_id)
        if loaded is None or agent != request.agent:
            why = (
                f"agent {agent} sent a cancel naming agent {request.agent}"
                if agent != request.agent
                else f"there is no held request for proposal {request.proposal_id}"
            )
            refused = StepWrite(request_id=request.proposal_id, expected_version=None)
            refused.audit.append(
                AuditEntry("cancel.refused", agent or "?", {"message": why}, request.proposal_id)
            )
            return Planned(now, refused, keys=frozenset((f"request:{request.proposal_id}",)))
        held, version = loaded
        step = cancel(held, agent=agent, reason=request.reason)
        write = StepWrite(
            request_id=held.request_id,
            expected_version=version if step.accepted else None,
            new_state=step.request.state if step.accepted else None,
        )
        write.audit.append(
            AuditEntry(
                kind="cancel.accepted" if step.accepted else "cancel.refused",
                actor=agent,
                proposal_id=held.proposal_id,
                request_id=held.request_id,
                data={"message": step.message},
            )
        )
        if step.closed is not None:
            await self._close(held, step, write)

        async def committed() -> None:
            self._count_outcome(held, write, now)

        keys = frozenset((f"request:{held.request_id}", f"request:{held.proposal_id}"))
        return Planned(now, write, keys=keys, committed=committed)

    def _count_outcome(self, held: HeldRequest, write: StepWrite, now: datetime) -> None:
        if write.outcome is None:
            return
        outcome = write.outcome.outcome
        self.ctx.metrics.outcomes.labels(outcome).inc()
        if outcome is Outcome.RELEASED:
            held_at = held.expires_at - timedelta(seconds=held.requirement.ttl_seconds)
            self.ctx.metrics.time_to_approval.observe((now - held_at).total_seconds())


def _edited_audit(held: HeldRequest, edit: Edit, step: Step) -> AuditEntry:
    """Both versions of an edited call: the proposal's own record keeps the one proposed."""
    return AuditEntry(
        kind="decision.edited",
        actor=step.record.approver if step.record else SERVICE_ACTOR,
        proposal_id=held.proposal_id,
        request_id=held.request_id,
        data={
            "proposed_digest": held.proposal_digest,
            "edited_digest": edit.proposal.digest(),
            "edited_arguments": edit.proposal.arguments,
            "classification": edit.classification.model_dump(mode="json"),
            "verdict": edit.verdict.model_dump(mode="json"),
        },
    )


def _returned(msg: Msg, recorded: RecordedNonce, signature: str | None) -> bool:
    """Whether `msg`, carrying a decision whose nonce is `recorded`, is the message that
    decision was recorded from, come back unacked.

    Known exactly by the stream sequence the decision's row keeps: a nats-server that is
    killed can forget a delivery it had not yet written down and hand the message out again
    as a first delivery, so the delivery count alone cannot tell. A decision recorded before
    the sequence was kept is taken for its message when it carries the same signature and was
    delivered before."""
    if signature is None or recorded.signature != signature:
        return False
    seq = stream_sequence(msg)
    if recorded.stream_seq is not None and seq is not None:
        return seq == recorded.stream_seq
    return attempts(msg) > 1


__all__ = ["SERVICE_ACTOR", "Collector"]
