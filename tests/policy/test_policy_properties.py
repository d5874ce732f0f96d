"""Invariants of the engine, checked with hypothesis over generated policies and calls.

Layers are generated *without* validation (a loosening layer included): the validator rejects
loosening entries, but the engine must not loosen even if one slipped through.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from workflow.classify.taxonomy import RiskClass, Severity
from workflow.messages import Classification, Decision, Proposal, Verdict
from workflow.policy.engine import evaluate, recheck
from workflow.policy.model import Policy
from workflow.policy.requirement import ApprovalSpec, at_least_as_strict
from workflow.policy.schema import Layer, Rule, ToolEntry

ROLES = ["lead", "sre", "dba"]
TOOLS = ["t", "u"]
NON_DESTRUCTIVE = [r for r in RiskClass if r is not RiskClass.DESTRUCTIVE]

decisions = st.sampled_from(list(Decision))
specs = st.builds(
    ApprovalSpec,
    quorum=st.none() | st.integers(1, 4),
    roles=st.none() | st.lists(st.sampled_from(ROLES), max_size=3, unique=True),
    four_eyes=st.none() | st.booleans(),
    ttl=st.none() | st.integers(60, 7200),
)
rules = st.builds(Rule, decision=st.none() | decisions, approval=st.none() | specs)
layers = st.builds(
    Layer,
    mode=st.none() | st.sampled_from(["default", "all_writes"]),
    unknown_tool=st.none() | decisions,
    approval=st.none() | specs,
    classes=st.dictionaries(st.sampled_from(list(RiskClass)), rules, max_size=3),
    tools=st.dictionaries(st.sampled_from(TOOLS), rules, max_size=2),
)


@st.composite
def tool_entries(draw: st.DrawFn) -> ToolEntry:
    risk = draw(st.none() | st.sampled_from(NON_DESTRUCTIVE))
    return ToolEntry(
        risk_class=risk,
        severity=None if risk is None else draw(st.sampled_from(list(Severity))),
        decision=draw(st.none() | decisions),
        approval=draw(st.none() | specs),
        allow_max_severity=draw(st.none() | st.sampled_from([Severity.LOW, Severity.HIGH])),
    )


@st.composite
def global_policies(draw: st.DrawFn) -> Policy:
    """Valid policies without workspace or source sections."""
    classes: dict[str, Any] = {
        r.value: draw(rules) for r in draw(st.sets(st.sampled_from(NON_DESTRUCTIVE)))
    }
    if draw(st.booleans()):
        classes["destructive"] = Rule(
            decision=Decision.REQUIRE_APPROVAL,
            approval=ApprovalSpec(quorum=draw(st.integers(2, 4))),
        )
    return Policy.model_validate(
        {
            "mode": draw(st.sampled_from(["default", "all_writes"])),
            "unknown_tool": draw(st.sampled_from([Decision.REQUIRE_APPROVAL, Decision.DENY])),
            "allow_max_severity": draw(st.sampled_from([Severity.LOW, Severity.MEDIUM])),
            "approval": draw(specs),
            "classes": classes,
            "tools": draw(st.dictionaries(st.sampled_from(TOOLS), tool_entries(), max_size=2)),
        }
    )


def with_layers(base: Policy, workspace: Layer | None, source: Layer | None) -> Policy:
    """`base` plus layers, bypassing validation so that loosening layers get in too."""
    fields = {name: getattr(base, name) for name in Policy.model_fields}
    fields["workspaces"] = {"w": workspace} if workspace else {}
    fields["sources"] = {"s": source} if source else {}
    return Policy.model_construct(**fields)


classifications = st.builds(
    Classification,
    risk_class=st.sampled_from(list(RiskClass)),
    severity=st.sampled_from(list(Severity)),
    tool_known=st.booleans(),
    fail_closed=st.booleans(),
)
proposals = st.builds(
    Proposal,
    id=st.just("p-1"),
    agent=st.just("coder"),
    tool=st.sampled_from([*TOOLS, "v"]),
    workspace=st.sampled_from(["w", "x"]),
    source=st.sampled_from(["s", "z", None]),
)


def no_looser(after: Verdict, before: Verdict) -> None:
    assert after.decision.rank >= before.decision.rank
    if after.decision is Decision.REQUIRE_APPROVAL and before.requirement is not None:
        assert after.requirement is not None
        assert at_least_as_strict(after.requirement, before.requirement)
        assert after.requirement.quorum >= before.requirement.quorum
        assert after.requirement.four_eyes or not before.requirement.four_eyes
        assert after.requirement.ttl_seconds <= before.requirement.ttl_seconds


@settings(max_examples=200, deadline=None)
@given(global_policies(), layers, layers, proposals, classifications)
def test_workspace_and_source_layers_never_loosen_the_global_verdict(
    base: Policy, ws: Layer, src: Layer, call: Proposal, classification: Classification
) -> None:
    before = evaluate(call, classification, base)
    after = evaluate(call, classification, with_layers(base, ws, src))
    no_looser(after, before)


@settings(max_examples=200, deadline=None)
@given(global_policies(), layers, layers, proposals, classifications)
def test_adding_one_layer_after_another_is_monotone(
    base: Policy, ws: Layer, src: Layer, call: Proposal, classification: Classification
) -> None:
    none_ = evaluate(call, classification, base)
    one = evaluate(call, classification, with_layers(base, ws, None))
    two = evaluate(call, classification, with_layers(base, ws, src))
    no_looser(one, none_)
    no_looser(two, one)
    if none_.decision is Decision.DENY:
        assert two.decision is Decision.DENY


@settings(max_examples=200, deadline=None)
@given(global_policies(), proposals, classifications)
def test_fail_closed_and_critical_calls_are_never_allowed(
    base: Policy, call: Proposal, classification: Classification
) -> None:
    verdict = evaluate(call, classification, base)
    if classification.fail_closed or classification.severity is Severity.CRITICAL:
        assert verdict.decision is not Decision.ALLOW
    if not classification.tool_known:
        assert verdict.decision is not Decision.ALLOW
    if classification.risk_class is RiskClass.DESTRUCTIVE and verdict.requirement is not None:
        assert verdict.requirement.quorum >= 2


@settings(max_examples=200, deadline=None)
@given(
    global_policies(),
    global_policies(),
    layers,
    proposals,
    classifications,
    classifications,
)
def test_recheck_never_loosens_the_held_or_the_fresh_verdict(
    old: Policy,
    new: Policy,
    ws: Layer,
    call: Proposal,
    then: Classification,
    now: Classification,
) -> None:
    held = evaluate(call, then, with_layers(old, ws, None))
    fresh = evaluate(call, now, new)
    result = recheck(call, now, held, new)
    no_looser(result, held)
    no_looser(result, fresh)
    if fresh.decision is Decision.DENY:
        assert result.decision is Decision.DENY
