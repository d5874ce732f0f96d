"""Escalation: every few seconds, take the ladder steps (`[approval.escalation]`) that fell due.

The steps themselves are decided by `workflow.escalation.due` (pure); here they are committed
— each one an `escalated` event on `<prefix>.escalated.<workspace>` (the notifier tells the
channels) and an audit record, with the raised requirement or the expiry in the same
transaction — and published. Safe on several replicas: the progress of a request moves only
from the count it was read at.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace
from datetime import datetime

from workflow.approvals import HeldRequest
from workflow.effects import AuditEntry, OutboxEvent, StepWrite
from workflow.escalation import Escalation, due
from workflow.messages import Classification, Escalated, Proposal, Verdict
from workflow.outcomes import Outcome, RequestState
from workflow.routing import SERVICE_ACTOR, closing_effects
from workflow.service.context import ServiceContext
from workflow.store.requests import ConcurrentUpdate

log = logging.getLogger("headgate.escalation")


async def escalate_once(ctx: ServiceContext) -> int:
    """Take every step that fell due; returns how many were taken."""
    spec = ctx.policy.approval.escalation
    if not spec.steps:
        return 0
    now = ctx.now()
    waiting = await ctx.store.requests.waiting(now)
    progress = await ctx.store.escalations.taken([held.request_id for held, _ in waiting])
    taken = 0
    for held, version in waiting:
        before = progress.get(held.request_id, 0)
        steps = due(spec, held, taken=before, now=now)
        if not steps:
            continue
        write = StepWrite(request_id=held.request_id, expected_version=None)
        for step in steps:
            write.events.append(_event(ctx, held.request_id, held.proposal_id, held.agent,
                                       held.workspace, step, now))  # fmt: skip
            write.audit.append(
                AuditEntry(
                    "escalated",
                    SERVICE_ACTOR,
                    {"step": step.index, "action": step.step.action, "message": step.message},
                    held.proposal_id,
                    held.request_id,
                )
            )
            if step.requirement is not None:
                write.expected_version = version
                write.requirement = step.requirement.model_dump_json()
            if step.expires:
                await _expire(ctx, held, version, step, write, now)
        try:
            await ctx.store.escalations.take(
                write, before=before, after=before + len(steps), now=now
            )
        except ConcurrentUpdate:
            continue  # a decision or another replica changed the request first
        taken += len(steps)
        for step in steps:
            ctx.metrics.escalations.labels(step.step.action).inc()
            log.info(
                "escalation step %d (%s): %s",
                step.index,
                step.step.action,
                step.message,
                extra={"request_id": held.request_id, "proposal_id": held.proposal_id},
            )
        try:
            await ctx.publish(write.events)
        except Exception as exc:  # committed in the outbox: the republisher sends them
            log.warning("escalation: publishing for %s failed (%s)", held.request_id, exc)
    return taken


def _event(
    ctx: ServiceContext,
    request_id: str,
    proposal_id: str,
    agent: str,
    workspace: str,
    step: Escalation,
    now: datetime,
) -> OutboxEvent:
    body = Escalated(
        request_id=request_id,
        proposal_id=proposal_id,
        agent=agent,
        workspace=workspace,
        step=step.index,
        action=step.step.action,
        message=step.message,
        roles=list(step.step.roles) if step.step.action == "notify" else [],
        channels=list(step.step.channels),
        requirement=step.requirement,
        at=now,
    )
    return OutboxEvent(
        msg_id=f"escalated:{request_id}:{step.index}",
        subject=ctx.subjects.escalated(workspace),
        payload=body.model_dump_json(),
        proposal_id=proposal_id,
    )


async def _expire(
    ctx: ServiceContext,
    held: HeldRequest,
    version: int,
    step: Escalation,
    write: StepWrite,
    now: datetime,
) -> None:
    parts = await ctx.store.proposals.parts(held.proposal_id)
    if parts is None:
        return
    proposal = Proposal.model_validate_json(parts[0])
    closed = replace(held, state=RequestState.EXPIRED)
    outcome, event, audit = closing_effects(
        ctx.subjects,
        closed,
        Outcome.EXPIRED,
        step.message,
        proposal,
        Classification.model_validate_json(parts[1]),
        Verdict.model_validate_json(parts[2]),
        now,
        parts[3] or None,
    )
    write.expected_version = version
    write.new_state = RequestState.EXPIRED
    write.outcome = outcome
    write.proposal_status = (proposal.id, Outcome.EXPIRED)
    write.events.append(event)
    write.audit.append(audit)


async def escalate_every(interval: float, ctx: ServiceContext, stopping: asyncio.Event) -> None:
    while not stopping.is_set():
        try:
            await escalate_once(ctx)
        except Exception as exc:
            log.warning("escalation failed (%s); will retry", exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), interval)
