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
