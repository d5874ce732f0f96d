"""PullStage's own pull loop: prompt hand-over, micro-batches, reconnects, graceful stop."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from urllib.parse import urlparse

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import RetentionPolicy, StreamConfig

from workflow.service.embedded import EmbeddedNats
from workflow.service.pull import attempts
from workflow.service.stage import PullStage
from workflow.service.streams import ConsumerSpec


class Recorder:
    def __init__(self, delay: float = 0.0) -> None:
        self.batches: list[list[bytes]] = []
        self.at: list[float] = []
        self.delay = delay

    async def __call__(self, msgs: Sequence[Msg]) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        for m in msgs:
            await m.ack()
        self.batches.append([m.data for m in msgs])
        self.at.append(time.perf_counter())

    @property
    def seen(self) -> list[bytes]:
        return [d for b in self.batches for d in b]


async def setup(url: str) -> tuple[NATS, ConsumerSpec, str]:
    nc = await nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    name = "PERF" + uuid.uuid4().hex[:8].upper()
    subject = f"{name.lower()}.in"
    await nc.jetstream().add_stream(
        StreamConfig(name=name, subjects=[f"{subject}.>"], retention=RetentionPolicy.WORK_QUEUE)
    )
    return nc, ConsumerSpec(stream=name, durable="d", filter_subjects=(f"{subject}.>",)), subject


async def wait_for(cond: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_a_message_published_while_idle_is_handed_over_promptly(nats_url: str) -> None:
    nc, spec, subject = await setup(nats_url)
    js = nc.jetstream()
    rec = Recorder()
    stopping = asyncio.Event()
    task = asyncio.create_task(PullStage(nc, js, spec, rec, batch=256).run(stopping))
    try:
        await asyncio.sleep(0.5)  # idle: the pull request is waiting on the server
        for i in range(5):
            await js.publish(f"{subject}.a", f"m{i}".encode())
            # Handed over alone, at once: a loop that lingered to fill the batch would hold it
            # until its pull request expires (30 s), far past this wait.
            await wait_for(lambda i=i: len(rec.seen) == i + 1, timeout=10.0)
            assert rec.batches[-1] == [f"m{i}".encode()]
    finally:
        stopping.set()
        await asyncio.wait_for(task, 10)
        await nc.close()
    assert rec.seen == [f"m{i}".encode() for i in range(5)]


async def test_a_backlog_larger_than_the_batch_is_split_and_nothing_is_lost(
    nats_url: str,
) -> None:
    nc, spec, subject = await setup(nats_url)
    js = nc.jetstream()
    for i in range(700):
        await js.publish(f"{subject}.a", str(i).encode())
    rec = Recorder(delay=0.01)
    stopping = asyncio.Event()
    task = asyncio.create_task(PullStage(nc, js, spec, rec, batch=64).run(stopping))
    try:
        await wait_for(lambda: len(rec.seen) == 700)
    finally:
        stopping.set()
        await asyncio.wait_for(task, 10)
        await nc.close()
    assert max(len(b) for b in rec.batches) == 64
    assert sorted(int(d) for d in rec.seen) == list(range(700))


async def test_consuming_goes_on_after_the_server_restarts(fresh_nats: EmbeddedNats) -> None:
    nc, spec, subject = await setup(fresh_nats.url)
    js = nc.jetstream()
    rec = Recorder()
    stopping = asyncio.Event()
    task = asyncio.create_task(PullStage(nc, js, spec, rec, batch=16, poll=0.2).run(stopping))
    try:
        await js.publish(f"{subject}.a", b"before")
        await wait_for(lambda: rec.seen == [b"before"])
        fresh_nats.port = urlparse(fresh_nats.url).port or -1
        fresh_nats.kill()
        fresh_nats.start()
        await wait_for(lambda: nc.is_connected and nc.stats["reconnects"] >= 1)
        for _ in range(100):  # the stream may need a moment after a restart
            try:
                await js.publish(f"{subject}.a", b"after", timeout=1)
                break
            except Exception:
                await asyncio.sleep(0.1)
        await wait_for(lambda: rec.seen == [b"before", b"after"], timeout=15)
    finally:
        stopping.set()
        await asyncio.wait_for(task, 10)
        await nc.close()


async def test_stopping_finishes_the_batch_in_hand_and_returns_the_rest(nats_url: str) -> None:
    nc, spec, subject = await setup(nats_url)
    try:
        js = nc.jetstream()
        for i in range(50):
            await js.publish(f"{subject}.a", str(i).encode())
        rec = Recorder(delay=0.3)
        stopping = asyncio.Event()
        task = asyncio.create_task(PullStage(nc, js, spec, rec, batch=10).run(stopping))
        await asyncio.sleep(0.1)  # the first batch (whatever had arrived, ≤ 10) is in the handler
        stopping.set()
        await asyncio.wait_for(task, 10)
        # That batch finished; nothing after the stop was handed over.
        assert len(rec.batches) == 1
        assert 0 < len(rec.seen) <= 10
        # The unhandled messages were given back: a new consumer gets them without waiting
        # ack_wait.
        rest = 50 - len(rec.seen)
        rec2 = Recorder()
        stopping2 = asyncio.Event()
        task2 = asyncio.create_task(PullStage(nc, js, spec, rec2, batch=64).run(stopping2))
        try:
            await wait_for(lambda: len(rec2.seen) == rest, timeout=5)
        finally:
            stopping2.set()
            await asyncio.wait_for(task2, 10)
        assert sorted(int(d) for d in rec.seen + rec2.seen) == list(range(50))
    finally:
        await nc.close()


async def test_attempts_counts_deliveries_as_jetstream_does(nats_url: str) -> None:
    nc, spec, subject = await setup(nats_url)
    js = nc.jetstream()
    seen: list[tuple[int, int]] = []

    async def handler(msgs: Sequence[Msg]) -> None:
        for m in msgs:
            seen.append((attempts(m), m.metadata.num_delivered))
            await (m.nak() if attempts(m) < 3 else m.ack())

    stopping = asyncio.Event()
    task = asyncio.create_task(PullStage(nc, js, spec, handler, batch=8).run(stopping))
    try:
        await js.publish(f"{subject}.a", b"x")
        await wait_for(lambda: len(seen) >= 3)
    finally:
        stopping.set()
        await task
        await nc.close()
    assert seen == [(1, 1), (2, 2), (3, 3)]


def test_attempts_reads_both_ack_subject_forms_and_defaults_to_one() -> None:
    def msg(reply: str) -> Msg:
        return Msg(_client=None, subject="s", reply=reply, data=b"")  # type: ignore[arg-type]

    assert attempts(msg("$JS.ACK.S.c.4.10.9.1732940000000000000.0")) == 4
    assert attempts(msg("$JS.ACK.dom.HASH.S.c.7.10.9.1732940000000000000.0.tok")) == 7
    assert attempts(msg("_INBOX.abc")) == 1
    assert attempts(msg("")) == 1
