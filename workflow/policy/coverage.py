"""Requirements nobody can satisfy. Pure: Policy -> the rules that hold calls for ever.

A policy can be valid and still hold calls that no registered approver can ever release: no
approvers at all, a requirement whose roles nobody has, a workspace nobody may approve for, or
a quorum (four-eyes counts as two) above the number of approvers who qualify. Such a call waits
until it expires. These are warnings, not errors: the approvers may be added on purpose later
(a policy reload picks them up), but the operator should hear about it at `policy check` and
when `serve` starts, with the rule named.

Approvers who run the proposing agent (`agents`) still count: who proposes is known only per
call.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from workflow.classify.taxonomy import RiskClass
from workflow.messages import ApprovalRequirement, Decision
from workflow.policy.model import Policy
from workflow.policy.requirement import ApprovalSpec, describe, strictest
from workflow.policy.schema import Layer
from workflow.policy.source import render_key


@dataclass(frozen=True, slots=True)
class ApprovalGap:
    """One rule whose approval requirement no registered approver set can meet."""

    key: str
    message: str

    def sentence(self) -> str:
        return f"{self.key}: {self.message}"


@dataclass(frozen=True, slots=True)
class _Held:
    """A rule that holds calls for approval: where it is written, what it asks, and where."""

    key: tuple[str, ...]
    requirement: ApprovalRequirement | None  # None: roles that share nothing with the global
    workspace: str | None = None


def approval_gaps(policy: Policy) -> list[ApprovalGap]:
    """Every rule that holds calls for approvals the registered approvers cannot give."""
    held = list(_held_rules(policy))
    if not held:
        return []
    if not policy.approvers:
        keys = ", ".join(dict.fromkeys(render_key(h.key) for h in held))
        return [
            ApprovalGap(
                "approvers",
                "no approvers are registered, so every call held for approval waits until it "
                f"expires (held by {keys}); add [approvers.NAME] entries with the keys "
                "`headgate keys new NAME` prints",
            )
        ]
    gaps: dict[str, ApprovalGap] = {}
    for rule in held:
        message = _unmet(policy, rule)
        key = render_key(rule.key)
        if message is not None and key not in gaps:
            gaps[key] = ApprovalGap(key, message)
    return list(gaps.values())


def _unmet(policy: Policy, rule: _Held) -> str | None:
    req = rule.requirement
    if req is None:
        return (
            "its approver roles share none with the global requirement's, so no approver can "
            "ever satisfy both (such calls are denied)"
        )
    where = f" for workspace {rule.workspace}" if rule.workspace else ""
    eligible = sorted(
        name
        for name, approver in policy.approvers.items()
        if (not req.roles or set(req.roles) & set(approver.roles))
        and (rule.workspace is None or approver.may_approve_for(rule.workspace))
    )
    needed = req.approvals_needed
    if not eligible:
        who = f"has one of the roles {', '.join(req.roles)}" if req.roles else "may approve"
        also = f" and may approve{where}" if req.roles and where else where
        return (
            f"it needs {describe(req)}, but no registered approver {who}{also}; such calls "
            "wait until they expire"
        )
    if len(eligible) < needed:
        return (
            f"it needs {describe(req)}, but only {len(eligible)} registered approver"
            f"{'s' if len(eligible) != 1 else ''} ({', '.join(eligible)}) can give "
            f"{'them' if len(eligible) != 1 else 'one'}{where}; such calls wait until they expire"
        )
    return None


def _held_rules(policy: Policy) -> Iterator[_Held]:
    """The rules under which some call is held for approval, with their requirement."""
    if policy.unknown_tool is Decision.REQUIRE_APPROVAL:
        yield _Held(("unknown_tool",), policy.default_requirement())
    for risk in RiskClass:
        rule = policy.classes.get(risk)
        if policy.class_decision(risk) is Decision.REQUIRE_APPROVAL or (
            policy.mode == "all_writes" and risk is not RiskClass.READ
        ):
            key = ("classes", risk.value) + (("approval",) if rule and rule.approval else ())
            yield _Held(key, policy.global_requirement(risk))
    for name, entry in policy.tools.items():
        if entry.decision is Decision.REQUIRE_APPROVAL or entry.approval is not None:
            key = ("tools", name) + (("approval",) if entry.approval else ())
            yield _Held(key, policy.global_requirement(entry.risk_class, entry))
    for kind, layers in (("workspaces", policy.workspaces), ("sources", policy.sources)):
        for name, layer in layers.items():
            workspace = name if kind == "workspaces" else None
            yield from _layer_rules(policy, (kind, name), layer, workspace)


def _layer_rules(
    policy: Policy, key: tuple[str, ...], layer: Layer, workspace: str | None
) -> Iterator[_Held]:
    """A workspace's or source's requirements: the global one made stricter by the layer."""
    base = policy.default_requirement()
    own = _tighten(base, layer.approval)
    if layer.approval is not None or workspace is not None:
        yield _Held(key + (("approval",) if layer.approval else ()), own, workspace)
    for risk, rule in layer.classes.items():
        if rule.decision is Decision.DENY:
            continue
        if rule.decision is Decision.REQUIRE_APPROVAL or rule.approval is not None:
            req = _tighten(own, rule.approval) if own is not None else None
            if req is not None:
                req = strictest(req, policy.global_requirement(risk))
            yield _Held((*key, "classes", risk.value), req, workspace)
    for tool, rule in layer.tools.items():
        if rule.decision is Decision.DENY:
            continue
        if rule.decision is Decision.REQUIRE_APPROVAL or rule.approval is not None:
            req = _tighten(own, rule.approval) if own is not None else None
            yield _Held((*key, "tools", tool), req, workspace)


def _tighten(
    req: ApprovalRequirement | None, spec: ApprovalSpec | None
) -> ApprovalRequirement | None:
    if req is None or spec is None:
        return req
    return strictest(req, spec.apply(req))
