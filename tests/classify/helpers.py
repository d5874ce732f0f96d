"""Building proposals for classifier tests."""

from __future__ import annotations

from typing import Any

from workflow.classify.engine import classify
from workflow.classify.tables import DEFAULT_TABLES, ClassifierTables
from workflow.messages import Classification, Proposal, ToolDefinition


def proposal(
    tool: str,
    arguments: dict[str, Any] | None = None,
    *,
    cwd: str | None = "/home/agent/proj",
    capability: str | None = None,
    definition: ToolDefinition | None = None,
    shell: str | None = None,
) -> Proposal:
    context = {"cwd": cwd, "shell": shell} if cwd or shell else None
    return Proposal.model_validate(
        {
            "id": "p-1",
            "agent": "tester",
            "tool": tool,
            "arguments": arguments or {},
            "capability": capability,
            "tool_definition": definition.model_dump() if definition else None,
            "context": context,
        }
    )


def run(command: str, tables: ClassifierTables = DEFAULT_TABLES, **kw: Any) -> Classification:
    return classify(proposal("run_shell", {"command": command}, **kw), tables)


def rules_of(result: Classification) -> set[str]:
    return {r.rule for r in result.reasons}
