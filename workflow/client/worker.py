"""The unattended worker: run each released call of an agent's queue exactly once.

It reads the durable consumer ``agent-<agent>`` on the results stream (single filter
``<prefix>.*.<agent>``: this agent's held, released and blocked events), so a release that
arrived while no worker ran waits there. For each release of a call the ledger knows:

1. ``queued``  → mark ``started`` (on disk), run the handler with the released arguments,
   mark ``finished`` with success and a summary, publish `Executed`, then ack.
2. ``started`` → a previous worker died while the handler ran. The side effects may or may not
   have happened, so it is **not run again** (at-most-once): it becomes ``unknown`` and is
   reported as a failure whose summary starts with "outcome unknown".
3. ``finished`` / ``unknown`` → a redelivery (the ack was lost): re-publish the same `Executed`
   report (deduplicated by ``Nats-Msg-Id: executed:<agent>:<release id>``) and ack.

A release is acked only once the ledger says finished (or unknown), so a crash anywhere means a
redelivery that step 2 or 3 settles. Blocked events go to ``on_blocked`` and are acked; nothing
runs for them. Releases of calls the ledger does not know (interactive tickets, or another
state dir's queue) are acked and left alone: their owner handles them.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from workflow.client import transport
from workflow.client.ledger import Entry, Ledger
from workflow.client.results import parse_event, results_filter
from workflow.client.trust import ServiceTrust, trust_for
from workflow.ids import report_msg_id
from workflow.messages import Blocked, Executed, Held, Released
from workflow.outcomes import Outcome
from workflow.subjects import Subjects

log = logging.getLogger("headgate.client.worker")

Handler = Callable[..., Awaitable[Any]]
BlockedHandler = Callable[[Blocked], Awaitable[None] | None]

#: Redelivery after this long without an ack; while a batch is being worked through, its
#: messages are kept in progress. It is also how long the releases a killed worker had fetched
#: wait before a new worker gets them.
ACK_WAIT = 30.0
SUMMARY_LIMIT = 4000
UNKNOWN = (
    "outcome unknown: the worker stopped while this call ran, so it may or may not have taken "
    "effect; it was not run again."
)


@dataclass
class WorkerStats:
    executed: int = 0
    failed: int = 0
    unknown: int = 0
    blocked: int = 0
    #: Releases and blocks of calls the ledger had already settled (redeliveries): not re-run.
    repeated: int = 0
    #: Events of calls this ledger did not queue (interactive tickets, other queues).
    ignored: int = 0


def consumer_name(agent: str) -> str:
    return f"agent-{agent}"


def consumer_config(subjects: Subjects, agent: str, ack_wait: float = ACK_WAIT) -> ConsumerConfig:
    return ConsumerConfig(
        name=consumer_name(agent),
        durable_name=consumer_name(agent),
        filter_subject=results_filter(subjects, agent),
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait,
        max_deliver=-1,  # a release is never dropped by the server
        max_ack_pending=1000,
        inactive_threshold=transport.DURABLE_INACTIVE_THRESHOLD,
    )


def _shorten(text: str) -> str:
    return text if len(text) <= SUMMARY_LIMIT else text[: SUMMARY_LIMIT - 1] + "…"


async def report_execution(
    nc: NATS, subjects: Subjects, release_id: str, proposal_id: str, agent: str,
    success: bool, summary: str,
) -> None:  # fmt: skip
    body = Executed(
        release_id=release_id, proposal_id=proposal_id, agent=agent, success=success,
        summary=_shorten(summary), finished_at=datetime.now(UTC),
    )  # fmt: skip
    await transport.publish(nc, subjects.executed(agent), body, report_msg_id(agent, release_id))


@dataclass
class Worker:
    nc: NATS
    subjects: Subjects
    agent: str
    ledger: Ledger
    handlers: Mapping[str, Handler]
    on_blocked: BlockedHandler | None
    stats: WorkerStats
    #: Whose events are run: a `released` event not signed by the service is ignored (acked,
    #: never run); while the key cannot be learnt, `handle` raises and the message comes back.
    trust: ServiceTrust

    async def handle(self, msg: Msg) -> None:
        event = await parse_event(self.subjects, msg, self.trust)
        entry = self.ledger.get(event.proposal_id) if event is not None else None
        if event is None or entry is None:
            self.stats.ignored += 1
        elif isinstance(event, Held):
            self.ledger.note_request(event.proposal_id, event.request_id)
        elif isinstance(event, Blocked):
            await self._blocked(event, entry)
        else:
            await self._released(event, entry, msg)
        await msg.ack()

    async def _blocked(self, event: Blocked, entry: Entry) -> None:
        if entry.state != "queued":
            self.stats.repeated += 1
            return
        if self.on_blocked is not None:
            result = self.on_blocked(event)  # at least once: before the ledger records it
            if inspect.isawaitable(result):
                await result
        self.ledger.block(event.proposal_id, Outcome(event.outcome), event.reason)
        self.stats.blocked += 1

    async def _released(self, event: Released, entry: Entry, msg: Msg) -> None:
        if entry.state == "queued" and self.ledger.claim(event.proposal_id, event.release_id):
            success, summary = await self._run(event, msg)
            self.ledger.finish(event.proposal_id, success, summary)
            if success:
                self.stats.executed += 1
            else:
                self.stats.failed += 1
        elif entry.state == "started":
            self.ledger.mark_unknown(event.proposal_id, UNKNOWN)
            self.stats.unknown += 1
            log.warning("release %s: %s", event.release_id, UNKNOWN)
        elif entry.state in ("finished", "unknown"):
            self.stats.repeated += 1
        else:
            return
        done = self.ledger.get(event.proposal_id)
        assert done is not None, "the row was just settled"
        await report_execution(
            self.nc, self.subjects, event.release_id, event.proposal_id, self.agent,
            bool(done.success), done.summary,
        )  # fmt: skip

    async def _run(self, event: Released, msg: Msg) -> tuple[bool, str]:
        handler = self.handlers.get(event.tool)
        if handler is None:
            return False, f"no handler for tool {event.tool!r} in this worker; it did not run."
        try:
            value = await handler(**event.arguments)
        except Exception as exc:
            log.info("release %s: %s failed: %s", event.release_id, event.tool, exc)
            return False, _shorten(f"{type(exc).__name__}: {exc}")
        text = "ok" if value is None else value if isinstance(value, str) else repr(value)
        return True, _shorten(text)


async def _keep_in_progress(waiting: list[Msg], every: float) -> None:
    """Extend the ack deadline of the fetched messages not settled yet (a long handler holds
    up the rest of its batch), so none is redelivered while this worker still has it."""
    while True:
        await asyncio.sleep(every)
        for msg in list(waiting):
            with contextlib.suppress(Exception):
                await msg.in_progress()


async def _settle(worker: Worker, msg: Msg, stop: asyncio.Event) -> None:
    if stop.is_set():
        await msg.nak()  # hand it back at once rather than after ack_wait
        return
    try:
        await worker.handle(msg)
    except Exception:
        # Nothing runs twice: the ledger holds the state and the redelivery settles it.
        log.exception("release message %s not settled; it will be redelivered",
                      msg.metadata.sequence.stream)  # fmt: skip
        with contextlib.suppress(Exception):
            await msg.nak(delay=1.0)


async def work(
    nc: NATS, subjects: Subjects, agent: str, ledger: Ledger, handlers: Mapping[str, Handler],
    *, stop: asyncio.Event, on_blocked: BlockedHandler | None, batch: int = 16,
    poll: float = 0.5, ack_wait: float = ACK_WAIT,
) -> WorkerStats:  # fmt: skip
    """Consume `agent-<agent>` until `stop` is set; see the module docstring."""
    ledger.take_worker_lock()
    stats = WorkerStats()
    worker = Worker(
        nc, subjects, agent, ledger, handlers, on_blocked, stats, trust_for(nc, subjects.prefix)
    )
    js = nc.jetstream()
    stream = subjects.stream("results")
    # Create or update the durable (the server applies a changed config to an existing one).
    await js.add_consumer(stream, config=consumer_config(subjects, agent, ack_wait))
    sub = await js.pull_subscribe_bind(durable=consumer_name(agent), stream=stream)
    try:
        while not stop.is_set():
            try:
                msgs = await sub.fetch(batch, timeout=poll)
            except TimeoutError:  # nats-py raises its own or asyncio's
                continue
            waiting = list(msgs)
            keepalive = asyncio.create_task(_keep_in_progress(waiting, ack_wait / 3))
            try:
                while waiting:
                    await _settle(worker, waiting[0], stop)
                    waiting.pop(0)
            finally:
                keepalive.cancel()
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
        ledger.release_worker_lock()
    return stats
