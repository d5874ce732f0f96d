"""`headgate mcp-proxy -- COMMAND ARGS…`: an MCP gateway in front of any stdio MCP server.

The proxy runs the upstream server and speaks MCP to the client on stdio. `tools/list` passes
through without the tools the policy denies this agent (`api.offered.<agent>`); every `tools/call`
becomes a proposal carrying the tool's definition (description, input schema, annotations)
and `--server-kind`. While it waits for the outcome it sends progress notifications (clients
abort calls that look idle); released, it calls the upstream tool with the **released**
arguments, returns its result and reports it `executed`. Blocked, or still pending after
`--wait`, the client gets an `isError` result with the reason or the request id: the same call
retried binds to the same request (see `gate`). A client's `notifications/cancelled` cancels
the pending proposal. An upstream that crashes, answers garbage or hangs gives an `isError`
result saying so, and a released call it failed is reported as executed unsuccessfully, so
nothing is left that could run later.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from workflow.adapters.calls import Action, HookCall, Phase
from workflow.adapters.gate import gate
from workflow.client import transport
from workflow.client.agent import Headgate
from workflow.client.connection import Role, resolve_nats
from workflow.client.worker import report_execution
from workflow.errors import HeadgateError
from workflow.messages import OfferedQuery, OfferedReply, ToolDefinition
from workflow.routing import release_id_for

log = logging.getLogger("headgate.mcp_proxy")

CLIENT = "mcp"
T = TypeVar("T")


@dataclass(frozen=True)
class ProxyOptions:
    agent: str
    command: list[str]
    workspace: str = "default"
    server_kind: str | None = None
    #: Seconds a call is held for its decision before the client is told it is pending.
    wait: float = 50.0
    #: Seconds between progress notifications while a call waits.
    progress_every: float = 5.0
    #: Seconds the upstream server has to answer one request.
    upstream_timeout: float = 120.0
    #: Seconds the upstream server has to start and complete the MCP handshake.
    start_timeout: float = 30.0
    connect_timeout: float = 5.0
    prefix: str = "headgate"
    nats_url: str | None = None
    data_dir: Path | None = None
    #: Where to write the upstream's latest `tools/list` (for `headgate tools pin --tools`).
    catalog: Path | None = None
    #: A streamable HTTP upstream (instead of `command`), e.g. http://127.0.0.1:8000/mcp.
    upstream_url: str | None = None
    #: Serve streamable HTTP on (host, port) at /mcp instead of stdio.
    listen: tuple[str, int] | None = None


class UpstreamError(HeadgateError):
    """The upstream MCP server failed: it exited, answered garbage or did not answer."""


def definition_of(tool: types.Tool, server_kind: str | None) -> ToolDefinition:
    """The proposal's view of an MCP tool: only what defines it (description, input schema,
    annotations as the spec spells them)."""
    annotations = (
        tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else None
    )
    return ToolDefinition.model_validate({
        "description": tool.description or "", "input_schema": tool.input_schema,
        "annotations": annotations or None, "server": server_kind,
    })  # fmt: skip


def error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _summary(result: types.CallToolResult, limit: int = 400) -> str:
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    shown = " ".join(texts) if texts else json.dumps(result.structured_content, default=str)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


@dataclass
class Proxy:
    hg: Headgate
    upstream: ClientSession
    options: ProxyOptions
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    tools: dict[str, types.Tool] = field(default_factory=dict)

    # ------------------------------------------------------------------ upstream
    async def _upstream(self, what: str, call: Awaitable[T]) -> T:
        """One request to the upstream, bounded in time; its failures become UpstreamError."""
        try:
            with anyio.fail_after(self.options.upstream_timeout):
                return await call
        except TimeoutError as exc:
            raise UpstreamError(
                f"the upstream MCP server did not answer {what} within "
                f"{self.options.upstream_timeout:g}s"
            ) from exc
        except Exception as exc:
            raise UpstreamError(
                f"the upstream MCP server failed on {what}: {str(exc) or type(exc).__name__}"
            ) from exc

    async def upstream_tools(self) -> list[types.Tool]:
        found: list[types.Tool] = []
        cursor: str | None = None
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self._upstream("tools/list", self.upstream.list_tools(params=params))
            found.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        self.tools = {t.name: t for t in found}
        if self.options.catalog is not None:
            self._record(found)
        return found

    def _record(self, tools: list[types.Tool]) -> None:
        catalog = {
            "server_kind": self.options.server_kind,
            "tools": [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in tools],
        }
        assert self.options.catalog is not None
        tmp = self.options.catalog.with_suffix(".tmp")
        tmp.write_text(json.dumps(catalog, indent=2))
        tmp.replace(self.options.catalog)

    # ------------------------------------------------------------------ tools/list
    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = await self.upstream_tools()
        denied = await self._denied(tools)
        return types.ListToolsResult(tools=[t for t in tools if t.name not in denied])

    async def _denied(self, tools: list[types.Tool]) -> set[str]:
        """The tools the policy denies this agent; none when Headgate cannot tell (every call
        is still gated: the listing is a convenience, the proposal is the boundary)."""
        listing = {"tools": [
            {"name": t.name, "description": t.description or "", "inputSchema": t.input_schema,
             "annotations": definition_of(t, None).model_dump(mode="json")["annotations"] or {}}
            for t in tools
        ]}  # fmt: skip
        if self.options.server_kind:
            listing["server_kind"] = self.options.server_kind  # type: ignore[assignment]
        query = OfferedQuery(agent=self.hg.agent, workspace=self.hg.workspace, tools=listing)
        try:
            # On the agent's own subject: NATS permissions can grant it to that agent alone.
            reply = await transport.request(
                self.hg.nc, self.hg.subjects, "offered", query, OfferedReply,
                subject=self.hg.subjects.api_offered(self.hg.agent),
            )  # fmt: skip
        except Exception as exc:
            log.warning("cannot ask Headgate which tools to offer (%s): listing them all", exc)
            return set()
        return {t.name for t in reply.denied} if reply is not None else set()

    # ------------------------------------------------------------------ tools/call
    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            return await self._call(ctx, params)
        except UpstreamError as exc:
            return error_result(f"{exc}. Nothing ran.")

    async def _call(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name, arguments = params.name, dict(params.arguments or {})
        tool = self.tools.get(name)
        if tool is None:
            await self.upstream_tools()
            tool = self.tools.get(name)
        if tool is None:
            return error_result(f"The upstream MCP server has no tool `{name}`. Nothing ran.")
        call = HookCall(
            CLIENT, "tools/call", Phase.BEFORE, tool=name, arguments=arguments, cwd=os.getcwd(),
            session_id=self.session_id, server=self.options.server_kind,
        )  # fmt: skip

        async def progress(waited: float, request_id: str | None) -> None:
            held = f" (request {request_id})" if request_id else ""
            await ctx.session.report_progress(
                waited, None, f"waiting for approval in Headgate{held}"
            )

        proposed: list[str] = []
        try:
            gated = await gate(
                self.hg, call, self.options.wait, progress=progress,
                definition=definition_of(tool, self.options.server_kind),
                every=self.options.progress_every, on_proposal=proposed.append,
            )  # fmt: skip
        except anyio.get_cancelled_exc_class():
            # The client gave up on the call (notifications/cancelled): withdraw it, so an
            # approval arriving later releases nothing.
            if proposed:
                with anyio.CancelScope(shield=True):
                    await self.hg.cancel(proposed[0], "the MCP client cancelled the call")
            raise
        if gated.answer.action is not Action.ALLOW or gated.released is None:
            return error_result(gated.answer.reason)
        return await self._run(name, gated.released.arguments, gated.proposal_id)

    async def _run(self, name: str, arguments: dict[str, Any], pid: str) -> types.CallToolResult:
        """Call the upstream with the released arguments; report what happened, whatever it is."""
        release = release_id_for(pid)
        try:
            result = await self._upstream(f"`{name}`", self.upstream.call_tool(name, arguments))
        except UpstreamError as exc:
            await report_execution(
                self.hg.nc, self.hg.subjects, release, pid, self.hg.agent, False, str(exc)
            )
            raise
        await report_execution(
            self.hg.nc, self.hg.subjects, release, pid, self.hg.agent, not result.is_error,
            _summary(result),
        )  # fmt: skip
        return result


async def serve(options: ProxyOptions) -> None:
    """Run the upstream server and serve MCP on stdio until the client closes it."""
    try:
        async with anyio.create_task_group() as tasks:
            shutdown = _Shutdown(tasks.cancel_scope)
            tasks.start_soon(_stop_on_signal, shutdown)
            await _serve(options, shutdown)
            tasks.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # the SDK's task groups wrap what went wrong
        found = group.subgroup(lambda e: isinstance(e, HeadgateError))
        if found is not None:
            raise _first(found) from group
        raise


@dataclass
class _Shutdown:
    """What a stop signal does: cancel the proxy, or, once it serves HTTP, ask the HTTP server
    to finish (cancelling uvicorn in the middle of its lifespan logs a traceback)."""

    scope: anyio.CancelScope
    http: Any = None  # a uvicorn.Server while it serves

    def __call__(self) -> None:
        if self.http is not None and not self.http.should_exit:
            self.http.should_exit = True
        else:
            self.scope.cancel()


async def _stop_on_signal(shutdown: _Shutdown) -> None:
    """SIGTERM, SIGINT or SIGHUP end the proxy through its normal exit, which stops the
    upstream server; dying on the signal would leave it running (it is in a process group of
    its own), hung in a call that will never be answered. A second signal cancels at once."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for _ in signals:
            shutdown()


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    inner = group.exceptions[0]
    return _first(inner) if isinstance(inner, BaseExceptionGroup) else inner


def _upstream_transport(options: ProxyOptions) -> Any:
    if options.upstream_url is not None:
        return streamable_http_client(options.upstream_url)
    params = StdioServerParameters(command=options.command[0], args=options.command[1:])
    return stdio_client(params, errlog=sys.stderr)


def _upstream_name(options: ProxyOptions) -> str:
    return options.upstream_url or shlex.join(options.command)


async def _wait_listening(url: str) -> None:
    """Until something accepts TCP connections where `url` points: an HTTP upstream started
    beside the proxy (a compose file, a supervisor) may bind its port after the proxy starts."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    while True:
        try:
            stream = await anyio.connect_tcp(parts.hostname or "localhost", port)
        except OSError:
            await anyio.sleep(0.1)
        else:
            await stream.aclose()
            return


@contextlib.asynccontextmanager
async def _upstream_session(options: ProxyOptions) -> AsyncIterator[ClientSession]:
    """The upstream's MCP session, handshake done, within `start_timeout` of being called."""
    deadline = anyio.current_time() + options.start_timeout
    try:
        if options.upstream_url is not None:
            with anyio.fail_after(options.start_timeout):
                await _wait_listening(options.upstream_url)
    except TimeoutError as exc:
        raise UpstreamError(
            f"the upstream MCP server `{options.upstream_url}` was not listening within "
            f"{options.start_timeout:g}s; is it running, and is the URL right?"
        ) from exc
    async with (
        _upstream_transport(options) as (read, write),
        ClientSession(read, write) as session,
    ):
        try:
            with anyio.fail_at(deadline):
                await session.initialize()
        except Exception as exc:
            why = "no answer" if isinstance(exc, TimeoutError) else str(exc) or type(exc).__name__
            raise UpstreamError(
                f"the upstream MCP server `{_upstream_name(options)}` did not complete the MCP "
                f"handshake within {options.start_timeout:g}s ({why}); is it an MCP server?"
            ) from exc
        yield session


async def _serve(options: ProxyOptions, shutdown: _Shutdown) -> None:
    target = resolve_nats(
        options.nats_url, role=Role.AGENT, data_dir=options.data_dir, agent=options.agent
    )
    async with (
        Headgate.connect(
            target, agent=options.agent, workspace=options.workspace, prefix=options.prefix,
            connect_timeout=options.connect_timeout, data_dir=options.data_dir,
        ) as hg,
        _upstream_session(options) as session,
    ):  # fmt: skip
        proxy = Proxy(hg, session, options)
        server: Server[Any] = Server(
            "headgate-mcp-proxy", on_list_tools=proxy.list_tools, on_call_tool=proxy.call_tool
        )
        if options.listen is not None:
            await _serve_http(server, *options.listen, shutdown)
            return
        async with stdio_server() as (client_read, client_write):
            with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError):
                await server.run(client_read, client_write, server.create_initialization_options())


async def _serve_http(server: Server[Any], host: str, port: int, shutdown: _Shutdown) -> None:
    """Streamable HTTP at http://HOST:PORT/mcp until the process is stopped."""
    import uvicorn

    class _Uvicorn(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # the proxy's own signal receiver stops it, through `should_exit`

    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", lifespan="on", timeout_graceful_shutdown=5
    )
    shutdown.http = _Uvicorn(config)
    await shutdown.http.serve()
