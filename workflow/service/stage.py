"""A stage: one durable pull consumer whose batches go to a handler, and the acking rules the
stages share.

A stage fetches a batch, commits its effects in one transaction, publishes the resulting events
and waits for JetStream to confirm them, and only then acks the input. A failure before the ack
means redelivery (with backoff), never loss; a message that keeps failing for MAX_ATTEMPTS
deliveries is published to `<prefix>.dead.<stage>` with the last error and then acked.

One convention for every stage (`Settle`): a message that can never succeed raises or is given
`Unprocessable` and is dead-lettered at once; any other failure is retried with backoff, then
dead-lettered. Nothing a message does ends a stage: an exception escaping the handler naks the
batch (it is counted and logged), a failed ack or nak is left to redelivery, and a dead letter
that cannot be published is retried later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from prometheus_client import Histogram

from workflow.service.metrics import Metrics
from workflow.service.pull import Puller, PullFailed, attempts, stored_at_ns, stream_sequence
from workflow.service.streams import (
    KEEP_ALIVE_AT_MOST,
    MAX_ATTEMPTS,
    PRIORITY_FIRST,
    ConsumerSpec,
    consumer_config,
    ensure_consumer,
)

log = logging.getLogger("headgate.stage")


class Unprocessable(Exception):
    """This message can never be processed (malformed, forbidden, conflicting): it goes to the
    dead-letter subject with this error, at once and without retries."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failing message is retried: delays base, 2×base, 4×base… capped at max_delay,
    then the dead-letter subject after max_attempts deliveries. The defaults keep every retry
    well inside the streams' duplicate window."""

    max_attempts: int = MAX_ATTEMPTS
    base_delay: float = 1.0
    max_delay: float = 30.0

    def delay(self, attempt: int) -> float:
        return float(min(self.base_delay * 2 ** max(attempt - 1, 0), self.max_delay))


DEFAULT_RETRY = RetryPolicy()


BatchHandler = Callable[[Sequence[Msg]], Awaitable[None]]
DeadLetterer = Callable[[str, Msg, str], Awaitable[None]]


def settled(msg: Msg) -> bool:
    """Whether the message was acked, naked or terminated already (nats-py records it)."""
    return bool(getattr(msg, "_ackd", False))


class Settle:
    """How the messages of one stage end: acked, retried later, or dead-lettered.

    None of these raises: a failure to ack or nak leaves the message to redelivery after its
    ack wait (every stage processes a redelivery idempotently), a dead letter that cannot be
    published naks the message so the dead-lettering is tried again. Each is logged and
    counted (`headgate_stage_errors`).
    """

    def __init__(
        self,
        stage: str,
        dead: DeadLetterer,
        retry: RetryPolicy = DEFAULT_RETRY,
        metrics: Metrics | None = None,
    ):
        self.stage = stage
        self._dead = dead
        self.retry = retry
        self.metrics = metrics

    def _count(self, kind: str) -> None:
        if self.metrics is not None:
            self.metrics.stage_errors.labels(self.stage, kind).inc()

    async def ack(self, msg: Msg) -> None:
        try:
            await msg.ack()
        except Exception as exc:
            self._count("ack")
            log.warning(
                "%s: acking %s failed (%s); it is redelivered and recognised",
                self.stage,
                msg.subject,
                exc or type(exc).__name__,
                extra={"stage": self.stage},
            )

    async def nak(self, msg: Msg, delay: float) -> None:
        try:
            await msg.nak(delay=delay)
        except Exception as exc:
            self._count("nak")
            log.warning(
                "%s: naking %s failed (%s); it is redelivered after its ack wait",
                self.stage,
                msg.subject,
                exc or type(exc).__name__,
                extra={"stage": self.stage},
            )

    async def unprocessable(self, msg: Msg, error: str) -> None:
        """Dead-letter `msg` now (it can never succeed)."""
        try:
            await self._dead(self.stage, msg, error)
        except Exception as exc:
            self._count("dead_letter")
            log.error(
                "%s: dead-lettering %s failed (%s); will retry",
                self.stage,
                msg.subject,
                exc or type(exc).__name__,
                extra={"stage": self.stage},
            )
            await self.nak(msg, self.retry.delay(attempts(msg)))

    async def failed(self, msg: Msg, error: str) -> None:
        """Retry `msg` later with backoff, or dead-letter it when out of attempts."""
        if attempts(msg) >= self.retry.max_attempts:
            await self.unprocessable(msg, f"gave up after {attempts(msg)} deliveries: {error}")
            return
        await self.nak(msg, self.retry.delay(attempts(msg)))

    async def batch_failed(self, msgs: Sequence[Msg], exc: BaseException) -> None:
        """The handler raised: every message of the batch not settled yet is retried."""
        self._count("handler")
        log.error(
            "%s: the batch of %d failed (%s: %s); its messages are retried",
            self.stage,
            len(msgs),
            type(exc).__name__,
            exc,
            exc_info=exc,
            extra={"stage": self.stage},
        )
        for msg in msgs:
            if not settled(msg):
                await self.failed(msg, f"internal error: {exc!r}")


async def unless_stopped(work: Coroutine[Any, Any, None], stopping: asyncio.Event) -> bool:
    """Run `work` until it finishes or `stopping` is set (then cancel it); whether it finished.
    Its exception, if it finished with one, is raised."""
    task = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        stop.cancel()
    if task.done():
        task.result()
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return False


async def _no_dead_letters(stage: str, msg: Msg, error: str) -> None:
    raise RuntimeError(f"stage {stage} has no dead-letter subject")


class PullStage:
    """Runs one durable pull consumer: take what has arrived, hand it to the handler, repeat.

    No waiting to fill a batch: the first message is taken as soon as it arrives, with
    whatever else is already queued (up to `batch`); the next messages keep arriving while
    the handler runs, on pull requests kept outstanding (see `Puller`).

    `overlap`: how many batches may be in the handler at once. With 2, the next batch is
    taken and prepared while the previous one waits for its commit and its PubAcks (the
    handler serialises what must be serialised itself), instead of waiting behind them: on
    PostgreSQL a batch spends most of its time waiting on the database.

    `priority`: on a consumer with a priority group (`ConsumerSpec.priority_group`), the
    priority of this stage's pull requests; the server serves the lowest number first.

    `keep_at_most`: every third of the consumer's ack wait, the messages held (delivered and not
    yet settled) since the last time are reported in progress, so its short ack wait redelivers
    only what a killed process held; a message held `keep_at_most` seconds is let go (see
    `KeepAlive`).
    """

    def __init__(
        self,
        nc: NATS,
        js: JetStreamContext,
        spec: ConsumerSpec,
        handler: BatchHandler,
        *,
        batch: int = 256,
        overlap: int = 1,
        priority: int = PRIORITY_FIRST,
        poll: float = 1.0,
        metrics: Metrics | None = None,
        settle: Settle | None = None,
        keep_at_most: float = KEEP_ALIVE_AT_MOST,
    ):
        self.nc, self.js, self.spec = nc, js, spec
        self.keep_at_most = keep_at_most
        self.handler = handler
        self.batch = batch
        self.overlap = max(overlap, 1)
        self.priority = priority
        self.poll = poll
        self.processed = 0
        self.metrics = metrics
        # Labelled once: `labels()` costs a lookup and a lock per batch.
        self._age = metrics.message_age.labels(spec.durable) if metrics is not None else None
        self.settle = settle or Settle(spec.durable, _no_dead_letters, metrics=metrics)

    async def run(self, stopping: asyncio.Event, beat: Callable[[], None] = lambda: None) -> None:
        """Serve the consumer until `stopping` is set. `beat` is called at least every `poll`
        seconds while the loop is alive (idle or busy), never while a batch hangs: a
        supervisor tells a stalled stage by it."""
        # Creating the consumer retries for up to a minute while NATS is away: a stop request
        # must not wait for that.
        if not await unless_stopped(ensure_consumer(self.js, self.spec), stopping):
            return
        max_ack_pending = consumer_config(self.spec).max_ack_pending or 1000
        puller = Puller(
            self.nc, self.spec, min(2 * self.batch, max_ack_pending), self.poll, self.priority
        )
        await puller.start()

        async def wake_on_stop() -> None:
            await stopping.wait()
            puller.wake.set()

        watcher = asyncio.create_task(wake_on_stop())
        batches = _InHand(beat)
        keeper = KeepAlive(
            lambda: [*puller.queue, *batches.messages()], self.spec.ack_wait / 3, self.keep_at_most
        )
        keeping = asyncio.create_task(keeper.run())
        pause = 0.5
        try:
            while not stopping.is_set():
                batches.idle_beat()
                if len(batches) >= self.overlap:
                    await batches.one_finished()
                    continue
                try:
                    msgs = await puller.next_batch(self.batch, stopping, batches.idle_beat)
                except Exception as exc:  # disconnected, consumer deleted, no JetStream, …
                    if self.nc.is_closed:
                        return
                    await self._pull_failed(exc, pause)
                    pause = min(pause * 2, 5.0)
                    puller.pending = 0
                    continue
                if msgs:
                    pause = 0.5
                    batches.start(self._handle(msgs), msgs)
        finally:
            watcher.cancel()
            await batches.all_finished()
            flush = getattr(self.handler, "flush", None)
            if flush is not None:
                try:
                    await asyncio.shield(flush())
                except Exception:
                    pass
            keeping.cancel()
            await puller.close()

    async def _pull_failed(self, exc: Exception, pause: float) -> None:
        log.warning("stage %s: pull failed (%s); retrying", self.spec.durable, exc)
        await asyncio.sleep(pause)
        if isinstance(exc, PullFailed):
            try:
                await ensure_consumer(self.js, self.spec, deadline=5.0)
            except Exception as again:
                log.warning("stage %s: %s", self.spec.durable, again)

    async def _handle(self, msgs: list[Msg]) -> None:
        started = time.perf_counter()
        if self._age is not None:
            self._observe_age(self._age, msgs[0])
        try:
            await self.handler(msgs)
        except Exception as exc:  # a message must not end the stage: retry the batch
            await self.settle.batch_failed(msgs, exc)
        self.processed += len(msgs)
        if self.metrics is not None:
            self._observe(msgs, time.perf_counter() - started)

    @staticmethod
    def _observe_age(age: Histogram, first: Msg) -> None:
        """The batch's first message's wait in JetStream (one parse per batch; a clock behind
        the server's counts as no wait)."""
        stored = stored_at_ns(first)
        if stored is not None:
            age.observe(max(time.time_ns() - stored, 0) / 1e9)

    def _observe(self, msgs: Sequence[Msg], seconds: float) -> None:
        assert self.metrics is not None
        stage = self.spec.durable
        self.metrics.stage_seconds.labels(stage).observe(seconds)
        self.metrics.batch_size.labels(stage).observe(len(msgs))
        again = sum(1 for m in msgs if attempts(m) > 1)
        if again:
            self.metrics.redeliveries.labels(stage).inc(again)


class _InHand:
    """The batches a stage's handler is working on, oldest first, each in a task of its own:
    a stop request lets the batches in hand finish (ack after commit) even when the stage's
    loop is cancelled.

    The stage's `beat` is given when nothing is in hand (the loop waits for messages) and when
    the oldest batch ends, never otherwise: a batch that hangs is not hidden by the batches
    taken after it."""

    def __init__(self, beat: Callable[[], None]):
        self._beat = beat
        self._tasks: deque[asyncio.Task[None]] = deque()
        self._msgs: dict[asyncio.Task[None], Sequence[Msg]] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    def idle_beat(self) -> None:
        if not self._tasks:
            self._beat()

    def start(self, work: Coroutine[Any, Any, None], msgs: Sequence[Msg]) -> None:
        task = asyncio.create_task(work)
        self._tasks.append(task)
        self._msgs[task] = msgs
        task.add_done_callback(self._finished)

    def messages(self) -> Iterator[Msg]:
        """The messages of the batches in hand."""
        for msgs in self._msgs.values():
            yield from msgs

    def _finished(self, task: asyncio.Task[None]) -> None:
        if self._tasks and self._tasks[0] is task:
            self._beat()
        self._tasks.remove(task)
        del self._msgs[task]

    async def one_finished(self) -> None:
        await asyncio.wait(set(self._tasks), return_when=asyncio.FIRST_COMPLETED)

    async def all_finished(self) -> None:
        if self._tasks:
            await asyncio.shield(asyncio.wait(set(self._tasks)))


class KeepAlive:
    """Tells JetStream a stage is still working on the messages it has held for a while.

    Every `every` seconds it looks at the messages held (`held`: delivered, queued or in a
    batch) and reports progress (`+WPI`, which restarts the message's ack wait) on each not
    settled that was held at the last look too. A message is normally settled milliseconds
    after it arrives, so this sends nothing while the stage keeps up; it matters when a batch
    waits (a database that is slow or away, a backlog queued behind a long batch).

    A message held for `at_most` seconds or more is no longer reported, so a batch that hangs
    lets its messages go after the ack wait, as without this. Messages are known by their
    stream sequence: a copy delivered again to this stage's outstanding pull requests (while its
    batch hangs, its queue is not taken) counts from when the first copy arrived, and is not
    kept either.
    """

    def __init__(self, held: Callable[[], Iterable[Msg]], every: float, at_most: float):
        self.held, self.every, self.at_most = held, every, at_most

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        since: dict[int, float] = {}  # stream sequence → when it was first seen held
        while True:
            await asyncio.sleep(self.every)
            now = loop.time()
            seen: dict[int, float] = {}
            due: list[Msg] = []
            for msg in self.held():
                seq = stream_sequence(msg)
                if seq is None or settled(msg):
                    continue
                first = seen.get(seq, since.get(seq, now))
                seen[seq] = first
                if first < now and now - first < self.at_most:
                    due.append(msg)
            since = seen
            for msg in due:
                if settled(msg):  # settled while an earlier report was sent
                    continue
                try:
                    await msg.in_progress()
                except Exception:  # redelivered after the ack wait instead, and recognised
                    pass
