"""The approver SDK: read pending requests, approve or reject them with a signed decision.

async with Approver.connect(url, name="alice", key=Path("alice.seed")) as approver:
    async for item in approver.inbox(workspaces=["acme"]):
        print(summarize(item))
        await item.approve(reason="looks right")
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from pydantic import ValidationError

from workflow.client import controls, transport
from workflow.client.connection import DEFAULT_CONNECT_TIMEOUT, NatsTarget, Role, resolve_nats
from workflow.client.display import summarize
from workflow.client.trust import trust_for
from workflow.client.verify import Decidable, DigestMismatch, check_digest, check_inbox_item
from workflow.controls import FreezeReply, GrantInfo, GrantScope
from workflow.errors import ConfigError, ConnectError, HeadgateError
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
#: An item whose decision was refused, and which this approver may still decide, is offered
#: again after this long (a refusal such as a skewed clock can be put right).
REOFFER_DELAY = 5.0
#: Pending requests asked for per fetched batch (their entries, not the whole proposals).
SNAPSHOT_LIMIT = 256
#: Refusals this approver's key can never overcome for the request: the item is not offered to
#: it again (its result message says so).
FINAL_REFUSALS = {
    "unknown_key": "its key is not a registered approver",
    "wrong_workspace": "it may not approve for this workspace",
    "no_role": "it has none of the roles this request needs",
    "self_approval": "it runs the agent that proposed the call",
    "duplicate_approver": "it has already approved this request",
    "digest_mismatch": "the request is for another version of the proposal",
}


@dataclass(frozen=True, slots=True)
class DecisionResult:
    """What the collector made of a decision: `accepted` is None when not waited for."""

    nonce: str
    accepted: bool | None
    message: str
    status: str
    #: Why a refused decision was refused (`no_role`, `stale`, …), as the service names it.
    refusal: str | None = None


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
        result = await self.approver.decide(self, verdict, reason, wait=wait, timeout=timeout)
        if result.accepted is False and result.status == "pending":
            final = FINAL_REFUSALS.get(result.refusal or "")
            if final is None:
                # Refused for a reason that can change (a skewed clock, a lost race): the item
                # goes back to the inbox and is offered again.
                await self._settle(nak=True, delay=self.approver.reoffer_delay)
                return _with_note(result, "The request is offered again.")
            await self._settle()
            return _with_note(result, f"Not offered to {self.approver.name} again: {final}.")
        await self._settle()
        return result

    async def _settle(self, *, nak: bool = False, delay: float | None = None) -> None:
        msg, self._msg = self._msg, None
        self.approver._offered.pop(self.request_id, None)
        if msg is not None:
            # An ack is confirmed by the server (ack_sync): once a decision returns, its item
            # is out of this approver's consumer, not merely on its way out.
            with contextlib.suppress(Exception):
                await (msg.nak(delay=delay) if nak else msg.ack_sync(timeout=5))


def _with_note(result: DecisionResult, note: str) -> DecisionResult:
    return DecisionResult(
        result.nonce, result.accepted, f"{result.message} {note}".strip(), result.status,
        result.refusal,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Snapshot:
    entries: dict[str, PendingEntry]
    #: Every pending request was in the answer: a request missing from it is not pending.
    complete: bool


class Approver:
    """An approver's connection: its inbox, and decisions signed with its key."""

    def __init__(
        self, nc: NATS, *, name: str, key: ApproverKey | None, prefix: str = "headgate",
        clock: Callable[[], datetime] | None = None, service_key: str | None = None,
        data_dir: Path | None = None,
    ):  # fmt: skip
        self.nc = nc
        self.name = name
        self.key = key  # None: read-only (inbox, pending); deciding needs a key
        self.subjects = Subjects(prefix)
        #: The service whose inbox items and answers this approver believes.
        self.trust = trust_for(nc, prefix, key=service_key, data_dir=data_dir)
        self.clock = clock or (lambda: datetime.now(UTC))
        #: Seconds before an item whose decision was refused (and may still succeed) comes back.
        self.reoffer_delay = REOFFER_DELAY
        #: Items offered and not yet decided or dismissed, by request id. Bounded by the inbox
        #: consumer's max_ack_pending: each holds an unacknowledged message.
        self._offered: dict[str, PendingRequest] = {}

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, url: str | NatsTarget | None = None, *, name: str, key: ApproverKey | Path,
        prefix: str = "headgate", data_dir: Path | None = None, service_key: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT, max_reconnect_attempts: int = -1,
        **nats_options: Any,
    ) -> AsyncIterator[Approver]:  # fmt: skip
        """Connect as approver `name`, signing with `key`.

        `url` (or, without it, `HEADGATE_NATS_URL` or the URL a local `headgate serve` recorded
        in `data_dir`) is where to connect; the approver credentials come from the environment
        or the data dir (see `workflow.client.connection.resolve_nats`), or pass a `NatsTarget`.
        The first connect fails with `ConnectError` after `connect_timeout` seconds; afterwards
        the connection is re-established after a restart of the server. Only inbox items and
        answers signed by the service are shown: `service_key` (else `HEADGATE_SERVICE_KEY`,
        the data dir's `service.pub`, or the key the service gives) is whose.
        """
        signer = key if isinstance(key, ApproverKey) else ApproverKey.from_file(key)
        target = url if isinstance(url, NatsTarget) else resolve_nats(
            url, role=Role.APPROVER, data_dir=data_dir
        )  # fmt: skip
        nc = await transport.connect(
            target, name=f"headgate-approver-{name}", connect_timeout=connect_timeout,
            max_reconnect_attempts=max_reconnect_attempts, **nats_options,
        )  # fmt: skip
        approver = cls(
            nc, name=name, key=signer, prefix=prefix, service_key=service_key, data_dir=data_dir
        )
        try:
            yield approver
        finally:
            await approver.release_undecided()
            with contextlib.suppress(Exception):
                await nc.drain()

    async def release_undecided(self) -> None:
        """Hand back the items offered but not decided, so the next session gets them at once
        (after a crash they come back when their ack wait passes)."""
        for item in list(self._offered.values()):
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
    ) -> AsyncGenerator[PendingRequest, None]:
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
            max_ack_pending=10_000, inactive_threshold=transport.DURABLE_INACTIVE_THRESHOLD,
            filter_subject=filters[0] if len(filters) == 1 else None,
            filter_subjects=filters if len(filters) > 1 else None,
        )  # fmt: skip
        await js.add_consumer(stream, config=config)  # creates, or updates the filters
        sub = await js.pull_subscribe_bind(durable=self.consumer, stream=stream)
        try:
            while True:
                try:
                    msgs = await sub.fetch(batch, timeout=poll)
                except TimeoutError:  # nats-py raises its own or asyncio's
                    continue
                except NatsError as exc:  # disconnected: nats-py reconnects, then fetch again
                    if self.nc.is_closed:  # it gave up (max_reconnect_attempts): so do we
                        raise ConnectError(f"the connection to NATS is closed ({exc})") from exc
                    log.debug("inbox fetch failed (%s); retrying", exc)
                    await asyncio.sleep(poll)
                    continue
                snapshot = await self._snapshot(workspaces)
                for msg in msgs:
                    item = await self._pending_item(msg, snapshot)
                    if item is not None:
                        self._offered[item.request_id] = item
                        yield item
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _snapshot(self, workspaces: Sequence[str] | None) -> _Snapshot:
        """What is pending now, in one query for a whole fetched batch (the items of a batch
        are committed before they are published, so the snapshot knows them all)."""
        query = PendingQuery(
            workspace=workspaces[0] if workspaces and len(workspaces) == 1 else None,
            limit=SNAPSHOT_LIMIT,
        )
        try:
            reply = await transport.ask(self.nc, self.subjects.api("pending"), query, PendingReply)
        except HeadgateError:
            return _Snapshot({}, complete=False)  # ask about each item instead
        entries = {e.request_id: e for e in reply.items}
        return _Snapshot(entries, complete=len(reply.items) < SNAPSHOT_LIMIT)

    async def _pending_item(self, msg: Msg, snapshot: _Snapshot) -> PendingRequest | None:
        try:
            signed = await self.trust.verified(msg.subject, msg.data, msg.headers)
        except ConnectError as exc:
            log.warning("cannot check inbox items now (%s); they come back later", exc)
            await msg.nak(delay=2.0)
            return None
        try:
            item = InboxItem.model_validate_json(msg.data)
        except ValidationError as exc:
            log.warning("ignoring an invalid inbox item: %s", exc.errors()[0]["msg"])
            await msg.ack()
            return None
        if not signed:
            # Anyone who may publish on the inbox subject could have made it, even under the
            # message id of a real request (which JetStream then drops as a duplicate): it is
            # never shown; the request it names is, as the service holds it, if it is pending.
            log.warning(
                "inbox item for request %s on %s is not signed by the Headgate service; "
                "showing the service's record of the request instead", item.request_id,
                msg.subject,
            )  # fmt: skip
        offered = self._offered.get(item.request_id)
        if offered is not None:
            # A redelivery of an item still being considered: answer through the newer copy.
            offered._msg = msg
            return None
        entry = snapshot.entries.get(item.request_id)
        if entry is None and snapshot.complete:
            await msg.ack()  # decided, expired or cancelled meanwhile: nothing to do
            return None
        if signed and entry is not None and entry.proposal_digest == item.proposal_digest:
            with contextlib.suppress(DigestMismatch):
                return PendingRequest(
                    self, check_inbox_item(item, msg.headers), list(entry.approvals), msg
                )
        try:
            history = await transport.history(self.nc, self.subjects, item.request_id)
        except ConnectError:
            history = None
        if history is None:
            await msg.nak(delay=2.0)  # the service answers for it shortly
            return None
        if history.status != "pending":
            await msg.ack()  # decided, expired or cancelled meanwhile: nothing to do
            return None
        shown = _trusted_item(item, history, msg.headers, signed=signed)
        if shown is None:
            await msg.ack()  # nothing that can be shown truthfully: never offered
            return None
        return PendingRequest(self, shown, _approvers(history), msg)

    async def decide(
        self, request: Decidable, verdict: DecisionVerdict, reason: str = "", *,
        wait: bool = True, timeout: float = 10.0,
        edited_arguments: Mapping[str, Any] | None = None,
    ) -> DecisionResult:  # fmt: skip
        """Sign and publish a decision on `request` (a `PendingRequest`, an `InboxItem`, a
        `ProposalHistory` …); with `wait`, return what the collector made of it.

        The digest signed is the one `request` carries, and only after the proposal it shows
        hashes to it: `DigestMismatch` otherwise, and nothing is signed. With
        `edited_arguments` the approval is of the call with those arguments instead (see
        `approve_edited`): the digest signed is the edited proposal's.
        """
        if self.key is None:
            raise ConfigError(f"approver {self.name} has no signing key; it can only read")
        check_digest(request.request_id, request.proposal, request.proposal_digest)
        request_id = request.request_id
        digest, edited = request.proposal_digest, None
        if edited_arguments is not None:
            if verdict is not DecisionVerdict.APPROVE:
                raise ConfigError("only an approval can carry an edited call")
            edited = dict(edited_arguments)
            digest = edited_proposal(request.proposal, edited).digest()
        decision = self.key.sign_decision(
            ApprovalDecision(
                request_id=request_id, proposal_digest=digest, verdict=verdict,
                approver=self.name, reason=reason, nonce=uuid.uuid4().hex,
                issued_at=self.clock(), edited_arguments=edited,
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

    async def approve_edited(
        self, request: Decidable, arguments: Mapping[str, Any], reason: str = "", *,
        wait: bool = True, timeout: float = 10.0,
    ) -> DecisionResult:  # fmt: skip
        """Approve the call with `arguments` instead of those proposed (edit before approve).

        The service classifies and evaluates the edited call like any proposal: it releases
        it (the agent runs the edited arguments, and the release says they were edited) only
        when the policy lets one approval release the edited call."""
        return await self.decide(
            request, DecisionVerdict.APPROVE, reason, wait=wait, timeout=timeout,
            edited_arguments=arguments,
        )  # fmt: skip

    async def approve_all(
        self, requests: Sequence[Decidable], reason: str = "", *, wait: bool = True,
        timeout: float = 10.0,
    ) -> list[DecisionResult]:  # fmt: skip
        """Approve a batch: one signed decision per request, each over the digest of the
        proposal it shows. Every digest is checked first; one that does not match raises
        `DigestMismatch` and nothing at all is signed (a tampered list approves none)."""
        self._signer()
        for request in requests:
            check_digest(request.request_id, request.proposal, request.proposal_digest)
        sent = [
            await self.decide(request, DecisionVerdict.APPROVE, reason, wait=False)
            for request in requests
        ]
        if not wait:
            return sent
        results = []
        for request, first in zip(requests, sent, strict=True):
            nonce = first.nonce

            async def verdict_of(request_id: str = request.request_id,
                                 nonce: str = nonce) -> DecisionResult | None:  # fmt: skip
                h = await transport.history(self.nc, self.subjects, request_id)
                return _result_for(h, nonce) if h is not None else None

            found = await transport.poll(verdict_of, timeout=timeout, first=0.02)
            results.append(found or first)
        return results

    # ------------------------------------------------------------------ controls

    def _signer(self) -> ApproverKey:
        if self.key is None:
            raise ConfigError(f"approver {self.name} has no signing key; it can only read")
        return self.key

    async def grant(
        self, request: Decidable, *, ttl: float | timedelta, scope: GrantScope | str | None = None,
        prefix: Sequence[str] | None = None, path_glob: str | None = None,
        any_agent: bool = False, this_session: bool = False, max_uses: int | None = None,
        reason: str = "",
    ) -> GrantInfo:  # fmt: skip
        """Allow calls like `request`'s for `ttl` (seconds or a timedelta): by default its
        own command (as an argv prefix) or its path's directory, for the same agent and
        workspace. The service checks the grant like an approval of `request`."""
        check_digest(request.request_id, request.proposal, request.proposal_digest)
        return await controls.issue_grant(
            self.nc, self.subjects, self._signer(), self.name, request_id=request.request_id,
            proposal=request.proposal,
            ttl=ttl if isinstance(ttl, timedelta) else timedelta(seconds=ttl),
            now=self.clock(), scope=GrantScope(scope) if scope else None, prefix=prefix,
            path_glob=path_glob, any_agent=any_agent, this_session=this_session,
            max_uses=max_uses, reason=reason,
        )  # fmt: skip

    async def grants(self, *, every: bool = False) -> list[GrantInfo]:
        """The grants in force (with `every`, also the expired, used-up and revoked ones)."""
        return await controls.list_grants(self.nc, self.subjects, every=every)

    async def revoke(self, grant_id: str, reason: str = "") -> GrantInfo:
        """Revoke a grant: it releases nothing from the next proposal on."""
        return await controls.revoke_grant(
            self.nc, self.subjects, self._signer(), self.name, grant_id, now=self.clock(),
            reason=reason,
        )  # fmt: skip

    async def freeze(
        self, *, agent: str | None = None, workspace: str | None = None,
        all_calls: bool = False, reason: str = "",
    ) -> FreezeReply:  # fmt: skip
        """Hold every consequential call of `agent` and/or `workspace` (neither: everything;
        `all_calls`: reads too) until the thaw."""
        return await controls.order_freeze(
            self.nc, self.subjects, self._signer(), self.name, thaw=False, now=self.clock(),
            agent=agent, workspace=workspace, all_calls=all_calls, reason=reason,
        )  # fmt: skip

    async def thaw(self, *, agent: str | None = None, workspace: str | None = None,
                   reason: str = "") -> FreezeReply:  # fmt: skip
        """Lift the freezes of exactly this scope."""
        return await controls.order_freeze(
            self.nc, self.subjects, self._signer(), self.name, thaw=True, now=self.clock(),
            agent=agent, workspace=workspace, reason=reason,
        )  # fmt: skip

    async def backtest(
        self, policy: str | Path, *, since: float | timedelta | None = None, examples: int = 3,
        timeout: float = 120.0,
    ) -> dict[str, Any]:  # fmt: skip
        """What `policy` (TOML text or a file) would have decided over the service's stored
        proposals (of the last `since` seconds): the report `headgate policy backtest --json`
        prints."""
        text = policy.read_text(encoding="utf-8") if isinstance(policy, Path) else policy
        period = timedelta(seconds=since) if isinstance(since, (int, float)) else since
        return await controls.run_backtest(
            self.nc, self.subjects, text, since=period, examples=examples, timeout=timeout
        )

    async def freezes(self) -> FreezeReply:
        return await controls.list_freezes(self.nc, self.subjects)


def edited_proposal(proposal: Proposal, arguments: Mapping[str, Any]) -> Proposal:
    """`proposal` with other arguments: the call an edited approval is signed over (the
    service builds it the same way)."""
    return Proposal.model_validate(
        {**proposal.model_dump(mode="json", exclude_none=True), "arguments": dict(arguments)}
    )


def _trusted_item(
    item: InboxItem, history: ProposalHistory, headers: dict[str, str] | None, *, signed: bool
) -> InboxItem | None:
    """The item to show: the one received when it is the service's and what the service holds,
    else the service's own record of the request (a forged or stale copy is never shown), else
    None."""
    if signed:
        try:
            checked = check_inbox_item(item, headers)
            if checked.proposal_digest == history.proposal_digest:
                return checked
            why = "its digest is not the one the service holds for the request"
        except DigestMismatch as exc:
            why = exc.why
        log.warning(
            "inbox item for request %s does not show what a decision would approve (%s); "
            "showing the service's record instead", item.request_id, why,
        )  # fmt: skip
    if history.request_id != item.request_id or history.requirement is None:
        return None
    if history.expires_at is None:
        return None
    try:
        record = InboxItem(
            request_id=item.request_id, proposal_id=history.proposal.id,
            proposal=history.proposal, proposal_digest=history.proposal_digest,
            classification=history.classification, verdict=history.verdict,
            requirement=history.requirement, created_at=_held_at(history, item),
            expires_at=history.expires_at,
        )  # fmt: skip
        return check_inbox_item(record)
    except (DigestMismatch, ValidationError) as exc:
        log.error("the service's record of request %s is not consistent either: %s",
                  item.request_id, exc)  # fmt: skip
        return None


def _held_at(history: ProposalHistory, item: InboxItem) -> datetime:
    for event in history.events:
        if event.kind == "held":
            return event.at
    return item.created_at


def _approvers(history: ProposalHistory) -> list[str]:
    return [a.approver for a in history.approvals]


def _result_for(history: ProposalHistory, nonce: str) -> DecisionResult | None:
    for event in history.events:
        if event.data.get("nonce") == nonce:
            message = str(event.data.get("message") or event.summary)
            refusal = event.data.get("refusal")
            return DecisionResult(
                nonce, event.kind == "decision.accepted", message, history.status,
                str(refusal) if refusal else None,
            )  # fmt: skip
    return None
