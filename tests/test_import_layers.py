"""The layers hold in fact: what importing a client-side package loads (a fresh interpreter).

`lint-imports` checks the import graph statically (contracts in pyproject.toml); this checks
what a process actually loads, which is what a hook started per tool call pays for.
"""

from __future__ import annotations

import json
import subprocess
import sys

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


def loaded_by_cli(*argv: str) -> set[str]:
    """The modules a `headgate` command loaded by the time it exited."""
    code = (
        "import atexit, json, sys\n"
        "report = lambda: sys.__stderr__.write('MODULES' + json.dumps(sorted(sys.modules)))\n"
        "atexit.register(report)\n"
        f"sys.argv = ['headgate', *{list(argv)!r}]\n"
        "from workflow.cli import main\n"
        "main()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
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
