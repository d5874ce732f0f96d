"""Policy evaluation. Pure: classification + proposal + policy -> Verdict with its trail."""

from __future__ import annotations

from workflow.messages import Classification, Decision, Proposal, TrailStep, Verdict
from workflow.policy.model import Policy


def evaluate(proposal: Proposal, classification: Classification, policy: Policy) -> Verdict:
    trail: list[TrailStep] = []
    if not classification.tool_known:
        decision = policy.unknown_tool
        if decision is Decision.ALLOW:
            decision = Decision.REQUIRE_APPROVAL
        trail.append(
            TrailStep(
                step="unknown_tool",
                decision=decision,
                message=f"`{proposal.tool}` is unknown or changed: unknown_tool = {decision}.",
            )
        )
    else:
        decision = policy.classes.get(classification.risk_class, Decision.REQUIRE_APPROVAL)
        trail.append(
            TrailStep(
                step="risk_class",
                decision=decision,
                message=f"Risk class {classification.risk_class} decides {decision}.",
            )
        )
    reason = trail[-1].message
    requirement = None
    if decision is Decision.REQUIRE_APPROVAL:
        requirement = policy.approval.model_copy(
            update={"ttl_seconds": policy.default_ttl_seconds}
        )
    return Verdict(
        decision=decision,
        reason=reason,
        requirement=requirement,
        trail=trail,
        policy_revision=policy.revision,
    )
