"""Freezes: "hold everything in this scope now". Pure.

A freeze covers an agent, a workspace, both, or (neither named) everything. While one is in
force, every consequential call in its scope is held for approval — even one an `allow` or a
grant would release; reads keep flowing unless the freeze covers all calls. A denial stays a
denial. Requests already pending stay pending, and approvals of calls in scope are refused
until the thaw (`workflow.approvals.apply_decision`'s `frozen`), so nothing in scope is
released while frozen.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from workflow.classify.taxonomy import RiskClass
from workflow.messages import (
    ApprovalRequirement,
    Classification,
    Decision,
    Proposal,
    TrailStep,
    Verdict,
)


@dataclass(frozen=True, slots=True)
class FreezeTerms:
    freeze_id: str
    agent: str | None
    workspace: str | None
    all_calls: bool
    reason: str
    by: str
    at: datetime

    def covers(self, agent: str, workspace: str) -> bool:
        return (self.agent is None or self.agent == agent) and (
            self.workspace is None or self.workspace == workspace
        )

    def describe(self) -> str:
        scope = [f"agent {self.agent}" if self.agent else "", f"workspace {self.workspace}"
                 if self.workspace else ""]  # fmt: skip
        where = " in ".join(s for s in scope if s) or "every agent and workspace"
        why = f": {self.reason}" if self.reason else ""
        calls = "every call" if self.all_calls else "every call but reads"
        return f"{self.by} froze {calls} of {where}{why}"


def freezing(
    agent: str, workspace: str, freezes: Iterable[FreezeTerms], *, read: bool
) -> FreezeTerms | None:
    """The first freeze that holds a call of `agent` in `workspace` (a read only when the
    freeze covers all calls), or None."""
    for freeze in freezes:
        if freeze.covers(agent, workspace) and (freeze.all_calls or not read):
            return freeze
    return None


def frozen_verdict(
    proposal: Proposal,
    classification: Classification,
    verdict: Verdict,
    freezes: Iterable[FreezeTerms],
    requirement: ApprovalRequirement,
) -> Verdict | None:
    """The verdict under the freezes in force: None when none applies (or the call is denied
    anyway), else the call held for approval under at least `requirement`."""
    if verdict.decision is Decision.DENY:
        return None
    read = classification.risk_class is RiskClass.READ
    freeze = freezing(proposal.agent, proposal.workspace, freezes, read=read)
    if freeze is None:
        return None
    message = f"Frozen since {freeze.at.isoformat()} ({freeze.describe()}): the call is held."
    return Verdict(
        decision=Decision.REQUIRE_APPROVAL,
        reason=message,
        requirement=verdict.requirement or requirement,
        trail=[
            *verdict.trail,
            TrailStep(step="freeze", decision=Decision.REQUIRE_APPROVAL, message=message),
        ],
        policy_revision=verdict.policy_revision,
    )
