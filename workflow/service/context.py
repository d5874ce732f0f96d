"""What every stage shares: connections, the store, the subjects and the current policy."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from workflow.effects import OutboxEvent
from workflow.policy.model import Policy
from workflow.service.held import HeldClassifications
from workflow.service.metrics import Metrics
from workflow.service.publishing import PublishedMarker, dead_letter_event, publish_events
from workflow.service.stage import DEFAULT_RETRY, RetryPolicy
from workflow.signing import ServiceKey
from workflow.store.priority import PriorityLock
from workflow.store.repo import Store
from workflow.subjects import Subjects

log = logging.getLogger("headgate.service")

#: What time it is, for everything the service decides (expiry, clock skew, timestamps).
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class ServiceContext:
    nc: NATS
    js: JetStreamContext
    store: Store
    subjects: Subjects
    policy: Policy
    retry: RetryPolicy = DEFAULT_RETRY
    metrics: Metrics = field(default_factory=Metrics)
    #: Where approvers' browsers reach the web inbox, when this service serves it.
    web_url: str | None = None
    #: A test hands in its own clock to move past a TTL instead of sleeping through it.
    clock: Clock = utc_now
    #: The stages' turns at the event loop (one core): the intake and the collector hold it
    #: while they compute, commit and send a batch (not while they wait for PubAcks); when
    #: both have a batch, the collector's (urgent: people wait for their approvals) goes first.
    turns: PriorityLock = field(default_factory=PriorityLock)
    #: Signs every event the service publishes and every API answer (`serve` loads it from
    #: the data dir or `--service-seed`; clients trust events that verify against it).
    signer: ServiceKey = field(default_factory=ServiceKey.generate)
    #: Marks the outbox rows of confirmed events published, for every stage, off their path.
    marker: PublishedMarker = field(init=False)
    #: The intake's classifications of the calls it held, for the re-check at release
    #: (None in an intake worker process: its calls are released by the main process).
    held: HeldClassifications | None = field(default_factory=HeldClassifications)

    def __post_init__(self) -> None:
        self.marker = PublishedMarker(self.store.outbox.mark_published)

    def now(self) -> datetime:
        return self.clock()

    async def publish(self, events: Sequence[OutboxEvent]) -> None:
        """Publish outbox events, wait for JetStream to confirm them, have them marked
        published (the republisher covers a crash)."""
        if not events:
            return
        self.marker.add(await publish_events(self.js, events, self.signer))

    async def dead(self, stage: str, msg: Msg, error: str) -> None:
        """Publish a message to `<prefix>.dead.<stage>` with the error, then ack it."""
        log.warning("dead letter from %s on %s: %.500s", stage, msg.subject, error)
        await publish_events(
            self.js, [dead_letter_event(self.subjects, stage, msg, error)], self.signer
        )
        await msg.ack()
        self.metrics.dead_letters.labels(stage).inc()
