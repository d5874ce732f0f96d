"""The HTTP hooks of `headgate serve --hook-listen`: the command hook's gate, in a process that
stays up and keeps its NATS connection.

A client with HTTP hooks (Claude Code's `type: "http"`) POSTs the same JSON a command hook
reads on stdin and reads the answer from the body of a 200. Whatever goes wrong with the
request itself — a body that is not the client's hook JSON, an agent name that is not a subject
token, the time budget spent, NATS gone — still ends in a 200 that blocks the call: Claude Code
treats any other status, a timeout or a refused connection as "no hook ran" and goes on to its
own permission check (it fails open, measured with 2.1.197), so an error status here would let
the call through. That also holds while `serve` is down, which no answer can cover: the command
hook stays the safe default.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client as NATS

from workflow.adapters import claude_code
from workflow.adapters.calls import (
    NEUTRAL,
    Action,
    Answer,
    Client,
    HookCall,
    HookInputError,
    OnPending,
    Phase,
    unavailable_reason,
)
from workflow.adapters.gate import gate, report
from workflow.client.agent import Headgate

log = logging.getLogger("headgate.hooks")

#: The clients with HTTP hooks, by the name in the path (`POST /hooks/<name>`). Codex 0.171 and
#: Gemini CLI 0.61 have command hooks only; Cursor documents command hooks only.
HTTP_CLIENTS: dict[str, Client] = {c.name: c for c in (claude_code.CLIENT,) if c.http_render}

#: Seconds an answer may take beyond the call's `wait` (lookups, publishing).
MARGIN = 4.0
#: The longest `wait` a request may ask for (a held HTTP request is a held connection).
MAX_WAIT = 600.0
#: The agents whose results consumers stay open; the least recently used one closes beyond.
MAX_AGENTS = 256

_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,128}")


class RequestError(ValueError):
    """The request's own parameters are wrong (not the call): the call is blocked, saying so."""


@dataclass(frozen=True)
class HookParams:
    """Who is asking and how long to hold them: the query of `/hooks/<client>?agent=…`."""

    agent: str
    workspace: str = "default"
    wait: float = 20.0
    on_pending: str = OnPending.DENY

    @classmethod
    def from_query(cls, client: Client, query: Mapping[str, str]) -> HookParams:
        agent = query.get("agent", "")
        if not _TOKEN.fullmatch(agent):
            raise RequestError(
                "the hook URL names no valid agent: add ?agent=NAME (letters, digits, _ and -)"
            )
        workspace = query.get("workspace", "default")
        if not _TOKEN.fullmatch(workspace):
            raise RequestError(f"the hook URL's workspace {workspace!r} is not a valid name")
        try:
            wait = float(query.get("wait", "20"))
        except ValueError:
            raise RequestError("the hook URL's wait is not a number of seconds") from None
        if not 0 <= wait <= MAX_WAIT:
            raise RequestError(f"the hook URL's wait must be between 0 and {MAX_WAIT:g} seconds")
        on_pending = query.get("on_pending", OnPending.DENY)
        if on_pending not in tuple(OnPending) or (
            on_pending == OnPending.DEFER and not client.defers
        ):
            raise RequestError(f"the hook URL's on_pending {on_pending!r} is not deny or defer")
        return cls(agent, workspace, wait, on_pending)


def parse_body(client: Client, body: bytes) -> HookCall:
    try:
        event = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HookInputError(f"the hook request's body is not JSON ({exc})") from exc
    if not isinstance(event, Mapping):
        raise HookInputError("the hook request's body is not a JSON object")
    return client.parse(event)


class Closing(Exception):
    """The gateway is stopping: a call still waiting is answered now, blocked."""

    def __str__(self) -> str:
        return "Headgate is shutting down; ask again once it is back"


class HookGateway:
    """Answers HTTP hook events through the agent SDK, on one NATS connection.

    One `Headgate` per agent (each with its results consumer), opened on first use and kept;
    beyond `MAX_AGENTS` the least recently used one that no request is using is closed. When
    it stops, every call still waiting is answered at once with a block: a connection cut by
    the shutdown would be a go-ahead in the client.
    """

    def __init__(
        self, nc: NATS, *, prefix: str, service_key: str | None = None,
        count: Callable[[str, str], None] | None = None,
    ):  # fmt: skip
        self.nc = nc
        self.prefix = prefix
        self.service_key = service_key
        #: Called with (client, answer: allow | deny | defer | none) for each request answered.
        self.count = count or (lambda client, answer: None)
        self.closing = asyncio.Event()
        self._agents: OrderedDict[tuple[str, str], Headgate] = OrderedDict()
        self._using: dict[tuple[str, str], int] = {}
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def agent(self, name: str, workspace: str) -> AsyncIterator[Headgate]:
        key = (name, workspace)
        async with self._lock:
            hg = self._agents.get(key)
            if hg is None:
                hg = Headgate(
                    self.nc, agent=name, workspace=workspace, prefix=self.prefix,
                    service_key=self.service_key,
                )  # fmt: skip
                await hg.start()
                self._agents[key] = hg
            self._agents.move_to_end(key)
            self._using[key] = self._using.get(key, 0) + 1
            await self._evict()
        try:
            yield hg
        finally:
            self._using[key] -= 1
            if not self._using[key]:
                del self._using[key]

    async def _evict(self) -> None:
        idle = [k for k in self._agents if k not in self._using]
        for key in idle[: max(len(self._agents) - MAX_AGENTS, 0)]:
            with contextlib.suppress(Exception):
                await self._agents.pop(key).close()

    async def close(self) -> None:
        self.closing.set()
        async with self._lock:
            for hg in self._agents.values():
                with contextlib.suppress(Exception):
                    await hg.close()
            self._agents.clear()

    async def decide(self, call: HookCall, params: HookParams) -> Answer:
        if call.phase is Phase.OTHER:
            return NEUTRAL
        async with self.agent(params.agent, params.workspace) as hg:
            if call.phase is Phase.AFTER:
                await report(hg, call)
                return NEUTRAL
            gated = await gate(hg, call, params.wait, on_pending=params.on_pending)
            return gated.answer

    async def _unless_closing(self, work: Awaitable[Answer], timeout: float) -> Answer:
        task = asyncio.ensure_future(work)
        closing = asyncio.ensure_future(self.closing.wait())
        try:
            done, _ = await asyncio.wait({task, closing}, timeout=timeout,
                                         return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            if task in done:
                return task.result()
            raise Closing() if closing in done else TimeoutError()
        finally:
            task.cancel()
            closing.cancel()

    async def answer(self, client: Client, query: Mapping[str, str], body: bytes) -> dict[str, Any]:
        """The JSON body answering one HTTP hook request. Never raises: a failure blocks the
        call (after the call ran there is nothing to block: the body is empty)."""
        assert client.http_render is not None
        call: HookCall | None = None
        try:
            if self.closing.is_set():
                raise Closing()
            params = HookParams.from_query(client, query)
            call = parse_body(client, body)
            timeout = params.wait + MARGIN
            decided = await self._unless_closing(self.decide(call, params), timeout)
        except Exception as exc:
            if call is not None and call.phase is not Phase.BEFORE:
                log.warning("HTTP hook (%s %s): %s", client.name, call.event, _describe(exc))
                self.count(client.name, "none")
                return {}
            reason = unavailable_reason(_describe(exc))
            log.warning("HTTP hook (%s): blocked a call: %s", client.name, _describe(exc))
            call = call or HookCall(client.name, "", Phase.BEFORE)
            decided = Answer(Action.DENY, reason)
        action = decided.action
        self.count(client.name, "none" if action is Action.NEUTRAL else action.value)
        try:
            return client.http_render(call, decided)
        except Exception as exc:  # never an error status: the client would go ahead
            log.exception("HTTP hook (%s): rendering the answer failed", client.name)
            return {"decision": "block", "reason": unavailable_reason(_describe(exc))}


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer within the hook's time budget"
    return str(exc).strip() or type(exc).__name__
