"""Unattended mode across real process deaths: each approved call runs exactly once.

The agent is a separate Python process (tests/client/unattended_agent.py) that the test
SIGKILLs; the service and nats-server keep running.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from nats.js.api import ConsumerInfo

from tests.client.support import KEYS, guarded_service
from tests.service.helpers import Harness, decision, send_decision, wait_until
from workflow.client import Headgate
from workflow.client.ledger import Ledger
from workflow.client.worker import consumer_name

SCRIPT = Path(__file__).with_name("unattended_agent.py")
AGENT = "night-owl"


Start = Callable[..., Awaitable[asyncio.subprocess.Process]]


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    """Starts agent processes; whatever still runs when the test ends is killed."""
    started: list[asyncio.subprocess.Process] = []

    async def run(*args: str) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(SCRIPT), *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        started.append(proc)
        return proc

    yield run
    for proc in started:
        if proc.returncode is None:
            await kill(proc)


async def read_until(proc: asyncio.subprocess.Process, last: str, timeout: float = 20) -> list[Any]:
    """The JSON lines the process prints up to (and without) the line `last`."""
    assert proc.stdout is not None
    lines: list[Any] = []

    async def read() -> None:
        while True:
            raw = await proc.stdout.readline()  # type: ignore[union-attr]
            if not raw:
                raise AssertionError(f"the agent exited before {last!r}: {lines}")
            text = raw.decode().strip()
            if text == last:
                return
            lines.append(json.loads(text))

    await asyncio.wait_for(read(), timeout)
    return lines


async def kill(proc: asyncio.subprocess.Process) -> None:
    proc.send_signal(signal.SIGKILL)
    await proc.wait()


async def finish(proc: asyncio.subprocess.Process, timeout: float = 30) -> list[Any]:
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode == 0, err.decode()
    return [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]


async def decide_all(h: Harness, ids: list[str], verdict: str) -> None:
    for pid in ids:
        (item,) = await h.observer.wait_for("inbox", pid)
        await send_decision(
            h.nc, h.subjects,
            decision(KEYS["alice"], item["request_id"], item["proposal_digest"], verdict,
                     approver="alice", reason=f"{verdict} by the test"),
        )  # fmt: skip


async def consumer_info(h: Harness) -> ConsumerInfo:
    js = h.nc.jetstream()
    info: ConsumerInfo = await js.consumer_info(h.subjects.stream("results"), consumer_name(AGENT))
    return info


@pytest.mark.slow
async def test_queued_calls_run_exactly_once_after_the_agent_was_killed(
    nats_url: str, tmp_path: Path, start: Start
) -> None:
    state, out = tmp_path / "agent-state", tmp_path / "out.txt"
    plan = [{"line": f"line-{i:02d}", "workspace": "hurry" if i >= 14 else "acme"}
            for i in range(20)]  # fmt: skip
    async with guarded_service(nats_url, tmp_path / "svc", sweep_interval=0.2) as h:
        prefix = h.subjects.prefix
        agent = await start("enqueue", nats_url, prefix, str(state), json.dumps(plan))
        queued = await read_until(agent, "ready")
        await kill(agent)
        ids = [q["id"] for q in queued]
        line_of = {q["id"]: q["line"] for q in queued}
        approved, rejected, expiring = ids[:10], ids[10:14], ids[14:]

        # While no agent process runs: approvals, rejections, expiries.
        await decide_all(h, approved, "approve")
        await decide_all(h, rejected, "reject")
        for pid in approved:
            await h.observer.wait_for("released", pid)
        for pid in rejected + expiring:
            await h.observer.wait_for("blocked", pid, timeout=15)

        worker = await start("work", nats_url, prefix, str(state), str(out))
        reports = await finish(worker)

        lines = out.read_text().splitlines()
        assert sorted(lines) == sorted(line_of[pid] for pid in approved)
        assert Counter(lines).most_common(1)[0][1] == 1
        blocked = {r["blocked"]: r["outcome"] for r in reports if "blocked" in r}
        assert blocked == {**dict.fromkeys(rejected, "rejected"),
                           **dict.fromkeys(expiring, "expired")}  # fmt: skip
        (stats,) = [r["stats"] for r in reports if "stats" in r]
        assert stats["executed"] == 10
        assert stats["blocked"] == 10
        assert stats["unknown"] == 0

        # The execution reports reach the service's audit log, one per release.
        kinds = await wait_until(h.audit_kinds, lambda k: k.count("executed") >= 10)
        assert kinds.count("executed") == 10
        assert "executed.unreleased" not in kinds
        for pid in approved:
            history = await h.service_history(pid)
            (event,) = [e for e in history["events"] if e["kind"] == "executed"]
            assert event["data"]["success"] is True

        ledger = Ledger(state)
        states = Counter(e.state for e in ledger.entries())
        ledger.close()
        assert states == {"finished": 10, "blocked": 10}

        # Every event delivered again (the durable is lost and recreated): nothing runs twice.
        await h.nc.jetstream().delete_consumer(h.subjects.stream("results"), consumer_name(AGENT))
        again = await start("work", nats_url, prefix, str(state), str(out))
        (rerun,) = [r["stats"] for r in await finish(again) if "stats" in r]
        assert rerun["repeated"] == 20, rerun
        assert rerun["executed"] == rerun["blocked"] == rerun["unknown"] == 0
        assert out.read_text().splitlines() == lines
        assert (await consumer_info(h)).num_ack_pending == 0


@pytest.mark.slow
async def test_a_call_interrupted_by_a_crash_is_reported_unknown_and_not_run_again(
    nats_url: str, tmp_path: Path, start: Start
) -> None:
    state, out = tmp_path / "agent-state", tmp_path / "out.txt"
    async with guarded_service(nats_url, tmp_path / "svc") as h:
        prefix = h.subjects.prefix
        async with Headgate.connect(nats_url, agent=AGENT, prefix=prefix, state_dir=state) as hg:
            hang = await hg.enqueue("append_line", {"line": "hang"}, workspace="acme")
            fine = await hg.enqueue("append_line", {"line": "fine"}, workspace="acme")
        await decide_all(h, [hang, fine], "approve")
        for pid in (hang, fine):
            await h.observer.wait_for("released", pid)

        first = await start("work", nats_url, prefix, str(state), str(out))
        await read_until(first, "hanging")
        await kill(first)  # the handler was running: its side effects are unknown

        second = await start("work", nats_url, prefix, str(state), str(out))
        (stats,) = [r["stats"] for r in await finish(second) if "stats" in r]
        assert stats["unknown"] == 1
        assert stats["executed"] == 1
        assert out.read_text().splitlines() == ["fine"]

        (report,) = await h.observer.wait_for("executed", hang)
        assert report["success"] is False
        assert report["summary"].startswith("outcome unknown")
        ledger = Ledger(state)
        entry = ledger.get(hang)
        ledger.close()
        assert entry is not None
        assert entry.state == "unknown"
        info = await consumer_info(h)
        assert info.num_ack_pending == 0
