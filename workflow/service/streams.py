"""JetStream streams and the service's durable consumers, created idempotently.

| stream    | subjects                      | retention  | why                            |
|-----------|-------------------------------|------------|--------------------------------|
| PROPOSALS | proposals.>                   | work queue | read once by intake; per-agent |
|           |                               |            | backlog cap                    |
| DECISIONS | decisions.>, cancel.>         | work queue | read once by the collector     |
| EXECUTED  | executed.>                    | work queue | read once by the auditor       |
| INBOX     | inbox.>                       | limits 7 d | each approver has a durable    |
| RESULTS   | held.>, released.>, blocked.> | limits 7 d | agents read releases later     |
| DEAD      | dead.>                        | limits 30d | kept for an operator           |
| ESCALATED | escalated.>                   | limits 30d | the notifier tells the channels|
| NOTIFIED  | notified.>                    | limits 30d | every notification delivered   |
|           |                               |            | or failed, per channel         |
| CONTROLS  | controls.>                    | limits 30d | freezes, read by approvers     |

Duplicate window 10 minutes everywhere: longer than the longest redelivery backoff, so a stage
that re-publishes after a crash is always deduplicated by `Nats-Msg-Id`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

from nats.errors import ConnectionClosedError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import APIError, NotFoundError

from workflow.subjects import Subjects

log = logging.getLogger("headgate.streams")

DAY = 24 * 3600.0
DUPLICATE_WINDOW = 600.0
#: Acknowledge within this time or the message is redelivered: how long the messages a killed
#: replica had in hand wait before another replica gets them. Batches take milliseconds; a
#: stage tells the server it is still working on what it holds longer (every third of this,
#: `workflow.service.stage.KeepAlive`).
ACK_WAIT = 6.0
#: A message held longer than this is no longer reported in progress: a batch that hangs does
#: not keep its messages from every other replica (they come back `ACK_WAIT` later).
KEEP_ALIVE_AT_MOST = 60.0
#: Deliveries after which a message that keeps failing goes to the dead-letter subject.
MAX_ATTEMPTS = 5
#: Most unprocessed proposals one agent may have queued; more are refused at publish time, so a
#: flooding agent cannot push everyone else's calls minutes back in the queue.
PER_AGENT_BACKLOG = 10_000


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    stream: str
    durable: str
    filter_subjects: tuple[str, ...]
    #: A JetStream priority group (ADR-42, `prioritized` policy): the server hands a message to
    #: the waiting pull request of the lowest priority number, so a busy process can ask to be
    #: served only what the others have no room for. Every pull request must then name it.
    priority_group: str | None = None
    #: Seconds before an unacknowledged message is delivered again (the stage running it keeps
    #: what it holds longer in progress, every third of it).
    ack_wait: float = ACK_WAIT


#: Priorities of the pull requests on a prioritized consumer (the server allows 0-9).
PRIORITY_FIRST, PRIORITY_OVERFLOW = 0, 1


def stream_configs(
    subjects: Subjects, replicas: int = 1, per_agent_backlog: int = PER_AGENT_BACKLOG
) -> list[StreamConfig]:
    def cfg(kind: str, subs: list[str], **kw: object) -> StreamConfig:
        return StreamConfig(
            name=subjects.stream(kind),
            subjects=subs,
            storage=StorageType.FILE,
            num_replicas=replicas,
            duplicate_window=DUPLICATE_WINDOW,
            **kw,  # type: ignore[arg-type]
        )

    return [
        cfg(
            "proposals",
            [subjects.proposals(">")],
            retention=RetentionPolicy.WORK_QUEUE,
            max_age=7 * DAY,
            max_msgs_per_subject=per_agent_backlog,
            discard=DiscardPolicy.NEW,
            discard_new_per_subject=True,
        ),
        cfg(
            "decisions",
            [subjects.decisions(">"), subjects.cancel(">")],
            retention=RetentionPolicy.WORK_QUEUE,
            max_age=7 * DAY,
        ),
        cfg(
            "executed",
            [subjects.executed(">")],
            retention=RetentionPolicy.WORK_QUEUE,
            max_age=30 * DAY,
        ),
        cfg("inbox", [subjects.inbox(">")], retention=RetentionPolicy.LIMITS, max_age=7 * DAY),
        cfg(
            "results",
            [subjects.held(">"), subjects.released(">"), subjects.blocked(">")],
            retention=RetentionPolicy.LIMITS,
            max_age=7 * DAY,
        ),
        cfg("dead", [subjects.dead(">")], retention=RetentionPolicy.LIMITS, max_age=30 * DAY),
        # What the notifier reads besides the inbox and results, and what it records.
        cfg(
            "escalated",
            [subjects.escalated(">")],
            retention=RetentionPolicy.LIMITS,
            max_age=30 * DAY,
        ),
        cfg(
            "notified", [subjects.notified(">")], retention=RetentionPolicy.LIMITS, max_age=30 * DAY
        ),
        # Freezes put in force and lifted: news for live inboxes (the database is the record).
        # Approvers read it (not publish): direct gets answer the last change from any replica.
        cfg(
            "controls",
            [subjects.controls(">")],
            retention=RetentionPolicy.LIMITS,
            max_age=30 * DAY,
            allow_direct=True,
        ),
    ]


def service_consumers(subjects: Subjects) -> dict[str, ConsumerSpec]:
    return {
        # Prioritized: the main process, where the collector runs, asks at PRIORITY_OVERFLOW, the
        # intake workers at PRIORITY_FIRST (see Service.start).
        "intake": ConsumerSpec(
            subjects.stream("proposals"), "intake", (subjects.proposals(">"),), "intake"
        ),
        "collector": ConsumerSpec(
            subjects.stream("decisions"),
            "collector",
            (subjects.decisions(">"), subjects.cancel(">")),
        ),
        "auditor": ConsumerSpec(subjects.stream("executed"), "auditor", (subjects.executed(">"),)),
    }


@dataclass
class PrioritizedConsumer(ConsumerConfig):
    """A consumer config with the priority-group fields nats-py's ConsumerConfig lacks (its
    `as_dict` sends every field that is set)."""

    priority_groups: list[str] | None = None
    priority_policy: str | None = None


def consumer_config(spec: ConsumerSpec, *, max_ack_pending: int = 4096) -> ConsumerConfig:
    group = spec.priority_group
    return PrioritizedConsumer(
        durable_name=spec.durable,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=spec.ack_wait,
        # A margin over MAX_ATTEMPTS: the stage dead-letters at MAX_ATTEMPTS itself; the server
        # limit only stops a message that crashes the whole process from looping forever.
        max_deliver=MAX_ATTEMPTS + 3,
        max_ack_pending=max_ack_pending,
        filter_subjects=list(spec.filter_subjects),
        priority_groups=None if group is None else [group],
        priority_policy=None if group is None else "prioritized",
    )


async def ensure_streams(
    js: JetStreamContext,
    subjects: Subjects,
    replicas: int = 1,
    *,
    deadline: float = 60.0,
    per_agent_backlog: int = PER_AGENT_BACKLOG,
) -> None:
    """Create the streams, or bring an existing stream's config up to date.

    Several replicas may start at once against a cluster that is still electing leaders, so
    each step is retried (two creators race: the loser finds the stream and updates it).
    """
    for config in stream_configs(subjects, replicas, per_agent_backlog):
        await _retrying(partial(_ensure_stream, js, config), f"stream {config.name}", deadline)


_COMPARED = (
    "subjects", "retention", "storage", "num_replicas", "duplicate_window", "max_age",
    "max_msgs_per_subject", "discard", "discard_new_per_subject", "allow_direct",
)  # fmt: skip


async def _ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    assert config.name is not None
    try:
        info = await js.stream_info(config.name)
    except NotFoundError:
        await js.add_stream(config=config)
        return
    # Update only when something differs: an update racing the creation of a replicated stream
    # by another replica stalls both requests on a cluster.
    current = info.config
    if any(_setting(current, f) != _setting(config, f) for f in _COMPARED):
        await js.update_stream(config=config)


def _setting(config: StreamConfig, name: str) -> object:
    """A setting as the server reports it: an unset flag is false."""
    value = getattr(config, name)
    return bool(value) if name in _FLAGS else value


_FLAGS = frozenset({"discard_new_per_subject", "allow_direct"})


async def ensure_consumer(js: JetStreamContext, spec: ConsumerSpec, deadline: float = 60.0) -> None:
    """Create the durable, or update it: a durable's config is not updated by re-binding."""
    await _retrying(
        lambda: js.add_consumer(spec.stream, config=consumer_config(spec)),
        f"consumer {spec.durable}",
        deadline,
    )


async def _retrying(step: Callable[[], Awaitable[object]], what: str, deadline: float) -> None:
    loop = asyncio.get_running_loop()
    give_up = loop.time() + deadline
    delay = 0.25
    while True:
        try:
            await step()
            return
        except (TimeoutError, NatsTimeoutError, APIError, ConnectionClosedError) as exc:
            if loop.time() + delay > give_up:
                raise
            log.info("creating %s: %s; retrying", what, exc or type(exc).__name__)
            # Jitter: replicas starting together must not retry in lock step.
            await asyncio.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, 3.0)
