"""Periodic work: the expiry sweeper, the outbox republisher, and the execution auditor.

All of them are safe to run on several replicas at once: the sweeper closes a request through
the same version check as a decision (the loser of a race skips it), the republisher's
re-publishes are dropped by JetStream's duplicate window, the auditor inserts on a unique key.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import timedelta

from nats.aio.msg import Msg
from pydantic import ValidationError

from workflow.approvals import expire
from workflow.effects import AuditEntry, ExecutionRecord, StepWrite
from workflow.errors import describe_invalid
from workflow.messages import Classification, Executed, Proposal, Verdict
from workflow.outcomes import Outcome
from workflow.routing import SERVICE_ACTOR, closing_effects
from workflow.service.context import ServiceContext
from workflow.service.publishing import to_resend
from workflow.service.stage import Settle
from workflow.store.executions import Report
from workflow.store.requests import ConcurrentUpdate

log = logging.getLogger("headgate.background")


async def sweep_once(ctx: ServiceContext) -> int:
    """Expire every due pending request; returns how many this call closed."""
    now = ctx.now()
    closed = 0
    ctx.metrics.pending.set(await ctx.store.requests.pending_count())
    for held, version in await ctx.store.requests.due(now):
        step = expire(held, now=now)
        if step is None:
            continue
        parts = await ctx.store.proposals.parts(held.proposal_id)
        if parts is None:
            continue
        proposal = Proposal.model_validate_json(parts[0])
        outcome, event, audit = closing_effects(
            ctx.subjects,
            step.request,
            Outcome.EXPIRED,
            step.message,
            proposal,
            Classification.model_validate_json(parts[1]),
            Verdict.model_validate_json(parts[2]),
            now,
            parts[3] or None,
        )
        write = StepWrite(
            request_id=held.request_id,
            expected_version=version,
            new_state=step.request.state,
            outcome=outcome,
            proposal_status=(proposal.id, Outcome.EXPIRED),
            events=[event],
            audit=[audit],
        )
        try:
            await ctx.store.requests.commit_step(write, now)
        except ConcurrentUpdate:
            continue  # a decision or another replica got there first
        closed += 1
        log.info(
            "expired: %s",
            step.message,
            extra={
                "request_id": held.request_id,
                "proposal_id": held.proposal_id,
                "agent": held.agent,
                "stage": "sweeper",
            },
        )
        ctx.metrics.expired.inc()
        ctx.metrics.outcomes.labels("expired").inc()
        try:
            await ctx.publish(write.events)
        except Exception as exc:
            log.warning(
                "sweeper: publishing expiry of %s failed (%s)",
                held.request_id,
                exc,
                extra={"request_id": held.request_id, "proposal_id": held.proposal_id},
            )
    return closed


async def republish_once(ctx: ServiceContext, grace: float = 10.0) -> int:
    """Publish outbox events a crash left unpublished (older than `grace` seconds). One older
    than the duplicate window is sent only if its stream does not hold it (`to_resend`); one
    it holds is marked published."""
    now = ctx.now()
    rows = await ctx.store.outbox.unpublished_rows(now - timedelta(seconds=grace))
    if not rows:
        return 0
    events = await to_resend(ctx.js, rows, now, ctx.signer)
    await ctx.publish(events)
    sent = {e.msg_id for e in events}
    ctx.marker.add(e.msg_id for e, _ in rows if e.msg_id not in sent)
    log.info("republished %d events left unpublished", len(events))
    return len(events)


async def every(
    interval: float, fn_name: str, ctx: ServiceContext, stopping: asyncio.Event
) -> None:
    fns = {"sweep": sweep_once, "republish": republish_once}
    fn = fns[fn_name]
    while not stopping.is_set():
        try:
            await fn(ctx)
        except Exception as exc:
            log.warning("%s failed (%s); will retry", fn_name, exc)
        try:
            await asyncio.wait_for(stopping.wait(), interval)
        except TimeoutError:
            pass


class Auditor:
    """Records agents' reports of what happened when they ran a released call.

    A fetched batch of reports is one read (who each release went to) and one transaction,
    in stream order, as the intake does with proposals: hooks report every call they ran, so
    these are as many as the releases."""

    def __init__(self, ctx: ServiceContext):
        self.ctx = ctx
        self.settle = Settle("auditor", ctx.dead, ctx.retry, ctx.metrics)

    async def __call__(self, msgs: Sequence[Msg]) -> None:
        ctx = self.ctx
        parsed: list[tuple[Msg, Executed, str | None]] = []
        for msg in msgs:
            try:
                report = Executed.model_validate_json(msg.data)
            except ValidationError as exc:
                await self.settle.unprocessable(
                    msg, f"invalid execution report: {describe_invalid(exc)}"
                )
                continue
            parsed.append((msg, report, ctx.subjects.token_after(msg.subject, "executed")))
        if not parsed:
            return
        try:
            await self._record(parsed)
        except Exception as exc:
            if len(parsed) == 1:
                await self.settle.failed(parsed[0][0], str(exc))
                return
            # Nothing of the batch was recorded. One by one, in order: a report that cannot
            # be recorded is retried on its own and the others are not held up by it.
            log.warning("auditor: recording %d reports failed (%s); one by one", len(parsed), exc)
            for one in parsed:
                try:
                    await self._record([one])
                except Exception as why:
                    await self.settle.failed(one[0], str(why))
                else:
                    await self.settle.ack(one[0])
            return
        for msg, _, _ in parsed:
            await self.settle.ack(msg)

    async def _record(self, parsed: Sequence[tuple[Msg, Executed, str | None]]) -> None:
        store = self.ctx.store.executions
        owners = await store.owners([(r.proposal_id, r.release_id) for _, r, _ in parsed])
        await store.record_many(
            [
                _report(report, agent, owners.get((report.proposal_id, report.release_id)))
                for _, report, agent in parsed
            ],
            self.ctx.now(),
        )


def _report(report: Executed, agent: str | None, owner: str | None) -> Report:
    """What to record of one report: its row and audit records, or the refusal's record."""
    refusal: tuple[str, str] | None = None
    if agent != report.agent:
        refusal = ("executed.unreleased", f"agent {agent} reported for agent {report.agent}")
    elif owner is None:
        refusal = (
            "executed.unreleased",
            f"no release {report.release_id} of proposal {report.proposal_id} exists: "
            "the call ran without a release",
        )
    elif owner != agent:
        # Release ids are derived from proposal ids, so another agent can name one: only
        # the agent the call was released to may say what happened when it ran.
        refusal = (
            "executed.refused",
            f"agent {agent} reported the release {report.release_id}, which was released "
            f"to agent {owner}; only that agent may report it",
        )
    if refusal is not None:
        kind, why = refusal
        return Report(
            None,
            AuditEntry(
                kind,
                agent or "?",
                {"message": why, "report": report.model_dump(mode="json")},
                report.proposal_id,
            ),
        )
    data = {"release_id": report.release_id, "success": report.success, "summary": report.summary}
    return Report(
        ExecutionRecord(
            release_id=report.release_id,
            proposal_id=report.proposal_id,
            agent=report.agent,
            success=report.success,
            summary=report.summary,
            finished_at=report.finished_at,
        ),
        AuditEntry("executed", report.agent, data, report.proposal_id),
        AuditEntry(
            "executed.repeated",
            report.agent,
            {**data, "message": f"the release {report.release_id} was already reported"},
            report.proposal_id,
        ),
    )


__all__ = ["SERVICE_ACTOR", "Auditor", "every", "republish_once", "sweep_once"]
