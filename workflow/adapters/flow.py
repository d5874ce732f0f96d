"""The pure steps of gating a hook call, shared by both ways of doing its I/O.

`gate` does the I/O through the agent SDK (asyncio, nats-py; the MCP gateway uses it); `lite`
does it with a small synchronous NATS client, for the process a client starts per tool call.
Both find a call's current generation with `generation_search`, decide whether it is spent
with `spent`, describe the proposal with `proposal_source` / `proposal_context`, and turn an
outcome into an `Answer` with the functions below, so the two cannot drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterable
from typing import Any

from workflow.adapters.calls import (
    Action,
    Answer,
    HookCall,
    blocked_reason,
)
from workflow.outcomes import Outcome

_TOKEN_BAD = re.compile(r"[^A-Za-z0-9_-]+")

#: Drives a search: sends whether the generation it yielded exists; returns the highest
#: existing generation, or -1 when not even generation 0 does.
GenerationSearch = Generator[int, bool, int]


def generation_search() -> GenerationSearch:
    """The highest generation of a call that the service knows, in O(log n) lookups.

    Generations are used in order, so the highest existing one is found by galloping (0, 1, 2,
    4, …) to the first missing one and bisecting below it."""
    if not (yield 0):
        return -1
    low, high = 0, 1
    while (yield high):
        low, high = high, high * 2
    while high - low > 1:  # the highest existing one lies in [low, high)
        middle = (low + high) // 2
        if (yield middle):
            low = middle
        else:
            high = middle
    return low


def executed(kinds: Iterable[str]) -> bool:
    """The history of a proposal records that the call ran."""
    return any(kind == "executed" for kind in kinds)


def spent(status: str, kinds: Iterable[str]) -> bool:
    """This generation is over (it ran, expired or was withdrawn): the next identical call is
    a new proposal. `kinds` are the kinds of the events in its history."""
    if status in (Outcome.EXPIRED, Outcome.CANCELLED):
        return True
    return status == Outcome.RELEASED and executed(kinds)


def proposal_source(call: HookCall) -> str | None:
    """The MCP server of the call, made a subject token (a proposal's `source`)."""
    return _TOKEN_BAD.sub("_", call.server)[:128] if call.server else None


def proposal_context(call: HookCall) -> dict[str, Any]:
    return {"cwd": call.cwd, "client": call.client, "session_id": call.session_id}


def blocked_answer(outcome: str, reason: str, request_id: str | None) -> Answer:
    return Answer(Action.DENY, blocked_reason(outcome, reason, request_id))


def released_answer(call: HookCall, request_id: str | None, arguments: dict[str, Any]) -> Answer:
    """Run the call, with the released arguments where an approver changed them."""
    why = (
        f"approved in Headgate (request {request_id})"
        if request_id
        else "allowed by Headgate's policy"
    )
    changed = arguments if arguments != call.arguments else None
    return Answer(Action.ALLOW, why, changed)
