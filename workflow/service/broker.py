"""The service's FastStream application: the request/reply API and the events the stages
publish — the source of the AsyncAPI document (`headgate schemas`).

The API runs on FastStream (`<prefix>.api.*`, core NATS, queue group `headgate-api`). The
JetStream stages — the intake, the collector and the auditor — run on the batch runner
(`workflow.service.stage`): FastStream's per-message overhead caps a JetStream stage at a
fraction of what batched nats-py does, a stage needs its whole batch for one transaction, and
FastStream's pull subscriber handles a fetched batch's messages concurrently, where a stage
needs them in stream order (an agent's first report of a release is the one recorded;
docs/bench.md). They are described here from the consumer specs they run on
(`streams.service_consumers`), so the document lists every subject the service reads, with a
handler behind each. The notifier the service runs has an application of its own
(`workflow.notify.broker`); the document joins the two.

Handlers take no `Context` or `NatsMessage` parameter (each would cost a thread-pool hop per
message): the broker runs with `apply_types=False` and a handler reads the message it serves
from `broker.context`. The annotations document the payloads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from faststream.nats import JStream, NatsBroker, NatsResponse
from pydantic import BaseModel

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
    GrantsQuery,
    GrantsReply,
)
from workflow.messages import (
    ApiError,
    ApprovalDecision,
    Blocked,
    Cancel,
    DeadLetter,
    Escalated,
    Executed,
    GetQuery,
    Held,
    InboxItem,
    InvitationQuery,
    InvitationReply,
    OfferedQuery,
    OfferedReply,
    PasskeyInfo,
    PasskeyQuery,
    PasskeyRegistration,
    PendingQuery,
    PendingReply,
    Proposal,
    ProposalHistory,
    Released,
    ServiceKeyQuery,
    ServiceKeyReply,
    WebInvite,
    WebInviteReply,
)
from workflow.service import api, controls_api, web_api
from workflow.service.context import ServiceContext
from workflow.service.streams import service_consumers
from workflow.subjects import Subjects

QUEUE = api.QUEUE


@dataclass(frozen=True)
class Query:
    """One request/reply subject: its query and reply models, and what answers it."""

    name: str
    model: type[BaseModel]
    reply: type[BaseModel]
    handler: api.Handler
    description: str


QUERIES = (
    Query("pending", PendingQuery, PendingReply, api.pending,
          "Held requests, oldest first (CLI, approvers)."),
    Query("get", GetQuery, ProposalHistory, api.history,
          "A proposal's whole history, by proposal or request id."),
    Query("explain", GetQuery, ProposalHistory, api.history,
          "The policy trail that decided a proposal."),
    Query("offered", OfferedQuery, OfferedReply, api.offered,
          "Which tools of a catalog to offer an agent at all."),
    Query("key", ServiceKeyQuery, ServiceKeyReply, api.service_key,
          "The public key the service signs its events and answers with."),
)  # fmt: skip


@dataclass(frozen=True)
class WebQuery:
    """One `api.web.<name>` subject of the web inbox (`service.web_api` answers it)."""

    name: str
    model: type[BaseModel]
    reply: type[BaseModel]
    description: str


WEB_QUERIES = (
    WebQuery("invite", WebInvite, WebInviteReply,
             "A one-time passkey sign-up link for an approver (signed by an admin or that "
             "approver)."),
    WebQuery("invitation", InvitationQuery, InvitationReply,
             "Who an invitation is for, while it is valid (the web inbox)."),
    WebQuery("register", PasskeyRegistration, PasskeyInfo,
             "Store a verified passkey for an invitation's approver (the web inbox)."),
    WebQuery("passkey", PasskeyQuery, PasskeyInfo,
             "A registered passkey and what its approver may do (the web inbox)."),
)  # fmt: skip

CONTROL_QUERIES = (
    WebQuery("grant.issue", GrantIssue, GrantInfo,
             "Store an approver's signed grant made from a held request (checked like an "
             "approval, audited)."),
    WebQuery("grant.list", GrantsQuery, GrantsReply, "The grants in force, or every one."),
    WebQuery("grant.revoke", GrantRevoke, GrantInfo,
             "Revoke a grant (signed); it releases nothing from the next proposal on."),
    WebQuery("freeze", FreezeOrder, FreezeReply,
             "Freeze or thaw a scope (signed): every consequential call in it is held."),
    WebQuery("freezes", FreezesQuery, FreezeReply, "The freezes in force."),
    WebQuery("policy.backtest", BacktestQuery, BacktestReply,
             "What a new policy would have decided over the stored proposals."),
)  # fmt: skip

#: What each batch stage reads (by consumer), for the document: subject kind -> message.
STAGE_MESSAGES: dict[str, dict[str, type[BaseModel]]] = {
    "intake": {"proposals": Proposal},
    "collector": {"decisions": ApprovalDecision, "cancel": Cancel},
    "auditor": {"executed": Executed},
}

#: What the service publishes: subject kind -> (message, description).
EVENTS: dict[str, tuple[type[BaseModel], str]] = {
    "inbox": (InboxItem, "A held call waiting for approvals (approvers read it durably)."),
    "held": (Held, "Told to the proposing agent: its call waits for approval."),
    "released": (Released, "The call may run; at most once per proposal."),
    "blocked": (Blocked, "The call will never run: denied, rejected, expired or cancelled."),
    "dead": (DeadLetter, "Input a stage could not process, with the error (operators)."),
    "escalated": (Escalated, "A step of a held request's escalation ladder (notifiers)."),
    "controls": (FreezeChanged, "A freeze put in force (`freeze`) or lifted (`thaw`)."),
    "grants": (GrantChanged, "A grant issued or revoked (approvers, auditors)."),
}

ContextSource = Callable[[], ServiceContext | None]


def build_app(
    subjects: Subjects,
    servers: Sequence[str] = ("nats://127.0.0.1:4222",),
    *,
    context: ContextSource = lambda: None,
    documentation: bool = False,
    **connect: Any,
) -> NatsBroker:
    """The broker the service runs (`documentation=False`), or the same with the batch stages
    added for the AsyncAPI document (never started)."""
    broker = NatsBroker(list(servers), logger=None, apply_types=False, **connect)

    def current() -> ServiceContext:
        ctx = context()
        if ctx is None:
            raise RuntimeError("the service is not started")
        return ctx

    def message() -> Any:
        return broker.context.get_local("message").raw_message

    for query in QUERIES:
        _api(broker, subjects, query, current, message)
    _api(
        broker, subjects,
        Query("status", GetQuery, ProposalHistory, api.agent_history,
              "An agent's own view of its proposals: answers only about the agent in the "
              "subject, so permissions can grant it to that agent alone."),
        current, message, subject=subjects.api_status("*"),
    )  # fmt: skip
    _api(
        broker, subjects,
        Query("offered.agent", OfferedQuery, OfferedReply, api.agent_offered,
              "An agent asks which of its tools to offer (the MCP gateway's listing): answers "
              "only for the agent in the subject, so permissions can grant it to that agent "
              "alone."),
        current, message, subject=subjects.api_offered("*"),
    )  # fmt: skip

    for web in WEB_QUERIES:
        _routed_api(
            broker, subjects.api_web(web.name), f"api.web.{web.name}", web_api.answer, web,
            current, message,
        )  # fmt: skip
    for control in CONTROL_QUERIES:
        _routed_api(
            broker, subjects.api_control(control.name), f"api.{control.name}",
            controls_api.answer, control, current, message,
        )  # fmt: skip

    for kind, (model, description) in EVENTS.items():
        broker.publisher(
            getattr(subjects, kind)("*"), schema=model, title=kind, description=description
        )
    if documentation:
        _batch_stages(broker, subjects)
    return broker


def _api(
    broker: NatsBroker,
    subjects: Subjects,
    query: Query,
    current: Callable[[], ServiceContext],
    message: Callable[[], Any],
    *,
    subject: str | None = None,
) -> None:
    async def respond(body: Any) -> NatsResponse:
        msg, ctx = message(), current()
        data = await api.answer(ctx, query.name, query.model, query.handler, msg.data, msg.subject)
        return signed(ctx, msg, data)

    respond.__annotations__ = {"body": query.model, "return": query.reply}
    broker.subscriber(
        subject or subjects.api(query.name),
        queue=QUEUE,
        title=f"api.{query.name}",
        description=f"{query.description} Errors answer as {ApiError.__name__}.",
    )(respond)


def _routed_api(
    broker: NatsBroker,
    subject: str,
    title: str,
    answer: Callable[[ServiceContext, str, bytes], Awaitable[bytes]],
    query: WebQuery,
    current: Callable[[], ServiceContext],
    message: Callable[[], Any],
) -> None:
    """One request of a routed family (`api.web.*`, the controls), answered signed."""

    async def respond(body: Any) -> NatsResponse:
        msg, ctx = message(), current()
        return signed(ctx, msg, await answer(ctx, query.name, msg.data))

    respond.__annotations__ = {"body": query.model, "return": query.reply}
    broker.subscriber(
        subject,
        queue=QUEUE,
        title=title,
        description=f"{query.description} Errors answer as {ApiError.__name__}.",
    )(respond)


def signed(ctx: ServiceContext, msg: Any, data: bytes) -> NatsResponse:
    """An answer signed for the inbox it goes to, so a client can tell it from an answer by any
    other subscriber of `api.*` (on a server whose permissions do not forbid one)."""
    return NatsResponse(data, headers=ctx.signer.headers(msg.reply or "", data))


def _batch_stages(broker: NatsBroker, subjects: Subjects) -> None:
    """The batch stages' consumers, for the document only (their runner is nats-py)."""
    for name, spec in service_consumers(subjects).items():
        for kind, model in STAGE_MESSAGES.get(name, {}).items():
            address = getattr(subjects, kind)("*")
            assert any(address[:-1] in f for f in spec.filter_subjects), (name, kind)

            async def documented(body: Any) -> None:
                raise RuntimeError("documentation only")

            documented.__annotations__ = {"body": model, "return": None}
            broker.subscriber(
                address,
                stream=JStream(spec.stream, declare=False),
                durable=spec.durable,
                pull_sub=True,
                title=kind,
                description=f"Read by the {name} stage (durable consumer `{spec.durable}`).",
            )(documented)
