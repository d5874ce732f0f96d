"""A verdict's trail as plain text or plain data, for `headgate explain` and the API.

No rich dependency: the CLI may wrap these lines in its own styling.
"""

from __future__ import annotations

from typing import Any

from workflow.classify.rulebook.spec import deciding_reason
from workflow.messages import Classification, Decision, Proposal, Verdict
from workflow.policy.requirement import describe

_MARK = {Decision.ALLOW: "allow", Decision.REQUIRE_APPROVAL: "hold", Decision.DENY: "deny"}


def explain_data(
    verdict: Verdict,
    classification: Classification | None = None,
    proposal: Proposal | None = None,
) -> dict[str, Any]:
    """The explanation as JSON-able data: decision, reason, requirement, trail, reasons."""
    data: dict[str, Any] = {
        "decision": verdict.decision.value,
        "reason": verdict.reason,
        "requirement": (
            verdict.requirement.model_dump(mode="json") if verdict.requirement else None
        ),
        "policy_revision": verdict.policy_revision,
        "trail": [
            {"step": s.step, "decision": s.decision.value, "message": s.message}
            for s in verdict.trail
        ],
    }
    if proposal is not None:
        data["proposal"] = {
            "id": proposal.id,
            "agent": proposal.agent,
            "workspace": proposal.workspace,
            "source": proposal.source,
            "tool": proposal.tool,
        }
    if classification is not None:
        data["classification"] = {
            "risk_class": classification.risk_class.value,
            "severity": classification.severity.value,
            "categories": [c.value for c in classification.categories],
            "fail_closed": classification.fail_closed,
            "tool_known": classification.tool_known,
            "reasons": [r.message for r in classification.reasons],
            "rules": [r.rule for r in classification.reasons],
            "deciding_rule": _deciding_rule(classification),
        }
    return data


def _deciding_rule(classification: Classification) -> str | None:
    i = deciding_reason(classification.reasons, classification.risk_class, classification.severity)
    return None if i is None else classification.reasons[i].rule


def explain_lines(
    verdict: Verdict,
    classification: Classification | None = None,
    proposal: Proposal | None = None,
) -> list[str]:
    """The explanation as plain-text lines, most important first."""
    lines: list[str] = []
    if proposal is not None:
        where = f"workspace {proposal.workspace}"
        if proposal.source:
            where += f", source {proposal.source}"
        lines.append(f"Proposal {proposal.id}: {proposal.agent} calls `{proposal.tool}` ({where}).")
    lines.append(f"Decision: {verdict.decision.value}. {verdict.reason}")
    if verdict.requirement is not None:
        lines.append(f"Requirement: {describe(verdict.requirement)}.")
    if classification is not None:
        lines.append(
            f"Classification: {classification.risk_class.value} "
            f"({classification.severity.value})"
            + (", failed closed" if classification.fail_closed else "")
            + ("" if classification.tool_known else ", unknown tool")
            + "."
        )
        decided = deciding_reason(
            classification.reasons, classification.risk_class, classification.severity
        )
        lines.extend(
            f"  ▶ {r.message} [{r.rule}] (decided the class)"
            if i == decided
            else f"  - {r.message} [{r.rule}]"
            for i, r in enumerate(classification.reasons)
        )
    lines.append(f"Policy trail (revision {verdict.policy_revision or 'unknown'}):")
    width = max((len(s.step) for s in verdict.trail), default=0)
    for number, step in enumerate(verdict.trail, start=1):
        lines.append(
            f"  {number}. {step.step.ljust(width)}  [{_MARK[step.decision]:>5}]  {step.message}"
        )
    return lines


def explain_text(
    verdict: Verdict,
    classification: Classification | None = None,
    proposal: Proposal | None = None,
) -> str:
    return "\n".join(explain_lines(verdict, classification, proposal))
