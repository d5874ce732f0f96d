"""The notifier's FastStream application: its three durable pull consumers and the delivery
records it publishes — the notifier's part of the AsyncAPI document (`headgate schemas`).

The notifier is an approver-side client with a broker of its own (it imports nothing of the
service). Each consumer is a concurrent FastStream pull subscriber bound to the durable the
notifier creates (`consumer_config`), so up to `max_workers` notices per consumer are in
delivery at once and one notice waiting for its next try holds up no other.

As in the service's application, handlers take no `Context` or `NatsMessage` parameter (the
broker runs with `apply_types=False`; the handler reads its message from `broker.context`) and
acks are the notifier's (`AckPolicy.MANUAL`): an event is acked once every delivery it caused is
recorded, handed back with a nak, or left unacked when the notifier dies. FastStream's default
would terminate an event whose handler raised. The broker waits for no handler when it stops
(`graceful_timeout=None`): the notifier finishes the notices in hand itself before it stops the
broker, and a notifier that is killed drops them unacked, so they come back.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Union

from faststream import AckPolicy
from faststream.nats import JStream, NatsBroker, PullSub
from nats.aio.msg import Msg
from nats.js import api
from pydantic import BaseModel

from workflow.messages import Blocked, Escalated, InboxItem, Notified, Released
from workflow.subjects import Subjects

#: FastStream's own lines: a consumer loop that failed and was restarted (errors), its task
#: notices (info, kept out of the service's log: `cli.logs`) and each message (debug).
log = logging.getLogger("headgate.notify.faststream")

ACK_WAIT = 60.0
#: Events asked for per pull; the consumers' `max_ack_pending` bounds the events in hand.
FETCH = 16
#: Seconds one pull waits for events (a stop does not wait for it).
FETCH_TIMEOUT = 5.0
MAX_ACK_PENDING = 1024


@dataclass(frozen=True, slots=True)
class Source:
    """One durable consumer of the notifier: the stream it reads and the events it gets."""

    durable: str
    stream: str
    kinds: tuple[str, ...]
    models: tuple[type[BaseModel], ...]
    description: str

    def filters(self, subjects: Subjects) -> list[str]:
        return [getattr(subjects, kind)(">") for kind in self.kinds]


SOURCES = (
    Source("notifier-held", "inbox", ("inbox",), (InboxItem,),
           "Held calls: each is told to the channels routed to it."),
    Source("notifier-outcomes", "results", ("released", "blocked"), (Released, Blocked),
           "How a held request ended (released, denied, rejected, expired, cancelled), told "
           "with who approved; outcomes of calls that were never held are skipped."),
    Source("notifier-escalated", "escalated", ("escalated",), (Escalated,),
           "Steps of a held request's escalation ladder, told to the roles and channels the "
           "step names as well as the routed ones."),
)  # fmt: skip


def consumer_config(subjects: Subjects, source: Source, ack_wait: float) -> api.ConsumerConfig:
    """A new consumer starts with what arrives from now on and never gives an event up."""
    return api.ConsumerConfig(
        durable_name=source.durable, ack_policy=api.AckPolicy.EXPLICIT, ack_wait=ack_wait,
        deliver_policy=api.DeliverPolicy.NEW, max_deliver=-1, max_ack_pending=MAX_ACK_PENDING,
        filter_subjects=source.filters(subjects),
    )  # fmt: skip


Handle = Callable[[Msg], Awaitable[None]]


async def _undocumented(msg: Msg) -> None:
    raise RuntimeError("documentation only")


def build_app(
    subjects: Subjects,
    handle: Handle = _undocumented,
    servers: Sequence[str] = ("nats://127.0.0.1:4222",),
    *,
    max_workers: int = 64,
    ack_wait: float = ACK_WAIT,
    **connect: Any,
) -> NatsBroker:
    """The notifier's broker: each event of its consumers goes to `handle`, which acks it.
    Without `handle`, the application for the AsyncAPI document (never started)."""
    broker = NatsBroker(
        list(servers), logger=log, log_level=logging.DEBUG, apply_types=False,
        graceful_timeout=None, **connect,
    )  # fmt: skip

    def message() -> Msg:
        raw: Msg = broker.context.get_local("message").raw_message
        return raw

    for source in SOURCES:

        async def notify(body: Any) -> None:
            await handle(message())

        payload: Any = Union[source.models]  # noqa: UP007 (a union built at run time)
        notify.__annotations__ = {"body": payload, "return": None}
        broker.subscriber(
            config=consumer_config(subjects, source, ack_wait),
            stream=JStream(subjects.stream(source.stream), declare=False),
            durable=source.durable,
            pull_sub=PullSub(batch_size=FETCH, timeout=FETCH_TIMEOUT),
            max_workers=max_workers,
            ack_policy=AckPolicy.MANUAL,
            title=source.durable,
            description=source.description,
        )(notify)

    broker.publisher(
        subjects.notified("*"), schema=Notified, title="notified",
        description="A notification delivered or failed, per channel (operators); published "
        "before the event it tells of is acked.",
    )  # fmt: skip
    return broker
