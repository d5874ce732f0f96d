"""The layers hold in fact: what importing a client-side package loads (a fresh interpreter).

`lint-imports` checks the import graph statically (contracts in pyproject.toml); this checks
what a process actually loads, which is what a hook started per tool call pays for.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("sqlalchemy", "sqlmodel", "aiosqlite", "asyncpg", "workflow.store", "workflow.service")


def loaded_after(statement: str) -> set[str]:
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize(
    "statement",
    [
        "import workflow.client",
        "import workflow.classify",
        "import workflow.classify.engine",
        "import workflow.approvals, workflow.routing, workflow.effects",
        "import workflow.policy.engine, workflow.policy.load",
    ],
)
def test_the_client_and_the_core_load_no_database_and_no_service(statement: str) -> None:
    modules = loaded_after(statement)
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY))
    assert heavy == []


def test_the_approval_state_machine_loads_no_parser() -> None:
    modules = loaded_after("import workflow.approvals")
    assert not any(m.startswith(("tree_sitter", "workflow.classify.shell")) for m in modules)


def loaded_by_cli(*argv: str, cwd: Path | None = None) -> set[str]:
    """The modules a `headgate` command loaded by the time it exited."""
    code = (
        "import atexit, json, sys\n"
        "report = lambda: sys.__stderr__.write('MODULES' + json.dumps(sorted(sys.modules)))\n"
        "atexit.register(report)\n"
        f"sys.argv = ['headgate', *{list(argv)!r}]\n"
        "from workflow.cli import main\n"
        "main()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=cwd
    )
    return set(json.loads(out.stderr.rsplit("MODULES", 1)[1]))


SERVICE_SIDE = (*HEAVY, "workflow.classify.engine", "workflow.policy", "tree_sitter")


def _found(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(
        m for m in modules if m in prefixes or m.startswith(tuple(f"{p}." for p in prefixes))
    )


def test_help_loads_neither_nats_nor_pydantic_nor_the_service() -> None:
    modules = loaded_by_cli("--help")
    assert "typer" in modules
    assert _found(modules, (*SERVICE_SIDE, "nats", "pydantic", "workflow.messages")) == []


UNREACHABLE = ("--nats-url", "nats://127.0.0.1:1")
#: The commands that talk to a running service, as a person or a script runs them.
CLIENT_COMMANDS = {
    "propose": ("propose", "--agent", "a", "--tool", "read_file"),
    "pending": ("pending",),
    "approve": ("approve", "rq_x", "--key", "approver.seed"),
    "reject": ("reject", "rq_x", "--reason", "not now", "--key", "approver.seed"),
    "show": ("show", "rq_x"),
    "inbox": ("inbox",),
    "dead": ("dead",),
    "grants list": ("grants", "list"),
}
#: What a client command never loads: the service side, the database, the parser, and the
#: modules of the commands it is not (each is imported only when its command runs).
NOT_FOR_CLIENTS = (
    *SERVICE_SIDE,
    "faststream",
    "workflow.classify.shell",
    "workflow.cli.serve",
    "workflow.cli.offline",
    "workflow.cli.backtest",
    "workflow.cli.policy_cmds",
    "workflow.cli.bench",
    "workflow.cli.hook",
    "workflow.cli.web",
    "workflow.cli.inbox_view",
)


@pytest.mark.parametrize("command", CLIENT_COMMANDS)
def test_a_client_command_loads_nothing_of_the_service_nor_of_the_other_commands(
    command: str, tmp_path: Path
) -> None:
    from workflow.signing import ApproverKey

    ApproverKey.generate().write(tmp_path / "approver.seed")  # so approve gets to connecting
    modules = loaded_by_cli(*CLIENT_COMMANDS[command], *UNREACHABLE, cwd=tmp_path)
    assert "nats" in modules  # it got as far as connecting
    assert _found(modules, NOT_FOR_CLIENTS) == []


def test_proposing_without_waiting_loads_neither_the_agent_sdk_nor_the_approvers_side(
    tmp_path: Path,
) -> None:
    modules = loaded_by_cli(*CLIENT_COMMANDS["propose"], *UNREACHABLE, cwd=tmp_path)
    assert _found(modules, ("workflow.client.agent", "workflow.client.approver")) == []


def test_a_command_s_help_loads_that_command_alone() -> None:
    modules = loaded_by_cli("propose", "--help")
    assert "workflow.cli.calls" in modules
    others = ("workflow.cli.serve", "workflow.cli.offline", "workflow.cli.policy_cmds")
    assert _found(modules, (*SERVICE_SIDE, *others, "nats", "workflow.messages")) == []


def test_propose_loads_the_wire_models_and_nats_but_nothing_of_the_service() -> None:
    modules = loaded_by_cli(
        "propose", "--agent", "a", "--tool", "read_file", "--nats-url", "nats://127.0.0.1:1"
    )
    assert {"workflow.messages", "nats"} <= modules
    assert _found(modules, SERVICE_SIDE) == []


def test_an_agent_hook_loads_nats_and_the_wire_models_but_nothing_of_the_service() -> None:
    modules = loaded_after("import workflow.adapters.hook, workflow.adapters.gate")
    assert {"nats", "workflow.messages", "workflow.client.agent"} <= modules
    assert _found(modules, SERVICE_SIDE) == []
