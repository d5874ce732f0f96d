"""Requirements no registered approver can satisfy are found and named (a table of policies)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tests.policy.policy_helpers import user_key
from tests.service.helpers import running_service
from workflow.cli.policy_cmds import policy_app
from workflow.policy.coverage import approval_gaps
from workflow.policy.load import load_policy, load_policy_text
from workflow.policy.model import default_policy

ALICE = f'[approvers.alice]\nkey = "{user_key(1)}"\nroles = ["approver"]\n'
BOB = f'[approvers.bob]\nkey = "{user_key(2)}"\nroles = ["approver", "lead"]\n'
DAVE = f'[approvers.dave]\nkey = "{user_key(4)}"\nworkspaces = ["dev"]\n'
CAROL = f'[approvers.carol]\nkey = "{user_key(3)}"\nroles = ["lead"]\nworkspaces = ["prod"]\n'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Everything that needs approval can be approved.
        (ALICE, {}),
        (ALICE + BOB + '[classes]\nexec = { approval = { roles = ["lead"] } }\n', {}),
        (ALICE + BOB + "[approval]\nquorum = 2\n", {}),
        # Nothing is ever held: no approver is needed.
        ('unknown_tool = "deny"\n[classes]\negress = "deny"\nexternal = "deny"\n'
         'write_local = "deny"\nexec = "deny"\n', {}),
        # No approvers at all: one warning naming what holds calls.
        ("", {"approvers": "no approvers are registered"}),
        # A role nobody has.
        (ALICE + '[classes]\nexec = { approval = { roles = ["lead"] } }\n',
         {"classes.exec.approval": "no registered approver has one of the roles lead"}),
        (ALICE + '[tools.send_email]\ndecision = "require_approval"\n'
         'approval = { roles = ["comms"] }\n',
         {"tools.send_email.approval": "no registered approver has one of the roles comms"}),
        # A quorum above the number of eligible approvers (four-eyes counts as two).
        (ALICE + "[approval]\nquorum = 3\n",
         {"unknown_tool": "only 1 registered approver (alice) can give one",
          "classes.write_local": "needs 3 approvals"}),
        (ALICE + BOB + '[classes]\nexec = { approval = { four_eyes = true, roles = ["lead"] } }\n',
         {"classes.exec.approval": "only 1 registered approver (bob) can give one"}),
        # A workspace nobody may approve for, and one only carol may.
        (CAROL + "[workspaces.staging]\nmode = \"all_writes\"\n",
         {"workspaces.staging": "no registered approver may approve for workspace staging"}),
        (DAVE + CAROL + '[workspaces.prod]\napproval = { quorum = 2 }\n',
         {"workspaces.prod.approval": "only 1 registered approver (carol) can give one for "
                                      "workspace prod"}),
        # A source that asks for a role nobody has.
        (ALICE + '[sources.billing]\napproval = { roles = ["approver"], quorum = 2 }\n',
         {"sources.billing.approval": "only 1 registered approver (alice)"}),
    ],
)  # fmt: skip
def test_unsatisfiable_requirements_are_named(text: str, expected: dict[str, str]) -> None:
    gaps = {g.key: g.sentence() for g in approval_gaps(load_policy_text(text))}
    for key, words in expected.items():
        assert key in gaps, (key, gaps)
        assert words in gaps[key], gaps[key]
    if not expected:
        assert gaps == {}


def test_a_policy_without_approvers_names_the_rules_that_hold_calls() -> None:
    (gap,) = approval_gaps(load_policy_text('[classes]\nexec = "require_approval"\n'))
    assert gap.key == "approvers"
    assert "classes.exec" in gap.message
    assert "unknown_tool" in gap.message
    assert "headgate keys new NAME" in gap.message


def test_the_default_policy_of_serve_has_no_gap() -> None:
    assert approval_gaps(default_policy()) != []  # no approver registered at all
    from workflow.policy.schema import Approver

    local = default_policy(approvers={"me": Approver(key=user_key(9), roles=["admin", "approver"])})
    assert approval_gaps(local) == []


def test_the_shipped_example_policy_has_no_gap() -> None:
    example = Path(__file__).resolve().parents[2] / "deploy" / "policy.example.toml"
    assert [g.sentence() for g in approval_gaps(load_policy(example))] == []


def test_policy_check_warns_naming_the_rule_and_stays_valid(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(ALICE + '[classes]\nexec = { approval = { roles = ["lead"] } }\n')
    app = typer.Typer()
    app.add_typer(policy_app, name="policy")
    result = CliRunner().invoke(app, ["policy", "check", str(path)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "is valid" in result.stdout
    (warning,) = result.stderr.splitlines()
    assert warning.startswith("warning: classes.exec.approval: it needs 1 approval from role lead")
    as_json = CliRunner().invoke(app, ["policy", "check", str(path), "--json"],
                                 env={"COLUMNS": "300"})  # fmt: skip
    assert json.loads(as_json.stdout)["warnings"] == [warning.removeprefix("warning: ")]


async def test_serve_warns_at_start_naming_the_rule(
    nats_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(ALICE + "[approval]\nquorum = 2\n")
    with caplog.at_level(logging.WARNING, logger="headgate"):
        async with running_service(nats_url, tmp_path, policy_path=path):
            pass
    warned = [r.getMessage() for r in caplog.records if "only 1 registered approver" in r.message]
    assert any(f"policy {path}: classes.write_local: it needs 2 approvals" in w for w in warned)
