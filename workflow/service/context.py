"""What every stage shares: connections, the store, the subjects and the current policy."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from workflow.policy.model import Policy
from workflow.service.metrics import Metrics
from workflow.service.runner import DEFAULT_RETRY, RetryPolicy, dead_letter_event, publish_events
from workflow.store.repo import OutboxEvent, Store
from workflow.subjects import Subjects

log = logging.getLogger("headgate.service")


@dataclass
class ServiceContext:
    nc: NATS
    js: JetStreamContext
    store: Store
    subjects: Subjects
    policy: Policy
    retry: RetryPolicy = DEFAULT_RETRY
    metrics: Metrics = field(default_factory=Metrics)

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def publish(self, events: Sequence[OutboxEvent]) -> None:
        """Publish outbox events and mark them published (the republisher covers a crash)."""
        if not events:
            return
        ids = await publish_events(self.js, events)
        await self.store.mark_published(ids)

    async def dead(self, stage: str, msg: Msg, error: str) -> None:
        """Publish a message to `<prefix>.dead.<stage>` with the error, then ack it."""
        log.warning("dead letter from %s on %s: %s", stage, msg.subject, error)
        await publish_events(self.js, [dead_letter_event(self.subjects, stage, msg, error)])
        await msg.ack()
        self.metrics.dead_letters.labels(stage).inc()
