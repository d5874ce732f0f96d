"""The agent SDK: propose a call and wait for its outcome, gate a tool, or queue work.

async with Headgate.connect(url, agent="builder-7", workspace="acme") as hg:
    ticket = await hg.propose("write_file", {"path": "notes.txt", "content": "hi"})
    outcome = await ticket.result(timeout=600)      # Released or Blocked
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from nats.aio.client import Client as NATS

from workflow.client import transport
from workflow.client.connection import DEFAULT_CONNECT_TIMEOUT, NatsTarget, Role, resolve_nats
from workflow.client.errors import (
    IdInUse,
    NoLedger,
    NotProcessed,
    ResultTimeout,
    ToolBlocked,
)
from workflow.client.ledger import Ledger
from workflow.client.results import Event, OutcomeEvent, ResultRouter, Watch
from workflow.client.trust import NotFromService, trust_for
from workflow.client.worker import (
    ACK_WAIT,
    BlockedHandler,
    Handler,
    WorkerStats,
    report_execution,
    work,
)
from workflow.errors import ConnectError, NotFoundError
from workflow.ids import cancel_msg_id, proposal_msg_id
from workflow.messages import (
    Blocked,
    Cancel,
    Classification,
    Decision,
    Held,
    Proposal,
    ProposalContext,
    ProposalHistory,
    Released,
    ToolDefinition,
    Verdict,
)
from workflow.outcomes import PENDING, Outcome, is_terminal
from workflow.subjects import Subjects

P = ParamSpec("P")
R = TypeVar("R")


@dataclass
class Ticket:
    """One proposed call: what Headgate decided at once, and a way to wait for the outcome."""

    client: Headgate = field(repr=False)
    proposal: Proposal
    classification: Classification
    verdict: Verdict
    status: str = PENDING
    request_id: str | None = None
    expires_at: datetime | None = None
    _outcome: OutcomeEvent | None = field(default=None, repr=False)
    #: Keeps this proposal's watch alive while the outcome is awaited (see `ResultRouter`).
    _watch: Watch | None = field(default=None, repr=False)

    @property
    def proposal_id(self) -> str:
        return self.proposal.id

    @property
    def held(self) -> bool:
        """True when the call waits for approvals."""
        return self.verdict.decision == Decision.REQUIRE_APPROVAL

    async def result(self, timeout: float | None = None) -> OutcomeEvent:
        """`Released` (run the call with its `arguments`) or `Blocked` (`outcome`, `reason`).

        Raises `ResultTimeout` when nothing happened within `timeout` seconds.
        """
        if self._outcome is None:
            outcome = await self.client._outcome_of(self, timeout)
            if isinstance(outcome, Released) and _sent_digest(outcome) != self.proposal.digest():
                # The release of another call under this id (this agent's own, made elsewhere
                # first): never this call's.
                raise IdInUse(self.proposal_id)
            self._outcome = outcome
        return self._outcome

    async def cancel(self, reason: str = "") -> None:
        """Withdraw the proposal while it is pending; `result()` then returns `cancelled`."""
        await self.client.cancel(self.proposal_id, reason)


class Headgate:
    """An agent's connection to Headgate. Use `Headgate.connect(...)` as a context manager."""

    #: How often `Ticket.result` asks the service whether an outcome it has not seen exists.
    recheck_interval = 10.0

    def __init__(
        self,
        nc: NATS,
        *,
        agent: str,
        workspace: str = "default",
        prefix: str = "headgate",
        state_dir: Path | None = None,
        service_key: str | None = None,
        data_dir: Path | None = None,
    ):
        self.nc = nc
        self.agent = agent
        self.workspace = workspace
        self.subjects = Subjects(prefix)
        #: The service whose events this agent believes (see `workflow.client.trust`).
        self.trust = trust_for(nc, prefix, key=service_key, data_dir=data_dir)
        self.router = ResultRouter(nc, self.subjects, agent, self.trust)
        self.ledger = Ledger(state_dir) if state_dir is not None else None

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        url: str | NatsTarget | None = None,
        *,
        agent: str,
        workspace: str = "default",
        prefix: str = "headgate",
        state_dir: Path | None = None,
        data_dir: Path | None = None,
        service_key: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_reconnect_attempts: int = -1,
        **nats_options: Any,
    ) -> AsyncIterator[Headgate]:
        """Connect, subscribe to this agent's results, and close everything on exit.

        `url` (or, without it, `HEADGATE_NATS_URL` or the URL a local `headgate serve` recorded
        in `data_dir`) is where to connect; the agent credentials come from the environment or
        the data dir, this agent's own if `headgate agents add` registered it (see
        `workflow.client.connection.resolve_nats`), or pass a `NatsTarget`.
        The first connect fails with `ConnectError` after `connect_timeout` seconds; afterwards
        the connection is re-established after a restart of the server (`max_reconnect_attempts`
        per server, -1 for ever), and the results consumer resumes where it stopped.
        Only events signed by the service count: `service_key` (else `HEADGATE_SERVICE_KEY`,
        the data dir's `service.pub`, or the key the service gives) is whose.
        """
        target = url if isinstance(url, NatsTarget) else resolve_nats(
            url, role=Role.AGENT, data_dir=data_dir, agent=agent
        )  # fmt: skip
        nc = await transport.connect(
            target, name=f"headgate-agent-{agent}", connect_timeout=connect_timeout,
            max_reconnect_attempts=max_reconnect_attempts, **nats_options,
        )  # fmt: skip
        client = cls(
            nc, agent=agent, workspace=workspace, prefix=prefix, state_dir=state_dir,
            service_key=service_key, data_dir=data_dir,
        )  # fmt: skip
        try:
            await client.start()
            yield client
        finally:
            await client.close()
            with contextlib.suppress(Exception):
                await nc.drain()

    async def start(self) -> None:
        # Before any publish: the results consumer starts at the stream's end, so every event
        # of a proposal made after this point reaches the router.
        await self.router.start()

    async def close(self) -> None:
        await self.router.stop()
        if self.ledger is not None:
            self.ledger.close()

    # ------------------------------------------------------------------ proposing
    def _proposal(
        self, tool: str, arguments: Mapping[str, Any] | None, *, definition: ToolDefinition |
        Mapping[str, Any] | None, intent: str | None, capability: str | None,
        context: ProposalContext | Mapping[str, Any] | None, source: str | None,
        workspace: str | None, proposal_id: str | None,
    ) -> Proposal:  # fmt: skip
        return Proposal(
            id=proposal_id or uuid.uuid4().hex, agent=self.agent,
            workspace=workspace or self.workspace, source=source, tool=tool,
            arguments=dict(arguments or {}),
            tool_definition=ToolDefinition.model_validate(definition) if definition else None,
            capability=capability,
            context=ProposalContext.model_validate(context) if context else None,
            intent=intent, created_at=datetime.now(UTC),
        )  # fmt: skip

    async def propose(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        definition: ToolDefinition | Mapping[str, Any] | None = None,
        intent: str | None = None,
        capability: str | None = None,
        context: ProposalContext | Mapping[str, Any] | None = None,
        source: str | None = None,
        workspace: str | None = None,
        proposal_id: str | None = None,
        timeout: float = 10.0,
    ) -> Ticket:
        """Publish a proposal and return its ticket once the service has classified it.

        The classification and verdict come from the first event of the proposal on this
        agent's results stream (held / released / blocked) or from `api.get`, whichever answers
        first — usually within milliseconds. Raises `NotProcessed` after `timeout` seconds.
        """
        proposal = self._proposal(
            tool, arguments, definition=definition, intent=intent, capability=capability,
            context=context, source=source, workspace=workspace, proposal_id=proposal_id,
        )  # fmt: skip
        if proposal.id in self.router.watches:
            raise IdInUse(proposal.id)  # a ticket of this client waits under it
        watch = self.router.watch(proposal.id)
        await transport.publish(
            self.nc, self.subjects.proposals(self.agent), proposal,
            proposal_msg_id(self.agent, proposal.id),
        )  # fmt: skip
        known = await transport.poll(
            lambda: transport.history(self.nc, self.subjects, proposal.id, agent=self.agent),
            timeout=timeout, first=0.005, interrupt=watch.first, grace=0.1,
        )  # fmt: skip
        ticket: Ticket | None = None
        if watch.first.done():
            first = watch.first.result()
            if isinstance(first, Blocked) and first.outcome == "invalid":
                # The service could not read it as a proposal (a rule this client does not
                # know yet): it says why, and nothing was recorded to wait for.
                self.router.forget(proposal.id)
                raise ToolBlocked(first)
            if not (isinstance(first, Released) and _sent_digest(first) != proposal.digest()):
                ticket = self._ticket_from_event(proposal, first)
            if ticket is None:
                known = await transport.history(
                    self.nc, self.subjects, proposal.id, agent=self.agent
                )
        if ticket is None:
            if known is None:
                raise NotProcessed(proposal.id, timeout)
            if not _same_call(known.proposal, proposal):
                # The id was this agent's already, for another call: the service kept that
                # one and refused this one. Its ticket is not this call's.
                self.router.forget(proposal.id)
                raise IdInUse(proposal.id)
            ticket = self._ticket_from_history(known)
        if ticket._outcome is None:
            ticket._watch = watch
        else:  # decided with its first event (every read): nothing left to wait for
            self.router.forget(proposal.id)
        return ticket

    def _ticket_from_event(self, proposal: Proposal, event: Event) -> Ticket | None:
        if event.classification is None or event.verdict is None:  # a bare cancellation
            return None
        ticket = Ticket(self, proposal, event.classification, event.verdict)
        if isinstance(event, Held):
            ticket.request_id, ticket.expires_at = event.request_id, event.expires_at
        elif isinstance(event, Released):
            ticket.status, ticket.request_id, ticket._outcome = (
                Outcome.RELEASED,
                event.request_id,
                event,
            )
        else:
            ticket.status, ticket.request_id, ticket._outcome = (
                event.outcome,
                event.request_id,
                event,
            )
        return ticket

    def _ticket_from_history(self, h: ProposalHistory) -> Ticket:
        return Ticket(
            self, h.proposal, h.classification, h.verdict, status=h.status,
            request_id=h.request_id, expires_at=h.expires_at,
        )  # fmt: skip

    async def ticket(self, proposal_id: str) -> Ticket:
        """The ticket of a proposal made earlier (by this or another process of this agent)."""
        watch = self.router.watch(proposal_id)  # from now on no event of it is missed
        found = await transport.history(self.nc, self.subjects, proposal_id, agent=self.agent)
        if found is None:
            raise NotFoundError("proposal", proposal_id)
        ticket = self._ticket_from_history(found)
        ticket._watch = watch
        return ticket

    async def _outcome_of(self, ticket: Ticket, timeout: float | None) -> OutcomeEvent:
        watch = ticket._watch = ticket._watch or self.router.watch(ticket.proposal_id)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        status = ticket.status
        while True:
            if is_terminal(status) and not watch.outcome.done():
                # It ended before this client listened (or the event was lost): read it back.
                since = ticket.proposal.created_at or datetime.now(UTC)
                found = await self.router.find(ticket.proposal_id, since)
                if found is not None:
                    self.router.forget(ticket.proposal_id)
                    ticket._watch = None
                    return found
            left = None if deadline is None else max(deadline - loop.time(), 0)
            wait = self.recheck_interval if left is None else min(self.recheck_interval, left)
            done, _ = await asyncio.wait([watch.outcome], timeout=wait)
            if done:
                self.router.forget(ticket.proposal_id)
                ticket._watch = None
                return watch.outcome.result()
            try:
                h = await transport.history(
                    self.nc, self.subjects, ticket.proposal_id, agent=self.agent
                )
            except NotFromService:
                # The key this client trusts is not the service's (another data dir's
                # service.pub, say): none of its events will verify either, so waiting on
                # would end in a timeout that hides why. Say it now.
                raise
            except ConnectError:  # the API may be unreachable (or not permitted): keep waiting
                h = None
            status = h.status if h is not None else status
            if deadline is not None and loop.time() >= deadline:
                raise ResultTimeout(ticket.proposal_id, timeout or 0, status)

    async def cancel(self, proposal_id: str, reason: str = "") -> None:
        """Withdraw an own pending proposal (published on `<prefix>.cancel.<agent>`)."""
        body = Cancel(proposal_id=proposal_id, agent=self.agent, reason=reason)
        await transport.publish(
            self.nc, self.subjects.cancel(self.agent), body, cancel_msg_id(self.agent, proposal_id)
        )

    async def report(self, released: Released, *, success: bool, summary: str) -> None:
        """Tell the service what happened when a released call ran (audited)."""
        await report_execution(self.nc, self.subjects, released.release_id,
                               released.proposal_id, self.agent, success, summary)  # fmt: skip

    # ------------------------------------------------------------------ gated tools
    def gated(
        self,
        tool: str,
        *,
        definition: ToolDefinition | Mapping[str, Any] | None = None,
        capability: str | None = None,
        intent: str | None = None,
        timeout: float | None = None,
    ) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
        """Wrap an async tool: each call is proposed with its keyword arguments, waits for the
        release, runs **with the released arguments**, and is reported as executed. A block
        raises `ToolBlocked`; the wrapper keeps the function's name, signature and docstring."""

        def decorate(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
            signature = inspect.signature(fn)
            for param in signature.parameters.values():
                if param.kind in (param.POSITIONAL_ONLY, param.VAR_POSITIONAL):
                    raise TypeError(
                        f"@gated({tool!r}): parameter {param.name!r} of {fn.__name__} must be "
                        "passable by keyword (the call runs with the released arguments)"
                    )

            @functools.wraps(fn)
            async def call(*args: P.args, **kwargs: P.kwargs) -> R:
                arguments = _keyword_arguments(signature, args, kwargs)
                ticket = await self.propose(
                    tool, arguments, definition=definition, capability=capability, intent=intent
                )
                outcome = await ticket.result(timeout)
                if isinstance(outcome, Blocked):
                    raise ToolBlocked(outcome)
                try:
                    value = await fn(**outcome.arguments)  # type: ignore[call-arg]
                except Exception as exc:
                    await self.report(
                        outcome, success=False, summary=f"{type(exc).__name__}: {exc}"
                    )
                    raise
                await self.report(outcome, success=True, summary=_result_summary(value))
                return value

            call.tool_name = tool  # type: ignore[attr-defined]
            return call

        return decorate

    # ------------------------------------------------------------------ unattended mode
    async def enqueue(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        definition: ToolDefinition | Mapping[str, Any] | None = None,
        intent: str | None = None,
        capability: str | None = None,
        context: ProposalContext | Mapping[str, Any] | None = None,
        source: str | None = None,
        workspace: str | None = None,
        proposal_id: str | None = None,
    ) -> str:
        """Queue a call for `run_released` and return its proposal id at once.

        The ledger records it before it is published, so the worker knows the release is its
        own; a call published but never recorded cannot happen.
        """
        if self.ledger is None:
            raise NoLedger()
        proposal = self._proposal(
            tool, arguments, definition=definition, intent=intent, capability=capability,
            context=context, source=source, workspace=workspace, proposal_id=proposal_id,
        )  # fmt: skip
        self.ledger.queue(proposal.id, tool)
        await transport.publish(
            self.nc, self.subjects.proposals(self.agent), proposal,
            proposal_msg_id(self.agent, proposal.id),
        )  # fmt: skip
        return proposal.id

    async def run_released(
        self,
        handlers: Mapping[str, Handler],
        *,
        stop: asyncio.Event | None = None,
        on_blocked: BlockedHandler | None = None,
        batch: int = 16,
        ack_wait: float = ACK_WAIT,
    ) -> WorkerStats:
        """Run each released call of this agent's queue exactly once, until `stop` is set.

        Reads the durable consumer `agent-<agent>`, so releases that arrived while no worker ran
        are executed when one starts. See `workflow.client.worker` for the guarantees.
        `ack_wait` is also how long the releases a killed worker had fetched wait before the
        next worker gets them.
        """
        if self.ledger is None:
            raise NoLedger()
        return await work(
            self.nc, self.subjects, self.agent, self.ledger, handlers,
            stop=stop or asyncio.Event(), on_blocked=on_blocked, batch=batch, ack_wait=ack_wait,
        )  # fmt: skip


def _sent_digest(released: Released) -> str:
    """The digest of the proposal a release answers, as the agent sent it."""
    return released.edited_from or released.proposal_digest


def _same_call(stored: Proposal, sent: Proposal) -> bool:
    """The stored proposal is the call sent (another copy of it may carry another time)."""
    return stored.model_copy(update={"created_at": None}).digest() == (
        sent.model_copy(update={"created_at": None}).digest()
    )


def _keyword_arguments(
    signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    arguments: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            arguments.update(value)
        else:
            arguments[name] = value
    return arguments


def _result_summary(value: Any, limit: int = 4000) -> str:
    text = "ok" if value is None else value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
