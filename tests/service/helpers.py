"""Test helpers: an in-process service on its own subject prefix, and a raw nats-py observer."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from workflow.datadir import local_approver
from workflow.messages import ApprovalDecision, DecisionVerdict
from workflow.service.lifecycle import Service
from workflow.service.settings import Settings
from workflow.signing import ApproverKey
from workflow.subjects import Subjects

T = TypeVar("T")


class FakeClock:
    """The service's clock in a test: real UTC time plus an offset the test moves forward
    (a TTL passes when the test says so, not after sleeping through it)."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


def unique_prefix() -> str:
    return f"hg{uuid.uuid4().hex[:10]}"


@dataclass
class Observer:
    """Collects every event under a prefix as it is published."""

    nc: NATS
    subjects: Subjects
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def start(self) -> None:
        await self.nc.subscribe(f"{self.subjects.prefix}.>", cb=self._on)

    async def _on(self, msg: Msg) -> None:
        kind = msg.subject.split(".")[-2] if msg.subject.count(".") >= 2 else msg.subject
        try:
            body = json.loads(msg.data)
        except ValueError:
            body = {"raw": msg.data.decode(errors="replace")}
        body["_subject"] = msg.subject
        async with self.changed:
            self.events.setdefault(kind, []).append(body)
            self.changed.notify_all()

    def of(self, kind: str, proposal_id: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events.get(kind, [])
            if proposal_id is None or e.get("proposal_id") == proposal_id
        ]

    async def wait_for(
        self, kind: str, proposal_id: str | None = None, *, count: int = 1, timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        async def enough() -> list[dict[str, Any]]:
            async with self.changed:
                await self.changed.wait_for(lambda: len(self.of(kind, proposal_id)) >= count)
            return self.of(kind, proposal_id)

        return await asyncio.wait_for(enough(), timeout)


async def propose(
    nc: NATS,
    subjects: Subjects,
    *,
    agent: str = "agent-1",
    tool: str = "read_file",
    arguments: dict[str, Any] | None = None,
    pid: str | None = None,
    **extra: Any,
) -> str:
    pid = pid or f"p-{uuid.uuid4().hex[:12]}"
    body = {"id": pid, "agent": agent, "tool": tool, "arguments": arguments or {}, **extra}
    await nc.jetstream().publish(
        subjects.proposals(agent), json.dumps(body).encode(), headers={"Nats-Msg-Id": pid}
    )
    return pid


def decision(
    key: ApproverKey, request_id: str, digest: str, verdict: str = "approve", **over: Any
) -> ApprovalDecision:
    body = ApprovalDecision(
        request_id=request_id,
        proposal_digest=digest,
        verdict=DecisionVerdict(verdict),
        approver=over.pop("approver", "tester"),
        nonce=over.pop("nonce", uuid.uuid4().hex),
        issued_at=over.pop("issued_at", datetime.now(UTC)),
        reason=over.pop("reason", ""),
    )
    return key.sign_decision(body)


async def send_decision(nc: NATS, subjects: Subjects, d: ApprovalDecision) -> None:
    await nc.jetstream().publish(
        subjects.decisions(d.request_id),
        d.model_dump_json().encode(),
        headers={"Nats-Msg-Id": f"decision:{d.nonce}"},
    )


async def wait_until(
    probe: Callable[[], Awaitable[T]], done: Callable[[T], bool], timeout: float = 10.0
) -> T:
    """Poll an async probe until `done` holds (for state not announced by an event)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await probe()
        if done(value):
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s; last value {value!r}")
        await asyncio.sleep(0.05)


@dataclass
class Harness:
    service: Service
    nc: NATS
    observer: Observer
    subjects: Subjects
    key: ApproverKey
    data_dir: Path

    async def service_history(self, ident: str) -> dict[str, Any]:
        msg = await self.nc.request(
            self.subjects.api("get"), json.dumps({"id": ident}).encode(), timeout=5
        )
        return json.loads(msg.data)  # type: ignore[no-any-return]

    async def audit_kinds(self) -> list[str]:
        assert self.service.ctx is not None
        return [r.kind for r in await self.service.ctx.store.audit.rows()]

    async def stream_events(self, subject: str, proposal_id: str) -> list[dict[str, Any]]:
        """Every message stored in JetStream on `subject` for one proposal."""
        js = self.nc.jetstream()
        sub = await js.subscribe(subject, ordered_consumer=True)
        found: list[dict[str, Any]] = []
        try:
            while True:
                try:
                    msg = await sub.next_msg(timeout=0.5)
                except Exception:
                    break
                body = json.loads(msg.data)
                if body.get("proposal_id") == proposal_id:
                    found.append(body)
        finally:
            await sub.unsubscribe()
        return found


@asynccontextmanager
async def running_service(
    nats_url: str, data_dir: Path, *, prefix: str | None = None, **settings: Any
) -> AsyncIterator[Harness]:
    prefix = prefix or unique_prefix()
    service = Service(Settings(data_dir=data_dir, nats_url=nats_url, prefix=prefix, **settings))
    await service.start()
    nc = await nats.connect(nats_url)
    observer = Observer(nc, Subjects(prefix))
    await observer.start()
    key, _, _ = local_approver(data_dir)
    try:
        yield Harness(service, nc, observer, Subjects(prefix), key, data_dir)
    finally:
        try:
            await asyncio.wait_for(nc.drain(), 5)
        except Exception:  # the test may have killed the server
            await nc.close()
        await service.stop()
