"""The approver SDK: read pending requests, approve or reject them with a signed decision.

async with Approver.connect(url, name="alice", key=Path("alice.seed")) as approver:
    async for item in approver.inbox(workspaces=["acme"]):
        print(summarize(item))
        await item.approve(reason="looks right")
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from pydantic import ValidationError

from workflow.client import transport
from workflow.client.display import summarize
from workflow.errors import ConfigError
from workflow.messages import (
    ApprovalDecision,
    ApprovalRequirement,
    Classification,
    DecisionVerdict,
    InboxItem,
    PendingEntry,
    PendingQuery,
    PendingReply,
    Proposal,
    ProposalHistory,
    Verdict,
)
from workflow.signing import ApproverKey
from workflow.subjects import Subjects

log = logging.getLogger("headgate.client.approver")

#: An undecided item is offered again after this long (and re-checked: gone items are acked).
INBOX_ACK_WAIT = 300.0


@dataclass(frozen=True, slots=True)
class DecisionResult:
    """What the collector made of a decision: `accepted` is None when not waited for."""

    nonce: str
    accepted: bool | None
    message: str
    status: str


class PendingRequest:
    """One held call waiting for approvals, as an approver sees it."""

    def __init__(self, approver: Approver, item: InboxItem, approvals: list[str],
                 msg: Msg | None = None):  # fmt: skip
        self.approver = approver
        self.item = item
        self.approvals = approvals
        self._msg = msg

    # What the request is about -------------------------------------------------------------
    @property
    def request_id(self) -> str:
        return self.item.request_id

    @property
    def proposal_id(self) -> str:
        return self.item.proposal_id

    @property
    def proposal_digest(self) -> str:
        return self.item.proposal_digest

    @property
    def created_at(self) -> datetime:
        return self.item.created_at

    @property
    def expires_at(self) -> datetime:
        return self.item.expires_at

    @property
    def proposal(self) -> Proposal:
        return self.item.proposal

    @property
    def agent(self) -> str:
        return self.item.proposal.agent

    @property
    def workspace(self) -> str:
        return self.item.proposal.workspace

    @property
    def tool(self) -> str:
        return self.item.proposal.tool

    @property
    def arguments(self) -> dict[str, Any]:
        return self.item.proposal.arguments

    @property
    def classification(self) -> Classification:
        return self.item.classification

    @property
    def risk_class(self) -> str:
        return str(self.item.classification.risk_class)

    @property
    def severity(self) -> str:
        return str(self.item.classification.severity)

    @property
    def reasons(self) -> list[str]:
        return [r.message for r in self.item.classification.reasons]

    @property
    def verdict(self) -> Verdict:
        return self.item.verdict

    @property
    def requirement(self) -> ApprovalRequirement:
        return self.item.requirement

    def __repr__(self) -> str:
        return f"<PendingRequest {self.request_id}: {summarize(self)}>"

    # What an approver does ----------------------------------------------------------------
    async def approve(self, reason: str = "", *, wait: bool = True,
                      timeout: float = 10.0) -> DecisionResult:  # fmt: skip
        return await self._decide(DecisionVerdict.APPROVE, reason, wait, timeout)

    async def reject(self, reason: str, *, wait: bool = True,
                     timeout: float = 10.0) -> DecisionResult:  # fmt: skip
        return await self._decide(DecisionVerdict.REJECT, reason, wait, timeout)

    async def dismiss(self) -> None:
        """Take the item out of this approver's inbox without deciding."""
        await self._settle()

    async def _decide(self, verdict: DecisionVerdict, reason: str, wait: bool,
                      timeout: float) -> DecisionResult:  # fmt: skip
        result = await self.approver.decide(
            self.request_id, self.proposal_digest, verdict, reason, wait=wait, timeout=timeout
        )
        await self._settle()
        return result

    async def _settle(self, *, nak: bool = False) -> None:
        msg, self._msg = self._msg, None
        if msg is not None:
            with contextlib.suppress(Exception):
                await (msg.nak() if nak else msg.ack())


class Approver:
    """An approver's connection: its inbox, and decisions signed with its key."""

    def __init__(self, nc: NATS, *, name: str, key: ApproverKey | None, prefix: str = "headgate"):
        self.nc = nc
        self.name = name
        self.key = key  # None: read-only (inbox, pending); deciding needs a key
        self.subjects = Subjects(prefix)
        self._offered: list[PendingRequest] = []

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, url: str, *, name: str, key: ApproverKey | Path, prefix: str = "headgate",
        **nats_options: Any,
    ) -> AsyncIterator[Approver]:  # fmt: skip
        signer = key if isinstance(key, ApproverKey) else ApproverKey.from_file(key)
        nc = await transport.connect(url, name=f"headgate-approver-{name}", **nats_options)
        approver = cls(nc, name=name, key=signer, prefix=prefix)
        try:
            yield approver
        finally:
            await approver.release_undecided()
            await nc.drain()

    async def release_undecided(self) -> None:
        """Hand back the items offered but not decided, so the next session gets them at once
        (after a crash they come back when their ack wait passes)."""
        for item in self._offered:
            await item._settle(nak=True)
        self._offered.clear()

    @property
    def consumer(self) -> str:
        return f"approver-{self.name}"

    async def pending(self, workspace: str | None = None, agent: str | None = None,
                      limit: int = 100) -> list[PendingEntry]:  # fmt: skip
        """What is pending now, oldest first (a snapshot from the service)."""
        reply = await transport.request(
            self.nc, self.subjects, "pending",
            PendingQuery(workspace=workspace, agent=agent, limit=limit), PendingReply,
        )  # fmt: skip
        return reply.items if reply is not None else []

    async def inbox(
        self, workspaces: Sequence[str] | None = None, *, batch: int = 32, poll: float = 0.5
    ) -> AsyncIterator[PendingRequest]:
        """Yield each pending request once, from the durable consumer `approver-<name>`.

        Requests published while this approver was offline are delivered when it comes back.
        An item stays in the consumer until it is approved, rejected or dismissed, or is found
        no longer pending (then it is acked and skipped), so a restarted approver sees every
        request it has not answered.
        """
        js = self.nc.jetstream()
        stream = self.subjects.stream("inbox")
        filters = [self.subjects.inbox(w) for w in workspaces] if workspaces else [
            self.subjects.inbox("*")
        ]  # fmt: skip
        config = ConsumerConfig(
            name=self.consumer, durable_name=self.consumer, deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.EXPLICIT, ack_wait=INBOX_ACK_WAIT, max_deliver=-1,
            max_ack_pending=10_000,
            filter_subject=filters[0] if len(filters) == 1 else None,
            filter_subjects=filters if len(filters) > 1 else None,
        )  # fmt: skip
        await js.add_consumer(stream, config=config)  # creates, or updates the filters
        sub = await js.pull_subscribe_bind(durable=self.consumer, stream=stream)
        offered: set[str] = set()
        try:
            while True:
                try:
                    msgs = await sub.fetch(batch, timeout=poll)
                except TimeoutError:  # nats-py raises its own or asyncio's
                    continue
                for msg in msgs:
                    item = await self._pending_item(msg, offered)
                    if item is not None:
                        offered.add(item.request_id)
                        self._offered.append(item)
                        yield item
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _pending_item(self, msg: Msg, offered: set[str]) -> PendingRequest | None:
        try:
            item = InboxItem.model_validate_json(msg.data)
        except ValidationError as exc:
            log.warning("ignoring an invalid inbox item: %s", exc.errors()[0]["msg"])
            await msg.ack()
            return None
        history = await transport.history(self.nc, self.subjects, item.request_id)
        if history is None:
            await msg.nak(delay=2.0)  # the service answers for it shortly
            return None
        if history.status != "pending":
            await msg.ack()  # decided, expired or cancelled meanwhile: nothing to do
            return None
        if item.request_id in offered:
            return None  # a redelivery of an item still being considered
        return PendingRequest(self, item, _approvers(history), msg)

    async def decide(
        self, request_id: str, proposal_digest: str, verdict: DecisionVerdict, reason: str = "",
        *, wait: bool = True, timeout: float = 10.0,
    ) -> DecisionResult:  # fmt: skip
        """Sign and publish a decision; with `wait`, return what the collector made of it."""
        if self.key is None:
            raise ConfigError(f"approver {self.name} has no signing key; it can only read")
        decision = self.key.sign_decision(
            ApprovalDecision(
                request_id=request_id, proposal_digest=proposal_digest, verdict=verdict,
                approver=self.name, reason=reason, nonce=uuid.uuid4().hex,
                issued_at=datetime.now(UTC),
            )
        )  # fmt: skip
        await transport.publish(
            self.nc, self.subjects.decisions(request_id), decision, f"decision:{decision.nonce}"
        )
        if not wait:
            return DecisionResult(decision.nonce, None, "sent", "pending")

        async def verdict_of() -> DecisionResult | None:
            h = await transport.history(self.nc, self.subjects, request_id)
            return _result_for(h, decision.nonce) if h is not None else None

        found = await transport.poll(verdict_of, timeout=timeout, first=0.02)
        if found is None:
            return DecisionResult(
                decision.nonce, None,
                f"the decision was sent but the service had not processed it within {timeout:g}s",
                "pending",
            )  # fmt: skip
        return found


def _approvers(history: ProposalHistory) -> list[str]:
    return [a.approver for a in history.approvals]


def _result_for(history: ProposalHistory, nonce: str) -> DecisionResult | None:
    for event in history.events:
        if event.data.get("nonce") == nonce:
            message = str(event.data.get("message") or event.summary)
            return DecisionResult(nonce, event.kind == "decision.accepted", message, history.status)
    return None
