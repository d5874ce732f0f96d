"""The notifier: reads what is held, decided and escalated, and tells the channels routed to it.

It is an approver-side client, not a stage: it reads the inbox and results streams on its own
durable consumers (`notifier-held`, `notifier-outcomes`, `notifier-escalated`) and asks the
service's API for a request's history — it never holds up the pipeline and never touches the
database. Each notice goes to every routed channel; a try that fails is retried with backoff
(the message's ack deadline is extended meanwhile), and after the last try the failure is
recorded. Every delivery, made or failed, is published as a `Notified` record on
`<prefix>.notified.<workspace>` before the event is acked, so a crash means the notice is sent
again (receivers deduplicate on `X-Headgate-Delivery`), never that it is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError
from prometheus_client import CollectorRegistry, Counter, Histogram
from pydantic import ValidationError

from workflow.client import transport
from workflow.client.trust import NotFromService, trust_for
from workflow.errors import ConnectError
from workflow.messages import Blocked, Escalated, InboxItem, Notified, ProposalHistory, Released
from workflow.notify.channels import Channel, DeliveryError, open_channel
from workflow.notify.config import NotifyConfig
from workflow.notify.routing import Routed, channels_for
from workflow.notify.text import Notice, held_notice, history_notice
from workflow.subjects import Subjects

log = logging.getLogger("headgate.notify")

DAY = 24 * 3600.0
ACK_WAIT = 60.0
#: A notice whose request history the service cannot give yet is tried again after this long.
API_RETRY_DELAY = 2.0


def notify_streams(subjects: Subjects, replicas: int = 1) -> list[StreamConfig]:
    """The escalation events and the delivery records (limits, 30 days)."""
    return [
        StreamConfig(
            name=subjects.stream(kind),
            subjects=[subject],
            storage=StorageType.FILE,
            num_replicas=replicas,
            duplicate_window=600.0,
            retention=RetentionPolicy.LIMITS,
            max_age=30 * DAY,
        )
        for kind, subject in (
            ("escalated", subjects.escalated(">")),
            ("notified", subjects.notified(">")),
        )
    ]


async def ensure_notify_streams(
    js: JetStreamContext, subjects: Subjects, replicas: int = 1
) -> None:
    for config in notify_streams(subjects, replicas):
        assert config.name is not None
        try:
            await js.stream_info(config.name)
        except NotFoundError:
            await js.add_stream(config=config)


class NotifyMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.deliveries = Counter(
            "headgate_notifications", "Notifications by channel, event and result.",
            ["channel", "event", "result"], registry=registry,
        )  # fmt: skip
        self.first_notification = Histogram(
            "headgate_time_to_first_notification_seconds",
            "From a request being held to its notification being delivered, by channel.",
            ["channel"],
            buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 900),
            registry=registry,
        )


class _Stopping(Exception):
    """The notifier stops while a notice waits for its next try: it is left unacked and
    comes back when a notifier runs again."""


@dataclass(frozen=True, slots=True)
class _Source:
    name: str
    stream: str
    filters: tuple[str, ...]


class Notifier:
    def __init__(
        self,
        nc: NATS,
        config: NotifyConfig,
        channels: dict[str, Channel],
        *,
        subjects: Subjects | None = None,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        max_inflight: int = 64,
        ack_wait: float = ACK_WAIT,
    ):
        self.nc = nc
        self.js = nc.jetstream(timeout=10)
        self.config = config
        self.channels = channels
        self.subjects = subjects or Subjects()
        self.metrics = NotifyMetrics(registry or CollectorRegistry())
        self.clock = clock
        self.sleep = sleep
        self.fallback_secret = b""
        self._stopping = asyncio.Event()
        self._slots = asyncio.Semaphore(max_inflight)
        self.ack_wait = ack_wait
        s = self.subjects
        self.sources = (
            _Source("notifier-held", s.stream("inbox"), (s.inbox(">"),)),
            _Source("notifier-outcomes", s.stream("results"), (s.released(">"), s.blocked(">"))),
            _Source("notifier-escalated", s.stream("escalated"), (s.escalated(">"),)),
        )

    @classmethod
    def open(
        cls, nc: NATS, config: NotifyConfig, *, fallback_secret: bytes, **options: object
    ) -> Notifier:
        """Open every configured channel (ConfigError naming the one that cannot be opened)."""
        notifier = cls(nc, config, _open(config, fallback_secret), **options)  # type: ignore[arg-type]
        notifier.fallback_secret = fallback_secret
        return notifier

    async def reconfigure(self, config: NotifyConfig) -> None:
        """Use a changed `[notify]` section: open its channels, then close the old ones (a
        notice in delivery meanwhile finishes on the channel it started with)."""
        if config.inbox_url is None:
            config = config.model_copy(update={"inbox_url": self.config.inbox_url})
        old = self.channels
        self.channels = _open(config, self.fallback_secret)
        self.config = config
        for channel in old.values():
            with contextlib.suppress(Exception):
                await channel.close()

    async def close(self) -> None:
        for channel in self.channels.values():
            with contextlib.suppress(Exception):
                await channel.close()

    async def ensure(self) -> None:
        """Create the streams it needs and its durable consumers. A new consumer starts with
        what arrives from now on; an existing one resumes where it stopped."""
        await ensure_notify_streams(self.js, self.subjects)
        for source in self.sources:
            try:
                await self.js.consumer_info(source.stream, source.name)
                continue
            except NotFoundError:
                pass
            await self.js.add_consumer(
                source.stream,
                config=ConsumerConfig(
                    durable_name=source.name, ack_policy=AckPolicy.EXPLICIT, ack_wait=self.ack_wait,
                    deliver_policy=DeliverPolicy.NEW, max_deliver=-1, max_ack_pending=1024,
                    filter_subjects=list(source.filters),
                ),
            )  # fmt: skip

    async def run(self, stop: asyncio.Event) -> None:
        """Read the three consumers until `stop` is set, then finish the notices in hand."""
        await self.ensure()
        self._stopping = stop
        tasks: set[asyncio.Task[None]] = set()
        loops = [asyncio.create_task(self._pull(s, stop, tasks)) for s in self.sources]
        try:
            await asyncio.gather(*loops)
        except asyncio.CancelledError:
            # Killed, not stopped: the notices in hand were not acked and come back.
            for task in list(tasks):
                task.cancel()
            raise
        finally:
            for loop in loops:
                loop.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _pull(
        self, source: _Source, stop: asyncio.Event, tasks: set[asyncio.Task[None]]
    ) -> None:
        sub = await self.js.pull_subscribe_bind(durable=source.name, stream=source.stream)
        try:
            while not stop.is_set():
                try:
                    msgs = await sub.fetch(16, timeout=0.5)
                except TimeoutError:
                    continue
                except Exception as exc:  # reconnecting, or the stream is being recreated
                    log.warning("notifier: fetching from %s failed: %s", source.stream, exc)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), 1.0)
                    continue
                for msg in msgs:
                    await self._slots.acquire()
                    task = asyncio.create_task(self._handle_guarded(msg))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _handle_guarded(self, msg: Msg) -> None:
        try:
            await self.handle(msg)
        except Exception as exc:  # one notice never stops the notifier
            log.exception("notifier: %s failed; it will be tried again", msg.subject)
            with contextlib.suppress(Exception):
                await msg.nak(delay=API_RETRY_DELAY)
            del exc
        finally:
            self._slots.release()

    # ------------------------------------------------------------------ one event
    async def handle(self, msg: Msg) -> None:
        """Notify about one event, record every delivery, then ack."""
        try:
            found = await self._notice(msg)
        except NotFromService as exc:
            log.warning("notifier: %s", exc)
            await msg.ack()
            return
        except ConnectError as exc:
            log.warning("notifier: the service did not answer (%s); retrying", exc)
            await msg.nak(delay=API_RETRY_DELAY)
            return
        except (ValidationError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            log.error("notifier: ignoring an unreadable event on %s: %s", msg.subject, exc)
            await msg.ack()
            return
        if found is None:
            await msg.ack()  # not about a held request (an allowed or denied call)
            return
        notice, names = found
        if not names:
            log.info("notifier: no route for %s of %s", notice.kind, notice.request_id)
        try:
            records = await asyncio.gather(*(self._deliver(notice, name, msg) for name in names))
        except _Stopping:
            await msg.nak()
            return
        for record in records:
            await self.js.publish(
                self.subjects.notified(notice.workspace),
                record.model_dump_json().encode(),
                headers={"Nats-Msg-Id": f"notified:{record.delivery}:{record.channel}"},
            )
        await msg.ack()

    async def _notice(self, msg: Msg) -> tuple[Notice, list[str]] | None:
        s, url = self.subjects, self.config.inbox_url
        # A notice is what an approver reads first: only the service's events make one.
        await trust_for(self.nc, s.prefix).require(msg.subject, msg.data, msg.headers)
        if s.token_after(msg.subject, "inbox") is not None:
            item = InboxItem.model_validate_json(msg.data)
            notice = held_notice(item, url)
            return notice, channels_for(self.config, _routed(notice))
        if s.token_after(msg.subject, "escalated") is not None:
            step = Escalated.model_validate_json(msg.data)
            history = await self._history(step.request_id)
            extra = {"step": step.step, "action": step.action}
            stepped = history_notice("escalated", history, url, detail=step.message, extra=extra)
            if stepped is None:
                return None
            roles = step.roles or None
            names = channels_for(self.config, _routed(stepped), roles=roles, also=step.channels)
            return stepped, names
        outcome: Released | Blocked
        if s.token_after(msg.subject, "released") is not None:
            outcome = Released.model_validate_json(msg.data)
            kind, detail = "released", ""
        else:
            outcome = Blocked.model_validate_json(msg.data)
            kind, detail = outcome.outcome, outcome.reason
        if outcome.request_id is None:
            return None
        history = await self._history(outcome.proposal_id)
        closed = history_notice(kind, history, url, detail=detail)
        return (closed, channels_for(self.config, _routed(closed))) if closed else None

    async def _history(self, ident: str) -> ProposalHistory:
        history = await transport.history(self.nc, self.subjects, ident)
        if history is None:
            raise ConnectError(f"the service does not know {ident} yet")
        return history

    async def _deliver(self, notice: Notice, name: str, msg: Msg) -> Notified:
        channel = self.channels.get(name)
        if channel is None:  # the policy dropped the channel meanwhile
            gone = "the channel is no longer configured"
            return _record(notice, name, False, 0, gone, self.clock())
        error = ""
        attempt = 0
        for attempt in range(1, self.config.attempts + 1):
            now = self.clock()
            try:
                await channel.send(notice, now)
            except DeliveryError as exc:
                error = str(exc)
            except Exception as exc:  # a channel's own bug must not lose the record
                error = f"{type(exc).__name__}: {exc}"
            else:
                self._delivered(notice, name, now)
                return _record(notice, name, True, attempt, "", now)
            if attempt < self.config.attempts:
                log.info(
                    "notifier: %s to %s failed (%s); try %d of %d in %.0fs",
                    notice.delivery_id, name, error, attempt + 1, self.config.attempts,
                    self.config.delay(attempt),
                )  # fmt: skip
                with contextlib.suppress(Exception):
                    await msg.in_progress()
                await self._pause(self.config.delay(attempt))
        log.warning(
            "notifier: %s to channel %s failed after %d tries: %s",
            notice.delivery_id, name, attempt, error,
        )  # fmt: skip
        self.metrics.deliveries.labels(name, notice.kind, "failed").inc()
        return _record(notice, name, False, attempt, error, self.clock())

    async def _pause(self, delay: float) -> None:
        """Wait before the next try, unless the notifier stops meanwhile (_Stopping)."""
        if self._stopping.is_set():
            raise _Stopping
        pause = asyncio.ensure_future(self.sleep(delay))
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({pause, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in (pause, stop):
                waiter.cancel()
        if self._stopping.is_set():
            raise _Stopping

    def _delivered(self, notice: Notice, name: str, now: datetime) -> None:
        self.metrics.deliveries.labels(name, notice.kind, "delivered").inc()
        if notice.kind == "held":
            waited = (now - notice.created_at).total_seconds()
            self.metrics.first_notification.labels(name).observe(max(waited, 0.0))


def _open(config: NotifyConfig, fallback_secret: bytes) -> dict[str, Channel]:
    return {
        name: open_channel(name, spec, fallback_secret=fallback_secret, timeout=config.timeout)
        for name, spec in config.channels.items()
    }


def _routed(notice: Notice) -> Routed:
    from workflow.classify.taxonomy import RiskClass, Severity

    return Routed(
        event=notice.event,
        workspace=notice.workspace,
        risk_class=RiskClass(notice.risk_class),
        severity=Severity(notice.severity),
        roles=notice.roles,
    )


def _record(notice: Notice, channel: str, delivered: bool, attempts: int, error: str,
            at: datetime) -> Notified:  # fmt: skip
    return Notified(
        delivery=notice.delivery_id, channel=channel, kind=notice.kind,
        request_id=notice.request_id, proposal_id=notice.proposal_id,
        workspace=notice.workspace, delivered=delivered, attempts=attempts, error=error[:500],
        at=at,
    )  # fmt: skip


__all__: Sequence[str] = ("Notifier", "ensure_notify_streams", "notify_streams")
