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
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import PubAck
from nats.js.errors import FetchTimeoutError

from workflow.messages import DeadLetter
from workflow.service.metrics import Metrics
from workflow.service.streams import MAX_ATTEMPTS, ConsumerSpec, ensure_consumer
from workflow.store.repo import OutboxEvent
from workflow.subjects import Subjects

log = logging.getLogger("headgate.stage")

PUBLISH_TIMEOUT = 10.0


def attempts(msg: Msg) -> int:
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


async def publish_events(js: JetStreamContext, events: Iterable[OutboxEvent]) -> list[str]:
    """Publish pipelined with `Nats-Msg-Id`; wait for every PubAck. Returns the msg ids."""
    futures: list[asyncio.Future[PubAck]] = []
    ids: list[str] = []
    for event in events:
        headers = (
            {**event.headers, "Nats-Msg-Id": event.msg_id}
            if event.headers
            else {"Nats-Msg-Id": event.msg_id}
        )
        fut = await js.publish_async(event.subject, event.payload.encode(), headers=headers)
        futures.append(fut)
        ids.append(event.msg_id)
    if futures:
        await asyncio.wait_for(asyncio.gather(*futures), PUBLISH_TIMEOUT)
    return ids


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


class PullStage:
    """Runs one durable pull consumer: fetch a batch, hand it to the handler, repeat."""

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
        await ensure_consumer(self.js, self.spec)
        sub = await self.js.pull_subscribe_bind(self.spec.durable, stream=self.spec.stream)
        pause = 0.5
        try:
            while not stopping.is_set():
                try:
                    msgs = await sub.fetch(self.batch, timeout=self.poll)
                except (TimeoutError, FetchTimeoutError, NatsTimeoutError):
                    continue
                except (ConnectionClosedError, OSError) as exc:
                    if self.nc.is_closed:
                        return
                    log.warning("stage %s: fetch failed (%s); retrying", self.spec.durable, exc)
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 5.0)
                    continue
                except Exception as exc:  # reconnecting, consumer being recreated, …
                    log.warning("stage %s: fetch failed (%s); retrying", self.spec.durable, exc)
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 5.0)
                    continue
                pause = 0.5
                # Shielded: a stop request lets the batch in hand finish (ack after commit).
                started = time.perf_counter()
                await asyncio.shield(self.handler(msgs))
                self.processed += len(msgs)
                if self.metrics is not None:
                    self._observe(msgs, time.perf_counter() - started)
        finally:
            flush = getattr(self.handler, "flush", None)
            if flush is not None:
                try:
                    await asyncio.shield(flush())
                except Exception:
                    pass
            try:
                await sub.unsubscribe()
            except Exception:
                pass

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
    the `published` flag only spares the republisher work. A mark lost to a crash means one
    re-publish that JetStream drops as a duplicate (`Nats-Msg-Id`).
    """

    def __init__(self, mark: Callable[[list[str]], Awaitable[None]]):
        self._mark = mark
        self._ids: list[str] = []
        self._task: asyncio.Task[None] | None = None

    def add(self, ids: Iterable[str]) -> None:
        self._ids.extend(ids)
        if self._ids and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        while self._ids:
            ids, self._ids = self._ids, []
            try:
                await self._mark(ids)
            except Exception as exc:
                log.warning("marking %d outbox events published failed (%s)", len(ids), exc)

    async def flush(self) -> None:
        if self._task is not None:
            await self._task


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
