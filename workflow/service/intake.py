"""The intake stage: validate → classify → evaluate policy → route → persist → publish → ack.

Classifier and router run in one stage, on one fetched batch, in one database transaction: a
separate `classified` hop through JetStream would double the latency of every read for no
added guarantee (the router is the pure `workflow.routing.route`, tested on its own).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import Counter
from collections.abc import Awaitable, Sequence
from datetime import datetime

import httpx
from nats.aio.msg import Msg
from pydantic import ValidationError

from workflow.classify.engine import classify
from workflow.effects import AuditEntry, IntakeRecord, OutboxEvent, StoredIntake
from workflow.errors import describe_invalid
from workflow.masking import masked_reasons
from workflow.messages import Classification, Decision, Proposal, Verdict
from workflow.policy.engine import evaluate
from workflow.policy.freeze import FreezeTerms, frozen_verdict
from workflow.policy.grants import GrantTerms, grant_release
from workflow.policy.model import Policy
from workflow.routing import SERVICE_ACTOR, intake_events, invalid_answer, route
from workflow.service.context import ServiceContext
from workflow.service.model_check import model_check
from workflow.service.publishing import (
    CLOCK_SLACK,
    Sent,
    publish_events,
    send_events,
    to_resend,
)
from workflow.service.pull import attempts, stream_sequence
from workflow.service.stage import Settle, Unprocessable
from workflow.service.tracing import span_headers, trace_headers
from workflow.store.proposals import FreezesChanged

log = logging.getLogger("headgate.intake")

#: A proposal of the batch with its classification, verdict and the audit entries it adds.
Evaluated = tuple[Msg, Proposal, Classification, Verdict, list[AuditEntry]]
STAGE = "intake"


class Intake:
    def __init__(self, ctx: ServiceContext):
        self.ctx = ctx
        self.settle = Settle(STAGE, ctx.dead, ctx.retry, ctx.metrics)
        self._http: httpx.AsyncClient | None = None
        #: The freezes in force as last read: a batch is decided on them and its commit writes
        #: only if they are still those in force (`FreezesChanged` otherwise: read anew).
        self._freezes: list[FreezeTerms] | None = None

    async def flush(self) -> None:
        """Close the model check's HTTP client (PullStage calls this when it stops)."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def _classify(self, msg: Msg) -> tuple[Proposal, Classification]:
        """The proposal and its classification; `Invalid` when it can never be."""
        ctx = self.ctx
        agent = ctx.subjects.token_after(msg.subject, "proposals")
        try:
            proposal = Proposal.model_validate_json(msg.data)
        except ValidationError as exc:
            raise Invalid(f"invalid proposal: {describe_invalid(exc)}") from exc
        if agent is None or proposal.agent != agent:
            raise Invalid(
                f"the proposal names agent {proposal.agent!r} but arrived on {msg.subject}; "
                "an agent may only propose as itself"
            )
        tables = ctx.policy.tables_for(proposal.tool, proposal.tool_definition)
        return proposal, classify(proposal, tables)

    def _route(
        self,
        msg: Msg,
        proposal: Proposal,
        classification: Classification,
        verdict: Verdict,
        audit: list[AuditEntry],
        now: datetime,
    ) -> IntakeRecord:
        ctx = self.ctx
        policy = ctx.policy
        definition = proposal.tool_definition
        trace = trace_headers(msg.headers)
        if trace:
            trace = span_headers(
                "headgate.intake", trace, proposal_id=proposal.id, decision=verdict.decision.value
            )
        record = route(
            ctx.subjects,
            proposal,
            msg.data.decode(),
            classification,
            verdict,
            now,
            trace,
            stream_sequence(msg),
        )
        record.audit.extend(audit)
        if definition is not None and definition.server:
            match = policy.tool_entry(proposal.tool, definition)
            if match is not None and match.inherited:
                # Same server kind and definition as a reviewed tool: its review applies here.
                record.audit.append(
                    AuditEntry(
                        kind="classification.inherited",
                        actor=SERVICE_ACTOR,
                        proposal_id=proposal.id,
                        data={
                            "tool": proposal.tool,
                            "from": match.name,
                            "fingerprint": match.fingerprint,
                        },
                    )
                )
        return record

    async def _model_checked(
        self, items: list[tuple[Msg, Proposal, Classification]]
    ) -> list[tuple[Msg, Proposal, Classification]]:
        """Layer 7, when configured: the model may only raise a shell call's classification.

        The calls of one batch run concurrently; each is bounded by the configured timeout and
        a failure leaves the classification as it was (with a reason saying so).
        """
        config = self.ctx.policy.classifier_tables().model_classifier
        if config is None or not config.enabled or not items:
            return items
        if self._http is None:
            self._http = httpx.AsyncClient()
        checked = await asyncio.gather(
            *(model_check(p, c, config, self._http) for _, p, c in items)
        )
        # The model's own words may quote the command: masked like every other reason.
        return [
            (m, p, c.model_copy(update={"reasons": masked_reasons(c.reasons, p)}))
            for (m, p, _), c in zip(items, checked, strict=True)
        ]

    async def __call__(self, msgs: Sequence[Msg]) -> None:
        # When no freezes are known, they are read while the batch is classified (on
        # PostgreSQL a round trip the classification does not wait for).
        reading = (
            asyncio.ensure_future(self.ctx.store.grants.freezes())
            if self._freezes is None
            else None
        )
        try:
            await self._batch(msgs, reading)
        finally:
            if reading is not None:
                reading.cancel()  # when the batch ended before taking them

    async def _freezes_now(self, reading: Awaitable[list[FreezeTerms]] | None) -> list[FreezeTerms]:
        """The freezes to decide the batch on: `reading`'s, the last ones known, or read now."""
        known = self._freezes
        if reading is not None or known is None:
            known = await (reading or self.ctx.store.grants.freezes())
            self._freezes = known
        return known

    async def _batch(
        self, msgs: Sequence[Msg], reading: Awaitable[list[FreezeTerms]] | None
    ) -> None:
        classified: list[tuple[Msg, Proposal, Classification]] = []
        bad: list[tuple[Msg, str]] = []
        invalid: list[tuple[Msg, str]] = []
        policy = self.ctx.policy  # what `_classify` classifies under (no await in the loop)
        for msg in msgs:
            try:
                classified.append((msg, *self._classify(msg)))
            except Invalid as exc:
                invalid.append((msg, str(exc)))
            except Exception as exc:  # a bug must not lose the message: retry, then dead-letter
                log.exception("intake: unexpected error on %s", msg.subject)
                await self.settle.failed(msg, f"internal error: {exc!r}")
        now = self.ctx.now()  # one batch, one moment: its rows share the timestamp
        decided: list[tuple[Msg, Proposal, Classification, Verdict]] = []
        for msg, proposal, classification in await self._model_checked(classified):
            try:
                verdict = evaluate(proposal, classification, self.ctx.policy)
                decided.append((msg, proposal, classification, verdict))
            except Exception as exc:
                log.exception("intake: unexpected error on %s", msg.subject)
                await self.settle.failed(msg, f"internal error: {exc!r}")
        good, events, sending = await self._decide(decided, bad, invalid, now, reading)
        self._remember_held(policy, classified, good)
        if not await self._publish(good, events, sending, now):
            good = []
        for msg, _ in good:
            await self.settle.ack(msg)
        for msg, error in bad:
            await self.settle.unprocessable(msg, error)
        for msg, error in invalid:
            await self._answer_invalid(msg, error, now)

    async def _decide(
        self,
        decided: list[tuple[Msg, Proposal, Classification, Verdict]],
        bad: list[tuple[Msg, str]],
        invalid: list[tuple[Msg, str]],
        now: datetime,
        reading: Awaitable[list[FreezeTerms]] | None,
    ) -> tuple[list[tuple[Msg, IntakeRecord]], list[OutboxEvent], Sent | Exception]:
        """Apply the freezes and grants to the policy's verdicts, route, commit and send the
        events: the messages to ack, the events and their sending.

        The batch is decided on the freezes last known (`reading`'s when they are read for
        it); when the commit finds others in force it writes nothing, and the batch is
        decided again on those (when they change twice in a row, it is retried later). A grant
        use claimed for a call the batch decided again holds (the freeze met at the commit) is
        given back once the call is stored held, and so is one an earlier delivery of a call a
        freeze now holds may have claimed (`_held_with_use`)."""
        again = False
        claimed: set[str] = set()  # the calls any decision of this batch claimed a use for
        while True:
            try:
                freezes = await self._freezes_now(reading)
                evaluated = await self._controls(
                    [(*item, []) for item in decided], now, freezes, claimed
                )
            except Exception as exc:
                # Freezes and grants unknown: nothing may be decided without them.
                log.warning("intake: reading freezes and grants failed (%s); will retry", exc)
                for msg, *_ in decided:
                    await self.settle.failed(msg, f"reading freezes and grants failed: {exc}")
                freezes, evaluated = [], []
            # Routing, the commit and sending the events take the event loop's turn, after any
            # batch of decisions waiting for it; the PubAcks are awaited after the turn.
            async with self.ctx.turns.hold():
                good = []
                for msg, proposal, classification, verdict, audit in evaluated:
                    try:
                        good.append(
                            (msg, self._route(msg, proposal, classification, verdict, audit, now))
                        )
                    except Exception as exc:
                        log.exception("intake: unexpected error on %s", msg.subject)
                        await self.settle.failed(msg, f"internal error: {exc!r}")
                try:
                    good, events = await self._commit(good, bad, invalid, now, freezes)
                except FreezesChanged as exc:
                    self._freezes, reading = None, None
                    if not again:
                        log.info("intake: %s; deciding the batch again", exc)
                        again = True
                        continue
                    await self._retry(good, str(exc))
                    good, events = [], []
                unused = _held_with_use(evaluated, claimed) if freezes else []
                if unused and good:  # before the calls' events: none is seen with its use
                    await self._give_back(unused)
                return good, events, await self._send(events)

    async def _give_back(self, proposal_ids: list[str]) -> None:
        """Give back the grant uses claimed for calls a freeze held (see `Grants.give_back`:
        only for calls stored as not released). A failure keeps them counted: the grant then
        releases one call fewer, never one more."""
        try:
            given = await self.ctx.store.grants.give_back(proposal_ids)
        except Exception as exc:
            log.warning("intake: giving back %d grant use(s) failed (%s)", len(proposal_ids), exc)
            return
        if given:
            log.info("intake: gave back %d grant use(s) claimed for calls a freeze held", given)

    def _remember_held(
        self,
        policy: Policy,
        classified: list[tuple[Msg, Proposal, Classification]],
        kept: list[tuple[Msg, IntakeRecord]],
    ) -> None:
        """Keep the classification of each call held for approval, as `classify` gave it
        (before any model check): the collector's re-check at release takes it instead of
        classifying the call again (`HeldClassifications`)."""
        memo = self.ctx.held
        held = [rec for _, rec in kept if rec.request is not None]
        if memo is None or not held:
            return
        fresh = {proposal.id: classification for _, proposal, classification in classified}
        for rec in held:
            classification = fresh.get(rec.id)
            if classification is not None:
                memo.remember(policy, rec.id, rec.proposal.digest, classification)

    async def _answer_invalid(self, msg: Msg, error: str, now: datetime) -> None:
        """Tell the agent its proposal was not accepted (a `blocked` event, `invalid`, when
        the id can be read: the agent waits on it), then dead-letter the input. The answer is
        confirmed first: if it cannot be published the message is retried, not dropped."""
        agent = self.ctx.subjects.token_after(msg.subject, "proposals")
        answer = (
            invalid_answer(self.ctx.subjects, agent, msg.data, _sentence(error), now, _key(msg))
            if agent is not None
            else None
        )
        if answer is not None:
            try:
                await publish_events(self.ctx.js, [answer], self.ctx.signer)
            except Exception as exc:
                await self.settle.failed(msg, f"answering the invalid proposal failed: {exc}")
                return
        await self.settle.unprocessable(msg, error)

    async def _controls(
        self,
        items: list[Evaluated],
        now: datetime,
        freezes: list[FreezeTerms],
        claimed: set[str],
    ) -> list[Evaluated]:
        """The freezes (those the batch is decided on) and grants in force, applied to the
        batch's verdicts; each call a grant use is claimed for is added to `claimed`.

        A freeze holds every consequential call in its scope, whatever its verdict would
        release (`policy.freeze`); otherwise a grant may release a call held for one approval
        (`policy.grants`), once its use is claimed in the store (atomically, across replicas).
        The grants are read from the database for every batch holding a call one might
        release; the freezes a batch was decided on are checked by its commit (`_decide`): a
        freeze, a thaw or a revocation takes effect on every replica from the next batch on.
        """
        ctx = self.ctx
        policy = ctx.policy
        store = ctx.store.grants
        held = any(i[3].decision is Decision.REQUIRE_APPROVAL for i in items)
        grants = await store.live(now) if held and policy.grants.enabled else []
        out: list[Evaluated] = []
        for msg, proposal, classification, verdict, audit in items:
            requirement = policy.class_requirements[classification.risk_class]
            frozen = frozen_verdict(proposal, classification, verdict, freezes, requirement)
            if frozen is not None:
                audit.append(
                    AuditEntry(
                        kind="freeze.held",
                        actor=SERVICE_ACTOR,
                        proposal_id=proposal.id,
                        data={"reason": frozen.reason, "decision": verdict.decision.value},
                    )
                )
                out.append((msg, proposal, classification, frozen, audit))
                continue
            candidates = list(grants)
            while candidates:
                found = grant_release(proposal, classification, verdict, candidates, policy, now)
                if found is None:
                    break
                if await store.claim(found.grant.grant_id, proposal.id, now):
                    claimed.add(proposal.id)
                    verdict = found.verdict
                    audit.append(_grant_used(proposal, found.grant))
                    break
                # Used up, revoked or expired since it was read: the next one may do.
                candidates = [g for g in candidates if g.grant_id != found.grant.grant_id]
            out.append((msg, proposal, classification, verdict, audit))
        return out

    async def _send(self, events: list[OutboxEvent]) -> Sent | Exception:
        """Hand the events to JetStream (PubAcks not awaited); the error if that failed."""
        try:
            return await send_events(self.ctx.js, events, self.ctx.signer)
        except Exception as exc:
            return exc

    async def _publish(
        self,
        good: Sequence[tuple[Msg, IntakeRecord]],
        events: list[OutboxEvent],
        sending: Sent | Exception,
        now: datetime,
    ) -> bool:
        """Wait for JetStream to confirm the batch's events (`sending`).

        No outbox row is written on this path: the proposals are acked only after the PubAcks,
        so until then their own JetStream messages stand in for it (a redelivery finds the rows
        committed and rebuilds the events). When publishing fails, the events go to the outbox
        for the republisher and the proposals are acked; when that fails too, they are
        redelivered. Returns whether the messages may be acked.
        """
        try:
            if isinstance(sending, Exception):
                raise sending
            await sending.confirmed()
            return True
        except Exception as exc:
            error = f"publishing results failed: {exc}"
        log.warning("intake: %s; keeping %d events in the outbox", error, len(events))
        try:
            await self.ctx.store.outbox.save(events, now)
            return True
        except Exception as exc:
            log.warning("intake: keeping events in the outbox failed (%s); will retry", exc)
            await self._retry(good, f"{error}; keeping them in the outbox failed: {exc}")
            return False

    async def _commit(
        self,
        good: list[tuple[Msg, IntakeRecord]],
        bad: list[tuple[Msg, str]],
        invalid: list[tuple[Msg, str]],
        now: datetime,
        freezes: Sequence[FreezeTerms],
    ) -> tuple[list[tuple[Msg, IntakeRecord]], list[OutboxEvent]]:
        """Write the batch in one transaction; returns the messages to ack and events to send.
        `FreezesChanged` when `freezes`, those the batch was decided on, are no longer those
        in force (nothing written).

        A proposal id seen before with the same digest is the recording message come back or
        another copy of it (`_copies`: which of them has its events sent again).
        The same id with another digest is a conflict (`_conflicts`): refused, and the first
        proposal under that id is left as it was.
        """
        ctx = self.ctx
        if not good:
            return good, []
        try:
            result = await ctx.store.proposals.record(
                [rec for _, rec in good], now, [f.freeze_id for f in freezes]
            )
        except FreezesChanged:
            raise
        except Exception as exc:
            log.warning("intake: database write failed (%s); will retry", exc)
            await self._retry(good, f"database write failed: {exc}")
            return [], []
        events: list[OutboxEvent] = []
        digests: dict[str, str] = {}
        copies: list[tuple[Msg, str]] = []
        keep: list[tuple[Msg, IntakeRecord]] = []
        conflicts: list[tuple[Msg, IntakeRecord]] = []
        for msg, rec in good:
            digest = rec.proposal.digest
            first = rec.id not in digests
            digests.setdefault(rec.id, digest)
            stored = digest if rec.id in result.new else result.existing_digests.get(rec.id)
            if stored != digest or digests[rec.id] != digest:
                conflicts.append((msg, rec))
                continue
            keep.append((msg, rec))
            if first and rec.id in result.new:
                events.extend(rec.events)
            elif rec.id not in result.new:
                copies.append((msg, rec.id))
        # Counted per batch: a labelled counter costs a lookup and a lock per increment.
        classes = Counter(
            (rec.proposal.risk_class, rec.proposal.decision)
            for _, rec in keep
            if rec.id in result.new
        )
        outcomes = Counter(
            rec.outcome.outcome
            for _, rec in keep
            if rec.id in result.new and rec.outcome is not None
        )
        for (risk_class, decision), n in classes.items():
            ctx.metrics.proposals.labels(risk_class, decision).inc(n)
        for outcome, n in outcomes.items():
            ctx.metrics.outcomes.labels(outcome).inc(n)
        ctx.metrics.duplicates.inc(len(copies))
        if conflicts:
            await self._conflicts(conflicts, bad, invalid)
        if copies:
            events.extend(await self._copies(copies, now))
        return keep, events

    async def _copies(self, copies: list[tuple[Msg, str]], now: datetime) -> list[OutboxEvent]:
        """The events to send again for messages carrying proposals recorded before.

        The message a proposal was recorded from can come back before it was acked: its
        batch's events may never have reached JetStream (a crash between the commit and the
        PubAcks). That message is known by its stream sequence, kept in the proposal's row,
        and its events are sent again (`to_resend`: JetStream drops what it holds). Its
        delivery count does not tell: a nats-server that is killed can forget a delivery it
        had not yet written down and hand the message out again as a first delivery.
        Another copy (an agent proposing the same call again, a publish past the duplicate
        window) sends nothing: the events are confirmed before the recording message is
        acked, or are in the outbox, or come with that message's return; re-sending them
        would hand every core subscriber a second `released` event.
        """
        ctx = self.ctx
        rows = {row.id: row for row in await ctx.store.proposals.stored({p for _, p in copies})}
        again: dict[str, StoredIntake] = {}
        for msg, pid in copies:
            row = rows.get(pid)
            if row is None:  # pruned since the commit found it: decided long ago
                continue
            seq = stream_sequence(msg)
            delivery = attempts(msg)
            returning = recorded_from(row, seq, delivery, _stored_at(msg))
            if returning:
                again[pid] = row
            log.info(
                "intake: %s was recorded before (stream message %s, delivery %d): %s",
                pid,
                "?" if seq is None else seq,
                delivery,
                "the message it was recorded from, its events are sent again"
                if returning
                else "another copy, nothing sent",
            )
        rebuilt = [
            (event, row.received_at)
            for row in again.values()
            for event in intake_events(ctx.subjects, row)
        ]
        return await to_resend(ctx.js, rebuilt, now, ctx.signer) if rebuilt else []

    async def _conflicts(
        self,
        conflicts: list[tuple[Msg, IntakeRecord]],
        bad: list[tuple[Msg, str]],
        invalid: list[tuple[Msg, str]],
    ) -> None:
        """Proposals whose id is already taken by another proposal (ids are chosen by agents,
        and one namespace across them). The first proposal keeps the id, untouched.

        Another agent's id: the sender is answered (`invalid`, on its own blocked subject),
        without a word about the proposal that holds the id. The same agent's: dead-lettered
        only, since an answer under that id on the agent's results would reach whoever waits
        for the first proposal (the agent's SDK refuses to take the first one's ticket for
        another call). Who holds the id is read from the database; when that fails, the
        messages are retried.
        """
        try:
            owners = await self.ctx.store.proposals.owners({rec.id for _, rec in conflicts})
        except Exception as exc:
            log.warning("intake: reading the owners of reused ids failed (%s); will retry", exc)
            await self._retry(conflicts, f"reading the owners of reused ids failed: {exc}")
            return
        for msg, rec in conflicts:
            if owners.get(rec.id, rec.proposal.agent) == rec.proposal.agent:
                bad.append(
                    (
                        msg,
                        f"proposal id {rec.id!r} was already used for a different "
                        "proposal; an edited proposal needs a new id",
                    )
                )
            else:
                invalid.append(
                    (
                        msg,
                        f"proposal id {rec.id!r} is already in use by another proposal; "
                        "every proposal needs an id of its own (a fresh random one)",
                    )
                )

    async def _retry(self, good: Sequence[tuple[Msg, IntakeRecord]], error: str) -> None:
        for msg, _ in good:
            await self.settle.failed(msg, error)


class Invalid(Unprocessable):
    """The message is not a proposal its agent may make: dead-lettered, and the agent is
    answered with a `blocked` event (`invalid`) when the proposal id can be read."""


#: The most of a validation error an `invalid` answer quotes (a field name can be as long as
#: the payload): the answer stays small whatever the input was.
REASON_LIMIT = 2000


def _sentence(error: str) -> str:
    """The validation error as the reason an agent reads: a sentence, bounded."""
    text = error[:1].upper() + error[1:]
    if len(text) > REASON_LIMIT:
        text = text[: REASON_LIMIT - 1] + "…"
    return text if text.endswith((".", "…")) else f"{text}."


def _key(msg: Msg) -> str:
    """What identifies the input message (its stream and sequence): its answer's dedup key."""
    try:
        return f"{msg.metadata.stream}:{msg.metadata.sequence.stream}"
    except Exception:  # not a JetStream message
        return hashlib.sha256(msg.data).hexdigest()[:24]


def _held_with_use(evaluated: list[Evaluated], claimed: set[str]) -> list[str]:
    """Calls a freeze held that may hold a grant's use nonetheless: one an earlier decision of
    this batch claimed (in `claimed`: a freeze met at the commit), or one an earlier
    delivery claimed and stored nothing (a batch retried, a process gone before its commit).
    Their uses are given back once they are stored held (`Grants.give_back`). Only calls in a
    freeze's scope are looked at."""
    return [
        proposal.id
        for msg, proposal, _, _, audit in evaluated
        if any(entry.kind == "freeze.held" for entry in audit)
        and (proposal.id in claimed or attempts(msg) > 1)
    ]


def _grant_used(proposal: Proposal, grant: GrantTerms) -> AuditEntry:
    return AuditEntry(
        kind="grant.used",
        actor=grant.approver,
        proposal_id=proposal.id,
        data={
            "grant_id": grant.grant_id,
            "use": grant.uses + 1,
            "max_uses": grant.max_uses,
            "scope": grant.describe(),
        },
    )


def recorded_from(
    row: StoredIntake, seq: int | None, delivery: int, stored_at: datetime | None
) -> bool:
    """Whether a message (its stream sequence, delivery count and the stream's time for it)
    carrying the already recorded proposal `row` is the message it was recorded from.

    Known exactly by the sequence the row keeps. A row recorded before the sequence was kept
    (or from a message without one) is judged by the times: a message stored in the stream
    before the recording, or up to `CLOCK_SLACK` after it (the clocks may differ), or
    delivered before, may be that message."""
    if row.stream_seq is not None and seq is not None:
        return seq == row.stream_seq
    return delivery > 1 or stored_at is None or stored_at < row.received_at + CLOCK_SLACK


def _stored_at(msg: Msg) -> datetime | None:
    """When the stream stored the message (its own clock); None when that cannot be read."""
    try:
        return msg.metadata.timestamp
    except Exception:  # not a JetStream message (tests)
        return None
