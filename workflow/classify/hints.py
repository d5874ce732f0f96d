"""Tool metadata (DESIGN §4 layer 4): MCP annotations and `requires_approval`.

They are suggestions from the tool's author: they may raise the class, never lower it.
`readOnlyHint` alone never makes a tool a read; read-only together with destructive is
incoherent and fails closed.
"""

from __future__ import annotations

from workflow.classify.findings import Finding, finding
from workflow.classify.taxonomy import Category, RiskClass, Severity
from workflow.messages import Hints, ToolDefinition

#: The hints of a tool that declares none. Shared: a frozen model of plain values.
NO_HINTS = Hints()


def hints_of(definition: ToolDefinition | None) -> Hints:
    ann = definition.annotations if definition is not None else None
    if ann is None:
        return NO_HINTS
    return Hints(
        read_only=ann.readOnlyHint,
        destructive=ann.destructiveHint,
        idempotent=ann.idempotentHint,
        open_world=ann.openWorldHint,
    )


def hint_findings(
    tool: str, definition: ToolDefinition | None, hints: Hints, table_class: RiskClass | None
) -> list[Finding]:
    """Findings from what the tool says about itself. `table_class` is its class by name."""
    if definition is None:
        return []
    if hints.read_only and hints.destructive:
        return [
            finding(
                "hints.incoherent",
                f"`{tool}` declares itself both read-only and destructive; incoherent metadata "
                "fails closed (destructive, critical).",
                RiskClass.DESTRUCTIVE,
                Severity.CRITICAL,
                Category.DESTRUCTIVE,
                fail_closed=True,
            )
        ]
    out: list[Finding] = []
    if hints.destructive:
        out.append(
            finding(
                "hints.destructive",
                f"The author of `{tool}` marks it destructive (destructive, high).",
                RiskClass.DESTRUCTIVE,
                Severity.HIGH,
                Category.DESTRUCTIVE,
            )
        )
    if hints.read_only is False and table_class is RiskClass.READ:
        out.append(
            finding(
                "hints.not_read_only",
                f"The author of `{tool}` says it is not read-only, so it is not treated as a "
                "read (write_local, medium).",
                RiskClass.WRITE_LOCAL,
                Severity.MEDIUM,
            )
        )
    if hints.open_world:
        risk = RiskClass.EGRESS if hints.read_only else RiskClass.EXTERNAL
        out.append(
            finding(
                "hints.open_world",
                f"The author of `{tool}` marks it as reaching the outside world ({risk}, medium).",
                risk,
                Severity.MEDIUM,
                Category.NETWORK,
            )
        )
    if definition.requires_approval:
        out.append(
            finding(
                "hints.requires_approval",
                f"The author of `{tool}` says it requires approval (external, medium).",
                RiskClass.EXTERNAL,
                Severity.MEDIUM,
            )
        )
    return out
