"""The notifier on FastStream against the nats-py pull loop it replaced, on one embedded
nats-server with a real local HTTP endpoint.

Run `python bench/bench_notifier.py [BURST] [SEQUENTIAL]`. Both variants are the same `Notifier`
(routing, text, signed webhook, a `Notified` record published before the ack); they differ only
in how events reach `Notifier.handle`: FastStream's concurrent pull subscribers, as shipped, or
the hand-written loop of the previous release (fetch 16, one task per event, at most 64 in
hand), kept here as the baseline. Per round and variant, on fresh streams: SEQUENTIAL held
events one at a time (latency from the publish to the endpoint's receipt), then BURST at once
(notices/s until the last arrives, and the CPU time of this process — notifier and endpoint —
per notice, which a busy machine distorts less). Median of 3 rounds, each variant as a ratio to
the baseline of the same round, with the load average before and after.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from workflow.messages import (
    ApprovalRequirement,
    Classification,
    InboxItem,
    Proposal,
    Reason,
    Verdict,
)
from workflow.notify.broker import SOURCES
from workflow.notify.channels import DELIVERY_HEADER
from workflow.notify.config import NotifyConfig
from workflow.notify.notifier import API_RETRY_DELAY, Notifier
from workflow.service.embedded import EmbeddedNats
from workflow.service.streams import ensure_streams
from workflow.subjects import Subjects


class PullLoop(Notifier):
    """The previous release's consumers: nats-py pull loops written by hand (the baseline)."""

    async def run(self, stop: asyncio.Event) -> None:
        await self.ensure()
        self._stopping = stop
        slots = asyncio.Semaphore(self.max_inflight)
        tasks: set[asyncio.Task[None]] = set()

        async def guarded(msg: Msg) -> None:
            try:
                await self.handle(msg)
            except Exception:
                with contextlib.suppress(Exception):
                    await msg.nak(delay=API_RETRY_DELAY)
            finally:
                slots.release()

        async def pull(durable: str, stream: str) -> None:
            sub = await self.js.pull_subscribe_bind(durable=durable, stream=stream)
            try:
                while not stop.is_set():
                    try:
                        msgs = await sub.fetch(16, timeout=0.5)
                    except TimeoutError:
                        continue
                    for msg in msgs:
                        await slots.acquire()
                        task = asyncio.create_task(guarded(msg))
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
            finally:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()

        loops = [pull(s.durable, self.subjects.stream(s.stream)) for s in SOURCES]
        try:
            await asyncio.gather(*loops)
        finally:
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)


class Endpoint:
    """A local HTTP endpoint (threads, like a small webhook receiver) that tells the event loop
    when each delivery arrived."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.waiting: dict[str, asyncio.Future[float]] = {}
        self.lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a webhook receiver would

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                arrived = time.perf_counter()
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")
                endpoint.arrived(self.headers[DELIVERY_HEADER], arrived)

            def log_message(self, *args: Any) -> None:
                return None

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # not the default 5: a burst must not drop connects

        self.server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def expect(self, delivery: str) -> asyncio.Future[float]:
        future: asyncio.Future[float] = self.loop.create_future()
        with self.lock:
            self.waiting[delivery] = future
        return future

    def arrived(self, delivery: str, at: float) -> None:
        with self.lock:
            future = self.waiting.pop(delivery, None)
        if future is not None:
            self.loop.call_soon_threadsafe(_settle, future, at)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _settle(future: asyncio.Future[float], at: float) -> None:
    if not future.done():
        future.set_result(at)


NOW = datetime.now(UTC)


def held(request_id: str) -> bytes:
    proposal = Proposal(
        id=f"p-{request_id}", agent="builder-7", tool="run_shell",
        arguments={"command": "terraform apply -auto-approve"}, intent="roll out the fix",
    )  # fmt: skip
    return InboxItem(
        request_id=request_id, proposal_id=proposal.id, proposal=proposal,
        proposal_digest="d" * 64,
        classification=Classification(
            risk_class="exec", severity="high",
            reasons=[Reason(rule="shell.exec", message="`terraform apply` changes infrastructure")],
        ),
        verdict=Verdict(decision="require_approval", reason="exec needs approval"),
        requirement=ApprovalRequirement(quorum=1, ttl_seconds=3600),
        created_at=NOW, expires_at=NOW + timedelta(hours=1),
    ).model_dump_json().encode()  # fmt: skip


async def measure(
    nc: NATS, endpoint: Endpoint, kind: type[Notifier], prefix: str, burst: int, sequential: int
) -> tuple[float, float, float, float]:
    """(p50 latency ms, p90 latency ms, notices/s in a burst, CPU ms per notice in the burst)
    for one variant on fresh streams."""
    subjects = Subjects(prefix)
    js = nc.jetstream(timeout=10)
    await ensure_streams(js, subjects)
    config = NotifyConfig.model_validate({"channels": {"hook": {"url": endpoint.url}}})
    notifier = kind.open(nc, config, fallback_secret=b"k" * 32, subjects=subjects)
    await notifier.ensure()  # the consumers start with what arrives after they exist
    stop = asyncio.Event()
    task = asyncio.create_task(notifier.run(stop))
    subject = subjects.inbox("default")

    async def publish(rid: str) -> None:
        await js.publish(subject, held(rid), headers={"Nats-Msg-Id": rid})

    try:
        await _warm(endpoint, publish, prefix)
        latencies = []
        for i in range(sequential):
            rid = f"rq_{prefix}_s{i}"
            arrived = endpoint.expect(f"{rid}:held")
            start = time.perf_counter()
            await publish(rid)
            latencies.append((await asyncio.wait_for(arrived, 30) - start) * 1000)
        ids = [f"rq_{prefix}_b{i}" for i in range(burst)]
        arrivals = [endpoint.expect(f"{rid}:held") for rid in ids]
        start, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(publish(rid) for rid in ids))
        last = max(await asyncio.wait_for(asyncio.gather(*arrivals), 120))
        rate = burst / (last - start)
        cpu_ms = (time.process_time() - cpu) / burst * 1000
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await notifier.close()
    cuts = statistics.quantiles(latencies, n=10)
    return statistics.median(latencies), cuts[8], rate, cpu_ms


async def _warm(endpoint: Endpoint, publish: Callable[[str], Awaitable[None]], prefix: str) -> None:
    """One notice first: the consumers are bound and the HTTP client is open."""
    rid = f"rq_{prefix}_warm"
    arrived = endpoint.expect(f"{rid}:held")
    await publish(rid)
    await asyncio.wait_for(arrived, 30)


VARIANTS: dict[str, type[Notifier]] = {"nats-py": PullLoop, "faststream": Notifier}


async def main(burst: int, sequential: int, variants: dict[str, type[Notifier]] = VARIANTS) -> None:
    server = EmbeddedNats(store_dir=Path(tempfile.mkdtemp()))
    url = server.start()
    endpoint = Endpoint(asyncio.get_running_loop())
    before = os.getloadavg()
    results: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in variants}
    try:
        nc = await nats.connect(url)
        for round_ in range(3):
            for name, kind in variants.items():
                prefix = f"b{round_}{name.replace('-', '')}"
                results[name].append(await measure(nc, endpoint, kind, prefix, burst, sequential))
        await nc.close()
    finally:
        endpoint.stop()
        server.stop()
    after = os.getloadavg()
    print(
        f"{sequential} held events one at a time, then {burst} at once; median of 3 rounds; "
        f"load average {before[0]:.2f} before, {after[0]:.2f} after ({os.cpu_count()} CPUs)"
    )
    print(
        f"{'consumers':12} {'p50 ms':>8} {'p90 ms':>8} {'notices/s':>10} {'× nats-py':>10} "
        f"{'CPU ms/notice':>14}"
    )
    base = [r[2] for r in results["nats-py"]]
    for name, rounds in results.items():
        p50 = statistics.median(r[0] for r in rounds)
        p90 = statistics.median(r[1] for r in rounds)
        rate = statistics.median(r[2] for r in rounds)
        ratio = statistics.median(r[2] / b for r, b in zip(rounds, base, strict=True))
        cpu = statistics.median(r[3] for r in rounds)
        print(f"{name:12} {p50:8.1f} {p90:8.1f} {rate:10.0f} {ratio:10.2f} {cpu:14.2f}")
    print(json.dumps({"load_before": before, "load_after": after, "rounds": results}))


if __name__ == "__main__":
    burst, sequential = [int(a) for a in sys.argv[1:3]] + [500, 100][len(sys.argv[1:3]) :]
    asyncio.run(main(burst, sequential))
