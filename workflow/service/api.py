"""Request/reply queries on `<prefix>.api.*` (core NATS, queue group `headgate-api`).

Every handler answers: a result, or `{"error": "..."}` with a sentence — never silence, so a
caller is not left waiting for a timeout on a bad request. The subscribers are FastStream's
(`workflow.service.broker`); the queries themselves are plain functions of the context.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from workflow.errors import HeadgateError, describe_invalid
from workflow.messages import (
    ApiError,
    ApprovalRecord,
    ApprovalRequirement,
    Classification,
    GetQuery,
    HistoryEvent,
    OfferedQuery,
    OfferedReply,
    PendingEntry,
    PendingQuery,
    PendingReply,
    Proposal,
    ProposalHistory,
    ServiceKeyQuery,
    ServiceKeyReply,
    Verdict,
)
from workflow.policy.catalog import offered_tools, parse_catalog
from workflow.service.context import ServiceContext

log = logging.getLogger("headgate.api")
QUEUE = "headgate-api"


def _summary(kind: str, data: dict[str, Any]) -> str:
    if kind == "proposal":
        verdict = data.get("verdict", {})
        cls = data.get("classification", {})
        return (
            f"classified {cls.get('risk_class')} ({cls.get('severity')}); "
            f"policy: {verdict.get('decision')} — {verdict.get('reason')}"
        )
    if kind == "held":
        return f"held for approval until {data.get('expires_at')}"
    for key in ("message", "reason", "summary"):
        if data.get(key):
            text = str(data[key])
            return f"{data['outcome']}: {text}" if "outcome" in data else text
    return kind


async def pending(ctx: ServiceContext, query: PendingQuery, subject: str = "") -> PendingReply:
    rows = await ctx.store.requests.pending(
        workspace=query.workspace, agent=query.agent, limit=query.limit
    )
    items = []
    for row, approvals in rows:
        proposal = Proposal.model_validate_json(row.payload)
        cls = Classification.model_validate_json(row.classification)
        items.append(
            PendingEntry(
                request_id=row.request_id,
                proposal_id=row.proposal_id,
                agent=row.agent,
                workspace=row.workspace,
                tool=proposal.tool,
                arguments=proposal.arguments,
                intent=proposal.intent,
                risk_class=cls.risk_class,
                severity=cls.severity,
                reasons=[r.message for r in cls.reasons],
                requirement=ApprovalRequirement.model_validate_json(row.requirement),
                approvals=[a.approver for a in approvals],
                proposal_digest=row.digest,
                created_at=row.created_at,
                expires_at=row.expires_at,
            )
        )
    return PendingReply(items=items)


async def history(
    ctx: ServiceContext, query: GetQuery, subject: str = ""
) -> ProposalHistory | ApiError:
    found = await ctx.store.proposals.history(query.id)
    if found is None:
        return ApiError(error=f"No proposal or request with id {query.id!r}.")
    prop, req = found["proposal"], found["request"]
    approvals = [
        ApprovalRecord.model_validate_json(d.record)
        for d in found["decisions"]
        if d.accepted and d.verdict == "approve" and d.record
    ]
    events = [
        HistoryEvent(
            at=datetime.fromisoformat(a.at),
            kind=a.kind,
            summary=_summary(a.kind, data := json.loads(a.data)),
            data=data if a.kind.startswith(("decision", "cancel", "executed")) else {},
        )
        for a in found["audit"]
    ]
    for d in found["decisions"]:
        if not any(e.data.get("nonce") == d.nonce for e in events):
            events.append(
                HistoryEvent(
                    at=d.received_at,
                    kind="decision.accepted" if d.accepted else "decision.refused",
                    summary=d.message,
                    data={"nonce": d.nonce, "refusal": d.refusal},
                )
            )
    return ProposalHistory(
        proposal=Proposal.model_validate_json(prop.payload),
        proposal_digest=prop.digest,
        status=prop.status,
        classification=Classification.model_validate_json(prop.classification),
        verdict=Verdict.model_validate_json(prop.verdict),
        request_id=req.request_id if req is not None else None,
        requirement=ApprovalRequirement.model_validate_json(req.requirement) if req else None,
        expires_at=req.expires_at if req is not None else None,
        approvals=approvals,
        events=sorted(events, key=lambda e: e.at),
    )


async def service_key(
    ctx: ServiceContext, query: ServiceKeyQuery, subject: str = ""
) -> ServiceKeyReply:
    """The public key the service signs with. Asked for by a client that has no pinned key
    (`HEADGATE_SERVICE_KEY`, the data dir's `service.pub`): it trusts the service that answers,
    which is why only the service's credentials may subscribe to `api.*`."""
    return ServiceKeyReply(public_key=ctx.signer.public_key)


async def offered(ctx: ServiceContext, query: OfferedQuery, subject: str = "") -> OfferedReply:
    catalog = parse_catalog(query.tools, source="request")
    return offered_tools(ctx.policy, catalog, query.agent, query.workspace, query.read_only)


#: (context, validated query, the subject it was asked on) -> answer
Handler = Callable[[ServiceContext, Any, str], Awaitable[BaseModel]]

ROUTES: dict[str, tuple[type[BaseModel], Handler]] = {
    "pending": (PendingQuery, pending),
    "get": (GetQuery, history),
    "explain": (GetQuery, history),
    "offered": (OfferedQuery, offered),
    "key": (ServiceKeyQuery, service_key),
}


async def agent_history(ctx: ServiceContext, query: GetQuery, subject: str) -> BaseModel:
    """`history`, answering only about the proposals of the agent named in the subject."""
    agent = ctx.subjects.token_after(subject, "api.status")
    found = await history(ctx, query, subject)
    if isinstance(found, ProposalHistory) and found.proposal.agent == agent:
        return found
    return ApiError(error=f"No proposal or request with id {query.id!r} for agent {agent}.")


async def agent_offered(ctx: ServiceContext, query: OfferedQuery, subject: str) -> BaseModel:
    """`offered`, answering only for the agent named in the subject."""
    agent = ctx.subjects.token_after(subject, "api.offered")
    if query.agent != agent:
        return ApiError(error=f"This subject answers only for agent {agent}, not {query.agent}.")
    return await offered(ctx, query, subject)


async def answer(
    ctx: ServiceContext,
    name: str,
    model: type[BaseModel],
    handler: Handler,
    data: bytes,
    subject: str,
) -> bytes:
    """The reply to one query: its result, or an `ApiError` sentence (never silence)."""
    try:
        query = model.model_validate_json(data or b"{}")
    except ValidationError as exc:
        reply: BaseModel = ApiError(error=f"Invalid {name} request: {describe_invalid(exc)}.")
    else:
        try:
            reply = await handler(ctx, query, subject)
        except HeadgateError as exc:
            reply = ApiError(error=str(exc))
        except Exception as exc:
            log.exception("api %s failed", name)
            reply = ApiError(error=f"The {name} query failed: {exc}.")
    return reply.model_dump_json().encode()


#: A routed request's handler: the context, the raw JSON object (what a signature covers) and
#: the validated request.
RoutedHandler = Callable[[ServiceContext, dict[str, Any], Any], Awaitable[BaseModel]]


async def answer_routed(
    routes: dict[str, tuple[type[BaseModel], RoutedHandler]],
    label: str,
    ctx: ServiceContext,
    name: str,
    data: bytes,
) -> bytes:
    """The reply to one request of a routed family (`api.web.*`, the controls): the request
    validated against its route's model, then handled; never raises, errors answer as
    ApiError naming `label` (the request as a caller knows it)."""
    model, handler = routes[name]
    reply: BaseModel
    try:
        raw = json.loads(data or b"{}")
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        query = model.model_validate(raw)
    except ValidationError as exc:
        reply = ApiError(error=f"Invalid {label} request: {describe_invalid(exc)}.")
    except (ValueError, UnicodeDecodeError) as exc:
        reply = ApiError(error=f"Invalid {label} request: {exc}.")
    else:
        try:
            reply = await handler(ctx, raw, query)
        except Exception as exc:
            log.exception("api %s failed", label)
            reply = ApiError(error=f"The {label} request failed: {exc}.")
    return reply.model_dump_json().encode()
