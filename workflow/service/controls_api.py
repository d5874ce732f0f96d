"""The approvers' controls on `<prefix>.api.grant.*`, `<prefix>.api.freeze` and `.freezes`.

| subject | what |
|---|---|
| `api.grant.issue` | store a signed grant made from a held request (checked, audited) |
| `api.grant.list` | the grants in force (or every one) |
| `api.grant.revoke` | revoke a grant, signed; effective from the next proposal |
| `api.freeze` | freeze or thaw a scope, signed; effective from every replica's next batch |
| `api.freezes` | the freezes in force |

A grant is authorised like a decision on the request it was made from: the signing key must
be a registered approver's, who may approve that call (workspace, the roles its requirement
asks for, not running the agent), and the call must be one a single approval could release
(`workflow.policy.grants.not_grantable`). Every refusal is audited, like a refused decision.
An issue, a revocation, a freeze and a thaw that lifted something are also news: a signed
event on `<prefix>.controls.*` (`.grant.issued`, `.grant.revoked`), written to the outbox in
the transaction that makes the change.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel

from workflow.approvals import DEFAULT_MAX_SKEW, ApproverProfile, ineligibility
from workflow.controls import (
    BacktestQuery,
    BacktestReply,
    FreezeChanged,
    FreezeOrder,
    FreezeReply,
    FreezesQuery,
    GrantChanged,
    GrantInfo,
    GrantIssue,
    GrantRevoke,
    GrantScope,
    GrantsQuery,
    GrantsReply,
)
from workflow.effects import AuditEntry, OutboxEvent
from workflow.errors import PolicyError
from workflow.messages import ApiError, Classification, Proposal, Verdict
from workflow.policy.backtest import Backtest, PastCall
from workflow.policy.durations import format_duration
from workflow.policy.freeze import FreezeTerms
from workflow.policy.grants import GrantTerms, not_grantable, scope_problem
from workflow.policy.load import load_policy_text
from workflow.service.api import RoutedHandler, answer_routed
from workflow.service.context import ServiceContext
from workflow.signing import verify_raw
from workflow.store.grants import freeze_info
from workflow.store.history import past_calls
from workflow.subjects import CONTROL_API_NAMES

log = logging.getLogger("headgate.api")

Signed = GrantIssue | GrantRevoke | FreezeOrder


class Refused(Exception):
    """A control request refused: the sentence answers the caller and goes to the audit."""


def _signer(
    ctx: ServiceContext, raw: dict[str, Any], body: Signed, what: str
) -> tuple[str, ApproverProfile]:
    if not body.key or not body.signature or not verify_raw(raw):
        raise Refused(f"The {what} is not signed by an approver key (or the signature is bad).")
    found = ctx.policy.approver_by_key(body.key)
    if found is None:
        raise Refused(
            f"The key {body.key[:12]}… that signed the {what} is not a registered approver."
        )
    if abs(ctx.now() - body.issued_at) > DEFAULT_MAX_SKEW:
        raise Refused(
            f"The {what} was issued at {body.issued_at.isoformat()}, outside the allowed clock "
            f"skew of {int(DEFAULT_MAX_SKEW.total_seconds())} s."
        )
    return found


async def _refused(
    ctx: ServiceContext, kind: str, body: Signed, raw: dict[str, Any], message: str,
    request_id: str | None = None,
) -> ApiError:  # fmt: skip
    await ctx.store.audit.append(
        [
            AuditEntry(
                kind=kind,
                actor=f"unverified:{body.approver}",
                request_id=request_id,
                data={"message": message, "key": body.key, "request": raw},
            )
        ],
        ctx.now(),
    )
    log.info("%s: %s", kind, message)
    return ApiError(error=message)


# --------------------------------------------------------------------------- grants


async def issue(ctx: ServiceContext, raw: dict[str, Any], body: GrantIssue) -> BaseModel:
    try:
        name, terms, request = await _check_issue(ctx, raw, body)
    except Refused as exc:
        return await _refused(ctx, "grant.refused", body, raw, str(exc), body.request_id)
    now = ctx.now()
    values = {
        "grant_id": body.grant_id,
        "nonce": body.nonce,
        "request_id": body.request_id,
        "approver": name,
        "key": body.key,
        "tool": body.tool,
        "workspace": body.workspace,
        "agent": body.agent,
        "session_id": body.session_id,
        "scope": body.scope.value,
        "command_prefix": json.dumps(body.command_prefix) if body.command_prefix else None,
        "path_glob": body.path_glob,
        "max_uses": body.max_uses,
        "uses": 0,
        "signed": json.dumps(raw, sort_keys=True, separators=(",", ":")),
        "signature": body.signature,
        "issued_at": body.issued_at,
        "expires_at": body.expires_at,
    }
    audit = AuditEntry(
        kind="grant.issued",
        actor=name,
        proposal_id=request[0],
        request_id=body.request_id,
        data={
            "grant_id": body.grant_id,
            "scope": terms.describe(),
            "expires_at": body.expires_at.isoformat(),
            "max_uses": body.max_uses,
            "reason": body.reason,
            "grant": raw,
        },
    )
    message = f"{name} granted {terms.describe()} until {body.expires_at.isoformat()}."
    events: list[OutboxEvent] = []
    issued = await ctx.store.grants.issue(
        values, [audit], now, _news(ctx, "issued", message, name, now, events)
    )
    if issued is None:
        return await _refused(
            ctx, "grant.refused", body, raw,
            f"A grant with id {body.grant_id} or nonce {body.nonce} exists already (a replay).",
            body.request_id,
        )  # fmt: skip
    log.info("%s", message)
    await _tell(ctx, events, "grant")
    return issued


def _news(
    ctx: ServiceContext, change: Literal["issued", "revoked"], message: str, by: str,
    now: datetime, events: list[OutboxEvent],
) -> Callable[[GrantInfo], list[OutboxEvent]]:  # fmt: skip
    """The news of a grant's change, made in the store's transaction from the grant as stored
    (`GrantChanged` on `<prefix>.controls.grant.<change>`) and kept in `events` to publish
    once it is committed; a retried transaction makes it once."""

    def made(grant: GrantInfo) -> list[OutboxEvent]:
        event = GrantChanged(change=change, message=message, by=by, at=now, grant=grant)
        events[:] = [
            OutboxEvent(
                msg_id=f"grant.{change}:{grant.grant_id}",
                subject=ctx.subjects.grants(change),
                payload=event.model_dump_json(),
            )
        ]
        return events

    return made


async def _tell(ctx: ServiceContext, events: list[OutboxEvent], what: str) -> None:
    """Publish the news of a committed change; a failure leaves it to the republisher."""
    try:
        await ctx.publish(events)
    except Exception as exc:  # committed with the change: the republisher sends it
        log.warning("publishing the news of a %s failed (%s); it is in the outbox", what, exc)


async def _check_issue(
    ctx: ServiceContext, raw: dict[str, Any], body: GrantIssue
) -> tuple[str, GrantTerms, tuple[str, Proposal]]:
    name, profile = _signer(ctx, raw, body, "grant")
    limits = ctx.policy.grants
    if not limits.enabled:
        raise Refused("Grants are disabled by the policy ([grants] enabled = false).")
    now = ctx.now()
    if body.expires_at <= now:
        raise Refused("The grant expires before it would start.")
    if (body.expires_at - max(now, body.issued_at)).total_seconds() > limits.max_ttl:
        raise Refused(
            f"The grant would last longer than the policy allows ({format_duration(limits.max_ttl)}"
            ", [grants] max_ttl)."
        )
    loaded = await ctx.store.requests.load(body.request_id)
    if loaded is None:
        raise Refused(f"There is no approval request {body.request_id}.")
    held, _ = loaded
    parts = await ctx.store.proposals.parts(held.proposal_id)
    if parts is None:
        raise Refused(f"The proposal of request {body.request_id} is not stored.")
    proposal = Proposal.model_validate_json(parts[0])
    classification = Classification.model_validate_json(parts[1])
    verdict = Verdict.model_validate_json(parts[2])
    if body.tool != proposal.tool or body.workspace != proposal.workspace:
        raise Refused(
            f"The grant names `{body.tool}` in {body.workspace}; request {body.request_id} is "
            f"`{proposal.tool}` in {proposal.workspace}."
        )
    if body.agent is not None and body.agent != proposal.agent:
        raise Refused(
            f"The grant names agent {body.agent}; the request is agent {proposal.agent}'s."
        )
    why = not_grantable(classification, verdict)
    if why is not None:
        raise Refused(f"No grant may cover request {body.request_id}: {why}.")
    assert verdict.requirement is not None
    ineligible = ineligibility(
        name, profile, proposal.workspace, proposal.agent, verdict.requirement
    )
    if ineligible is not None:
        raise Refused(f"{ineligible[1]} A grant is authorised like an approval.")
    shape = {
        GrantScope.COMMAND_PREFIX: (bool(body.command_prefix), body.path_glob is None),
        GrantScope.PATH: (body.path_glob is not None, not body.command_prefix),
        GrantScope.TOOL: (body.path_glob is None, not body.command_prefix),
    }[body.scope]
    if not all(shape):
        raise Refused(
            f"A {body.scope} grant needs "
            + {
                GrantScope.COMMAND_PREFIX: "a command_prefix and no path_glob.",
                GrantScope.PATH: "a path_glob and no command_prefix.",
                GrantScope.TOOL: "neither a command_prefix nor a path_glob.",
            }[body.scope]
        )
    terms = GrantTerms(
        grant_id=body.grant_id, approver=name, key=body.key or "", tool=body.tool,
        workspace=body.workspace, agent=body.agent, scope=body.scope,
        command_prefix=tuple(body.command_prefix) if body.command_prefix else None,
        path_glob=body.path_glob, expires_at=body.expires_at, max_uses=body.max_uses,
        session_id=body.session_id,
    )  # fmt: skip
    problem = scope_problem(terms, proposal)
    if problem is not None:
        raise Refused(f"The grant's scope does not cover the approved call itself: {problem}.")
    return name, terms, (proposal.id, proposal)


async def grants(ctx: ServiceContext, raw: dict[str, Any], query: GrantsQuery) -> BaseModel:
    found = await ctx.store.grants.listed(
        ctx.now(), every=query.all, workspace=query.workspace, limit=query.limit
    )
    return GrantsReply(grants=found)


async def revoke(ctx: ServiceContext, raw: dict[str, Any], body: GrantRevoke) -> BaseModel:
    now = ctx.now()
    try:
        name, profile = _signer(ctx, raw, body, "revocation")
        grant = await ctx.store.grants.get(body.grant_id, now)
        if grant is None:
            raise Refused(f"There is no grant {body.grant_id}.")
        if name != grant.approver and not profile.may_approve_for(grant.workspace):
            raise Refused(
                f"Approver {name} may not revoke a grant for workspace {grant.workspace}."
            )
    except Refused as exc:
        return await _refused(ctx, "grant.revoke.refused", body, raw, str(exc))
    audit = AuditEntry(
        kind="grant.revoked",
        actor=name,
        request_id=grant.request_id,
        data={"grant_id": grant.grant_id, "reason": body.reason, "uses": grant.uses},
    )
    message = f"{name} revoked the grant {body.grant_id} ({grant.uses} use(s))."
    events: list[OutboxEvent] = []
    revoked = await ctx.store.grants.revoke(
        body.grant_id, name, [audit], now, _news(ctx, "revoked", message, name, now, events)
    )
    if revoked is None:
        return ApiError(error=f"Grant {body.grant_id} was revoked already.")
    log.info("%s", message)
    await _tell(ctx, events, "grant")
    return revoked


# --------------------------------------------------------------------------- freezes


async def freeze(ctx: ServiceContext, raw: dict[str, Any], body: FreezeOrder) -> BaseModel:
    now = ctx.now()
    what = "thaw" if body.thaw else "freeze"
    try:
        name, profile = _signer(ctx, raw, body, what)
        # A freeze of every workspace is for an approver of every workspace ("*").
        if not profile.may_approve_for(body.workspace or "*"):
            raise Refused(
                f"Approver {name} may not {what} "
                + (f"workspace {body.workspace}." if body.workspace else "every workspace.")
            )
    except Refused as exc:
        return await _refused(ctx, f"{what}.refused", body, raw, str(exc))
    data = {"agent": body.agent, "workspace": body.workspace, "reason": body.reason}
    before = await ctx.store.grants.freezes()

    def news(message: str, in_force: list[FreezeTerms], **change: Any) -> OutboxEvent:
        """The change, for live inboxes and other subscribers (`<prefix>.controls.*`)."""
        kind = "thaw" if body.thaw else "freeze"
        event = FreezeChanged(
            change=kind, message=message, agent=body.agent, workspace=body.workspace,
            all_calls=body.all_calls, reason=body.reason, by=name, at=now,
            freezes=[freeze_info(f) for f in in_force], **change,
        )  # fmt: skip
        return OutboxEvent(
            msg_id=f"{kind}:{body.nonce}",
            subject=ctx.subjects.controls(kind),
            payload=event.model_dump_json(),
        )

    events: list[OutboxEvent] = []
    if body.thaw:

        def thawed(lifted: int) -> list[OutboxEvent]:
            # What stays in force: the freezes read before, but those of exactly this scope.
            left = [f for f in before if (f.agent, f.workspace) != (body.agent, body.workspace)]
            events[:] = [news(_thawed(lifted), left, lifted=lifted)]  # a retried body: once
            return events

        lifted = await ctx.store.grants.thaw(
            body.agent, body.workspace, name, [AuditEntry("thaw", name, data)], now, thawed
        )
        message = _thawed(lifted)
    else:
        terms = FreezeTerms(
            freeze_id=f"fz_{body.nonce}", agent=body.agent, workspace=body.workspace,
            all_calls=body.all_calls, reason=body.reason, by=name, at=now,
        )  # fmt: skip
        audit = AuditEntry(
            "freeze", name, {**data, "all_calls": body.all_calls, "id": terms.freeze_id}
        )
        message = f"Frozen: {terms.describe()}."
        events.append(news(message, [*before, terms], freeze_id=terms.freeze_id))
        await ctx.store.grants.freeze(terms, [audit], now, events)
    log.info("%s", message)
    await _tell(ctx, events, "freeze")
    return FreezeReply(
        message=message, freezes=[freeze_info(f) for f in await ctx.store.grants.freezes()]
    )


def _thawed(lifted: int) -> str:
    return f"Thawed {lifted} freeze(s)." if lifted else "Nothing was frozen in exactly that scope."


async def freezes(ctx: ServiceContext, raw: dict[str, Any], query: FreezesQuery) -> BaseModel:
    found = await ctx.store.grants.freezes()
    return FreezeReply(
        message=f"{len(found)} freeze(s) in force.", freezes=[freeze_info(f) for f in found]
    )


# --------------------------------------------------------------------------- backtest


async def backtest(ctx: ServiceContext, raw: dict[str, Any], query: BacktestQuery) -> BaseModel:
    """The backtest over this service's store: pages read from the store, each evaluated in a
    worker thread so the event loop keeps serving the stages meanwhile."""
    try:
        policy = load_policy_text(query.policy, "the policy sent")
    except PolicyError as exc:
        return ApiError(error=f"The policy is not valid: {exc}")
    since = ctx.now() - timedelta(seconds=query.since_seconds) if query.since_seconds else None
    result = Backtest(policy, examples=query.examples)

    def evaluate_page(page: list[PastCall]) -> None:
        for call in page:
            result.add(call)

    async for page in past_calls(ctx.store.db, since=since):
        await asyncio.to_thread(evaluate_page, page)
    return BacktestReply(report=result.report())


Handler = RoutedHandler

ROUTES: dict[str, tuple[type[BaseModel], Handler]] = {
    "grant.issue": (GrantIssue, issue),
    "grant.list": (GrantsQuery, grants),
    "grant.revoke": (GrantRevoke, revoke),
    "freeze": (FreezeOrder, freeze),
    "freezes": (FreezesQuery, freezes),
    "policy.backtest": (BacktestQuery, backtest),
}
assert set(ROUTES) == set(CONTROL_API_NAMES)


async def answer(ctx: ServiceContext, name: str, data: bytes) -> bytes:
    """The reply to one control request: never raises, errors answer as ApiError."""
    return await answer_routed(ROUTES, name, ctx, name, data)
