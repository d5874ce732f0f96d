"""A client's tool call through Headgate: propose it, wait for the outcome, report it ran.

The I/O half of the hooks, through the agent SDK like any agent. A hook process is started
per tool call and keeps no state, so a call is found again by its id: the same session, tool,
arguments and directory give the same id stem (`calls.proposal_base`), and generation `n` of
the stem is the `n`-th time that call is made. Generations are used in order, so the current
one is the highest that exists (found with O(log n) lookups). It is spent once the call ran
(an `executed` report) or its request expired or was withdrawn; then the next call makes
generation `n + 1`. A retry of a call still pending, or already rejected, binds to the same
request instead of opening another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from workflow.adapters.calls import (
    NEUTRAL,
    Answer,
    HookCall,
    Phase,
    pending_answer,
    proposal_base,
    proposal_id,
)
from workflow.adapters.flow import (
    blocked_answer,
    executed,
    generation_search,
    proposal_context,
    proposal_source,
    released_answer,
    spent,
)
from workflow.adapters.options import GateOptions
from workflow.client import transport
from workflow.client.agent import Headgate, Ticket
from workflow.client.connection import Role, resolve_nats
from workflow.client.errors import ResultTimeout
from workflow.client.results import OutcomeEvent
from workflow.client.worker import report_execution
from workflow.ids import release_id_for
from workflow.messages import Blocked, ProposalHistory, Released, ToolDefinition
from workflow.outcomes import Outcome


async def decide(call: HookCall, options: GateOptions) -> Answer:
    """Headgate's answer to one hook event (the call has been reported, for an `after`)."""
    if call.phase is Phase.OTHER:
        return NEUTRAL
    target = resolve_nats(
        options.nats_url, role=Role.AGENT, data_dir=options.data_dir, agent=options.agent
    )
    async with Headgate.connect(
        target, agent=options.agent, workspace=options.workspace, prefix=options.prefix,
        connect_timeout=options.connect_timeout, max_reconnect_attempts=0,
        data_dir=options.data_dir,  # where `serve` wrote its key (service.pub): trusted events
    ) as hg:  # fmt: skip
        if call.phase is Phase.AFTER:
            await report(hg, call)
            return NEUTRAL
        return (await gate(hg, call, options.wait, on_pending=options.on_pending)).answer


#: Called while a call waits for its decision: (seconds waited, the request id if held).
Progress = Callable[[float, str | None], Awaitable[None]]


@dataclass(frozen=True)
class Gated:
    """Headgate's answer to a call, and the proposal it is about."""

    answer: Answer
    proposal_id: str
    released: Released | None = None


async def gate(
    hg: Headgate, call: HookCall, wait: float, *, definition: ToolDefinition | None = None,
    progress: Progress | None = None, every: float = 5.0,
    on_proposal: Callable[[str], None] | None = None, on_pending: str = "deny",
) -> Gated:  # fmt: skip
    """Propose the call (or find the proposal an earlier attempt made) and wait up to `wait`
    seconds for its outcome, calling `progress` every `every` seconds meanwhile, and
    `on_proposal` with the proposal's id as soon as it is known. Still held after `wait`:
    a deny naming the request, or a deferral (`on_pending="defer"`)."""
    base = proposal_base(call, hg.agent, hg.workspace)
    generation, found = await current(hg, base)
    if found is not None and _spent(found):
        generation, found = generation + 1, None
    pid = proposal_id(base, generation)
    if on_proposal is not None:
        on_proposal(pid)
    if found is not None:
        ticket = await hg.ticket(pid)
    else:
        ticket = await _propose(hg, call, pid, definition)
    return await _outcome(ticket, call, wait, progress, every, on_pending)


async def current(hg: Headgate, base: str) -> tuple[int, ProposalHistory | None]:
    """The highest generation of `base` the service knows, with its history (0, None: none)."""
    found: dict[int, ProposalHistory] = {}
    search = generation_search()
    probe = next(search)
    try:
        while True:
            history = await transport.history(
                hg.nc, hg.subjects, proposal_id(base, probe), agent=hg.agent
            )
            if history is not None:
                found[probe] = history
            probe = search.send(history is not None)
    except StopIteration as done:
        highest: int = done.value
    return (0, None) if highest < 0 else (highest, found[highest])


def _executed(history: ProposalHistory) -> bool:
    return executed(e.kind for e in history.events)


def _spent(history: ProposalHistory) -> bool:
    """This generation is over: the next identical call is a new proposal."""
    return spent(history.status, (e.kind for e in history.events))


async def _propose(
    hg: Headgate, call: HookCall, pid: str, definition: ToolDefinition | None
) -> Ticket:
    return await hg.propose(
        call.tool, call.arguments, intent=call.intent, source=proposal_source(call),
        proposal_id=pid, definition=definition, context=proposal_context(call),
    )  # fmt: skip


async def _wait(
    ticket: Ticket, wait: float, progress: Progress | None, every: float
) -> OutcomeEvent | None:
    """The outcome, or None when there is none after `wait` seconds."""
    waiting = asyncio.ensure_future(ticket.result(timeout=wait))
    started = asyncio.get_running_loop().time()
    try:
        while True:
            done, _ = await asyncio.wait({waiting}, timeout=every if progress else None)
            if done:
                break
            if progress is not None:
                waited = asyncio.get_running_loop().time() - started
                await progress(waited, ticket.request_id)
        return waiting.result()
    except ResultTimeout:
        return None
    finally:
        waiting.cancel()


async def _outcome(
    ticket: Ticket, call: HookCall, wait: float, progress: Progress | None, every: float,
    on_pending: str,
) -> Gated:  # fmt: skip
    pid = ticket.proposal_id
    outcome = await _wait(ticket, wait, progress, every)
    if outcome is None:
        return Gated(pending_answer(ticket.request_id, pid, wait, on_pending), pid)
    if isinstance(outcome, Blocked):
        return Gated(blocked_answer(outcome.outcome, outcome.reason, outcome.request_id), pid)
    return Gated(released_answer(call, outcome.request_id, outcome.arguments), pid, outcome)


async def report(hg: Headgate, call: HookCall) -> str | None:
    """Report a call that ran as executed, once, if Headgate released it and it was not
    reported yet; returns the proposal reported."""
    base = proposal_base(call, hg.agent, hg.workspace)
    generation, found = await current(hg, base)
    if found is None or found.status != Outcome.RELEASED or _executed(found):
        return None
    pid = proposal_id(base, generation)
    await report_execution(
        hg.nc, hg.subjects, release_id_for(pid), pid, hg.agent, call.succeeded, call.summary
    )
    return pid
