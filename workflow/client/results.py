"""An agent's results stream: held / released / blocked events for its proposals.

One ordered JetStream consumer per client, created with deliver-new *before* the client's first
publish, so every event of a proposal this client makes reaches it, even one that arrives before
anybody awaits it (it waits in a future keyed by proposal id). An ordered consumer also resumes
after a reconnect from the last sequence it saw, where a core subscription would lose the
events published meanwhile. Events of proposals made elsewhere (another process, before this
client existed) are found by `find`, which reads the stream from a start time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import weakref
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import ConsumerConfig, DeliverPolicy
from pydantic import ValidationError

from workflow.client.connection import when_reconnected
from workflow.client.trust import ServiceTrust
from workflow.errors import ConnectError
from workflow.messages import Blocked, Held, Released
from workflow.subjects import Subjects

log = logging.getLogger("headgate.client")

#: The terminal event of a proposal (its `outcomes.Outcome` is `released` or a blocked one).
OutcomeEvent = Released | Blocked
Event = Held | Released | Blocked

#: Seconds between the server's heartbeats on an idle results consumer; two missed ones make
#: nats-py recreate the consumer.
HEARTBEAT = 2.0

#: Slack between the service's clock (proposal times) and the server's (stream timestamps).
CLOCK_SLACK = timedelta(minutes=5)


def results_filter(subjects: Subjects, agent: str) -> str:
    """`<prefix>.*.<agent>`: on the results stream, exactly this agent's held, released and
    blocked subjects — the single filter the deploy permissions pin an agent's consumers to."""
    return subjects.results(agent)


@dataclass
class NamedConsumer(ConsumerConfig):
    """A consumer config that gets a fresh name each time nats-py creates a consumer from it.

    A named consumer is created through `$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>`,
    where the server checks the filter against the config: the only create subject a NATS user
    limited to its own results may be allowed (an unnamed one goes through the bare
    `CONSUMER.CREATE.<stream>`, whose filter nothing checks). nats-py copies the config
    (`evolve`) before every create, also when it remakes an ordered consumer after a gap; the
    copy is named anew, so the remade consumer never collides with the one it replaces.
    """

    def __post_init__(self) -> None:
        tail = (self.filter_subject or "").rsplit(".", 1)[-1]
        self.name = f"{tail if tail not in ('', '*', '>') else 'results'}-{os.urandom(6).hex()}"


async def parse_event(subjects: Subjects, msg: Msg, trust: ServiceTrust) -> Event | None:
    """The event in a results-stream message, or None (logged) when it is not one.

    Every results event a client acts on (the router's, `find`'s, the unattended worker's)
    passes here with its message: one not signed by the service (`trust`) is not an event —
    anyone who may publish on a results subject could otherwise release a call. Raises
    `ConnectError` when the service's key cannot be learnt now (the message is kept for later).
    """
    if not await trust.verified(msg.subject, msg.data, msg.headers):
        log.warning(
            "ignoring a message on %s that is not signed by the Headgate service", msg.subject
        )
        return None
    try:
        if subjects.token_after(msg.subject, "released") is not None:
            return Released.model_validate_json(msg.data)
        if subjects.token_after(msg.subject, "blocked") is not None:
            return Blocked.model_validate_json(msg.data)
        if subjects.token_after(msg.subject, "held") is not None:
            return Held.model_validate_json(msg.data)
    except ValidationError as exc:
        log.warning("ignoring an invalid event on %s: %s", msg.subject, exc.errors()[0]["msg"])
        return None
    log.warning("ignoring a message on an unexpected subject %s", msg.subject)
    return None


@dataclass
class Watch:
    """What a client waits for about one proposal."""

    first: asyncio.Future[Event]
    outcome: asyncio.Future[OutcomeEvent]


@dataclass
class ResultRouter:
    """Routes this agent's events to the watches of their proposals.

    A watch lives as long as something holds it (the ticket of its proposal, or a call waiting
    on it) and no longer: the router keeps it by weak reference, and forgets it as soon as the
    outcome is known. An agent that proposes for days keeps no watch per past proposal.
    """

    nc: NATS
    subjects: Subjects
    agent: str
    trust: ServiceTrust
    watches: weakref.WeakValueDictionary[str, Watch] = field(
        default_factory=weakref.WeakValueDictionary
    )
    _sub: Subscription | None = None
    #: The stream sequence of the last event routed, and when the router started: where a
    #: consumer made after a reconnect resumes.
    _last_seq: int = 0
    _started: datetime | None = None
    _resuming: asyncio.Task[None] | None = None
    _stopped: bool = False

    async def start(self) -> None:
        self._started = datetime.now(UTC)
        self._sub = await self._subscribe(NamedConsumer(deliver_policy=DeliverPolicy.NEW))
        when_reconnected(self.nc, self._after_reconnect)

    async def _subscribe(self, config: NamedConsumer) -> Subscription:
        return await self.nc.jetstream().subscribe(
            results_filter(self.subjects, self.agent),
            stream=self.subjects.stream("results"),
            ordered_consumer=True,
            idle_heartbeat=HEARTBEAT,
            config=config,
            cb=self._on_message,
        )

    async def _after_reconnect(self) -> None:
        # The server may have restarted and lost the ephemeral consumer: make a new one at
        # once (nats-py would notice only after two missed heartbeats).
        if not self._stopped and (self._resuming is None or self._resuming.done()):
            self._resuming = asyncio.create_task(self.resume())

    async def resume(self, attempts: int = 60) -> None:
        """A new ordered consumer from the event after the last one routed (events delivered
        twice are harmless: a watch takes its first)."""
        if self._last_seq:
            config = NamedConsumer(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=self._last_seq + 1
            )
        else:
            since = (self._started or datetime.now(UTC)) - CLOCK_SLACK
            config = NamedConsumer(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=since)
        for _ in range(attempts):  # JetStream may still be recovering its streams
            if self._stopped:
                return
            try:
                fresh = await self._subscribe(config)
            except Exception as exc:
                log.debug("results consumer not made yet (%s); retrying", exc)
                await asyncio.sleep(0.5)
                continue
            old, self._sub = self._sub, fresh
            if old is not None:
                with contextlib.suppress(Exception):
                    await old.unsubscribe()
            return
        log.warning("could not make a new results consumer after reconnecting; relying on "
                    "the periodic status check")  # fmt: skip

    async def stop(self) -> None:
        self._stopped = True
        if self._resuming is not None:
            self._resuming.cancel()
            with contextlib.suppress(BaseException):
                await self._resuming
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None
        for watch in list(self.watches.values()):
            for fut in (watch.first, watch.outcome):
                if not fut.done():
                    fut.cancel()
        self.watches.clear()

    def watch(self, proposal_id: str) -> Watch:
        """Register interest in a proposal (before publishing it); idempotent. The caller keeps
        the watch it gets: the router drops it when nothing else refers to it."""
        found = self.watches.get(proposal_id)
        if found is None:
            loop = asyncio.get_running_loop()
            found = self.watches[proposal_id] = Watch(loop.create_future(), loop.create_future())
        return found

    def forget(self, proposal_id: str) -> None:
        self.watches.pop(proposal_id, None)

    def deliver(self, event: Event) -> None:
        watch = self.watches.get(event.proposal_id)
        if watch is None:
            return
        if not watch.first.done():
            watch.first.set_result(event)
        if not isinstance(event, Held) and not watch.outcome.done():
            watch.outcome.set_result(event)

    async def _on_message(self, msg: Msg) -> None:
        with contextlib.suppress(Exception):
            self._last_seq = max(self._last_seq, msg.metadata.sequence.stream)
        try:
            event = await parse_event(self.subjects, msg, self.trust)
        except ConnectError as exc:  # the periodic status check finds the outcome later
            log.warning("cannot check the event on %s now: %s", msg.subject, exc)
            return
        if event is not None:
            self.deliver(event)

    async def find(
        self, proposal_id: str, since: datetime, timeout: float = 10.0
    ) -> OutcomeEvent | None:
        """Read this agent's results from `since` (minus clock slack) for the proposal's outcome."""
        js = self.nc.jetstream()
        config = NamedConsumer(
            deliver_policy=DeliverPolicy.BY_START_TIME,
            opt_start_time=since - CLOCK_SLACK,
        )
        sub = await js.subscribe(
            results_filter(self.subjects, self.agent),
            stream=self.subjects.stream("results"),
            ordered_consumer=True,
            config=config,
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while loop.time() < deadline:
                try:
                    msg = await sub.next_msg(timeout=min(0.5, max(deadline - loop.time(), 0.01)))
                except TimeoutError:  # nats-py raises its own or asyncio's
                    return None  # a new consumer delivers at once: silence means nothing left
                event = await parse_event(self.subjects, msg, self.trust)
                if event is not None and not isinstance(event, Held):
                    if event.proposal_id == proposal_id:
                        return event
                if msg.metadata.num_pending == 0:
                    return None
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        return None
