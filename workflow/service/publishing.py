"""Publishing a stage's events: pipelined with `Nats-Msg-Id`, confirmed before the input is
acked; dead letters; and marking outbox rows published off the hot path."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy, PubAck

from workflow.effects import OutboxEvent
from workflow.messages import DeadLetter
from workflow.service.pull import attempts
from workflow.service.streams import DUPLICATE_WINDOW
from workflow.signing import ServiceKey
from workflow.subjects import Subjects

log = logging.getLogger("headgate.stage")

PUBLISH_TIMEOUT = 10.0


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


async def send_events(
    js: JetStreamContext, events: Iterable[OutboxEvent], signer: ServiceKey
) -> Sent:
    """Publish pipelined with `Nats-Msg-Id`, without waiting for the PubAcks.

    Every event carries the service's signature over its subject and payload
    (`ServiceKey.headers`): clients trust an inbox item or a release only when it verifies
    against the service's public key, so no other NATS client can pass one off as the service's;
    and its `Nats-Msg-Id` carries a tag of the key (`ServiceKey.message_id`), so no other client
    can have JetStream drop it by publishing first under its id.
    """
    sent = Sent([], [])
    for event in events:
        payload = event.payload.encode()
        headers = {
            **(event.headers or {}),
            **signer.headers(event.subject, payload),
            "Nats-Msg-Id": signer.message_id(event.msg_id),
        }
        fut = await js.publish_async(event.subject, payload, headers=headers)
        sent.futures.append(fut)
        sent.ids.append(event.msg_id)
    return sent


#: An event first published longer ago than this may be outside the streams' duplicate
#: window: JetStream would store a re-sent copy again, so it is looked for in the stream first.
RESEND_HORIZON = DUPLICATE_WINDOW - 60.0
#: How far before an event's own time its stream is searched (the service's clock and the
#: server's may differ).
CLOCK_SLACK = timedelta(minutes=1)


async def to_resend(
    js: JetStreamContext,
    events: Sequence[tuple[OutboxEvent, datetime]],
    now: datetime,
    signer: ServiceKey,
) -> list[OutboxEvent]:
    """Of events that may not have reached JetStream, each with the time it was first sent,
    those to send again: every one still inside the duplicate window (JetStream drops a copy
    of what it holds), and the older ones their stream does not hold (a copy of those would
    be stored twice: a second `released` event). The stream is searched for the ids the
    service publishes under (`ServiceKey.message_id`): a message another client stored under
    the plain id does not count as the service's event."""
    horizon = now - timedelta(seconds=RESEND_HORIZON)
    young = [event for event, at in events if at > horizon]
    old = [(event, at) for event, at in events if at <= horizon]
    if not old:
        return young
    since: dict[str, datetime] = {}
    for event, at in old:
        since[event.subject] = min(since.get(event.subject, at), at)
    stored: set[str] = set()
    for subject, first in since.items():
        stored |= await stored_msg_ids(js, subject, first - CLOCK_SLACK)
    return young + [event for event, _ in old if signer.message_id(event.msg_id) not in stored]


async def stored_msg_ids(js: JetStreamContext, subject: str, since: datetime) -> set[str]:
    """The `Nats-Msg-Id`s of the messages a stream holds on `subject` from `since` on."""
    config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=since)
    sub = await js.subscribe(subject, ordered_consumer=True, config=config)
    found: set[str] = set()
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=2.0)
            except TimeoutError:  # nothing (more) from `since` on
                return found
            if msg.headers and "Nats-Msg-Id" in msg.headers:
                found.add(msg.headers["Nats-Msg-Id"])
            if msg.metadata.num_pending == 0:
                return found
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


async def publish_events(
    js: JetStreamContext, events: Iterable[OutboxEvent], signer: ServiceKey
) -> list[str]:
    """Publish pipelined with `Nats-Msg-Id`, signed; wait for every PubAck. Returns the ids."""
    return await (await send_events(js, events, signer)).confirmed()


#: The most of a dead message's payload (bytes) a dead letter keeps, and of its error
#: (characters): even escaped (a character can become six), the letter stays far below the
#: server's max payload (1 MB by default), so a large input cannot make its own dead letter
#: unpublishable.
DEAD_PAYLOAD_LIMIT = 32 * 1024
DEAD_ERROR_LIMIT = 2000


def dead_letter_event(subjects: Subjects, stage: str, msg: Msg, error: str) -> OutboxEvent:
    data = msg.data or b""
    kept = data[:DEAD_PAYLOAD_LIMIT]
    encoding: Literal["utf-8", "base64"] = "utf-8"
    try:
        data.decode()
        # Valid UTF-8 as a whole: a cut can only split the last character, which is dropped.
        payload = kept.decode(errors="ignore")
    except UnicodeDecodeError:
        payload, encoding = base64.b64encode(kept).decode(), "base64"
    if len(error) > DEAD_ERROR_LIMIT:
        error = error[: DEAD_ERROR_LIMIT - 1] + "…"
    digest = hashlib.sha256(data).hexdigest()
    try:
        seq = f"{msg.metadata.stream}:{msg.metadata.sequence.stream}"
    except Exception:  # not a JetStream message
        seq = f"{msg.subject}:{digest[:24]}"
    letter = DeadLetter(
        stage=stage,
        subject=msg.subject,
        error=error,
        payload=payload,
        payload_encoding=encoding,
        payload_size=len(data),
        payload_sha256=digest,
        truncated=len(kept) < len(data),
        deliveries=attempts(msg),
        received_at=datetime.now(UTC),
    )
    return OutboxEvent(
        msg_id=f"dead:{seq}", subject=subjects.dead(stage), payload=letter.model_dump_json()
    )


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
