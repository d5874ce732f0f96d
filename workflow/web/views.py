"""What the inbox page shows, built from the service's answers. Pure (the clock is passed).

Every proposal-dependent text an approver reads is masked here (secrets in arguments, the
intent and the reasons). The page itself never holds a secret: when the approver decides, the
browser fetches the proposal's canonical JSON, hashes it into the digest it signs and checks
that what the page shows is that proposal (`canonical_proposal`), so an approver is never shown
one call and made to sign another.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime

from workflow.client.display import mask_secrets, mask_text, target_of, time_left
from workflow.messages import PendingEntry, Proposal, ProposalHistory, canonical_json


@dataclass(frozen=True, slots=True)
class Viewer:
    """The signed-in approver, as far as the page needs to know."""

    approver: str
    roles: tuple[str, ...] = ()
    workspaces: tuple[str, ...] = ("*",)

    def may_approve_for(self, workspace: str) -> bool:
        return "*" in self.workspaces or workspace in self.workspaces


@dataclass(frozen=True, slots=True)
class ItemView:
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
    needed: int
    roles: tuple[str, ...]
    created_at: datetime
    expires_at: datetime
    time_left: str
    digest: str
    blocked_because: str | None = None
    """Why the viewer cannot decide this one (another workspace, a role, their own agent…)."""

    @property
    def fingerprint(self) -> str:
        """Changes whenever what the item shows changes (approvals, time left aside)."""
        parts = [self.request_id, ",".join(self.approvals), str(self.needed), self.digest]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Group:
    agent: str
    workspace: str
    items: tuple[ItemView, ...]


def canonical_proposal(proposal: Proposal) -> str:
    """The text `Proposal.digest` hashes."""
    return canonical_json(proposal.model_dump(mode="json", exclude_none=True))


def item_view(
    entry: PendingEntry, proposal: Proposal, viewer: Viewer | None, now: datetime
) -> ItemView:
    why: str | None = None
    roles = tuple(entry.requirement.roles)
    if viewer is not None:
        if not viewer.may_approve_for(entry.workspace):
            why = f"You may not approve for workspace {entry.workspace}."
        elif roles and not set(roles) & set(viewer.roles):
            why = f"Needs one of the roles {', '.join(roles)}."
        elif viewer.approver in entry.approvals:
            why = "You approved this already."
    return ItemView(
        request_id=entry.request_id,
        proposal_id=entry.proposal_id,
        agent=entry.agent,
        workspace=entry.workspace,
        tool=entry.tool,
        target=target_of(proposal.arguments),
        intent=mask_text(proposal.intent) if proposal.intent else None,
        risk_class=str(entry.risk_class),
        severity=str(entry.severity),
        reasons=tuple(mask_text(r) for r in entry.reasons),
        approvals=tuple(entry.approvals),
        needed=entry.requirement.approvals_needed,
        roles=roles,
        created_at=entry.created_at,
        expires_at=entry.expires_at,
        time_left=time_left(entry.expires_at, now),
        digest=entry.proposal_digest,
        blocked_because=why,
    )


def grouped(items: list[ItemView]) -> list[Group]:
    """Groups by agent and workspace; newest request first, in each group and among groups."""
    ordered = sorted(items, key=lambda i: i.created_at, reverse=True)
    groups: dict[tuple[str, str], list[ItemView]] = {}
    for item in ordered:
        groups.setdefault((item.agent, item.workspace), []).append(item)
    return [Group(agent, ws, tuple(members)) for (agent, ws), members in groups.items()]


@dataclass(frozen=True, slots=True)
class DetailView:
    item: ItemView | None
    """Set while the request is pending (the page then offers Approve and Reject)."""
    status: str
    proposal_pretty: str
    verdict_reason: str
    trail: tuple[tuple[str, str, str], ...]
    events: tuple[tuple[str, str, str], ...]
    approvals: tuple[str, ...] = field(default=())
    request_id: str | None = None
    proposal: Proposal | None = None


def detail_view(
    history: ProposalHistory, entry: PendingEntry | None, viewer: Viewer | None, now: datetime
) -> DetailView:
    proposal = history.proposal
    shown = mask_secrets(proposal.model_dump(mode="json", exclude_none=True))
    if isinstance(shown, dict) and isinstance(shown.get("intent"), str):
        shown["intent"] = mask_text(shown["intent"])
    return DetailView(
        item=item_view(entry, proposal, viewer, now) if entry is not None else None,
        status=history.status,
        proposal_pretty=json.dumps(shown, indent=2, ensure_ascii=False, sort_keys=True),
        verdict_reason=mask_text(history.verdict.reason),
        trail=tuple(
            (step.step, str(step.decision), mask_text(step.message))
            for step in history.verdict.trail
        ),
        events=tuple(
            (e.at.strftime("%Y-%m-%d %H:%M:%S"), e.kind, mask_text(e.summary))
            for e in history.events
        ),
        approvals=tuple(a.approver for a in history.approvals),
        request_id=history.request_id,
        proposal=proposal,
    )
