"""`headgate mcp-proxy` between the real MCP client SDK and a real stdio MCP server.

The client is the `mcp` SDK's `ClientSession` over stdio, talking to a `headgate mcp-proxy`
process, which runs `notes_server.py` (a read, a write, a destructive tool, and tools that
make it misbehave) and gates every call through the service on a real nats-server.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.client.support import KEYS
from tests.service.helpers import (
    Harness,
    decision,
    running_service,
    send_decision,
    unique_prefix,
    wait_until,
)
from workflow import agent_identities
from workflow.service.lifecycle import Service
from workflow.service.settings import Settings

SERVER = Path(__file__).parent / "notes_server.py"
AGENT = "notes-agent"
POLICY = f"""
default_ttl = "1h"

[tools.read_note]
risk_class = "read"
severity = "low"

[tools.crash]
risk_class = "read"
severity = "low"

[tools.hang]
risk_class = "read"
severity = "low"

[tools.write_note]
risk_class = "write_local"
severity = "medium"

[approvers.alice]
key = "{KEYS["alice"].public_key}"
roles = ["approver"]
"""


@asynccontextmanager
async def service(nats_url: str, data: Path) -> AsyncIterator[Harness]:
    data.mkdir(parents=True)
    (data / "policy.toml").write_text(POLICY)
    async with running_service(nats_url, data, policy_path=data / "policy.toml") as h:
        yield h


@asynccontextmanager
async def proxied(
    h: Harness | None, nats_url: str, notes: Path, *options: str,
    upstream: list[str] | None = None,
) -> AsyncIterator[ClientSession]:  # fmt: skip
    prefix = h.subjects.prefix if h is not None else "headgate"
    command = upstream or [sys.executable, str(SERVER), str(notes)]
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "workflow", "mcp-proxy", "--nats-url", nats_url, "--prefix", prefix,
              "--agent", AGENT, "--server-kind", "notes-mcp", "--progress-every", "0.2",
              "--data-dir", "/nonexistent-headgate-data", *options, "--", *command],
        cwd=str(Path(__file__).resolve().parents[2]),
    )  # fmt: skip
    with (notes.parent / "proxy-stderr.txt").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                with anyio.fail_after(30):
                    await session.initialize()
                yield session


async def decide(h: Harness, verdict: str = "approve", reason: str = "") -> dict[str, Any]:
    (item,) = await h.observer.wait_for("inbox", timeout=30)
    await send_decision(
        h.nc, h.subjects,
        decision(KEYS["alice"], item["request_id"], item["proposal_digest"], verdict,
                 approver="alice", reason=reason),
    )  # fmt: skip
    return item


def text_of(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_the_listing_hides_the_destructive_tool_and_a_read_returns_at_once(
    nats_url: str, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    async with service(nats_url, tmp_path / "svc") as h, proxied(h, nats_url, notes) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert {"read_note", "write_note"} <= listed
        assert "delete_all" not in listed

        result = await client.call_tool("read_note", {"name": "todo"})
        assert not result.is_error
        assert text_of(result) == "note todo: nothing yet"
        (released,) = h.observer.of("released")
        (executed,) = await h.observer.wait_for("executed", released["proposal_id"])
        assert executed["success"] is True
        history = await h.service_history(released["proposal_id"])
        definition = history["proposal"]["tool_definition"]
        assert definition["description"] == "Read one note."
        hints = {k: v for k, v in definition["annotations"].items() if v is not None}
        assert hints == {"readOnlyHint": True}
        assert definition["server"] == "notes-mcp"
        assert history["proposal"]["source"] == "notes-mcp"


@pytest.mark.parametrize("registered", [False, True], ids=["shared-user", "registered"])
async def test_the_listing_is_filtered_on_the_embedded_default_with_the_agent_credentials(
    tmp_path: Path, registered: bool
) -> None:
    # `serve` with its own nats-server: the proxy finds the URL and the agent's credentials in
    # the data dir, and the agent may ask which of its tools to offer on its own subject. A
    # registered agent's subjects are denied to the shared user: the proxy uses its own.
    data, policy = tmp_path / ".headgate", tmp_path / "policy.toml"
    policy.write_text(POLICY)
    if registered:
        agent_identities.add(data, AGENT)
    service = Service(Settings(data_dir=data, prefix=unique_prefix(), policy_path=policy))
    await service.start()
    try:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "workflow", "mcp-proxy", "--data-dir", str(data), "--agent", AGENT,
                  "--prefix", service.subjects.prefix, "--",
                  sys.executable, str(SERVER), str(tmp_path / "notes.txt")],
            cwd=str(Path(__file__).resolve().parents[2]),
        )  # fmt: skip
        with (tmp_path / "proxy-stderr.txt").open("w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as client,
            ):
                with anyio.fail_after(30):
                    await client.initialize()
                    listed = {t.name for t in (await client.list_tools()).tools}
        assert {"read_note", "write_note"} <= listed
        assert "delete_all" not in listed
        assert "listing them all" not in (tmp_path / "proxy-stderr.txt").read_text()
    finally:
        await service.stop()


async def test_a_write_runs_once_after_approval_with_progress_while_it_waits(
    nats_url: str, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with service(nats_url, tmp_path / "svc") as h, proxied(h, nats_url, notes) as client:
        async with anyio.create_task_group() as tg:

            async def approve_after_progress() -> None:
                item = await decide_when(h, lambda: len(seen) >= 2)
                assert item["proposal"]["tool"] == "write_note"

            tg.start_soon(approve_after_progress)
            result = await client.call_tool(
                "write_note", {"name": "a", "text": "hello"}, progress_callback=on_progress
            )
        assert not result.is_error, text_of(result)
        assert text_of(result) == "wrote a"
        assert notes.read_text() == "a=hello\n"
        (released,) = h.observer.of("released")
        await h.observer.wait_for("executed", released["proposal_id"])


async def decide_when(h: Harness, ready: Any, verdict: str = "approve") -> dict[str, Any]:
    await wait_until(lambda: anyio.sleep(0.05), lambda _: ready(), timeout=30)
    return await decide(h, verdict)


async def test_a_rejected_call_is_an_error_result_with_the_reason(
    nats_url: str, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    async with service(nats_url, tmp_path / "svc") as h, proxied(h, nats_url, notes) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(decide, h, "reject", "no notes today")
            result = await client.call_tool("write_note", {"name": "a", "text": "x"})
        assert result.is_error
        assert "rejected" in text_of(result)
        assert "no notes today" in text_of(result)
        assert not notes.exists()


async def test_a_pending_call_names_its_request_and_the_retry_binds_to_it(
    nats_url: str, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    async with (
        service(nats_url, tmp_path / "svc") as h,
        proxied(h, nats_url, notes, "--wait", "0.5") as client,
    ):
        first = await client.call_tool("write_note", {"name": "a", "text": "x"})
        assert first.is_error
        (item,) = await h.observer.wait_for("inbox")
        assert item["request_id"] in text_of(first)
        assert "Ask again later" in text_of(first)
        again = await client.call_tool("write_note", {"name": "a", "text": "x"})
        assert item["request_id"] in text_of(again)
        assert len(h.observer.of("inbox")) == 1
        await decide(h)
        await h.observer.wait_for("released", item["proposal_id"])
        done = await client.call_tool("write_note", {"name": "a", "text": "x"})
        assert not done.is_error, text_of(done)
        assert notes.read_text() == "a=x\n"


async def test_a_call_the_client_cancels_is_withdrawn(nats_url: str, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    async with service(nats_url, tmp_path / "svc") as h, proxied(h, nats_url, notes) as client:
        with anyio.move_on_after(3):
            await client.call_tool("write_note", {"name": "a", "text": "x"})
        (item,) = await h.observer.wait_for("inbox")
        (blocked,) = await h.observer.wait_for("blocked", item["proposal_id"], timeout=15)
        assert blocked["outcome"] == "cancelled"
        assert not notes.exists()


@pytest.mark.parametrize("tool", ["crash", "hang"])
async def test_an_upstream_that_dies_or_hangs_gives_an_error_and_nothing_stays_pending(
    tool: str, nats_url: str, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    async with (
        service(nats_url, tmp_path / "svc") as h,
        proxied(h, nats_url, notes, "--upstream-timeout", "3") as client,
    ):
        result = await client.call_tool(tool, {})
        assert result.is_error
        assert "upstream MCP server" in text_of(result)
        (released,) = h.observer.of("released")
        (executed,) = await h.observer.wait_for("executed", released["proposal_id"])
        assert executed["success"] is False
        history = await h.service_history(released["proposal_id"])
        assert history["status"] == "released"
    # The proxy is gone: so is the upstream server, even the one hung in a call.
    upstream = int(Path(f"{notes}.pid").read_text())

    async def running() -> bool:
        return alive(upstream)

    await wait_until(running, lambda up: not up)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid)


def _state(pid: int) -> str:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "zombie"
    return next((line for line in status.splitlines() if line.startswith("State:")), "")


async def test_an_upstream_speaking_garbage_stops_the_proxy_with_a_clear_error(
    nats_url: str, tmp_path: Path
) -> None:
    garbage = [sys.executable, "-c", "print('this is not MCP'); import time; time.sleep(60)"]
    notes = tmp_path / "notes.txt"
    async with service(nats_url, tmp_path / "svc") as h:
        with pytest.raises(Exception):  # noqa: B017,PT011 - the SDK's own connection error
            async with proxied(h, nats_url, notes, "--start-timeout", "3", upstream=garbage):
                pass
    stderr = (tmp_path / "proxy-stderr.txt").read_text()
    assert "did not complete the MCP handshake" in stderr
    assert "Traceback" not in stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_listening(port: int) -> None:
    with anyio.fail_after(30):
        while True:
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.1)
            else:
                await stream.aclose()
                return


def proxy_command(nats_url: str, h: Harness, upstream_url: str, *options: str) -> list[str]:
    return [sys.executable, "-m", "workflow", "mcp-proxy", "--nats-url", nats_url,
            "--prefix", h.subjects.prefix, "--agent", AGENT, "--data-dir", "/nonexistent",
            "--upstream-url", upstream_url, *options]  # fmt: skip


async def test_streamable_http_on_both_sides_with_the_upstream_starting_after_the_proxy(
    nats_url: str, tmp_path: Path
) -> None:
    """The proxy starts first and waits for the HTTP upstream to listen, as when both are
    started at once by a compose file: the upstream binds its port seconds later."""
    notes = tmp_path / "notes.txt"
    upstream_port, proxy_port = free_port(), free_port()
    root = str(Path(__file__).resolve().parents[2])
    upstream_url = f"http://127.0.0.1:{upstream_port}/mcp"
    with (
        (tmp_path / "proxy-stderr.txt").open("wb") as proxy_err,
        (tmp_path / "upstream-stderr.txt").open("wb") as upstream_err,
    ):
        async with service(nats_url, tmp_path / "svc") as h, anyio.create_task_group() as tg:
            proxy = await anyio.open_process(
                proxy_command(nats_url, h, upstream_url, "--listen", f"127.0.0.1:{proxy_port}"),
                cwd=root, stdout=proxy_err, stderr=proxy_err,
            )  # fmt: skip
            await anyio.sleep(1)  # the proxy is past its start before the upstream exists
            upstream = await anyio.open_process(
                [sys.executable, str(SERVER), str(notes), str(upstream_port)],
                cwd=root, stdout=upstream_err, stderr=upstream_err,
            )  # fmt: skip
            try:
                await wait_listening(proxy_port)
                url = f"http://127.0.0.1:{proxy_port}/mcp"
                async with (
                    streamable_http_client(url) as (read, write),
                    ClientSession(read, write) as client,
                ):
                    await client.initialize()
                    listed = {t.name for t in (await client.list_tools()).tools}
                    assert "write_note" in listed
                    assert "delete_all" not in listed
                    tg.start_soon(decide, h)
                    result = await client.call_tool("write_note", {"name": "h", "text": "ttp"})
                    assert not result.is_error, text_of(result)
                    assert notes.read_text() == "h=ttp\n"
            finally:
                for process in (proxy, upstream):
                    if process.returncode is None:
                        process.terminate()
                    await process.wait()
    assert proxy.returncode is not None
    assert "Traceback" not in (tmp_path / "proxy-stderr.txt").read_text()


async def test_an_http_upstream_that_never_listens_stops_the_proxy_with_a_clear_error(
    nats_url: str, tmp_path: Path
) -> None:
    root = str(Path(__file__).resolve().parents[2])
    upstream_url = f"http://127.0.0.1:{free_port()}/mcp"
    async with service(nats_url, tmp_path / "svc") as h:
        command = proxy_command(nats_url, h, upstream_url, "--start-timeout", "1")
        with anyio.fail_after(60):
            done = await anyio.run_process(command, cwd=root, check=False)
    stderr = done.stderr.decode()
    assert done.returncode != 0
    assert f"the upstream MCP server `{upstream_url}` was not listening within 1s" in stderr
    assert "Traceback" not in stderr
