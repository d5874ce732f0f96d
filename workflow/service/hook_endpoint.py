"""`serve --hook-listen HOST:PORT`: the agents' HTTP hooks, `POST /hooks/<client>`.

Opt-in and on loopback by default. It saves the process a command hook starts per tool call,
but a client's HTTP hook fails open (see `workflow.adapters.http_hook`): with `serve` stopped
or unreachable, Claude Code goes on as if no hook ran. Every request carries a bearer token,
compared in constant time; the agent it speaks for is the URL's `?agent=`. An agent registered
with `headgate agents add NAME` has a token of its own (`credentials/agents/NAME.token`), and
only that one is taken for `?agent=NAME`; any other agent name takes the shared token `serve`
writes to the data dir (`hook.token`), unless `serve --no-shared-agent` runs, which takes
registered agents only.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import Callable
from pathlib import Path

from nats.aio.client import Client as NATS
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from workflow import agent_identities, datadir
from workflow.adapters.calls import Action, Answer, HookCall, Phase
from workflow.adapters.http_hook import HTTP_CLIENTS, HookGateway
from workflow.errors import ConfigError
from workflow.service.metrics import Metrics
from workflow.web.server import AppServer, listen

log = logging.getLogger("headgate.hooks")

#: Largest request body read (a Write of a big file carries the whole content).
MAX_BODY = 16 * 1024 * 1024


def parse_listen(value: str) -> tuple[str, int]:
    """`HOST:PORT` (or `PORT`, on loopback) → (host, port)."""
    host, _, port = value.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"--hook-listen must be HOST:PORT, e.g. 127.0.0.1:8788, not {value!r}")
    return host, int(port)


def authorized(header: str | None, token: str) -> bool:
    scheme, _, given = (header or "").partition(" ")
    ok = hmac.compare_digest(given.strip().encode(), token.encode())
    return scheme.lower() == "bearer" and ok


def hook_app(
    gateway: HookGateway,
    token: str | Callable[[str], str | None],
    count: Callable[[str, str], None] | None = None,
) -> Starlette:
    """The routes. A request that names a client with HTTP hooks is always answered with a
    200 and a body the client honours — even a wrong token gets a deny rather than a 401,
    which Claude Code would take as "no hook ran". `token` is the token every request must
    carry, or the one a request for a given agent must (None: none is taken)."""
    token_for = token if callable(token) else (lambda agent: token)

    async def hook(request: Request) -> Response:
        name = request.path_params["client"]
        client = HTTP_CLIENTS.get(name)
        if client is None or client.http_render is None:
            known = ", ".join(HTTP_CLIENTS)
            return JSONResponse({"error": f"no HTTP hooks for {name!r} (only {known})"}, 404)
        expected = token_for(request.query_params.get("agent", ""))
        if expected is None or not authorized(request.headers.get("authorization"), expected):
            log.warning("HTTP hook from %s refused: wrong or missing bearer token", request.client)
            reason = (
                "Headgate refused this hook request: its bearer token is missing or wrong, so "
                "the call is blocked. Nothing ran. Tell the user: the hook's Authorization "
                "header must carry the agent's token (credentials/agents/NAME.token in "
                "Headgate's data dir for an agent registered with `headgate agents add`, else "
                "hook.token there); Claude Code fills $VARIABLES in headers only from those "
                "listed in allowedEnvVars."
            )
            if count is not None:
                count(client.name, "refused")
            call = HookCall(client.name, "", Phase.BEFORE)
            return JSONResponse(client.http_render(call, Answer(Action.DENY, reason)))
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY:
                body = bytearray(b"<too large>")  # answered like any other malformed body
                break
        return JSONResponse(await gateway.answer(client, request.query_params, bytes(body)))

    return Starlette(routes=[Route("/hooks/{client}", hook, methods=["POST"])])


class HookEndpoint:
    """The listener and its NATS connection, started and stopped with the service. The socket
    is bound when this is made, so a taken port stops `serve` before anything started."""

    def __init__(self, listen_on: str, data_dir: Path, *, shared_token: bool = True) -> None:
        self.data_dir = data_dir
        #: The registered agents' own tokens (kept current by `workflow.service.agent_access`).
        self.agent_tokens: dict[str, str] = {}
        #: Whether an agent that is not registered may use the shared token (`hook.token`).
        self.shared_token = shared_token
        host, port = parse_listen(listen_on)
        self._socket = listen(host, port, what="the HTTP hooks")
        # Listening already: a hook that arrives while the service starts waits in the
        # backlog for its answer instead of being refused, which the client takes as go-ahead.
        self._socket.listen(128)
        bound_host, bound_port = self._socket.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        self.url = f"http://{shown}:{bound_port}"
        self._server: AppServer | None = None
        self.gateway: HookGateway | None = None

    async def start(
        self, nc: NATS, *, prefix: str, service_key: str, metrics: Metrics | None = None
    ) -> None:
        token, path = datadir.hook_token(self.data_dir)
        self.agent_tokens = await asyncio.to_thread(agent_identities.hook_tokens, self.data_dir)
        answers = metrics.hook_answers if metrics is not None else None

        def count(client: str, answer: str) -> None:
            if answers is not None:
                answers.labels(client, answer).inc()

        self.gateway = HookGateway(nc, prefix=prefix, service_key=service_key, count=count)

        def token_for(agent: str) -> str | None:
            own = self.agent_tokens.get(agent)
            return own if own is not None else (token if self.shared_token else None)

        server = AppServer(hook_app(self.gateway, token_for, count), self._socket,
                           what="the HTTP hooks")  # fmt: skip
        await server.start()
        self._server = server
        datadir.record(self.data_dir, datadir.HOOK_URL_FILE, self.url + "\n")
        log.info(
            "HTTP hooks at %s/hooks/<client> (bearer token in %s); they fail open in the "
            "clients: the command hook (headgate hook) stays the safe default",
            self.url,
            path,
        )

    async def stop(self) -> None:
        """Answer the calls still waiting (blocked), then close the listener and NATS."""
        if self.gateway is not None:
            self.gateway.closing.set()
        if self._server is not None:
            await self._server.stop()  # graceful: the answers just given are sent
            self._server = None
            (self.data_dir / datadir.HOOK_URL_FILE).unlink(missing_ok=True)
        else:
            self._socket.close()
        if self.gateway is not None:
            gateway, self.gateway = self.gateway, None
            await gateway.close()
            nc = gateway.nc
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.drain(), 5)
            if not nc.is_closed:
                with contextlib.suppress(Exception):
                    await nc.close()
