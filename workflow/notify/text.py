"""What a notification says: what is pending, in words and as JSON. Pure (the clock is passed).

Every text names the call — agent, tool, the command or target with secrets masked — and its
risk, the approvals so far, the time left and a link to the request. The agent's stated intent
is shown as what it is: the agent's own words, never verified. Secrets are masked everywhere,
in the reasons and the intent too (a reason may quote a command that holds a token).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from workflow.client.display import mask_text, target_of, time_left
from workflow.messages import (
    ApprovalRequirement,
    Classification,
    InboxItem,
    Proposal,
    ProposalHistory,
)
from workflow.notify.config import Event

INTENT_LABEL = "Intent (the agent's own words, unverified)"

_HEADLINES = {
    "held": "Approval needed",
    "released": "Approved and released",
    "rejected": "Rejected",
    "denied": "Denied",
    "expired": "Expired without a decision",
    "cancelled": "Cancelled by the agent",
    "escalated": "Still waiting for approval",
}


@dataclass(frozen=True, slots=True)
class Notice:
    """One thing to tell approvers about one request."""

    kind: str
    """`held`, an outcome (`released`, `rejected`, `denied`, `expired`, `cancelled`) or
    `escalated`."""
    request_id: str
    proposal_id: str
    agent: str
    workspace: str
    tool: str
    target: str
    intent: str | None
    risk_class: str
    severity: str
    reasons: tuple[str, ...]
    approvals: tuple[str, ...]
    approvals_needed: int
    roles: tuple[str, ...]
    created_at: datetime
    expires_at: datetime
    detail: str = ""
    """The outcome's reason or the escalation step, masked."""
    link: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def event(self) -> Event:
        if self.kind == "held":
            return "held"
        return "escalated" if self.kind == "escalated" else "outcome"

    @property
    def delivery_id(self) -> str:
        """Stable per request and event: a receiver deduplicates retries and redeliveries."""
        step = self.extra.get("step")
        return f"{self.request_id}:{self.kind}" + (f":{step}" if step is not None else "")

    def title(self) -> str:
        headline = _HEADLINES.get(self.kind, self.kind)
        return f"{headline}: {self.agent} · {self.tool} in {self.workspace}"

    def text(self, now: datetime) -> str:
        what = f"{self.tool} `{self.target}`" if self.target else self.tool
        count = f"{len(self.approvals)}/{self.approvals_needed} approvals"
        if self.approvals:
            count += f" ({', '.join(self.approvals)})"
        lines = [
            f"{self.agent} wants {what} in {self.workspace} — "
            f"{self.risk_class} ({self.severity}), {count}"
        ]
        if self.kind in ("held", "escalated"):
            left = time_left(self.expires_at, now)
            lines[0] += ", expired" if left == "expired" else f", {left} left"
        if self.detail:
            lines.append(self.detail)
        if self.intent:
            lines.append(f'{INTENT_LABEL}: "{self.intent}"')
        if self.reasons:
            lines.append("Why it is held: " + " ".join(self.reasons))
        where = self.link or f"headgate show {self.request_id}"
        lines.append(f"Request {self.request_id} — {where}")
        return "\n".join(lines)

    def body(self, now: datetime) -> dict[str, Any]:
        """The webhook's JSON body."""
        return {
            "event": self.kind,
            "delivery": self.delivery_id,
            "title": self.title(),
            "text": self.text(now),
            "request_id": self.request_id,
            "proposal_id": self.proposal_id,
            "agent": self.agent,
            "workspace": self.workspace,
            "tool": self.tool,
            "target": self.target,
            "intent": self.intent,
            "intent_verified": False,
            "risk_class": self.risk_class,
            "severity": self.severity,
            "reasons": list(self.reasons),
            "approvals": list(self.approvals),
            "approvals_needed": self.approvals_needed,
            "roles": list(self.roles),
            "created_at": self.created_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "seconds_left": max(0, int((self.expires_at - now).total_seconds())),
            "detail": self.detail,
            "url": self.link,
            **self.extra,
        }


def request_link(inbox_url: str | None, request_id: str) -> str | None:
    return f"{inbox_url.rstrip('/')}/requests/{request_id}" if inbox_url else None


def _notice(
    kind: str,
    request_id: str,
    proposal: Proposal,
    classification: Classification,
    requirement: ApprovalRequirement,
    approvals: tuple[str, ...],
    created_at: datetime,
    expires_at: datetime,
    inbox_url: str | None,
    detail: str = "",
    extra: dict[str, Any] | None = None,
) -> Notice:
    return Notice(
        kind=kind,
        request_id=request_id,
        proposal_id=proposal.id,
        agent=proposal.agent,
        workspace=proposal.workspace,
        tool=proposal.tool,
        target=target_of(proposal.arguments),
        intent=mask_text(proposal.intent) if proposal.intent else None,
        risk_class=str(classification.risk_class),
        severity=str(classification.severity),
        reasons=tuple(mask_text(r.message) for r in classification.reasons),
        approvals=approvals,
        approvals_needed=requirement.approvals_needed,
        roles=tuple(requirement.roles),
        created_at=created_at,
        expires_at=expires_at,
        detail=mask_text(detail),
        link=request_link(inbox_url, request_id),
        extra=extra or {},
    )


def held_notice(item: InboxItem, inbox_url: str | None) -> Notice:
    return _notice(
        "held", item.request_id, item.proposal, item.classification, item.requirement, (),
        item.created_at, item.expires_at, inbox_url,
    )  # fmt: skip


def history_notice(
    kind: str,
    history: ProposalHistory,
    inbox_url: str | None,
    *,
    detail: str = "",
    extra: dict[str, Any] | None = None,
) -> Notice | None:
    """A notice about a held request from its history (outcomes, escalations); None when the
    proposal was never held."""
    if history.request_id is None or history.requirement is None or history.expires_at is None:
        return None
    held_at = history.expires_at.timestamp() - history.requirement.ttl_seconds
    created = datetime.fromtimestamp(held_at, tz=history.expires_at.tzinfo)
    return _notice(
        kind, history.request_id, history.proposal, history.classification, history.requirement,
        tuple(a.approver for a in history.approvals if a.verdict == "approve"),
        created, history.expires_at, inbox_url, detail, extra,
    )  # fmt: skip
