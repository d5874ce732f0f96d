"""Policy evaluation. Pure: proposal + classification + policy -> Verdict with its trail.

The order is DESIGN §5, and every step can only tighten (allow < require_approval < deny):

1. unknown or changed tool definition -> `unknown_tool`;
2. destructive -> `classes.destructive` (deny by default), or the decision of a tool entry that
   itself classifies the tool as destructive (the operator knowingly chose it);
3. the global decision for the tool, else for its risk class; an allow holds only up to
   `allow_max_severity` (low by default, never critical);
4. the workspace's section; 5. the source's section (both merged strictest);
6. mode `all_writes`: every non-read call needs at least approval;
   and, as a floor, a fail-closed classification never ends in allow;
7. the approval requirement: the global one (default <- class <- tool, the most specific
   wins), tightened by every layer that applied (max quorum, four-eyes if any, shortest TTL,
   intersection of roles), with a quorum of at least two for a destructive call.

A tool entry counts as the operator's word only for the definition it was reviewed under: for
an unknown or changed tool it can still tighten, never loosen. `recheck` re-evaluates a held
call at release time and keeps the stricter of the held and the fresh verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workflow.classify.taxonomy import RiskClass, Severity
from workflow.messages import (
    ApprovalRequirement,
    Classification,
    Decision,
    Proposal,
    TrailStep,
    Verdict,
)
from workflow.policy.durations import format_duration
from workflow.policy.model import Policy
from workflow.policy.requirement import ApprovalSpec, describe, strictest
from workflow.policy.schema import Layer, ToolMatch

_VERB = {
    Decision.ALLOW: "allows",
    Decision.REQUIRE_APPROVAL: "requires approval for",
    Decision.DENY: "denies",
}


def stricter(a: Decision, b: Decision) -> Decision:
    return a if a.rank >= b.rank else b


@dataclass
class _Acc:
    """The running decision and requirement; both only ever tighten."""

    requirement: ApprovalRequirement
    decision: Decision = Decision.ALLOW
    conflict: str | None = None
    steps: list[TrailStep] = field(default_factory=list)

    def apply(self, step: str, proposed: Decision, message: str) -> None:
        self.decision = stricter(self.decision, proposed)
        self.steps.append(TrailStep(step=step, decision=self.decision, message=message))

    def tighten(self, spec: ApprovalSpec | None, label: str) -> None:
        if spec is None or self.conflict is not None:
            return
        merged = strictest(self.requirement, spec.apply(self.requirement))
        if merged is None:
            self.conflict = (
                f"The approver roles required by {label} ({', '.join(spec.roles or [])}) share "
                f"none with those already required ({', '.join(self.requirement.roles)}), so "
                "no approver could ever satisfy both."
            )
            return
        self.requirement = merged


def evaluate(proposal: Proposal, classification: Classification, policy: Policy) -> Verdict:
    """Decide one call. Deterministic: the same inputs always give the same verdict."""
    tool = proposal.tool
    risk = classification.risk_class
    known = classification.tool_known
    match = policy.tool_entry(tool, proposal.tool_definition)
    # The entry is the operator's word only for the definition it was reviewed under, and for
    # a destructive call only when the entry itself says the tool is destructive.
    authoritative = (
        match is not None
        and known
        and (risk is not RiskClass.DESTRUCTIVE or match.entry.risk_class is RiskClass.DESTRUCTIVE)
    )
    acc = _Acc(
        requirement=policy.global_requirement(risk, match.entry)
        if match is not None and authoritative
        else policy.class_requirements[risk]
    )

    _global_steps(acc, proposal, classification, policy, match, authoritative)
    for kind, name, layer in _layers(proposal, policy):
        _layer_step(acc, kind, name, layer, tool, classification, match)
    _mode_and_floors(acc, proposal, classification, policy)
    return _finish(acc, classification, policy)


def _entry_label(match: ToolMatch, tool: str) -> str:
    if match.inherited:
        return (
            f"the entry tools.{match.name} (inherited by `{tool}` because both have the "
            f"same fingerprint {_short_fp(match.fingerprint)})"
        )
    return f"the entry tools.{match.name}"


def _short_fp(fp: str | None) -> str:
    if not fp:
        return ""
    server, _, dhash = fp.rpartition(":")
    return f"{server}:{dhash[:12]}…"


def _global_steps(
    acc: _Acc,
    proposal: Proposal,
    classification: Classification,
    policy: Policy,
    match: ToolMatch | None,
    authoritative: bool,
) -> None:
    tool, risk = proposal.tool, classification.risk_class
    destructive = risk is RiskClass.DESTRUCTIVE
    entry = match.entry if match is not None else None
    # 1. unknown or changed definition
    if not classification.tool_known:
        acc.apply(
            "unknown_tool",
            policy.unknown_tool,
            f"`{tool}` has no reviewed classification or its definition changed since it was "
            f"pinned; unknown tools fail closed, and the unknown_tool rule "
            f"{_VERB[policy.unknown_tool]} the call.",
        )
    # 2. destructive
    entry_decided = False
    if destructive:
        if match is not None and entry is not None and authoritative and entry.decision:
            entry_decided = True
            acc.apply(
                "destructive",
                entry.decision,
                f"The call is destructive; {_entry_label(match, tool)} classifies `{tool}` as "
                f"destructive and {_VERB[entry.decision]} it.",
            )
        else:
            d = policy.class_decision(RiskClass.DESTRUCTIVE)
            acc.apply(
                "destructive",
                d,
                f"The call is destructive; the policy {_VERB[d]} destructive calls"
                + (" by default." if d is Decision.DENY else "."),
            )
    # 3. the global decision for the tool, else for its class
    if match is not None and entry is not None and entry.decision and not entry_decided:
        label = _entry_label(match, tool)
        if authoritative:
            msg = (
                f"The global decision for `{tool}` comes from {label}: it "
                f"{_VERB[entry.decision]} it."
            )
        else:
            msg = (
                f"{label[0].upper()}{label[1:]} {_VERB[entry.decision]} `{tool}`; it was made "
                "for another definition or class, so it can only tighten."
            )
        acc.apply("tool", entry.decision, msg)
    elif not destructive:
        d = policy.class_decision(risk)
        acc.apply(
            "risk_class",
            d,
            f"The call is classified {risk} ({classification.severity}); the global decision "
            f"for {risk} calls is {d}.",
        )
    if match is not None and entry is not None and not authoritative:
        acc.tighten(entry.approval, f"tools.{match.name}")
    # 3b. an allow holds only up to a severity
    cap = policy.allow_max_severity
    if authoritative and entry is not None and entry.allow_max_severity is not None:
        cap = entry.allow_max_severity
    if acc.decision is Decision.ALLOW and classification.severity.rank > cap.rank:
        why = (
            "critical calls always need a human"
            if classification.severity is Severity.CRITICAL
            else f"an allow holds only up to severity {cap}"
        )
        acc.apply(
            "severity",
            Decision.REQUIRE_APPROVAL,
            f"The call's severity is {classification.severity} and {why}, so it needs approval.",
        )


def _layers(proposal: Proposal, policy: Policy) -> list[tuple[str, str, Layer]]:
    found = []
    if (ws := policy.workspaces.get(proposal.workspace)) is not None:
        found.append(("workspace", proposal.workspace, ws))
    if proposal.source is not None and (src := policy.sources.get(proposal.source)) is not None:
        found.append(("source", proposal.source, src))
    return found


def _layer_step(
    acc: _Acc,
    kind: str,
    name: str,
    layer: Layer,
    tool: str,
    classification: Classification,
    match: ToolMatch | None,
) -> None:
    """Steps 4 and 5: a workspace or source section, merged strictest (never loosens)."""
    proposed = Decision.ALLOW
    said: list[str] = []
    if not classification.tool_known and layer.unknown_tool is not None:
        proposed = stricter(proposed, layer.unknown_tool)
        said.append(f"it {_VERB[layer.unknown_tool]} unknown tools")
    risk = classification.risk_class
    rules = [(f"{risk} calls", f"classes.{risk}", layer.classes.get(risk))]
    # An inherited entry's layer rules apply too: the tool is the same tool under another name.
    names = {tool} | ({match.name} if match is not None else set())
    for name_ in sorted(names):
        rules.append((f"`{name_}`", f"tools.{name_}", layer.tools.get(name_)))
    for what, key, rule in rules:
        if rule is None:
            continue
        if rule.decision is not None:
            proposed = stricter(proposed, rule.decision)
            said.append(f"it {_VERB[rule.decision]} {what}")
        if rule.approval is not None:
            acc.tighten(rule.approval, f"{kind} `{name}` {key}")
            said.append(f"held {what} need {_spec_text(rule.approval)}")
    if layer.approval is not None:
        acc.tighten(layer.approval, f"{kind} `{name}`")
        said.append(f"every held call needs {_spec_text(layer.approval)}")
    if layer.mode == "all_writes":
        said.append('it sets mode = "all_writes"')
    if said:
        acc.apply(kind, proposed, f"The {kind} `{name}` applies: {'; '.join(said)}.")


def _spec_text(spec: ApprovalSpec) -> str:
    parts = []
    if spec.quorum is not None:
        parts.append(f"quorum {spec.quorum}")
    if spec.four_eyes:
        parts.append("four-eyes")
    if spec.roles is not None:
        parts.append(f"roles {', '.join(spec.roles) or 'any'}")
    if spec.ttl is not None:
        parts.append(f"ttl {format_duration(spec.ttl)}")
    return ", ".join(parts) or "the usual approval"


def _mode_and_floors(
    acc: _Acc, proposal: Proposal, classification: Classification, policy: Policy
) -> None:
    modes = [("the policy", policy.mode)] + [
        (f"the {kind} `{name}`", layer.mode) for kind, name, layer in _layers(proposal, policy)
    ]
    setters = [who for who, mode in modes if mode == "all_writes"]
    if setters and classification.risk_class is not RiskClass.READ:
        acc.apply(
            "all_writes",
            Decision.REQUIRE_APPROVAL,
            f'Mode "all_writes" (set by {", ".join(setters)}): every call that is not a read '
            "needs at least approval.",
        )
    if classification.fail_closed and acc.decision is Decision.ALLOW:
        acc.apply(
            "fail_closed",
            Decision.REQUIRE_APPROVAL,
            "The classifier could not vouch for this call (it failed closed), so it is never "
            "allowed without approval.",
        )


def _finish(acc: _Acc, classification: Classification, policy: Policy) -> Verdict:
    requirement: ApprovalRequirement | None = None
    if acc.decision is Decision.REQUIRE_APPROVAL:
        if acc.conflict is not None:
            acc.apply("roles", Decision.DENY, acc.conflict + " The call is denied.")
        else:
            # Its own copy: acc.requirement may be one the policy shares between calls.
            requirement = _own_copy(acc.requirement)
            if classification.risk_class is RiskClass.DESTRUCTIVE and requirement.quorum < 2:
                requirement = requirement.model_copy(update={"quorum": 2})
                acc.steps.append(
                    TrailStep(
                        step="destructive_quorum",
                        decision=acc.decision,
                        message="A destructive call needs a quorum of at least two approvers.",
                    )
                )
            acc.steps.append(
                TrailStep(
                    step="requirement",
                    decision=acc.decision,
                    message=f"Approval needed: {describe(requirement)}.",
                )
            )
    reason = next(s.message for s in acc.steps if s.decision is acc.decision)
    return Verdict(
        decision=acc.decision,
        reason=reason,
        requirement=requirement,
        trail=acc.steps,
        policy_revision=policy.revision,
    )


def _own_copy(req: ApprovalRequirement) -> ApprovalRequirement:
    return req.model_copy(update={"roles": list(req.roles)})


def recheck(
    proposal: Proposal, classification: Classification, held: Verdict, policy: Policy
) -> Verdict:
    """Re-evaluate a held call at release time; the result is never looser than `held`.

    The rule: a policy change (or a changed tool definition, seen in `classification`) may
    tighten a held call but never loosen it. The decision is the stricter of the two verdicts;
    the requirement is the strictest of both requirements. If the fresh verdict denies, the
    result denies and says the policy (or the tool) changed. `classification` is the fresh one.
    """
    fresh = evaluate(proposal, classification, policy)
    changed = (
        f"the policy changed from revision {held.policy_revision} to {fresh.policy_revision}"
        if held.policy_revision != fresh.policy_revision
        else "the call was re-checked under the same policy revision"
    )
    if fresh.decision is Decision.DENY or held.decision is Decision.DENY:
        why = fresh.reason if fresh.decision is Decision.DENY else held.reason
        reason = f"Denied at release: {changed}, and it now denies the call. {why}"
        return _rechecked(fresh, Decision.DENY, None, reason)
    decision = stricter(held.decision, fresh.decision)
    if decision is Decision.ALLOW:
        return fresh
    reqs = [r for r in (held.requirement, fresh.requirement) if r is not None]
    requirement: ApprovalRequirement | None = reqs[0] if reqs else ApprovalRequirement()
    for other in reqs[1:]:
        requirement = strictest(requirement, other) if requirement is not None else None
    if requirement is None:
        reason = (
            f"Denied at release: {changed}, and the approver roles it requires share none "
            "with those the call was held under, so no approver could satisfy both."
        )
        return _rechecked(fresh, Decision.DENY, None, reason)
    reason = (
        f"Re-checked at release ({changed}): the stricter of the held and the fresh verdict "
        f"applies: {decision}, {describe(requirement)}."
    )
    return _rechecked(fresh, decision, requirement, reason)


def _rechecked(
    fresh: Verdict, decision: Decision, requirement: ApprovalRequirement | None, reason: str
) -> Verdict:
    return Verdict(
        decision=decision,
        reason=reason,
        requirement=requirement,
        trail=[*fresh.trail, TrailStep(step="recheck", decision=decision, message=reason)],
        policy_revision=fresh.policy_revision,
    )
