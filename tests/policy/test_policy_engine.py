"""The evaluation order of DESIGN §5, step by step, and the release-time re-check."""

from __future__ import annotations

import pytest

from tests.policy.policy_helpers import classified, policy, proposal
from workflow.classify.taxonomy import RiskClass, Severity
from workflow.messages import (
    ApprovalRequirement,
    Decision,
    ToolDefinition,
    Verdict,
    definition_hash,
)
from workflow.policy.engine import evaluate, recheck
from workflow.policy.model import Policy, default_policy
from workflow.policy.requirement import ApprovalSpec

R, EG, EX, W, X, D = (
    RiskClass.READ,
    RiskClass.EGRESS,
    RiskClass.EXTERNAL,
    RiskClass.WRITE_LOCAL,
    RiskClass.EXEC,
    RiskClass.DESTRUCTIVE,
)
LOW, MED, HIGH, CRIT = Severity.LOW, Severity.MEDIUM, Severity.HIGH, Severity.CRITICAL
ALLOW, HOLD, DENY = Decision.ALLOW, Decision.REQUIRE_APPROVAL, Decision.DENY


def steps(verdict: Verdict) -> list[str]:
    return [s.step for s in verdict.trail]


@pytest.mark.parametrize(
    ("risk", "severity", "decision"),
    [
        (R, LOW, ALLOW),
        (EG, MED, HOLD),
        (EX, HIGH, HOLD),
        (W, MED, HOLD),
        (X, HIGH, HOLD),
        (D, HIGH, DENY),
    ],
)
def test_the_default_policy_decides_by_risk_class(
    risk: RiskClass, severity: Severity, decision: Decision
) -> None:
    p = default_policy()
    verdict = evaluate(proposal("t"), classified(risk, severity), p)
    assert verdict.decision is decision
    assert verdict.policy_revision == p.revision
    assert (verdict.requirement is not None) == (decision is HOLD)


# --------------------------------------------------------------------------- step 1


@pytest.mark.parametrize("unknown_tool", [HOLD, DENY])
def test_an_unknown_tool_gets_the_unknown_tool_decision(unknown_tool: Decision) -> None:
    p = policy(f'unknown_tool = "{unknown_tool}"')
    verdict = evaluate(proposal("mystery"), classified(X, HIGH, known=False), p)
    assert verdict.decision is unknown_tool
    assert steps(verdict)[0] == "unknown_tool"
    assert "`mystery`" in verdict.trail[0].message


def test_an_entry_made_for_an_older_definition_cannot_allow_a_changed_tool() -> None:
    p = policy('[tools.deploy]\nrisk_class = "read"\nseverity = "low"\ndecision = "allow"\n')
    verdict = evaluate(proposal("deploy"), classified(X, HIGH, known=False), p)
    assert verdict.decision is HOLD
    assert "can only tighten" in verdict.trail[1].message


def test_an_entry_made_for_an_older_definition_cannot_lower_the_quorum() -> None:
    p = policy(
        "[classes.exec]\napproval = { quorum = 2 }\n"
        '[tools.deploy]\nrisk_class = "exec"\nseverity = "high"\napproval = { quorum = 1 }\n'
    )
    known = evaluate(proposal("deploy"), classified(X, HIGH), p)
    changed = evaluate(proposal("deploy"), classified(X, HIGH, known=False), p)
    assert known.requirement is not None
    assert known.requirement.quorum == 1
    assert changed.requirement is not None
    assert changed.requirement.quorum == 2


# --------------------------------------------------------------------------- step 2


def test_a_destructive_call_is_denied_by_default_even_if_its_tool_requires_approval() -> None:
    p = policy('[tools.run_shell]\ndecision = "require_approval"\n')
    verdict = evaluate(proposal("run_shell"), classified(D, HIGH), p)
    assert verdict.decision is DENY
    assert verdict.trail[0].step == "destructive"


def test_an_operator_may_open_destructive_calls_to_a_quorum_of_two() -> None:
    p = policy('[classes.destructive]\ndecision = "require_approval"\napproval = { quorum = 2 }\n')
    verdict = evaluate(proposal("delete_file"), classified(D, HIGH), p)
    assert verdict.decision is HOLD
    assert verdict.requirement is not None
    assert verdict.requirement.quorum == 2


def test_a_tool_reviewed_as_destructive_may_be_opened_to_approval_on_its_own() -> None:
    p = policy(
        '[tools.drop_branch]\nrisk_class = "destructive"\nseverity = "high"\n'
        'decision = "require_approval"\napproval = { quorum = 2, roles = ["lead"] }\n'
    )
    verdict = evaluate(proposal("drop_branch"), classified(D, HIGH), p)
    assert verdict.decision is HOLD
    assert verdict.requirement == ApprovalRequirement(quorum=2, roles=["lead"])
    assert evaluate(proposal("delete_file"), classified(D, HIGH), p).decision is DENY


# --------------------------------------------------------------------------- step 3


@pytest.mark.parametrize(
    ("tool_decision", "risk", "severity", "expected"),
    [
        ("allow", X, LOW, ALLOW),
        ("deny", R, LOW, DENY),
        ("require_approval", R, LOW, HOLD),
    ],
)
def test_the_global_tool_decision_replaces_the_class_decision(
    tool_decision: str, risk: RiskClass, severity: Severity, expected: Decision
) -> None:
    p = policy(f'[tools.t]\ndecision = "{tool_decision}"\n')
    verdict = evaluate(proposal("t"), classified(risk, severity), p)
    assert verdict.decision is expected
    assert steps(verdict)[0] == "tool"


@pytest.mark.parametrize(
    ("text", "severity", "expected"),
    [
        ("", MED, HOLD),
        ('allow_max_severity = "medium"', MED, ALLOW),
        ('allow_max_severity = "high"', HIGH, ALLOW),
        ('allow_max_severity = "high"', CRIT, HOLD),
    ],
)
def test_an_allow_holds_only_up_to_allow_max_severity(
    text: str, severity: Severity, expected: Decision
) -> None:
    verdict = evaluate(proposal("read_file"), classified(R, severity), policy(text))
    assert verdict.decision is expected


def test_a_critical_call_is_never_allowed_even_by_its_tool_entry() -> None:
    p = policy('[tools.t]\ndecision = "allow"\nallow_max_severity = "high"\n')
    verdict = evaluate(proposal("t"), classified(R, CRIT), p)
    assert verdict.decision is HOLD
    assert "critical calls always need a human" in verdict.reason


def test_a_fail_closed_classification_never_ends_in_allow() -> None:
    verdict = evaluate(proposal("t"), classified(R, LOW, fail_closed=True), default_policy())
    assert verdict.decision is HOLD
    assert steps(verdict)[-2:] == ["fail_closed", "requirement"]


# --------------------------------------------------------------------------- steps 4 and 5


@pytest.mark.parametrize(
    ("layer", "workspace", "source", "expected"),
    [
        ('[workspaces.acme.classes]\nwrite_local = "deny"', "acme", None, DENY),
        ('[workspaces.acme.classes]\nwrite_local = "deny"', "other", None, HOLD),
        ('[sources.prod.tools]\nwrite_file = "deny"', "default", "prod", DENY),
        ('[sources.prod.tools]\nwrite_file = "deny"', "default", "dev", HOLD),
        ('[workspaces.acme.classes]\nread = "require_approval"', "acme", None, HOLD),
    ],
)
def test_workspace_and_source_sections_tighten_the_decision(
    layer: str, workspace: str, source: str | None, expected: Decision
) -> None:
    p = policy(layer)
    risk = R if "read" in layer else W
    verdict = evaluate(
        proposal("write_file", workspace=workspace, source=source), classified(risk, LOW), p
    )
    assert verdict.decision is expected


def test_a_workspace_denies_unknown_tools_where_the_global_policy_holds_them() -> None:
    p = policy('[workspaces.acme]\nunknown_tool = "deny"\n')
    call = classified(X, HIGH, known=False)
    assert evaluate(proposal("m", workspace="acme"), call, p).decision is DENY
    assert evaluate(proposal("m"), call, p).decision is HOLD


def test_layers_tighten_the_requirement_strictest_field_by_field() -> None:
    p = policy(
        '[approval]\nquorum = 1\nroles = ["lead", "sre", "dba"]\nttl = "1h"\n'
        '[workspaces.acme.approval]\nquorum = 2\nroles = ["sre", "dba"]\nttl = "30m"\n'
        '[sources.prod.classes.write_local]\napproval = { four_eyes = true, roles = ["dba"], '
        'ttl = "45m" }\n'
    )
    verdict = evaluate(proposal(workspace="acme", source="prod"), classified(W, MED), p)
    assert verdict.requirement == ApprovalRequirement(
        quorum=2, roles=["dba"], four_eyes=True, ttl_seconds=1800
    )
    assert steps(verdict) == ["risk_class", "workspace", "source", "requirement"]


def test_roles_that_no_approver_could_satisfy_together_deny_the_call() -> None:
    p = policy(
        '[workspaces.acme.approval]\nroles = ["lead"]\n[sources.prod.approval]\nroles = ["dba"]\n'
    )
    verdict = evaluate(proposal(workspace="acme", source="prod"), classified(W, MED), p)
    assert verdict.decision is DENY
    assert verdict.requirement is None
    assert "no approver could ever satisfy both" in verdict.reason


# --------------------------------------------------------------------------- step 6


@pytest.mark.parametrize(
    ("text", "workspace", "risk", "expected"),
    [
        ('mode = "all_writes"\n[tools.t]\ndecision = "allow"', "default", X, HOLD),
        ('mode = "all_writes"\n[tools.t]\ndecision = "allow"', "default", R, ALLOW),
        ('[tools.t]\ndecision = "allow"\n[workspaces.acme]\nmode = "all_writes"', "acme", EG, HOLD),
        (
            '[tools.t]\ndecision = "allow"\n[workspaces.acme]\nmode = "all_writes"',
            "other",
            EG,
            ALLOW,
        ),
    ],
)
def test_mode_all_writes_holds_every_non_read(
    text: str, workspace: str, risk: RiskClass, expected: Decision
) -> None:
    verdict = evaluate(proposal("t", workspace=workspace), classified(risk, LOW), policy(text))
    assert verdict.decision is expected


# --------------------------------------------------------------------------- step 7 and trail


def test_a_destructive_call_opened_by_a_workspace_quorum_never_drops_below_two() -> None:
    p = policy(
        '[classes.destructive]\ndecision = "require_approval"\napproval = { quorum = 2 }\n'
        "[workspaces.acme.approval]\nquorum = 3\n"
    )
    verdict = evaluate(proposal(workspace="acme"), classified(D, HIGH), p)
    assert verdict.requirement is not None
    assert verdict.requirement.quorum == 3


def test_the_trail_lists_every_step_that_applied_in_order() -> None:
    p = policy(
        'mode = "all_writes"\nunknown_tool = "require_approval"\n'
        '[workspaces.acme.classes]\nexec = "require_approval"\n'
        "[sources.prod.approval]\nfour_eyes = true\n"
    )
    verdict = evaluate(
        proposal("m", workspace="acme", source="prod"), classified(X, HIGH, known=False), p
    )
    assert steps(verdict) == [
        "unknown_tool",
        "risk_class",
        "workspace",
        "source",
        "all_writes",
        "requirement",
    ]
    assert all(s.message.endswith(".") for s in verdict.trail)
    assert verdict.reason == verdict.trail[0].message


def test_evaluation_is_deterministic() -> None:
    p = policy('[workspaces.acme.classes]\nexec = "deny"\n')
    call = (proposal("t", workspace="acme"), classified(X, HIGH))
    assert evaluate(*call, p) == evaluate(*call, p)


# --------------------------------------------------------------------------- fingerprints


def _definition(server: str) -> ToolDefinition:
    return ToolDefinition(
        description="Run a SQL query.", input_schema={"type": "object"}, server=server
    )


def _inheriting_policy() -> Policy:
    dhash = definition_hash(_definition("postgres-mcp"))
    return policy(
        '[tools.main_query]\nrisk_class = "read"\nseverity = "low"\ndecision = "allow"\n'
        f'[lock]\nmain_query = {{ hash = "{dhash}", server = "postgres-mcp" }}\n'
        '[workspaces.acme.tools]\nmain_query = "require_approval"\n'
    )


def test_a_tool_with_the_same_fingerprint_inherits_the_reviewed_entry() -> None:
    p = _inheriting_policy()
    call = proposal("reports_query", definition=_definition("postgres-mcp"))
    match = p.tool_entry(call.tool, call.tool_definition)
    assert match is not None
    assert match.inherited
    assert match.name == "main_query"
    tables = p.tables_for(call.tool, call.tool_definition)
    assert tables.overrides["reports_query"].risk_class is RiskClass.READ
    verdict = evaluate(call, classified(R, LOW), p)
    assert verdict.decision is ALLOW
    assert "inherited by `reports_query`" in verdict.trail[0].message


def test_an_inherited_entry_carries_its_workspace_rules_along() -> None:
    call = proposal("reports_query", workspace="acme", definition=_definition("postgres-mcp"))
    assert evaluate(call, classified(R, LOW), _inheriting_policy()).decision is HOLD


def test_another_server_kind_does_not_inherit() -> None:
    p = _inheriting_policy()
    assert p.tool_entry("reports_query", _definition("mysql-mcp")) is None


# --------------------------------------------------------------------------- recheck


def _held(p: Policy, workspace: str = "default") -> Verdict:
    return evaluate(proposal(workspace=workspace), classified(W, MED), p)


def test_recheck_denies_when_the_new_policy_denies_and_says_the_policy_changed() -> None:
    old = policy("")
    new = policy('[classes]\nwrite_local = "deny"\n')
    result = recheck(proposal(), classified(W, MED), _held(old), new)
    assert result.decision is DENY
    assert f"from revision {old.revision} to {new.revision}" in result.reason
    assert result.trail[-1].step == "recheck"
    assert result.policy_revision == new.revision


def test_recheck_keeps_the_held_requirement_when_the_new_policy_is_looser() -> None:
    old = policy("[approval]\nquorum = 2\nfour_eyes = true\n")
    new = policy('[classes]\nwrite_local = "allow"\n')
    result = recheck(proposal(), classified(W, MED), _held(old), new)
    assert result.decision is HOLD
    assert result.requirement is not None
    assert (result.requirement.quorum, result.requirement.four_eyes) == (2, True)


def test_recheck_adopts_a_stricter_requirement_from_the_new_policy() -> None:
    old = policy('[approval]\nttl = "1h"\n')
    new = policy('[approval]\nquorum = 3\nttl = "10m"\n')
    result = recheck(proposal(), classified(W, MED), _held(old), new)
    assert result.requirement == ApprovalRequirement(quorum=3, ttl_seconds=600)


def test_recheck_denies_when_a_changed_tool_definition_is_denied() -> None:
    p = policy('unknown_tool = "deny"')
    result = recheck(proposal(), classified(X, HIGH, known=False), _held(p), p)
    assert result.decision is DENY
    assert "same policy revision" in result.reason


# --------------------------------------------------------------------------- cached requirements


CLASS_APPROVALS = (
    '[approval]\nroles = ["lead", "ops"]\nttl = "2h"\n'
    '[classes.exec]\napproval = { quorum = 2, roles = ["ops"] }\n'
    '[classes.egress]\napproval = { four_eyes = true, ttl = "5m" }\n'
)


def test_the_cached_class_requirements_are_the_global_requirements() -> None:
    p = policy(CLASS_APPROVALS)
    assert p.class_requirements == {risk: p.global_requirement(risk) for risk in RiskClass}
    assert p.class_requirements[R].roles == ["lead", "ops"]
    changed = p.model_copy(update={"approval": ApprovalSpec(quorum=3)})
    assert changed.class_requirements[R] == ApprovalRequirement(quorum=3, ttl_seconds=3600)
    assert default_policy(ttl_seconds=60).class_requirements[W].ttl_seconds == 60


@pytest.mark.parametrize(("risk", "severity"), [(EG, MED), (X, HIGH), (W, MED)])
def test_a_verdict_never_carries_the_requirement_the_policy_shares(
    risk: RiskClass, severity: Severity
) -> None:
    p = policy(CLASS_APPROVALS)
    first = evaluate(proposal("t"), classified(risk, severity), p)
    second = evaluate(proposal("t"), classified(risk, severity), p)
    assert first.requirement is not None
    assert second.requirement is not None
    assert first.requirement == second.requirement == p.global_requirement(risk)
    assert first.requirement is not p.class_requirements[risk]
    assert first.requirement.roles is not p.class_requirements[risk].roles
    assert first.requirement.roles is not second.requirement.roles
