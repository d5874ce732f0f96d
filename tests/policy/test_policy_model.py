"""Loading and validating the policy file: formats, defaults, and errors a human can act on."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.policy.policy_helpers import policy, user_key
from workflow.classify.tables import ToolRule
from workflow.classify.taxonomy import Category, RiskClass, Severity
from workflow.errors import PolicyError
from workflow.messages import Decision
from workflow.policy.load import load_policy, load_policy_text
from workflow.policy.model import default_policy
from workflow.policy.problems import PolicyValidationError
from workflow.policy.schema import Approver

HASH_A = "a" * 64
HASH_B = "b" * 64


@pytest.mark.parametrize(
    ("risk", "decision"),
    [
        (RiskClass.READ, Decision.ALLOW),
        (RiskClass.EGRESS, Decision.REQUIRE_APPROVAL),
        (RiskClass.EXTERNAL, Decision.REQUIRE_APPROVAL),
        (RiskClass.WRITE_LOCAL, Decision.REQUIRE_APPROVAL),
        (RiskClass.EXEC, Decision.REQUIRE_APPROVAL),
        (RiskClass.DESTRUCTIVE, Decision.DENY),
    ],
)
def test_default_policy_decides_each_risk_class_as_designed(
    risk: RiskClass, decision: Decision
) -> None:
    assert default_policy().class_decision(risk) is decision


def test_default_policy_holds_unknown_tools_for_approval_with_its_ttl() -> None:
    p = default_policy(ttl_seconds=600)
    assert p.unknown_tool is Decision.REQUIRE_APPROVAL
    assert p.default_ttl_seconds == 600
    assert p.default_requirement().ttl_seconds == 600


@pytest.mark.parametrize(
    ("written", "seconds"),
    [
        ("3600", 3600),
        ('"1h"', 3600),
        ('"30m"', 1800),
        ('"1h30m"', 5400),
        ('"2d"', 172800),
        ('"45s"', 45),
        ("90", 90),
    ],
)
def test_default_ttl_accepts_seconds_and_duration_strings(written: str, seconds: int) -> None:
    assert policy(f"default_ttl = {written}").default_ttl_seconds == seconds


def test_an_approval_ttl_wins_over_the_default_ttl() -> None:
    p = policy('default_ttl = "2h"\n[approval]\nttl = "15m"\n')
    assert p.default_ttl_seconds == 900
    assert p.default_requirement().ttl_seconds == 900


def test_a_class_decision_may_be_a_string_or_a_table_with_an_approval() -> None:
    p = policy(
        '[classes]\nexec = "deny"\n'
        '[classes.write_local]\ndecision = "require_approval"\napproval = { quorum = 2 }\n'
    )
    assert p.class_decision(RiskClass.EXEC) is Decision.DENY
    assert p.global_requirement(RiskClass.WRITE_LOCAL).quorum == 2
    assert p.class_decision(RiskClass.READ) is Decision.ALLOW


def test_the_global_requirement_goes_from_default_to_class_to_tool() -> None:
    p = policy(
        '[approval]\nquorum = 1\nroles = ["approver"]\nttl = "1h"\n'
        "[classes.exec]\napproval = { quorum = 2, four_eyes = true }\n"
        '[tools.run_tests]\nrisk_class = "exec"\nseverity = "medium"\n'
        'approval = { quorum = 1, ttl = "10m" }\n'
    )
    req = p.global_requirement(RiskClass.EXEC, p.tools["run_tests"])
    assert (req.quorum, req.four_eyes, req.roles, req.ttl_seconds) == (1, True, ["approver"], 600)


def test_tool_risk_entries_and_lock_pins_become_classifier_tables() -> None:
    p = policy(
        '[tools.query]\nrisk_class = "read"\nseverity = "low"\ncategories = ["network"]\n'
        f'pin = "{HASH_A}"\n'
        f'[lock]\nwrite_file = "{HASH_B}"\nsql = {{ hash = "{HASH_A}", server = "postgres" }}\n'
        '[classifier.overrides.deploy]\nrisk_class = "external"\nseverity = "high"\n'
    )
    tables = p.classifier_tables()
    assert tables.overrides["query"] == ToolRule(
        risk_class=RiskClass.READ, severity=Severity.LOW, categories=frozenset({Category.NETWORK})
    )
    assert tables.overrides["deploy"].risk_class is RiskClass.EXTERNAL
    assert tables.pinned == {"query": HASH_A, "write_file": HASH_B, "sql": HASH_A}


def test_approvers_are_found_by_key_and_scoped_to_workspaces_and_agents() -> None:
    p = policy(
        f'[approvers.alice]\nkey = "{user_key(1)}"\nroles = ["lead"]\n'
        'workspaces = ["acme"]\nagents = ["coder"]\n'
    )
    found = p.approver_by_key(user_key(1))
    assert found is not None
    name, alice = found
    assert name == "alice"
    assert alice.may_approve_for("acme")
    assert not alice.may_approve_for("other")
    assert not alice.may_approve(workspace="acme", agent="coder")
    assert alice.may_approve(workspace="acme", agent="reviewer")
    assert p.approver_by_key(user_key(2)) is None


def test_an_approver_with_the_star_workspace_may_approve_anywhere() -> None:
    assert Approver(key=user_key(3)).may_approve_for("anything")


def test_revision_is_stable_and_ignores_comments_and_layout() -> None:
    a = policy('# comment\nmode = "all_writes"\n[approval]\nquorum = 2\n')
    b = policy('[approval]\nquorum    = 2  # two\n\n[classes]\nread = "allow"\n')
    b_mode = policy('mode = "all_writes"\n[approval]\nquorum = 2\n')
    assert a.revision == b_mode.revision
    assert a.revision != b.revision
    assert len(a.revision) == 16


def test_revision_changes_with_a_copy_that_changes_content() -> None:
    p = default_policy()
    assert p.model_copy(update={"default_ttl": 60}).revision != p.revision


# --------------------------------------------------------------------------- invalid files

INVALID: list[tuple[str, str, str, int | None]] = [
    # (policy text, key path, what the message says, line)
    ('unknown_tool = "allow"\n', "unknown_tool", "fail closed", 1),
    ('[classes]\nread = "allow"\nexce = "deny"\n', "classes.exce", "not allowed here", 3),
    ('[tools.x]\ndecison = "allow"\n', "tools.x.decison", "not a known setting", 2),
    ('[tools.x]\nrisk_class = "exec"\n', "tools.x", "needs a severity", 1),
    ('[tools.x]\nseverity = "low"\n', "tools.x", "needs risk_class", 1),
    ('default_ttl = "1 hour"\n', "default_ttl", "not a duration", 1),
    ('[classes]\nexec = "maybe"\n', "classes.exec.decision", "'allow', 'require_approval'", 2),
    ('[classes]\ndestructive = "allow"\n', "classes.destructive.decision", "never be allowed", 2),
    (
        '[classes]\ndestructive = "require_approval"\n',
        "classes.destructive.approval.quorum",
        "quorum of at least 2",
        2,
    ),
    (
        '[tools.drop_table]\nrisk_class = "destructive"\nseverity = "high"\n'
        'decision = "require_approval"\n',
        "tools.drop_table.approval.quorum",
        "quorum of at least 2",
        1,
    ),
    ('allow_max_severity = "critical"\n', "allow_max_severity", "always needs a human", 1),
    ('[lock]\nwrite_file = "abc"\n', "lock.write_file.hash", "not a definition hash", 2),
    (
        f'[tools.x]\npin = "{HASH_A}"\n[lock]\nx = "{HASH_B}"\n',
        "lock.x",
        "differs from tools.x.pin",
        4,
    ),
    ('[approvers.bob]\nkey = "SUAFOO"\n', "approvers.bob.key", "not a public user nkey", 2),
    (
        f'[approvers.a]\nkey = "{user_key(1)}"\n[approvers.b]\nkey = "{user_key(1)}"\n',
        "approvers.b.key",
        "already registered for the approver `a`",
        4,
    ),
    ('[workspaces."bad name"]\nmode = "all_writes"\n', 'workspaces."bad name"', "not allowed", 1),
    (
        '[tools."fs.write"]\nrisk_class = "exec"\nseverity = "hgh"\n',
        'tools."fs.write".severity',
        "(got 'hgh')",
        3,
    ),
]


@pytest.mark.parametrize(("text", "key", "fragment", "line"), INVALID)
def test_an_invalid_policy_names_the_file_key_line_and_problem(
    text: str, key: str, fragment: str, line: int | None
) -> None:
    with pytest.raises(PolicyValidationError) as caught:
        load_policy_text(text, "acme.toml")
    err = caught.value
    message = str(err)
    assert err.key == key
    assert err.line == line
    assert message.startswith(f"acme.toml, line {line}, key {key}: ")
    assert fragment in message
    for leak in ("Traceback", "ValidationError", "pydantic", "type=", "For further information"):
        assert leak not in message


LOOSENING: list[tuple[str, str, str]] = [
    # (policy text, key path of the loosening entry, what the message says)
    (
        '[workspaces.acme.classes]\nwrite_local = "allow"\n',
        "workspaces.acme.classes.write_local",
        "allow is looser than the global require_approval",
    ),
    (
        '[sources.prod.classes]\nexec = "allow"\n',
        "sources.prod.classes.exec",
        "allow is looser than the global require_approval",
    ),
    (
        '[classes.destructive]\ndecision = "require_approval"\napproval = { quorum = 2 }\n'
        '[workspaces.acme.classes]\ndestructive = "allow"\n',
        "workspaces.acme.classes.destructive",
        "looser than the global require_approval",
    ),
    (
        "[approval]\nquorum = 2\n[workspaces.acme.approval]\nquorum = 1\n",
        "workspaces.acme.approval.quorum",
        "quorum 1 is lower than the 2",
    ),
    (
        '[approval]\nttl = "1h"\n[sources.prod.approval]\nttl = "2h"\n',
        "sources.prod.approval.ttl",
        "ttl 2h is longer than the 1h",
    ),
    (
        "[approval]\nfour_eyes = true\n[workspaces.acme]\napproval = { four_eyes = false }\n",
        "workspaces.acme.approval.four_eyes",
        "would drop the four-eyes rule",
    ),
    (
        '[approval]\nroles = ["lead"]\n[workspaces.acme.approval]\nroles = ["intern"]\n',
        "workspaces.acme.approval.roles",
        "roles ['intern'] are not among the roles ['lead']",
    ),
    (
        '[approval]\nroles = ["lead"]\n[workspaces.acme.approval]\nroles = []\n',
        "workspaces.acme.approval.roles",
        "widens ['lead'] to everyone",
    ),
    (
        'mode = "all_writes"\n[workspaces.acme]\nmode = "default"\n',
        "workspaces.acme.mode",
        'would lift the global mode = "all_writes"',
    ),
    (
        'unknown_tool = "deny"\n[sources.prod]\nunknown_tool = "require_approval"\n',
        "sources.prod.unknown_tool",
        "looser than the global deny",
    ),
    (
        '[workspaces.acme.tools]\nmystery = "allow"\n',
        "workspaces.acme.tools.mystery",
        "has no global decision that allows it",
    ),
    (
        '[tools.deploy]\ndecision = "deny"\n[workspaces.acme.tools]\ndeploy = "require_approval"\n',
        "workspaces.acme.tools.deploy",
        "require_approval is looser than the global deny",
    ),
    (
        "[classes.exec]\napproval = { quorum = 3 }\n"
        "[workspaces.acme.classes.exec]\napproval = { quorum = 2 }\n",
        "workspaces.acme.classes.exec.approval.quorum",
        "quorum 2 is lower than the 3",
    ),
    (
        '[tools.deploy]\nrisk_class = "external"\nseverity = "high"\napproval = { quorum = 2 }\n'
        "[sources.prod.tools.deploy]\napproval = { quorum = 1 }\n",
        "sources.prod.tools.deploy.approval.quorum",
        "quorum 1 is lower than the 2",
    ),
]


@pytest.mark.parametrize(("text", "key", "fragment"), LOOSENING)
def test_a_loosening_workspace_or_source_entry_is_an_error_naming_its_key(
    text: str, key: str, fragment: str
) -> None:
    with pytest.raises(PolicyValidationError) as caught:
        load_policy_text(text, "acme.toml")
    assert caught.value.key == key
    kind = "workspace" if key.startswith("workspaces") else "source"
    assert f"the {kind} `{key.split('.')[1]}` may only tighten" in str(caught.value)
    assert fragment in str(caught.value)
    assert caught.value.line is not None


TIGHTENING = [
    '[workspaces.acme.classes]\nwrite_local = "deny"\nread = "require_approval"\n',
    "[approval]\nquorum = 1\n[workspaces.acme.approval]\nquorum = 3\nfour_eyes = true\n",
    '[approval]\nroles = ["lead", "sre"]\n[sources.prod.approval]\nroles = ["sre"]\nttl = "5m"\n',
    '[workspaces.acme]\nmode = "all_writes"\nunknown_tool = "deny"\n',
    '[tools.deploy]\ndecision = "allow"\n[workspaces.acme.tools]\ndeploy = "require_approval"\n',
    '[workspaces.acme.tools]\nmystery = "deny"\n',
]


@pytest.mark.parametrize("text", TIGHTENING)
def test_a_tightening_workspace_or_source_entry_is_accepted(text: str) -> None:
    load_policy_text(text, "acme.toml")


def test_every_problem_is_reported_not_just_the_first() -> None:
    text = 'unknown_tool = "allow"\n[workspaces.acme.classes]\nexec = "allow"\n'
    with pytest.raises(PolicyValidationError) as caught:
        load_policy_text(text, "acme.toml")
    keys = [p.key for p in caught.value.problems]
    assert keys == ["unknown_tool", "workspaces.acme.classes.exec"]
    assert str(caught.value).startswith("The policy has 2 problems:")


def test_a_toml_syntax_error_gives_the_line() -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy_text('mode = "all_writes"\n[classes\nread = "allow"\n', "acme.toml")
    message = str(caught.value)
    assert message.startswith("acme.toml, line 2")
    assert "not valid TOML" in message


def test_a_missing_policy_file_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(PolicyError) as caught:
        load_policy(missing)
    assert str(missing) in str(caught.value)
    assert "cannot be read" in str(caught.value)


def test_load_policy_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text('mode = "all_writes"\n')
    assert load_policy(path).mode == "all_writes"


EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "policy.example.toml"


def test_the_example_policy_loads_and_exercises_every_section() -> None:
    p = load_policy(EXAMPLE)
    assert p.mode == "default"
    assert p.unknown_tool is Decision.REQUIRE_APPROVAL
    assert p.default_ttl_seconds == 3600
    assert p.class_decision(RiskClass.DESTRUCTIVE) is Decision.DENY
    assert {"run_tests", "send_email", "main_db_query", "drop_branch"} <= set(p.tools)
    assert p.workspaces["production"].mode == "all_writes"
    assert "billing-db" in p.sources
    assert set(p.approvers) == {"alice", "bob", "carol"}
    tables = p.classifier_tables()
    assert "*.internal.example.com" in tables.trusted_hosts
    assert tables.overrides["create_ticket"].risk_class is RiskClass.EXTERNAL
    assert tables.overrides["main_db_query"].risk_class is RiskClass.READ
    assert set(tables.pinned) == {"main_db_query", "run_tests"}
    text = EXAMPLE.read_text()
    for section in (
        "[approval]",
        "[classes]",
        "[tools.",
        "[workspaces.",
        "[sources.",
        "[approvers.",
        "[classifier]",
        "[lock]",
    ):
        assert section in text
