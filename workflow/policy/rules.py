"""The rules a policy must satisfy beyond field types. Pure: Policy -> list of problems.

* `unknown_tool` can never be `allow` (unknown tools fail closed), globally or in a layer.
* `allow_max_severity` can never be `critical`: a critical call always needs a human.
* A destructive call is never allowed outright; an operator who opens it to approval must ask
  for a quorum of at least two.
* Workspace and source sections may only tighten: each decision is at least the global one it
  refines, each approval field at least as strict. A loosening entry is an error naming its
  key, never silently ignored (the engine would ignore it anyway: layers combine strictest).
* A pin or a risk rule is written in one place only.
* Two approvers cannot share a key.
"""

from __future__ import annotations

from workflow.classify.taxonomy import RiskClass, Severity
from workflow.messages import ApprovalRequirement, Decision
from workflow.policy.model import Policy
from workflow.policy.problems import PolicyProblem
from workflow.policy.requirement import ApprovalSpec
from workflow.policy.schema import Layer, Rule
from workflow.policy.source import render_key


def _problem(key: list[str], message: str) -> PolicyProblem:
    return PolicyProblem(render_key(key), message, path=tuple(key))


def policy_problems(policy: Policy) -> list[PolicyProblem]:
    found: list[PolicyProblem] = []
    found += _fail_closed(policy)
    found += _destructive(policy)
    for kind, layers in (("workspaces", policy.workspaces), ("sources", policy.sources)):
        for name, layer in layers.items():
            found += _layer(policy, [kind, name], layer)
    found += _single_source_of_truth(policy)
    found += _approvers(policy)
    return found


def _fail_closed(policy: Policy) -> list[PolicyProblem]:
    found = []
    unknowns = [(["unknown_tool"], policy.unknown_tool)] + [
        ([kind, name, "unknown_tool"], layer.unknown_tool)
        for kind, layers in (("workspaces", policy.workspaces), ("sources", policy.sources))
        for name, layer in layers.items()
    ]
    for key, decision in unknowns:
        if decision is Decision.ALLOW:
            found.append(
                _problem(
                    key,
                    "unknown or changed tools fail closed, so this must be require_approval "
                    "or deny, not allow",
                )
            )
    severities = [(["allow_max_severity"], policy.allow_max_severity)] + [
        (["tools", name, "allow_max_severity"], entry.allow_max_severity)
        for name, entry in policy.tools.items()
    ]
    for key, severity in severities:
        if severity is Severity.CRITICAL:
            found.append(
                _problem(key, "a critical call always needs a human, so this cannot be critical")
            )
    return found


def _destructive_rule(
    policy: Policy, key: list[str], decision: Decision | None, req: ApprovalRequirement
) -> list[PolicyProblem]:
    if decision is Decision.ALLOW:
        return [
            _problem(
                [*key, "decision"],
                "destructive calls can never be allowed outright; use require_approval "
                "(with quorum of at least 2) or deny",
            )
        ]
    if decision is Decision.REQUIRE_APPROVAL and req.quorum < 2:
        return [
            _problem(
                [*key, "approval", "quorum"],
                f"destructive calls opened to approval need a quorum of at least 2, "
                f"but the requirement here has quorum {req.quorum}",
            )
        ]
    return []


def _destructive(policy: Policy) -> list[PolicyProblem]:
    d = RiskClass.DESTRUCTIVE
    found = _destructive_rule(
        policy,
        ["classes", d.value],
        policy.class_decision(d),
        policy.global_requirement(d),
    )
    for name, entry in policy.tools.items():
        if entry.risk_class is d:
            found += _destructive_rule(
                policy,
                ["tools", name],
                entry.decision or policy.class_decision(d),
                policy.global_requirement(d, entry),
            )
    return found


def _who(key: list[str]) -> str:
    kind = "workspace" if key[0] == "workspaces" else "source"
    return f"the {kind} `{key[1]}`"


def _tighter_decision(
    key: list[str], given: Decision | None, base: Decision | None, what: str
) -> list[PolicyProblem]:
    if given is None:
        return []
    if base is None:
        if given is Decision.ALLOW:
            return [
                _problem(
                    key,
                    f"{_who(key)} may only tighten, and allow tightens nothing here: "
                    f"{what} has no global decision that allows it",
                )
            ]
        return []
    if given.rank < base.rank:
        return [
            _problem(
                key,
                f"{_who(key)} may only tighten, but {given} is looser than the "
                f"global {base} for {what}",
            )
        ]
    return []


def _tighter_spec(
    key: list[str], spec: ApprovalSpec | None, base: ApprovalRequirement, what: str
) -> list[PolicyProblem]:
    if spec is None:
        return []
    return [
        _problem(
            [*key, "approval", field],
            f"{_who(key)} may only tighten the approval requirement for {what}, but {sentence}",
        )
        for field, sentence in spec.looser_than(base)
    ]


def _layer(policy: Policy, key: list[str], layer: Layer) -> list[PolicyProblem]:
    found: list[PolicyProblem] = []
    if layer.mode == "default" and policy.mode == "all_writes":
        found.append(
            _problem(
                [*key, "mode"],
                f'{_who(key)} may only tighten, but mode = "default" would lift '
                'the global mode = "all_writes"',
            )
        )
    if layer.unknown_tool is not None:
        found += _tighter_decision(
            [*key, "unknown_tool"], layer.unknown_tool, policy.unknown_tool, "unknown tools"
        )
    found += _tighter_spec(key, layer.approval, policy.default_requirement(), "every held call")
    for risk_class, rule in layer.classes.items():
        found += _rule(
            [*key, "classes", risk_class.value],
            rule,
            policy.class_decision(risk_class),
            policy.global_requirement(risk_class),
            f"{risk_class} calls",
        )
    for tool, rule in layer.tools.items():
        entry = policy.tools.get(tool)
        base_decision: Decision | None = None
        risk = entry.risk_class if entry is not None else None
        if entry is not None and entry.decision is not None:
            base_decision = entry.decision
        elif risk is not None:
            base_decision = policy.class_decision(risk)
        found += _rule(
            [*key, "tools", tool],
            rule,
            base_decision,
            policy.global_requirement(risk, entry),
            f"the tool `{tool}`",
        )
    return found


def _rule(
    key: list[str],
    rule: Rule,
    base_decision: Decision | None,
    base_req: ApprovalRequirement,
    what: str,
) -> list[PolicyProblem]:
    decision_key = [*key, "decision"] if rule.approval is not None else key
    return _tighter_decision(decision_key, rule.decision, base_decision, what) + _tighter_spec(
        key, rule.approval, base_req, what
    )


def _single_source_of_truth(policy: Policy) -> list[PolicyProblem]:
    found = []
    for name, entry in policy.tools.items():
        if entry.risk_class is not None and name in policy.classifier.overrides:
            found.append(
                _problem(
                    ["classifier", "overrides", name],
                    f"`{name}` is classified both here and in [tools.{name}]; keep one",
                )
            )
        lock = policy.lock.get(name)
        if entry.pin is not None and lock is not None and lock.hash != entry.pin:
            found.append(
                _problem(
                    ["lock", name],
                    f"the pin for `{name}` here differs from tools.{name}.pin; keep one",
                )
            )
        if (
            entry.server is not None
            and lock is not None
            and lock.server is not None
            and lock.server != entry.server
        ):
            found.append(
                _problem(
                    ["lock", name, "server"],
                    f"the server kind {lock.server!r} differs from tools.{name}.server "
                    f"{entry.server!r}; keep one",
                )
            )
    for name in policy.classifier.pinned:
        if policy.pinned_hash(name) != policy.classifier.pinned[name] and (
            name in policy.lock or (name in policy.tools and policy.tools[name].pin)
        ):
            found.append(
                _problem(
                    ["classifier", "pinned", name],
                    f"`{name}` is pinned both here and in [lock] with different hashes; keep one",
                )
            )
    return found


def _approvers(policy: Policy) -> list[PolicyProblem]:
    found = []
    seen: dict[str, str] = {}
    for name, approver in policy.approvers.items():
        if approver.key in seen:
            found.append(
                _problem(
                    ["approvers", name, "key"],
                    f"this key is already registered for the approver `{seen[approver.key]}`; "
                    "one key identifies one person",
                )
            )
        seen.setdefault(approver.key, name)
    return found
