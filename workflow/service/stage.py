"""A stage: one durable pull consumer whose batches go to a handler, and the acking rules the
stages share.

A stage fetches a batch, commits its effects in one transaction, publishes the resulting events
and waits for JetStream to confirm them, and only then acks the input. A failure before the ack
means redelivery (with backoff), never loss; a message that keeps failing for MAX_ATTEMPTS
deliveries is published to `<prefix>.dead.<stage>` with the last error and then acked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from workflow.service.metrics import Metrics
from workflow.service.pull import Puller, PullFailed, attempts
from workflow.service.streams import MAX_ATTEMPTS, ConsumerSpec, consumer_config, ensure_consumer

log = logging.getLogger("headgate.stage")


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
        puller = Puller(self.nc, self.spec, min(2 * self.batch, max_ack_pending), self.poll)
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
                    if isinstance(exc, PullFailed):
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
