"""PullStage's own pull loop: prompt hand-over, micro-batches, reconnects, graceful stop."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from urllib.parse import urlparse

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StreamConfig
from nats.js.errors import NotFoundError

from workflow.service.embedded import EmbeddedNats
from workflow.service.metrics import Metrics
from workflow.service.pull import attempts, stored_at_ns, stream_sequence
from workflow.service.stage import PullStage
from workflow.service.streams import (
    ACK_WAIT,
    PRIORITY_FIRST,
    PRIORITY_OVERFLOW,
    ConsumerSpec,
    consumer_config,
    ensure_consumer,
)


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


@asynccontextmanager
async def running(nc: NATS, *stages: PullStage) -> AsyncIterator[None]:
    """The stages run until the block ends; then they stop and `nc` is closed."""
    stopping = asyncio.Event()
    tasks = [asyncio.create_task(stage.run(stopping)) for stage in stages]
    try:
        yield
    finally:
        stopping.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        await nc.close()


async def test_a_message_published_while_idle_is_handed_over_promptly(nats_url: str) -> None:
    nc, spec, subject = await setup(nats_url)
    js = nc.jetstream()
    rec = Recorder()
    async with running(nc, PullStage(nc, js, spec, rec, batch=256)):
        await asyncio.sleep(0.5)  # idle: the pull request is waiting on the server
        for i in range(5):
            await js.publish(f"{subject}.a", f"m{i}".encode())
            # Handed over alone, at once: a loop that lingered to fill the batch would hold it
            # until its pull request expires (30 s), far past this wait.
            await wait_for(lambda i=i: len(rec.seen) == i + 1, timeout=10.0)
            assert rec.batches[-1] == [f"m{i}".encode()]
    assert rec.seen == [f"m{i}".encode() for i in range(5)]


async def test_a_backlog_larger_than_the_batch_is_split_and_nothing_is_lost(
    nats_url: str,
) -> None:
    nc, spec, subject = await setup(nats_url)
    js = nc.jetstream()
    for i in range(700):
        await js.publish(f"{subject}.a", str(i).encode())
    rec = Recorder(delay=0.01)
    async with running(nc, PullStage(nc, js, spec, rec, batch=64)):
        await wait_for(lambda: len(rec.seen) == 700)
    assert max(len(b) for b in rec.batches) == 64
    assert sorted(int(d) for d in rec.seen) == list(range(700))


async def test_consuming_goes_on_after_the_server_restarts(fresh_nats: EmbeddedNats) -> None:
    nc, spec, subject = await setup(fresh_nats.url)
    js = nc.jetstream()
    rec = Recorder()
    async with running(nc, PullStage(nc, js, spec, rec, batch=16, poll=0.2)):
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


class Gate:
    """A handler whose batches wait until their first message's data is opened."""

    def __init__(self) -> None:
        self.started: list[bytes] = []
        self.finished: list[bytes] = []
        self.open: dict[bytes, asyncio.Event] = {}

    def release(self, data: bytes) -> None:
        self.open.setdefault(data, asyncio.Event()).set()

    async def __call__(self, msgs: Sequence[Msg]) -> None:
        first = msgs[0].data
        self.started.append(first)
        await self.open.setdefault(first, asyncio.Event()).wait()
        for m in msgs:
            await m.ack()
        self.finished.append(first)


async def test_with_overlap_the_next_batch_is_handled_while_the_last_one_waits(
    nats_url: str,
) -> None:
    nc, spec, subject = await setup(nats_url)
    js = nc.jetstream()
    gate = Gate()
    async with running(nc, PullStage(nc, js, spec, gate, batch=8, overlap=2)):
        await js.publish(f"{subject}.a", b"first")
        await wait_for(lambda: gate.started == [b"first"])
        await js.publish(f"{subject}.a", b"second")
        # Handed over while the first batch is still in the handler, and done before it.
        await wait_for(lambda: gate.started == [b"first", b"second"])
        gate.release(b"second")
        await wait_for(lambda: gate.finished == [b"second"])
        await js.publish(f"{subject}.a", b"third")
        await wait_for(lambda: gate.started[2:] == [b"third"])
        # Two in hand at most: the fourth waits for one of them to end.
        await js.publish(f"{subject}.a", b"fourth")
        await asyncio.sleep(0.2)
        assert len(gate.started) == 3
        gate.release(b"first")
        await wait_for(lambda: gate.finished == [b"second", b"first"])
        await wait_for(lambda: len(gate.started) == 4)
        assert gate.started[3] == b"fourth"
        gate.release(b"third")
        gate.release(b"fourth")
        await wait_for(lambda: len(gate.finished) == 4)


async def test_a_hanging_batch_silences_the_beat_while_later_batches_finish(
    nats_url: str,
) -> None:
    nc, spec, subject = await setup(nats_url)
    js = nc.jetstream()
    gate = Gate()
    beats: list[int] = []
    stopping = asyncio.Event()
    stage = PullStage(nc, js, spec, gate, batch=8, overlap=2, poll=0.05)
    task = asyncio.create_task(stage.run(stopping, lambda: beats.append(len(gate.finished))))
    try:
        await js.publish(f"{subject}.a", b"hangs")
        await wait_for(lambda: gate.started == [b"hangs"])
        silent_from = len(beats)
        for i in range(3):  # later batches come and go while the first one hangs
            gate.release(f"later{i}".encode())
            await js.publish(f"{subject}.a", f"later{i}".encode())
            await wait_for(lambda i=i: len(gate.finished) == i + 1)
        await asyncio.sleep(0.3)  # idle polls, several of them, while the first one hangs
        assert len(beats) == silent_from
        gate.release(b"hangs")
        await wait_for(lambda: len(beats) > silent_from)
        assert beats[silent_from] == 4  # the beat came back when the hanging batch ended
    finally:
        stopping.set()
        await asyncio.wait_for(task, 10)
        await nc.close()


async def test_messages_held_longer_than_the_ack_wait_are_kept_in_progress(
    nats_url: str,
) -> None:
    nc, spec, subject = await setup(nats_url)
    spec = dataclasses.replace(spec, ack_wait=1.0)
    js, gate, other = nc.jetstream(), Gate(), Recorder()
    async with running(nc, PullStage(nc, js, spec, gate, batch=1)):
        await js.publish(f"{subject}.a", b"slow")
        await wait_for(lambda: gate.started == [b"slow"])
        await js.publish(f"{subject}.a", b"queued")  # delivered, queued behind the slow batch
        await wait_for_info(js, spec, lambda i: i.num_ack_pending == 2 and i.num_pending == 0)
        async with another_replica(nats_url, spec, other):
            await asyncio.sleep(3.5)  # three and a half ack waits
            assert other.seen == []  # neither was delivered again, to this stage or any
            info = await js.consumer_info(spec.stream, spec.durable)
            assert info.num_redelivered == 0
            gate.release(b"slow")
            gate.release(b"queued")
            await wait_for(lambda: gate.finished == [b"slow", b"queued"])
        assert other.seen == []


async def test_a_batch_that_hangs_lets_its_messages_go_after_keep_at_most(
    nats_url: str,
) -> None:
    nc, spec, subject = await setup(nats_url)
    spec = dataclasses.replace(spec, ack_wait=1.0)
    js, gate, other = nc.jetstream(), Gate(), Recorder()
    async with running(nc, PullStage(nc, js, spec, gate, batch=1, keep_at_most=1.5)):
        await js.publish(f"{subject}.a", b"hangs")
        await wait_for(lambda: gate.started == [b"hangs"])
        started = time.monotonic()
        async with another_replica(nats_url, spec, other):
            await wait_for(lambda: other.seen == [b"hangs"])
            # Kept in progress for keep_at_most, then let go: delivered again an ack wait later.
            assert time.monotonic() - started > 1.5
            gate.release(b"hangs")
            # The hung batch ends (its ack is too late to count), and so does the copy delivered
            # to this stage's own pull request meanwhile, if it got one: handled as a duplicate.
            await wait_for(lambda: gate.finished[:1] == [b"hangs"])


async def test_a_consumer_an_earlier_version_made_gets_the_short_ack_wait(nats_url: str) -> None:
    nc, spec, _ = await setup(nats_url)
    js = nc.jetstream()
    try:
        # Earlier versions made their consumers with a 30 s ack wait.
        old = consumer_config(dataclasses.replace(spec, ack_wait=30.0))
        await js.add_consumer(spec.stream, config=old)
        await ensure_consumer(js, spec)
        info = await js.consumer_info(spec.stream, spec.durable)
        assert info.config.ack_wait == ACK_WAIT < 30.0
    finally:
        await nc.close()


@asynccontextmanager
async def another_replica(url: str, spec: ConsumerSpec, handler: Recorder) -> AsyncIterator[None]:
    """A stage on the same consumer on a connection of its own, as another replica runs it."""
    nc = await nats.connect(url)
    async with running(nc, PullStage(nc, nc.jetstream(), spec, handler, batch=8)):
        yield


async def wait_for_info(js: JetStreamContext, spec: ConsumerSpec, cond: object) -> None:
    deadline = time.monotonic() + 10
    while not cond(await js.consumer_info(spec.stream, spec.durable)):  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_stopping_with_two_batches_in_hand_finishes_both(nats_url: str) -> None:
    nc, spec, subject = await setup(nats_url)
    js = nc.jetstream()
    gate = Gate()
    stopping = asyncio.Event()
    task = asyncio.create_task(PullStage(nc, js, spec, gate, batch=8, overlap=2).run(stopping))
    try:
        await js.publish(f"{subject}.a", b"one")
        await wait_for(lambda: gate.started == [b"one"])
        await js.publish(f"{subject}.a", b"two")
        await wait_for(lambda: gate.started == [b"one", b"two"])
        stopping.set()
        await asyncio.sleep(0.1)
        assert not task.done()  # it waits for the batches in hand
        gate.release(b"two")
        gate.release(b"one")
        await asyncio.wait_for(task, 10)
        assert sorted(gate.finished) == [b"one", b"two"]
    finally:
        stopping.set()
        await nc.close()


async def test_attempts_counts_deliveries_as_jetstream_does(nats_url: str) -> None:
    nc, spec, subject = await setup(nats_url)
    js = nc.jetstream()
    seen: list[tuple[int, int]] = []
    sequences: list[tuple[int | None, int]] = []
    stored: list[tuple[int | None, float]] = []

    async def handler(msgs: Sequence[Msg]) -> None:
        for m in msgs:
            seen.append((attempts(m), m.metadata.num_delivered))
            sequences.append((stream_sequence(m), m.metadata.sequence.stream))
            stored.append((stored_at_ns(m), m.metadata.timestamp.timestamp()))
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
    # the same stream message each time, as the metadata says
    assert len({seq for seq, _ in sequences}) == 1
    assert all(seq == meta for seq, meta in sequences)
    # when it was stored, in ns, as the metadata says (to its microseconds)
    assert all(ns is not None and abs(ns / 1e9 - meta) < 1e-5 for ns, meta in stored)


def test_attempts_and_stream_sequence_read_both_ack_subject_forms() -> None:
    def msg(reply: str) -> Msg:
        return Msg(_client=None, subject="s", reply=reply, data=b"")  # type: ignore[arg-type]

    assert attempts(msg("$JS.ACK.S.c.4.10.9.1732940000000000000.0")) == 4
    assert attempts(msg("$JS.ACK.dom.HASH.S.c.7.10.9.1732940000000000000.0.tok")) == 7
    assert attempts(msg("_INBOX.abc")) == 1
    assert attempts(msg("")) == 1
    assert stream_sequence(msg("$JS.ACK.S.c.4.10.9.1732940000000000000.0")) == 10
    assert stream_sequence(msg("$JS.ACK.dom.HASH.S.c.7.12.9.1732940000000000000.0.tok")) == 12
    assert stream_sequence(msg("_INBOX.abc")) is None
    assert stored_at_ns(msg("$JS.ACK.S.c.4.10.9.1732940000000000000.0")) == 1732940000000000000
    assert stored_at_ns(msg("$JS.ACK.dom.HASH.S.c.7.12.9.1732940000000000001.0.tok")) == (
        1732940000000000001
    )
    assert stored_at_ns(msg("_INBOX.abc")) is None


async def test_a_batch_s_wait_in_jetstream_is_measured_from_when_it_was_stored(
    nats_url: str,
) -> None:
    """Messages stored while no stage runs wait until one starts: the age its first batch
    records is at least that wait (`headgate_stage_message_age_seconds`)."""
    nc, spec, subject = await setup(nats_url)
    js = nc.jetstream()
    for i in range(3):
        await js.publish(f"{subject}.a", f"m{i}".encode())
    await asyncio.sleep(0.3)
    metrics, recorder = Metrics(), Recorder()
    async with running(nc, PullStage(nc, js, spec, recorder, batch=8, metrics=metrics)):
        await wait_for(lambda: len(recorder.seen) == 3)
    count = metrics.registry.get_sample_value(
        "headgate_stage_message_age_seconds_count", {"stage": "d"}
    )
    total = metrics.registry.get_sample_value(
        "headgate_stage_message_age_seconds_sum", {"stage": "d"}
    )
    assert count == len(recorder.batches)
    assert total is not None
    assert total >= 0.3


async def test_on_a_prioritized_consumer_the_overflow_gets_only_what_the_first_has_no_room_for(
    nats_url: str,
) -> None:
    nc, plain, subject = await setup(nats_url)
    spec = dataclasses.replace(plain, priority_group="g")
    js = nc.jetstream()
    release = asyncio.Event()

    class Held(Recorder):
        async def __call__(self, msgs: Sequence[Msg]) -> None:
            await release.wait()
            await super().__call__(msgs)

    first, overflow = Recorder(), Recorder()
    stages = [
        PullStage(nc, js, spec, first, batch=8, priority=PRIORITY_FIRST),
        PullStage(nc, js, spec, overflow, batch=8, priority=PRIORITY_OVERFLOW),
    ]
    async with running(nc, *stages):
        try:
            for _ in range(200):  # both stages have their requests out
                try:
                    info = await js.consumer_info(spec.stream, spec.durable)
                except NotFoundError:
                    info = None
                if info is not None and (info.num_waiting or 0) >= 2:
                    break
                await asyncio.sleep(0.05)
            for i in range(20):
                await js.publish(f"{subject}.a", f"m{i}".encode())
                await wait_for(lambda i=i: len(first.seen) == i + 1)
            assert overflow.seen == []  # the first always had room

            # The first stops handling: once its requests are used up, the rest overflows.
            stages[0].handler = held = Held()
            for i in range(20, 120):
                await js.publish(f"{subject}.a", f"m{i}".encode())
            await wait_for(lambda: len(overflow.seen) > 0)
            release.set()
            await wait_for(lambda: len(first.seen) + len(held.seen) + len(overflow.seen) == 120)
        finally:
            release.set()  # a failed wait must not leave a batch hanging the stop
    everything = first.seen + held.seen + overflow.seen
    assert sorted(everything) == sorted(f"m{i}".encode() for i in range(120))
    # The first holds at most its credit (two batches) beyond the batch in its handler.
    assert len(overflow.seen) >= 100 - 3 * 8


async def test_a_consumer_remade_by_another_version_is_made_anew_and_consuming_goes_on(
    nats_url: str,
) -> None:
    nc, spec, subject = await setup(nats_url)
    js = nc.jetstream()
    rec = Recorder()
    async with running(nc, PullStage(nc, js, spec, rec, batch=16, poll=0.2)):
        await js.publish(f"{subject}.a", b"before")
        await wait_for(lambda: rec.seen == [b"before"])
        # Another version makes the consumer prioritized: this stage's requests, which name no
        # group, are refused (400); it backs off, makes the consumer as it knows it and goes on.
        await js.add_consumer(
            spec.stream, config=consumer_config(dataclasses.replace(spec, priority_group="g"))
        )
        # More than the requests already out ask for (twice the batch): new ones are needed.
        after = [f"after{i}".encode() for i in range(40)]
        for data in after:
            await js.publish(f"{subject}.a", data)
        await wait_for(lambda: rec.seen == [b"before", *after], timeout=20)
        info = await js.consumer_info(spec.stream, spec.durable)
        assert getattr(info.config, "priority_groups", None) is None
