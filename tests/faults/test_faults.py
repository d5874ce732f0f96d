"""Faults with real processes: NATS killed and restarted, failing handlers, unreachable NATS."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.adapters.test_hook_gate import AGENT
from tests.adapters.test_lite import NO_DATA, mcp_call, read_call
from tests.service.helpers import decision, propose, running_service, send_decision, wait_until
from workflow.adapters import lite
from workflow.adapters.calls import Action, Phase
from workflow.adapters.options import GateOptions
from workflow.errors import ConnectError
from workflow.service.embedded import EmbeddedNats
from workflow.service.lifecycle import Service
from workflow.service.settings import Settings

pytestmark = pytest.mark.slow


async def test_the_service_reconnects_after_nats_is_killed_and_restarted(
    fresh_nats: EmbeddedNats, tmp_path: Path
) -> None:
    async with running_service(fresh_nats.url, tmp_path / "svc") as h:
        before = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        await h.observer.wait_for("released", before)
        restarted = await _restart(fresh_nats, pause=0.5)
        try:
            # The client connections reconnect by themselves; JetStream kept its data.
            await _reconnected(h)
            after = await _propose_retrying(h, tool="read_file", arguments={"path": "b"})
            await h.observer.wait_for("released", after, timeout=20)
            assert (await h.service_history(before))["status"] == "released"
        finally:
            restarted.stop()


async def _restart(
    server: EmbeddedNats, pause: float, meanwhile: asyncio.Task[Any] | None = None
) -> EmbeddedNats:
    """Kill the server, wait `pause` seconds (`meanwhile` must still be running then) and
    start another on the same port and store."""
    port = int(server.url.rsplit(":", 1)[1])
    server.kill()
    await asyncio.sleep(pause)
    assert meanwhile is None or not meanwhile.done(), "it gave up when the connection was lost"
    restarted = EmbeddedNats(store_dir=server.store_dir, port=port)
    restarted.start()
    return restarted


async def _reconnected(h: Any) -> None:
    await wait_until(lambda: asyncio.sleep(0, h.service.ctx.nc.is_connected), bool, timeout=15)


async def _propose_retrying(h: Any, **kw: Any) -> str:
    for _ in range(40):
        try:
            return await propose(h.nc, h.subjects, **kw)
        except Exception:
            await asyncio.sleep(0.25)
    raise AssertionError("could not publish after the restart")


async def test_a_message_that_keeps_failing_goes_to_the_dead_letter_subject(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_service(nats_url, tmp_path, retry_base_delay=0.05) as h:
        store = h.service.ctx.store  # type: ignore[union-attr]
        calls = 0

        async def always_failing(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            raise OSError("disk I/O error")

        monkeypatch.setattr(store.proposals, "record", always_failing)
        pid = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        (dead,) = await h.observer.wait_for("dead", timeout=15)
        assert calls == 5
        assert dead["deliveries"] == 5
        assert "gave up after 5 deliveries" in dead["error"]
        assert "disk I/O error" in dead["error"]
        assert pid in dead["payload"]
        assert h.observer.of("released", pid) == []


async def test_starting_without_a_reachable_nats_fails_with_a_clear_error(tmp_path: Path) -> None:
    service = Service(
        Settings(data_dir=tmp_path, nats_url="nats://127.0.0.1:1", connect_timeout=1.5)
    )
    with pytest.raises(ConnectError, match=r"cannot reach NATS at nats://127\.0\.0\.1:1"):
        await service.start()


def test_serve_against_an_unreachable_server_exits_with_a_message_not_a_traceback(
    tmp_path: Path,
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "workflow", "serve", "--nats-url", "nats://127.0.0.1:1",
         "--data-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False,
        env={"HEADGATE_CONNECT_TIMEOUT": "1", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert result.returncode == 2
    assert "error: cannot reach NATS at nats://127.0.0.1:1" in result.stderr
    assert "Traceback" not in result.stderr


async def test_the_cli_reports_a_missing_service_clearly(fresh_nats: EmbeddedNats) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "workflow", "pending", "--nats-url", fresh_nats.url,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    _, err = await proc.communicate()
    assert proc.returncode == 2
    assert "no Headgate service answers" in err.decode()
    nc = await nats.connect(fresh_nats.url)
    await nc.close()


async def test_the_service_stops_and_closes_its_connection_while_nats_is_down(
    fresh_nats: EmbeddedNats, tmp_path: Path
) -> None:
    service = Service(Settings(data_dir=tmp_path, nats_url=fresh_nats.url, prefix="hgdownstop"))
    await service.start()
    assert service.ctx is not None
    fresh_nats.kill()
    await asyncio.sleep(0.5)  # the connection is reconnecting now: drain refuses
    await asyncio.wait_for(service.stop(), 30)
    assert service.ctx.nc.is_closed  # no reconnect loop left behind


async def test_a_hook_waiting_for_an_approval_outlives_a_nats_restart(
    fresh_nats: EmbeddedNats, tmp_path: Path
) -> None:
    """The light hook client holds one connection while a held call waits for a person: a
    server restarted meanwhile (a node of a cluster replaced) must not end the wait. It opens
    another connection, listens again and asks the service; the approval given after the
    restart releases the call."""
    async with running_service(fresh_nats.url, tmp_path / "svc") as h:
        opts = GateOptions(agent=AGENT, prefix=h.subjects.prefix, nats_url=fresh_nats.url,
                           data_dir=NO_DATA, wait=60.0, connect_timeout=2.0)  # fmt: skip
        waiting = asyncio.create_task(asyncio.to_thread(lite.decide, mcp_call("s1"), opts, 90.0))
        (item,) = await wait_until(
            lambda: asyncio.sleep(0, h.observer.of("inbox")), lambda items: len(items) == 1
        )
        restarted = await _restart(fresh_nats, pause=1.0, meanwhile=waiting)
        try:
            await _reconnected(h)
            signed = decision(h.key, item["request_id"], item["proposal_digest"])
            for _ in range(40):
                try:
                    await send_decision(h.nc, h.subjects, signed)
                    break
                except Exception:
                    await asyncio.sleep(0.25)
            answer = await asyncio.wait_for(waiting, 60)
            assert answer.action == Action.ALLOW, answer.reason
            assert item["request_id"] in answer.reason
        finally:
            restarted.stop()


async def test_a_hook_whose_nats_does_not_come_back_fails_closed_within_its_wait(
    fresh_nats: EmbeddedNats, tmp_path: Path
) -> None:
    """No server again before the wait ends: the hook stops with an error (the caller
    blocks the call), in time, instead of hanging or allowing anything."""
    async with running_service(fresh_nats.url, tmp_path / "svc") as h:
        opts = GateOptions(agent=AGENT, prefix=h.subjects.prefix, nats_url=fresh_nats.url,
                           data_dir=NO_DATA, wait=4.0, connect_timeout=2.0)  # fmt: skip
        started = asyncio.get_running_loop().time()
        waiting = asyncio.create_task(asyncio.to_thread(lite.decide, mcp_call("s2"), opts, 30.0))
        await wait_until(
            lambda: asyncio.sleep(0, h.observer.of("inbox")), lambda items: len(items) == 1
        )
        fresh_nats.kill()
        with pytest.raises(ConnectError, match="lost and not made again"):
            await asyncio.wait_for(waiting, 20)
        assert asyncio.get_running_loop().time() - started < 15


class CuttingProxy:
    """A TCP relay in front of nats-server that cuts the first connection carrying `trigger`
    (bytes of a subject). Sent by the client, the bytes go through and the server's answers
    are dropped; sent by the server (a message delivered), they are dropped. Both sockets
    close a moment later, as a network fault or a server's crash would leave them. Later
    connections are relayed untouched."""

    def __init__(self, upstream: str, trigger: bytes) -> None:
        host, port = upstream.removeprefix("nats://").rsplit(":", 1)
        self.upstream = (host, int(port))
        self.trigger = trigger
        self.cuts = 0
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"nats://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        cut = asyncio.Event()
        armed = self.cuts == 0

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
            nonlocal armed
            while data := await src.read(65536):
                if cut.is_set():
                    return  # the answers to what triggered the cut never arrive
                if armed and self.trigger in data:
                    armed = False
                    self.cuts += 1
                    cut.set()
                    if not up:
                        return
                dst.write(data)
                await dst.drain()

        async def cutter() -> None:
            await cut.wait()
            await asyncio.sleep(0.3)  # the server has handled what went through
            for w in (writer, up_writer):
                w.transport.abort()

        tasks = [
            asyncio.create_task(pump(reader, up_writer, True)),
            asyncio.create_task(pump(up_reader, writer, False)),
            asyncio.create_task(cutter()),
        ]
        try:
            await asyncio.wait(tasks[:2], return_when=asyncio.FIRST_COMPLETED)
        except Exception:
            pass
        finally:
            for task in tasks:
                task.cancel()
            for w in (writer, up_writer):
                w.transport.abort()


@pytest.mark.parametrize(
    "step",
    [
        "asking for earlier attempts",
        "subscribing to the outcomes",
        "publishing the proposal",
        "receiving the outcome",
        "reporting the call",
    ],
)
async def test_a_hook_whose_connection_is_cut_while_proposing_connects_again(
    fresh_nats: EmbeddedNats, tmp_path: Path, step: str
) -> None:
    """A connection lost at any step of a hook call, not only while a held call waits, is
    replaced and the step taken again: the subscriptions made again, the status question
    asked again, the proposal
    published again (JetStream keeps one copy: its message id), an outcome lost on the way
    asked of the service, the report sent again. The
    read is released, once, and its execution recorded once; without the new connection the
    call would be blocked."""
    async with running_service(fresh_nats.url, tmp_path / "svc") as h:
        subjects = h.subjects
        trigger = {
            "asking for earlier attempts": subjects.api_status(AGENT),
            "publishing the proposal": subjects.proposals(AGENT),
            "subscribing to the outcomes": f"SUB {subjects.released(AGENT)} ",
            "receiving the outcome": f"MSG {subjects.released(AGENT)}",
            "reporting the call": subjects.executed(AGENT),
        }[step].encode()
        proxy = CuttingProxy(fresh_nats.url, trigger)
        async with proxy as url:
            opts = GateOptions(agent=AGENT, prefix=subjects.prefix, nats_url=url,
                               data_dir=NO_DATA, wait=10.0, connect_timeout=2.0)  # fmt: skip
            before = await asyncio.to_thread(lite.decide, read_call("s4"), opts, 30.0)
            assert before.action == Action.ALLOW, before.reason
            after = await asyncio.to_thread(lite.decide, read_call("s4", Phase.AFTER), opts, 30.0)
            assert after.action is not Action.DENY
        assert proxy.cuts == 1, "the step under test never ran"
        assert proxy.connections >= 3  # the hook's two calls, and one connection made again
        (released,) = h.observer.of("released")
        pid = released["proposal_id"]
        history = await wait_until(
            lambda: h.service_history(pid),
            lambda found: any(e["kind"] == "executed" for e in found["events"]),
        )
        kinds = [e["kind"] for e in history["events"]]
        assert kinds.count("released") == 1, kinds
        assert kinds.count("executed") == 1, kinds
