"""The batch pull loop every JetStream stage runs on, and the acking rules they share.

A stage fetches a batch, commits its effects in one transaction, publishes the resulting events
and waits for JetStream to confirm them, and only then acks the input. A failure before the ack
means redelivery (with backoff), never loss; a message that keeps failing for MAX_ATTEMPTS
deliveries is published to `<prefix>.dead.<stage>` with the last error and then acked.

FastStream is not used on these paths: its per-message overhead caps a JetStream relay at a
fraction of what nats-py does with batched fetches and pipelined publishes (see the README's
performance section), and a stage needs the whole batch to make one database transaction.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import PubAck

from workflow.messages import DeadLetter
from workflow.service.metrics import Metrics
from workflow.service.streams import MAX_ATTEMPTS, ConsumerSpec, consumer_config, ensure_consumer
from workflow.store.repo import OutboxEvent
from workflow.subjects import Subjects

log = logging.getLogger("headgate.stage")

PUBLISH_TIMEOUT = 10.0


def attempts(msg: Msg) -> int:
    """How many times JetStream has delivered `msg` (1 the first time).

    Read off the ack subject, `$JS.ACK.<stream>.<consumer>.<delivered>.…` (9 tokens) or with
    a domain and account hash after `$JS.ACK` (12 tokens or more): 1 µs against 5 µs for
    building `msg.metadata`, once per message of every batch.
    """
    tokens = (msg.reply or "").split(".")
    index = 4 if len(tokens) == 9 else 6 if len(tokens) >= 12 else None
    if index is not None and tokens[0] == "$JS" and tokens[1] == "ACK":
        delivered = tokens[index]
        if delivered.isdigit():
            return int(delivered)
    try:
        return int(msg.metadata.num_delivered)
    except Exception:  # not a JetStream message (tests)
        return 1


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


@dataclass(slots=True)
class Sent:
    """Events handed to JetStream whose PubAcks have not been awaited yet."""

    ids: list[str]
    futures: list[asyncio.Future[PubAck]]

    async def confirmed(self) -> list[str]:
        """Wait until JetStream has stored every event; returns their msg ids."""
        if self.futures:
            await asyncio.wait_for(asyncio.gather(*self.futures), PUBLISH_TIMEOUT)
        return self.ids


async def send_events(js: JetStreamContext, events: Iterable[OutboxEvent]) -> Sent:
    """Publish pipelined with `Nats-Msg-Id`, without waiting for the PubAcks."""
    sent = Sent([], [])
    for event in events:
        headers = (
            {**event.headers, "Nats-Msg-Id": event.msg_id}
            if event.headers
            else {"Nats-Msg-Id": event.msg_id}
        )
        fut = await js.publish_async(event.subject, event.payload.encode(), headers=headers)
        sent.futures.append(fut)
        sent.ids.append(event.msg_id)
    return sent


async def publish_events(js: JetStreamContext, events: Iterable[OutboxEvent]) -> list[str]:
    """Publish pipelined with `Nats-Msg-Id`; wait for every PubAck. Returns the msg ids."""
    return await (await send_events(js, events)).confirmed()


def dead_letter_event(subjects: Subjects, stage: str, msg: Msg, error: str) -> OutboxEvent:
    encoding: Literal["utf-8", "base64"] = "utf-8"
    try:
        payload = msg.data.decode()
    except UnicodeDecodeError:
        payload, encoding = base64.b64encode(msg.data).decode(), "base64"
    try:
        seq = f"{msg.metadata.stream}:{msg.metadata.sequence.stream}"
    except Exception:
        seq = f"{msg.subject}:{hash(msg.data)}"
    letter = DeadLetter(
        stage=stage,
        subject=msg.subject,
        error=error,
        payload=payload,
        payload_encoding=encoding,
        deliveries=attempts(msg),
        received_at=datetime.now(UTC),
    )
    return OutboxEvent(
        msg_id=f"dead:{seq}", subject=subjects.dead(stage), payload=letter.model_dump_json()
    )


BatchHandler = Callable[[Sequence[Msg]], Awaitable[None]]


# A pull request lives this long on the server; while it waits, the server sends an idle
# heartbeat this often, so a request lost with a connection or a server is noticed.
PULL_EXPIRES = 30.0
PULL_HEARTBEAT = 5.0


class _PullFailed(Exception):
    """The server refused the pull requests (consumer deleted, no JetStream): back off."""


class _Puller:
    """Pull requests kept outstanding on a private inbox; delivered messages queue here.

    Credit accounting: `pending` counts messages asked for and neither delivered nor given
    back by a status (408 expired, 409 leadership change…, with `Nats-Pending-Messages`).
    When it falls to half the credit, one request tops it up, so the server pushes messages
    the moment they are stored instead of waiting for the next fetch. A reconnect, or silence
    longer than two heartbeats while requests are out, means the requests may be gone:
    `pending` is reset and they are issued again (asking twice is harmless; the consumer's
    max_ack_pending bounds what the server hands out).
    """

    def __init__(self, nc: NATS, spec: ConsumerSpec, credit: int, tick: float):
        self.nc = nc
        self.subject = f"$JS.API.CONSUMER.MSG.NEXT.{spec.stream}.{spec.durable}"
        self.inbox = nc.new_inbox()
        self.credit = max(credit, 1)
        self.tick = tick
        self.queue: deque[Msg] = deque()
        self.wake = asyncio.Event()
        self.pending = 0
        self.heard = 0.0
        self.reconnects = int(nc.stats["reconnects"])
        self.failure: str | None = None
        self.sub: Subscription | None = None
        self.loop = asyncio.get_running_loop()

    async def start(self) -> None:
        self.sub = await self.nc.subscribe(self.inbox, cb=self._on_msg)

    async def _on_msg(self, msg: Msg) -> None:
        self.heard = self.loop.time()
        headers = msg.headers
        status = headers.get("Status") if headers else None
        if status is None:
            if self.pending > 0:
                self.pending -= 1
            self.queue.append(msg)
            self.wake.set()
            return
        if status == "100":  # idle heartbeat
            return
        assert headers is not None
        released = headers.get("Nats-Pending-Messages")
        if released is not None and released.isdigit():
            self.pending = max(0, self.pending - int(released))
        else:  # a status that does not say how much it ends: assume every request ended
            self.pending = 0
        description = headers.get("Description", "")
        if status == "503" or (status == "409" and "Deleted" in description):
            self.failure = f"{status} {description}".strip()
        elif status not in ("404", "408", "409"):
            log.warning("pull %s: unexpected status %s %s", self.subject, status, description)
        self.wake.set()

    async def top_up(self) -> None:
        now = self.loop.time()
        reconnects = int(self.nc.stats["reconnects"])
        if reconnects != self.reconnects:
            self.reconnects, self.pending = reconnects, 0
        elif self.pending and now - self.heard > 2 * PULL_HEARTBEAT:
            self.pending = 0
        if self.pending > self.credit // 2:
            return
        want = self.credit - self.pending - len(self.queue)
        if want <= 0:
            return
        request = b'{"batch":%d,"expires":%d,"idle_heartbeat":%d}' % (
            want,
            int(PULL_EXPIRES * 1e9),
            int(PULL_HEARTBEAT * 1e9),
        )
        await self.nc.publish(self.subject, request, reply=self.inbox)
        self.pending += want
        self.heard = max(self.heard, now)

    async def next_batch(self, limit: int, stopping: asyncio.Event) -> list[Msg]:
        """What is queued, up to `limit`, as soon as there is one message; [] when stopping."""
        while True:
            if self.failure is not None:
                failure, self.failure = self.failure, None
                raise _PullFailed(failure)
            if stopping.is_set():
                return []
            await self.top_up()
            if self.queue:
                break
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), self.tick)
            except TimeoutError:
                pass
        queue = self.queue
        if len(queue) <= limit:
            batch = list(queue)
            queue.clear()
        else:
            batch = [queue.popleft() for _ in range(limit)]
        return batch

    async def close(self) -> None:
        """Stop receiving; messages delivered but never handled go back at once."""
        if self.sub is not None:
            try:
                # Drain: the server stops delivering, what it already sent still arrives here.
                await asyncio.wait_for(self.sub.drain(), 2.0)  # type: ignore[no-untyped-call]
            except Exception:
                try:
                    await self.sub.unsubscribe()
                except Exception:
                    pass
        while self.queue:
            msg = self.queue.popleft()
            try:
                await msg.nak()
            except Exception:  # redelivered after ack_wait instead
                pass


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


class PullStage:
    """Runs one durable pull consumer: take what has arrived, hand it to the handler, repeat.

    No waiting to fill a batch: the first message is taken as soon as it arrives, with
    whatever else is already queued (up to `batch`); the next messages keep arriving while
    the handler runs, on pull requests kept outstanding (see `_Puller`).
    """

    def __init__(
        self,
        nc: NATS,
        js: JetStreamContext,
        spec: ConsumerSpec,
        handler: BatchHandler,
        *,
        batch: int = 256,
        poll: float = 1.0,
        metrics: Metrics | None = None,
    ):
        self.nc, self.js, self.spec = nc, js, spec
        self.handler = handler
        self.batch = batch
        self.poll = poll
        self.processed = 0
        self.metrics = metrics

    async def run(self, stopping: asyncio.Event) -> None:
        # Creating the consumer retries for up to a minute while NATS is away: a stop request
        # must not wait for that.
        if not await unless_stopped(ensure_consumer(self.js, self.spec), stopping):
            return
        max_ack_pending = consumer_config(self.spec).max_ack_pending or 1000
        puller = _Puller(self.nc, self.spec, min(2 * self.batch, max_ack_pending), self.poll)
        await puller.start()

        async def wake_on_stop() -> None:
            await stopping.wait()
            puller.wake.set()

        watcher = asyncio.create_task(wake_on_stop())
        pause = 0.5
        try:
            while not stopping.is_set():
                try:
                    msgs = await puller.next_batch(self.batch, stopping)
                except Exception as exc:  # disconnected, consumer deleted, no JetStream, …
                    if self.nc.is_closed:
                        return
                    log.warning("stage %s: pull failed (%s); retrying", self.spec.durable, exc)
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 5.0)
                    puller.pending = 0
                    if isinstance(exc, _PullFailed):
                        try:
                            await ensure_consumer(self.js, self.spec, deadline=5.0)
                        except Exception as again:
                            log.warning("stage %s: %s", self.spec.durable, again)
                    continue
                if not msgs:
                    continue
                pause = 0.5
                # Shielded: a stop request lets the batch in hand finish (ack after commit).
                started = time.perf_counter()
                await asyncio.shield(self.handler(msgs))
                self.processed += len(msgs)
                if self.metrics is not None:
                    self._observe(msgs, time.perf_counter() - started)
        finally:
            watcher.cancel()
            flush = getattr(self.handler, "flush", None)
            if flush is not None:
                try:
                    await asyncio.shield(flush())
                except Exception:
                    pass
            await puller.close()

    def _observe(self, msgs: Sequence[Msg], seconds: float) -> None:
        assert self.metrics is not None
        stage = self.spec.durable
        self.metrics.stage_seconds.labels(stage).observe(seconds)
        self.metrics.batch_size.labels(stage).observe(len(msgs))
        again = sum(1 for m in msgs if attempts(m) > 1)
        if again:
            self.metrics.redeliveries.labels(stage).inc(again)


class PublishedMarker:
    """Marks outbox rows as published in the background, many batches in one UPDATE.

    Off the hot path: a stage acks once its events are committed and confirmed by JetStream;
    the `published` flag only spares the republisher work. Marks are gathered for `interval`
    seconds (well inside the republisher's grace period) and written together, so a busy or
    a trickling stage costs a few mark transactions per second, not one per batch. A mark lost
    to a crash means one re-publish that JetStream drops as a duplicate (`Nats-Msg-Id`).
    """

    def __init__(self, mark: Callable[[list[str]], Awaitable[None]], interval: float = 0.2):
        self._mark = mark
        self._interval = interval
        self._ids: list[str] = []
        self._task: asyncio.Task[None] | None = None
        self._now = asyncio.Event()

    def add(self, ids: Iterable[str]) -> None:
        self._ids.extend(ids)
        if self._ids and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        while self._ids:
            try:
                await asyncio.wait_for(self._now.wait(), self._interval)
            except TimeoutError:
                pass
            await self._write()

    async def _write(self) -> None:
        ids, self._ids = self._ids, []
        if not ids:
            return
        try:
            await self._mark(ids)
        except Exception as exc:
            log.warning("marking %d outbox events published failed (%s)", len(ids), exc)

    async def flush(self) -> None:
        """Write what is gathered now (the stage is stopping)."""
        self._now.set()
        if self._task is not None:
            await self._task
        await self._write()


async def settle_failure(
    msg: Msg,
    error: str,
    dead: Callable[[Msg, str], Awaitable[None]],
    retry: RetryPolicy = DEFAULT_RETRY,
) -> None:
    """A message whose processing failed: retry later, or dead-letter it when out of attempts."""
    if attempts(msg) >= retry.max_attempts:
        await dead(msg, f"gave up after {attempts(msg)} deliveries: {error}")
        return
    await msg.nak(delay=retry.delay(attempts(msg)))
