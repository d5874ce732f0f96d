"""The load generator, the result observer and the bot approver.

Timestamps are taken in this one process with `time.perf_counter()`: when a proposal is handed
to the client to publish, and when its result event (or its inbox item) arrives on a core
subscription. Both systems under test are driven and observed by exactly the same code.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from time import perf_counter
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from workflow.errors import ConfigError
from workflow.ids import proposal_msg_id, report_msg_id
from workflow.messages import ApprovalDecision, DecisionVerdict
from workflow.signing import ApproverKey
from workflow.subjects import Subjects

KINDS = ("read", "write", "denied")
AGENTS = tuple(f"bench-{n}" for n in range(16))
#: Subscriptions of the observer must never drop a result (a core subscription drops silently).
SUB_LIMITS = {"pending_msgs_limit": 10_000_000, "pending_bytes_limit": 4 * 1024**3}


@dataclass(frozen=True, slots=True)
class Mix:
    """Shares of reads, approvable writes and denied calls."""

    read: float = 0.80
    write: float = 0.15
    denied: float = 0.05

    @classmethod
    def parse(cls, text: str) -> Mix:
        """'80,15,5' (percent of reads, writes, denied; normalised)."""
        try:
            parts = [float(p) for p in text.split(",")]
        except ValueError as exc:
            raise ConfigError(f"--mix must be three numbers like 80,15,5, not {text!r}") from exc
        if len(parts) != 3 or any(p < 0 for p in parts) or sum(parts) <= 0:
            raise ConfigError(f"--mix must be three non-negative numbers like 80,15,5: {text!r}")
        total = sum(parts)
        return cls(parts[0] / total, parts[1] / total, parts[2] / total)

    def kinds(self, rng: random.Random, n: int) -> list[str]:
        return rng.choices(KINDS, weights=(self.read, self.write, self.denied), k=n)

    def label(self) -> str:
        return f"{self.read:.0%} reads, {self.write:.0%} writes, {self.denied:.0%} denied"


READS_ONLY = Mix(1.0, 0.0, 0.0)

#: Every load tag starts with this; a proposal id ends with its load's tag.
TAG_PREFIX = "hgb"


def bench_proposal_id(tag: str) -> str:
    """Random first, as agents' uuid4 ids are: every insert lands somewhere else in the
    primary-key indexes (sequential ids would flatter the database's write cost)."""
    return f"{uuid.uuid4().hex[:20]}-{tag}"


def is_bench_proposal(proposal_id: str) -> bool:
    return proposal_id.rpartition("-")[2].startswith(TAG_PREFIX)


def proposal_json(pid: str, agent: str, kind: str, n: int) -> bytes:
    """A small proposal like an agent's: a read, an approvable write or a denied delete."""
    if kind == "read":
        tool, args = "read_file", f'{{"path": "src/pkg/module_{n % 997}.py"}}'
    elif kind == "write":
        tool, args = "write_file", f'{{"path": "notes/bench_{n % 997}.txt", "content": "line\\n"}}'
    else:
        tool, args = "delete_file", f'{{"path": "build/out_{n % 997}.o"}}'
    return (
        f'{{"id": "{pid}", "agent": "{agent}", "workspace": "bench", "tool": "{tool}", '
        f'"arguments": {args}, "intent": "benchmark"}}'
    ).encode()


@dataclass
class Tracker:
    """What one phase published, and when each result arrived."""

    relay: bool
    think: float = 0.0
    #: pid -> [kind, t_pub, t_inbox, t_decision]
    pending: dict[str, list[Any]] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)
    published: int = 0
    completed: int = 0
    unexpected: int = 0
    publish_errors: int = 0
    first_pub: float | None = None
    last_done: float | None = None
    window: int = 0
    space: asyncio.Event = field(default_factory=asyncio.Event)
    window_completed: int = 0

    def sent(self, pid: str, kind: str, t: float) -> None:
        self.pending[pid] = [kind, t, None, None]
        self.published += 1
        if self.first_pub is None:
            self.first_pub = t

    def puback(self, pid: str, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            self.publish_errors += 1
            if self.pending.pop(pid, None) is not None:
                self._freed()

    def _sample(self, name: str, value: float) -> None:
        self.samples.setdefault(name, []).append(value)

    def inbox(self, pid: str, t: float) -> bool:
        entry = self.pending.get(pid)
        if entry is None or entry[2] is not None:
            return False
        entry[2] = t
        self._sample("held", t - entry[1])
        return True

    def decided(self, pid: str, t: float) -> None:
        """The bot approver handed its decision on `pid` to the client at `t`."""
        entry = self.pending.get(pid)
        if entry is not None and entry[3] is None:
            entry[3] = t

    def done(self, pid: str, outcome: str, t: float) -> None:
        entry = self.pending.pop(pid, None)
        if entry is None:
            return
        kind, t_pub, t_inbox, t_decision = entry
        if self.relay:
            self._sample("relay", t - t_pub)
        else:
            if outcome != ("blocked" if kind == "denied" else "released"):
                self.unexpected += 1
            if kind == "read":
                self._sample("read", t - t_pub)
            elif kind == "write":
                if t_decision is not None:
                    self._sample("approved", t - t_decision)
                if t_inbox is not None:
                    self._sample("approved_from_inbox", t - t_inbox - self.think)
            else:
                self._sample("denied", t - t_pub)
        self.completed += 1
        self.window_completed += 1
        self.last_done = t
        self._freed()

    def _freed(self) -> None:
        if self.window and len(self.pending) < self.window:
            self.space.set()

    def take_window(self) -> tuple[dict[str, list[float]], int]:
        """The samples and completions since the last call (for per-minute soak figures)."""
        samples, completed = self.samples, self.window_completed
        self.samples, self.window_completed = {}, 0
        return samples, completed


class Observer:
    """Routes result events of both systems under test to the tracker of the running phase."""

    def __init__(self, subjects: Subjects, relay_prefix: str):
        self.subjects = subjects
        self.relay_prefix = relay_prefix
        self.tracker: Tracker | None = None
        self.bot: BotApprover | None = None
        #: Reports every release of Headgate's as executed (`--executions`); None: not.
        self.executions: ExecutionReports | None = None

    def decided(self, pid: str, t: float) -> None:
        if self.tracker is not None:
            self.tracker.decided(pid, t)

    async def subscribe(self, nc: NATS) -> None:
        s = self.subjects
        for subject in (s.released(), s.blocked()):
            await nc.subscribe(subject, cb=self._on_result, **SUB_LIMITS)  # type: ignore[arg-type]
        await nc.subscribe(s.inbox(), cb=self._on_inbox, **SUB_LIMITS)  # type: ignore[arg-type]
        await nc.subscribe(f"{self.relay_prefix}.out.>", cb=self._on_relayed, **SUB_LIMITS)  # type: ignore[arg-type]

    async def _on_result(self, msg: Msg) -> None:
        t = perf_counter()
        tracker = self.tracker
        mid = msg.headers.get("Nats-Msg-Id") if msg.headers else None
        if tracker is None or mid is None:
            return
        outcome, _, pid = mid.partition(":")
        tracker.done(pid.partition("~")[0], outcome, t)  # the id, without the service's tag
        if outcome == "released" and self.executions is not None:
            await self.executions.on_released(msg.data)

    async def _on_inbox(self, msg: Msg) -> None:
        t = perf_counter()
        body = json.loads(msg.data)
        if self.tracker is not None:
            self.tracker.inbox(body["proposal_id"], t)
        if self.bot is not None:
            await self.bot.on_inbox(body)

    async def _on_relayed(self, msg: Msg) -> None:
        t = perf_counter()
        tracker = self.tracker
        mid = msg.headers.get("Nats-Msg-Id") if msg.headers else None
        if tracker is None or mid is None:
            return
        # The relay re-sends under `relay:<agent>:<proposal id>`.
        tracker.done(mid.removeprefix("relay:").partition(":")[2], "relayed", t)


class _Publisher:
    """Publishes into JetStream without waiting, counting what it sent and what JetStream
    did not confirm."""

    def __init__(self, js: JetStreamContext, subjects: Subjects):
        self.js, self.subjects = js, subjects
        self.sent = 0
        self.errors = 0

    async def publish(self, subject: str, payload: bytes, msg_id: str) -> None:
        fut = await self.js.publish_async(subject, payload, headers={"Nats-Msg-Id": msg_id})
        fut.add_done_callback(self._acked)
        self.sent += 1

    def _acked(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            self.errors += 1


class BotApprover(_Publisher):
    """Approves every held call of the benchmark, at once or after `think` seconds."""

    def __init__(self, js: JetStreamContext, subjects: Subjects, key: ApproverKey, think: float):
        super().__init__(js, subjects)
        self.key, self.think = key, think
        self._tasks: set[asyncio.Task[None]] = set()
        #: Told (proposal id, time) as each decision is handed to the client.
        self.on_sent: Callable[[str, float], None] | None = None

    async def on_inbox(self, body: dict[str, Any]) -> None:
        if not is_bench_proposal(str(body.get("proposal_id", ""))):
            return  # not ours
        if self.think > 0:
            task = asyncio.create_task(self._later(body))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            await self._approve(body)

    async def _later(self, body: dict[str, Any]) -> None:
        await asyncio.sleep(self.think)
        await self._approve(body)

    async def _approve(self, body: dict[str, Any]) -> None:
        decision = self.key.sign_decision(
            ApprovalDecision(
                request_id=body["request_id"], proposal_digest=body["proposal_digest"],
                verdict=DecisionVerdict.APPROVE, approver="bench-bot", reason="benchmark",
                nonce=uuid.uuid4().hex, issued_at=datetime.now(UTC),
            )
        )  # fmt: skip
        if self.on_sent is not None:
            self.on_sent(str(body["proposal_id"]), perf_counter())
        await self.publish(
            self.subjects.decisions(decision.request_id), decision.model_dump_json().encode(),
            f"decision:{decision.nonce}",
        )  # fmt: skip


class ExecutionReports(_Publisher):
    """Reports every release of a benchmark proposal as executed, as a hook does once the
    call ran (`workflow.adapters.lite.Session.report`): the same subject, body and
    `Nats-Msg-Id`, published into JetStream at once (the call "ran" in no time)."""

    async def on_released(self, data: bytes) -> None:
        body = json.loads(data)
        pid, agent, release = body.get("proposal_id"), body.get("agent"), body.get("release_id")
        if not (isinstance(pid, str) and is_bench_proposal(pid)):
            return  # not ours
        report = {
            "release_id": release, "proposal_id": pid, "agent": agent, "success": True,
            "summary": "benchmark", "finished_at": datetime.now(UTC).isoformat(),
        }  # fmt: skip
        await self.publish(
            self.subjects.executed(str(agent)), json.dumps(report).encode(),
            report_msg_id(str(agent), str(release)),
        )  # fmt: skip


@dataclass
class Load:
    """One phase's load: how many, how fast, what mix, to which subjects."""

    subject_for: Callable[[str], str]
    mix: Mix
    count: int | None
    duration: float
    rate: float | None  # None: full speed under `window`
    window: int
    tag: str
    seed: int = 1


async def drive(
    js: JetStreamContext,
    load: Load,
    tracker: Tracker,
    tick: Callable[[], None] | None = None,
    max_outstanding: int = 50_000,
) -> None:
    """Publish the load; return when the last proposal is published."""
    rng = random.Random(load.seed)
    limit = load.count if load.count is not None else None
    start = perf_counter()
    stop_at = start + load.duration if limit is None else None
    tracker.window = load.window if load.rate is None else max_outstanding
    subject_for = load.subject_for
    i = 0
    kinds = load.mix.kinds(rng, 4096)

    async def one(n: int) -> None:
        kind = kinds[n % 4096]
        agent = AGENTS[n % len(AGENTS)]
        pid = bench_proposal_id(load.tag)
        data = proposal_json(pid, agent, kind, n)
        tracker.sent(pid, kind, perf_counter())
        # As agents send it (`workflow.ids`): the id carries the agent.
        msg_id = proposal_msg_id(agent, pid)
        fut = await js.publish_async(subject_for(agent), data, headers={"Nats-Msg-Id": msg_id})
        fut.add_done_callback(functools.partial(tracker.puback, pid))

    while True:
        now = perf_counter()
        if (limit is not None and i >= limit) or (stop_at is not None and now >= stop_at):
            break
        if load.rate is None:
            if len(tracker.pending) >= tracker.window:
                tracker.space.clear()
                await tracker.space.wait()
                continue
            await one(i)
            i += 1
            if i % 256 == 0:
                if tick is not None:
                    tick()
                await asyncio.sleep(0)
            continue
        due = int((now - start) * load.rate) + 1
        if limit is not None:
            due = min(due, limit)
        while i < due and len(tracker.pending) < tracker.window:
            await one(i)
            i += 1
        if tick is not None:
            tick()
        await asyncio.sleep(0.001)


async def settle(
    tracker: Tracker, tick: Callable[[], None] | None = None, idle_timeout: float = 15.0
) -> None:
    """Wait until every published proposal has its result, or nothing arrives for a while."""
    last, seen = perf_counter(), tracker.completed
    while tracker.pending:
        await asyncio.sleep(0.02)
        if tick is not None:
            tick()
        if tracker.completed != seen:
            last, seen = perf_counter(), tracker.completed
        elif perf_counter() - last > idle_timeout:
            return
