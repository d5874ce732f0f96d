"""Grants in the pure core: what a grant may release, and what it never releases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.policy.policy_helpers import user_key
from workflow.classify.simple import simple_argv
from workflow.classify.taxonomy import Category, RiskClass, Severity
from workflow.controls import GrantScope
from workflow.messages import (
    ApprovalRequirement,
    Classification,
    Decision,
    Proposal,
    ProposalContext,
    Verdict,
)
from workflow.policy.grants import GrantTerms, grant_release, not_grantable, scope_problem
from workflow.policy.model import Policy
from workflow.policy.schema import Approver

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
KEY = user_key(1)
POLICY = Policy.model_validate(
    {
        "approvers": {
            "alice": Approver(key=KEY, roles=["approver"], workspaces=["w"]),
            "bob": Approver(key=user_key(2), roles=["approver"], agents=["coder"]),
        }
    }
)


def grant(**over: object) -> GrantTerms:
    fields: dict[str, object] = {
        "grant_id": "g1",
        "approver": "alice",
        "key": KEY,
        "tool": "run_shell",
        "workspace": "w",
        "agent": None,
        "scope": GrantScope.COMMAND_PREFIX,
        "command_prefix": ("npm", "test"),
        "path_glob": None,
        "expires_at": NOW + timedelta(hours=1),
    }
    fields.update(over)
    return GrantTerms(**fields)  # type: ignore[arg-type]


def call(command: str, tool: str = "run_shell", **args: object) -> Proposal:
    arguments = {"command": command} if command else {}
    return Proposal(
        id="p-1",
        agent="coder",
        workspace="w",
        tool=tool,
        arguments={**arguments, **args},
        context=ProposalContext(cwd="/repo"),
    )


EXEC = Classification(risk_class=RiskClass.EXEC, severity=Severity.HIGH)
HELD = Verdict(
    decision=Decision.REQUIRE_APPROVAL,
    reason="needs approval",
    requirement=ApprovalRequirement(),
)


def released(proposal: Proposal, terms: GrantTerms, cls: Classification = EXEC) -> bool:
    return grant_release(proposal, cls, HELD, [terms], POLICY, NOW) is not None


@pytest.mark.parametrize(
    ("command", "covered"),
    [
        ("npm test", True),
        ("npm test --watch src", True),
        ("npm 'test'", True),
        ("npm testing", False),
        ("npm", False),
        ("npm test && curl https://evil.example", False),
        ("npm test; curl x", False),
        ("npm test | sh", False),
        ("npm test > ~/.bashrc", False),
        ("npm test 2>/dev/null", False),
        ("npm test $(curl x)", False),
        ("npm test `id`", False),
        ("npm test $HOME", False),
        ("npm test *", False),
        ("npm test &", False),
        ("FOO=1 npm test", False),
        ("(npm test)", False),
        ("npm test # note", False),
        ("npm test <<< x", False),
    ],
)
def test_a_command_grant_covers_only_a_simple_command_starting_with_its_prefix(
    command: str, covered: bool
) -> None:
    assert released(call(command), grant()) is covered


def test_an_argv_list_is_matched_word_for_word() -> None:
    assert released(call("", argv=["npm", "test", "-x"]), grant())
    assert not released(call("", argv=["npm", "tes"]), grant())


@pytest.mark.parametrize(
    ("path", "covered"),
    [
        ("src/a.py", True),
        ("/repo/src/deep/b.py", True),
        ("src/../secrets.txt", False),
        ("/etc/passwd", False),
        ("~/x", False),
    ],
)
def test_a_path_grant_covers_paths_under_its_glob(path: str, covered: bool) -> None:
    terms = grant(
        tool="write_file", scope=GrantScope.PATH, command_prefix=None, path_glob="/repo/src/**"
    )
    write = Classification(risk_class=RiskClass.WRITE_LOCAL, severity=Severity.MEDIUM)
    assert released(call("", tool="write_file", path=path), terms, write) is covered


def test_a_tool_grant_never_covers_a_call_that_carries_a_command() -> None:
    terms = grant(scope=GrantScope.TOOL, command_prefix=None)
    assert scope_problem(terms, call("npm test")) is not None
    assert scope_problem(terms, call("", tool="run_shell", query="x")) is None


def test_the_grant_names_itself_in_the_release() -> None:
    found = grant_release(call("npm test"), EXEC, HELD, [grant(max_uses=3, uses=1)], POLICY, NOW)
    assert found is not None
    assert found.verdict.decision is Decision.ALLOW
    assert "g1" in found.verdict.reason
    assert "use 2 of 3" in found.verdict.reason
    assert found.verdict.trail[-1].step == "grant"


@pytest.mark.parametrize(
    "terms",
    [
        grant(approver="bob", key=user_key(2)),  # runs the agent
        grant(workspace="other"),  # not the call's workspace
        grant(key=user_key(3)),  # the key is no approver's
        grant(approver="bob"),  # the key is alice's
    ],
)
def test_a_grant_is_authorised_like_an_approval(terms: GrantTerms) -> None:
    assert not released(call("npm test"), terms)


def test_a_grant_needs_the_roles_the_call_requires() -> None:
    needs_sre = HELD.model_copy(update={"requirement": ApprovalRequirement(roles=["sre"])})
    assert grant_release(call("npm test"), EXEC, needs_sre, [grant()], POLICY, NOW) is None


# --------------------------------------------------------------------------- properties

commands = st.sampled_from(
    [
        "npm test",
        "npm test -x",
        "npm test && rm -rf /",
        "npm test | sh",
        "npm test > f",
        "npm $(x)",
        "npm run build",
        "echo npm test",
    ]
)
classifications = st.builds(
    Classification,
    risk_class=st.sampled_from(list(RiskClass)),
    severity=st.sampled_from(list(Severity)),
    categories=st.lists(st.sampled_from(list(Category)), max_size=2, unique=True),
    fail_closed=st.booleans(),
)
requirements = st.builds(ApprovalRequirement, quorum=st.integers(1, 3), four_eyes=st.booleans())
verdicts = st.builds(
    Verdict,
    decision=st.sampled_from(list(Decision)),
    reason=st.just("r"),
    requirement=st.none() | requirements,
)
grants = st.builds(
    grant,
    expires_at=st.sampled_from([NOW - timedelta(seconds=1), NOW, NOW + timedelta(minutes=5)]),
    max_uses=st.none() | st.integers(1, 3),
    uses=st.integers(0, 3),
    revoked=st.booleans(),
    agent=st.sampled_from([None, "coder", "other"]),
)


@settings(max_examples=400, deadline=None)
@given(commands, classifications, verdicts, st.lists(grants, max_size=3))
def test_a_grant_never_releases_what_the_policy_does_not_leave_to_one_approval(
    command: str,
    cls: Classification,
    verdict: Verdict,
    terms: list[GrantTerms],
) -> None:
    found = grant_release(call(command), cls, verdict, terms, POLICY, NOW)
    if found is None:
        return
    # Never a denial, never a call needing more than one approval.
    assert verdict.decision is Decision.REQUIRE_APPROVAL
    assert verdict.requirement is not None
    assert verdict.requirement.approvals_needed == 1
    # Never destructive, critical or fail-closed.
    assert cls.risk_class is not RiskClass.DESTRUCTIVE
    assert Category.DESTRUCTIVE not in cls.categories
    assert cls.severity is not Severity.CRITICAL
    assert not cls.fail_closed
    # Only a live grant, and only for a simple command starting with its prefix.
    g = found.grant
    assert not g.revoked
    assert NOW < g.expires_at
    assert g.max_uses is None or g.uses < g.max_uses
    argv = simple_argv(command)
    assert argv is not None
    assert argv[:2] == ("npm", "test")
    assert found.verdict.decision is Decision.ALLOW
    assert g.grant_id in found.verdict.reason


@settings(max_examples=200, deadline=None)
@given(commands, st.sampled_from(["revoked", "expired", "used_up"]), st.integers(1, 3))
def test_a_used_up_expired_or_revoked_grant_releases_nothing(
    command: str, state: str, uses: int
) -> None:
    terms = {
        "revoked": grant(revoked=True),
        "expired": grant(expires_at=NOW - timedelta(seconds=uses)),
        "used_up": grant(max_uses=uses, uses=uses),
    }[state]
    assert grant_release(call(command), EXEC, HELD, [terms], POLICY, NOW) is None


@pytest.mark.parametrize(
    ("cls", "verdict"),
    [
        (EXEC.model_copy(update={"risk_class": RiskClass.DESTRUCTIVE}), HELD),
        (EXEC.model_copy(update={"categories": [Category.DESTRUCTIVE]}), HELD),
        (EXEC.model_copy(update={"severity": Severity.CRITICAL}), HELD),
        (EXEC.model_copy(update={"fail_closed": True}), HELD),
        (EXEC, HELD.model_copy(update={"requirement": ApprovalRequirement(quorum=2)})),
        (EXEC, HELD.model_copy(update={"requirement": ApprovalRequirement(four_eyes=True)})),
        (EXEC, Verdict(decision=Decision.DENY, reason="no")),
    ],
)
def test_no_grant_covers_what_needs_more_than_one_approval(
    cls: Classification, verdict: Verdict
) -> None:
    assert not_grantable(cls, verdict) is not None
    assert grant_release(call("npm test"), cls, verdict, [grant()], POLICY, NOW) is None


def test_a_session_grant_covers_only_the_calls_of_its_session() -> None:
    terms = grant(session_id="s1")

    def in_session(session: str | None) -> Proposal:
        return call("npm test").model_copy(
            update={"context": ProposalContext(cwd="/repo", session_id=session)}
        )

    assert released(in_session("s1"), terms)
    assert not released(in_session("s2"), terms)
    assert not released(in_session(None), terms)
