"""The notifier: reads what is held, decided and escalated, and tells the channels routed to it.

It is an approver-side client, not a stage: it reads the inbox and results streams on its own
durable consumers (`notifier-held`, `notifier-outcomes`, `notifier-escalated`), through a
FastStream application of its own (`workflow.notify.broker`), and asks the service's API for a
request's history — it never holds up the pipeline and never touches the database. Each notice
goes to every routed channel; a try that fails is retried with backoff (the message's ack
deadline is extended meanwhile), and after the last try the failure is recorded. Every
delivery, made or failed, is published as a `Notified` record on `<prefix>.notified.<workspace>`
(signed with the service's key, like every event it publishes) before the event is acked, so
a crash means the notice is sent again (receivers deduplicate on `X-Headgate-Delivery`), never
that it is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from faststream.nats import NatsBroker
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError
from prometheus_client import CollectorRegistry, Counter, Histogram
from pydantic import ValidationError

from workflow.client import transport
from workflow.client.trust import NotFromService, trust_for
from workflow.errors import ConnectError
from workflow.messages import Blocked, Escalated, InboxItem, Notified, ProposalHistory, Released
from workflow.notify.broker import ACK_WAIT, SOURCES, build_app, consumer_config
from workflow.notify.channels import Channel, DeliveryError, open_channel
from workflow.notify.config import NotifyConfig
from workflow.notify.routing import Routed, channels_for
from workflow.notify.text import Notice, held_notice, history_notice
from workflow.signing import ServiceKey
from workflow.subjects import Subjects

log = logging.getLogger("headgate.notify")

DAY = 24 * 3600.0
#: A notice whose request history the service cannot give yet is tried again after this long.
API_RETRY_DELAY = 2.0
#: A notice handed back at a stop comes back after this long, when the stopping notifier has
#: unsubscribed: handed back at once, it went straight to the stopping notifier's own pull, which
#: was then abandoned, and waited out the whole ack wait.
HAND_BACK_DELAY = 2.0


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
    """The notifier stops while a notice waits for its next try: it is handed back (nak) and
    comes back when a notifier runs again."""


class Notifier:
    """Reads its consumers on a FastStream broker of its own (`workflow.notify.broker`); the
    client `nc` asks the service for histories and publishes the delivery records. The broker
    connects to `servers` (by default those of `nc`) with `connect` (FastStream's `security=`,
    `name=`, ...)."""

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
        servers: Sequence[str] | None = None,
        connect: Mapping[str, Any] | None = None,
        signer: ServiceKey | None = None,
    ):
        self.nc = nc
        #: Signs the delivery records as the service's, like every event it publishes (the
        #: notifier runs in `headgate serve`).
        self.signer = signer
        self.js = nc.jetstream(timeout=10)
        self.config = config
        self.channels = channels
        self.subjects = subjects or Subjects()
        self.metrics = NotifyMetrics(registry or CollectorRegistry())
        self.clock = clock
        self.sleep = sleep
        self.fallback_secret = b""
        self._stopping = asyncio.Event()
        #: Notices in delivery at once, per consumer.
        self.max_inflight = max_inflight
        self.ack_wait = ack_wait
        self.servers = list(servers) if servers else [url.geturl() for url in nc.servers]
        self.connect = {"name": "headgate-notifier", **(connect or {})}
        self._in_hand: set[asyncio.Task[Any]] = set()

    @classmethod
    def open(
        cls, nc: NATS, config: NotifyConfig, *, fallback_secret: bytes, **options: Any
    ) -> Notifier:
        """Open every configured channel (ConfigError naming the one that cannot be opened)."""
        notifier = cls(nc, config, _open(config, fallback_secret), **options)
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
        for source in SOURCES:
            stream = self.subjects.stream(source.stream)
            try:
                await self.js.consumer_info(stream, source.durable)
                continue
            except NotFoundError:
                pass
            config = consumer_config(self.subjects, source, self.ack_wait)
            await self.js.add_consumer(stream, config=config)

    async def run(self, stop: asyncio.Event) -> None:
        """Read the three consumers until `stop` is set, then finish the notices in hand: a
        notice waiting for its next try is handed back at once, a try under way ends. Killed
        (cancelled), it drops the notices in hand unacked: they come back after the ack wait."""
        await self.ensure()
        self._stopping = stop
        broker = await self._started(stop)
        if broker is None:
            return
        try:
            await stop.wait()
            while self._in_hand:
                await asyncio.wait(set(self._in_hand))
        finally:
            # Stops fetching, then cancels what is still in hand (nothing, unless killed).
            await broker.stop()

    async def _started(self, stop: asyncio.Event) -> NatsBroker | None:
        """Its broker, started. One that cannot start (NATS unreachable, credentials refused)
        is logged and tried again with backoff (1 s, 2 s, … 30 s) until `stop`: nothing else
        watches the notifier, and a notifier that ended here would tell nobody anything."""
        delay = 1.0
        while not stop.is_set():
            broker = build_app(
                self.subjects, self._handle_guarded, self.servers,
                max_workers=self.max_inflight, ack_wait=self.ack_wait, **self.connect,
            )  # fmt: skip
            starting = asyncio.ensure_future(broker.start())
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if starting.done() and starting.exception() is None:
                return broker
            starting.cancel()
            with contextlib.suppress(BaseException):
                await starting
            if not starting.cancelled() and (exc := starting.exception()) is not None:
                log.error(
                    "notifier: cannot read its consumers on %s (%s: %s); trying again in %.0f s",
                    _where(self.servers), type(exc).__name__, exc, delay,
                )  # fmt: skip
            with contextlib.suppress(Exception):
                await broker.stop()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            delay = min(delay * 2, 30.0)
        return None

    async def _handle_guarded(self, msg: Msg) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._in_hand.add(task)
        try:
            if self._stopping.is_set():  # fetched while stopping: hand it back untouched
                await msg.nak(delay=HAND_BACK_DELAY)
                return
            await self.handle(msg)
        except Exception as exc:  # one notice never stops the notifier
            log.exception("notifier: %s failed; it will be tried again", msg.subject)
            with contextlib.suppress(Exception):
                await msg.nak(delay=API_RETRY_DELAY)
            del exc
        finally:
            self._in_hand.discard(task)

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
            await msg.nak(delay=HAND_BACK_DELAY)
            return
        for record in records:
            subject = self.subjects.notified(notice.workspace)
            data = record.model_dump_json().encode()
            headers = {"Nats-Msg-Id": f"notified:{record.delivery}:{record.channel}"}
            if self.signer is not None:
                headers |= self.signer.headers(subject, data)
            await self.js.publish(subject, data, headers=headers)
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


def _where(servers: Sequence[str]) -> str:
    """The servers without any user or password in their URLs."""
    return ", ".join(urlsplit(url)._replace(netloc=urlsplit(url).netloc.rpartition("@")[2])
                     .geturl() for url in servers)  # fmt: skip


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
