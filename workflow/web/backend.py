"""What the web inbox reads and writes, and how: through the service's API and the decisions
subject, like every other approver (no door of its own into the database).

`Backend` is the seam the web application is written against; `NatsBackend` is the one that
talks to a running service over NATS.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from workflow.client import transport
from workflow.controls import FreezeInfo, FreezeReply, FreezesQuery
from workflow.errors import HeadgateError
from workflow.messages import (
    InvitationQuery,
    InvitationReply,
    PasskeyInfo,
    PasskeyQuery,
    PasskeyRegistration,
    PendingEntry,
    PendingQuery,
    PendingReply,
    ProposalHistory,
)
from workflow.subjects import Subjects


class BackendError(HeadgateError):
    """The service refused a request; the message is a sentence for the approver."""


@dataclass(frozen=True, slots=True)
class DecisionResult:
    accepted: bool | None
    message: str
    status: str


class Backend(Protocol):
    async def pending(self) -> list[PendingEntry]: ...

    async def history(self, ident: str) -> ProposalHistory | None: ...

    async def decide(self, raw: dict[str, Any], *, timeout: float = 10.0) -> DecisionResult: ...

    async def invitation(self, token: str) -> InvitationReply | None: ...

    async def register(self, registration: PasskeyRegistration) -> str: ...

    async def passkey(self, credential_id: str) -> PasskeyInfo | None: ...

    async def watch(self, changed: Callable[[], None]) -> Callable[[], Awaitable[None]]: ...

    async def freezes(self) -> list[FreezeInfo]: ...


class NatsBackend:
    def __init__(self, nc: NATS, subjects: Subjects):
        self.nc = nc
        self.subjects = subjects

    async def pending(self) -> list[PendingEntry]:
        reply = await transport.ask(
            self.nc, self.subjects.api("pending"), PendingQuery(limit=1000), PendingReply
        )
        return reply.items

    async def history(self, ident: str) -> ProposalHistory | None:
        return await transport.history(self.nc, self.subjects, ident)

    async def freezes(self) -> list[FreezeInfo]:
        reply = await transport.ask(
            self.nc, self.subjects.api_control("freezes"), FreezesQuery(), FreezeReply
        )
        return reply.freezes

    async def decide(self, raw: dict[str, Any], *, timeout: float = 10.0) -> DecisionResult:
        """Publish a signed decision as received (its signature covers these very bytes'
        values) and wait for what the collector made of it."""
        request_id, nonce = str(raw["request_id"]), str(raw["nonce"])
        # A message id of its own per submission: a decision sent twice reaches the collector
        # twice, which refuses and audits the second as a replay instead of JetStream dropping
        # it unseen.
        await self.nc.jetstream().publish(
            self.subjects.decisions(request_id),
            json.dumps(raw, ensure_ascii=False).encode(),
            headers={"Nats-Msg-Id": f"decision:{nonce}:{uuid.uuid4().hex}"},
        )

        async def verdict() -> DecisionResult | None:
            history = await transport.history(self.nc, self.subjects, request_id)
            if history is None:
                return None
            for event in reversed(history.events):
                if event.data.get("nonce") == nonce:
                    message = str(event.data.get("message") or event.summary)
                    return DecisionResult(
                        event.kind == "decision.accepted", message, history.status
                    )
            return None

        found = await transport.poll(verdict, timeout=timeout, first=0.02)
        if found is None:
            return DecisionResult(
                None, f"Sent; the service had not processed it within {timeout:g} s.", "pending"
            )
        return found

    async def invitation(self, token: str) -> InvitationReply | None:
        return await transport.request(
            self.nc, self.subjects, "", InvitationQuery(token=token), InvitationReply,
            subject=self.subjects.api_web("invitation"),
        )  # fmt: skip

    async def register(self, registration: PasskeyRegistration) -> str:
        try:
            reply = await transport.ask(
                self.nc, self.subjects.api_web("register"), registration, PasskeyInfo
            )
        except transport.ApiRefused as exc:
            raise BackendError(str(exc)) from exc
        return reply.approver

    async def passkey(self, credential_id: str) -> PasskeyInfo | None:
        return await transport.request(
            self.nc, self.subjects, "", PasskeyQuery(credential_id=credential_id), PasskeyInfo,
            subject=self.subjects.api_web("passkey"),
        )  # fmt: skip

    async def watch(self, changed: Callable[[], None]) -> Callable[[], Awaitable[None]]:
        """Call `changed` whenever something that shows in the inbox may have changed: a request
        held, a decision sent, a request closed or escalated, a freeze put in force or lifted.
        Returns the unsubscribe."""
        s = self.subjects

        async def on(msg: Msg) -> None:
            changed()

        subs: list[Subscription] = [
            await self.nc.subscribe(subject, cb=on)
            for subject in (
                s.inbox(">"), s.decisions(">"), s.released(">"), s.blocked(">"),
                s.escalated(">"), s.controls(">"),
            )
        ]  # fmt: skip

        async def stop() -> None:
            for sub in subs:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()

        return stop
