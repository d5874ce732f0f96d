"""`headgate serve` stopped by SIGTERM in the middle of a large backlog exits, and loses
nothing: what it had not acked is redelivered to the next start, nothing is half-written, and
every proposal ends with exactly one first event on the results stream."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import IO

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from workflow.service.embedded import EmbeddedNats
from workflow.subjects import Subjects

pytestmark = pytest.mark.slow

BACKLOG = 3000
#: Generous: only a process that does not stop at all fails on it.
EXIT_TIMEOUT = 90.0


def serve(url: str, data: Path, prefix: str, log: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "workflow", "serve", "--nats-url", url,
         "--data-dir", str(data), "--prefix", prefix],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


async def answering(nc: NATS, s: Subjects) -> None:
    for _ in range(600):
        try:
            await nc.request(s.api("key"), b"{}", timeout=1)
            return
        except Exception:
            await asyncio.sleep(0.1)
    raise AssertionError("serve did not answer")


async def stop(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    return await asyncio.to_thread(process.wait, EXIT_TIMEOUT)


async def first_events(nc: NATS, s: Subjects) -> dict[str, list[str]]:
    """The held / released / blocked events stored on the results stream, by proposal."""
    found: dict[str, list[str]] = {}
    sub = await nc.jetstream().subscribe(
        f"{s.prefix}.>", stream=s.stream("results"), ordered_consumer=True
    )
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=2)
            except TimeoutError:
                return found
            body = json.loads(msg.data)
            found.setdefault(body["proposal_id"], []).append(msg.subject.split(".")[1])
    finally:
        await sub.unsubscribe()


async def test_sigterm_during_a_backlog_exits_and_loses_nothing(
    fresh_nats: EmbeddedNats, tmp_path: Path
) -> None:
    s = Subjects(f"hg{uuid.uuid4().hex[:8]}")
    data = tmp_path / "data"
    data.mkdir()
    nc = await nats.connect(fresh_nats.url)
    seen: set[str] = set()

    async def on(msg: Msg) -> None:
        seen.add(json.loads(msg.data)["proposal_id"])

    for subject in (s.held(), s.released(), s.blocked()):
        await nc.subscribe(subject, cb=on)
    with (tmp_path / "serve.log").open("ab") as log:
        try:
            first = serve(fresh_nats.url, data, s.prefix, log)  # makes the streams
            await answering(nc, s)
            assert await stop(first) == 0

            js = nc.jetstream()
            ids = []
            for i in range(BACKLOG):
                pid, agent = uuid.uuid4().hex, f"agent-{i % 10}"
                tool, arguments = (
                    ("read_file", {"path": f"f{i}"})
                    if i % 2
                    else ("write_file", {"path": f"f{i}", "content": "x"})
                )
                body = {"id": pid, "agent": agent, "tool": tool, "arguments": arguments}
                await js.publish_async(
                    s.proposals(agent), json.dumps(body).encode(),
                    headers={"Nats-Msg-Id": f"{agent}:{pid}"},
                )  # fmt: skip
                ids.append(pid)
            await js.publish_async_completed()

            busy = serve(fresh_nats.url, data, s.prefix, log)
            await answering(nc, s)
            while len(seen) < 200:  # in the middle of the backlog
                await asyncio.sleep(0.01)
            assert await stop(busy) == 0
            assert len(seen) < BACKLOG, "the backlog was gone before the stop"

            again = serve(fresh_nats.url, data, s.prefix, log)
            for _ in range(1200):
                if len(seen) >= BACKLOG:
                    break
                await asyncio.sleep(0.1)
            assert await stop(again) == 0
            events = await first_events(nc, s)
        finally:
            await nc.close()
    assert sorted(events) == sorted(ids)
    for i, pid in enumerate(ids):
        assert events[pid] == (["released"] if i % 2 else ["held"]), pid
    with sqlite3.connect(data / "headgate.db") as db:
        assert db.execute("SELECT count(*) FROM proposals").fetchone() == (BACKLOG,)
        assert db.execute("SELECT count(*) FROM requests").fetchone() == (BACKLOG // 2,)
        assert db.execute("SELECT count(*) FROM outcomes").fetchone() == (BACKLOG // 2,)
    assert "Traceback" not in (tmp_path / "serve.log").read_text()
