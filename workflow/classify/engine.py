"""The layered classifier. Pure: no I/O, no clock.

Each layer proposes a (class, severity, categories) with a reason; the strictest result any
layer gives wins and no layer can lower another.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workflow.classify.tables import BUILTIN_TOOLS, DEFAULT_TABLES, ClassifierTables, ToolRule
from workflow.classify.taxonomy import (
    Category,
    RiskClass,
    Severity,
    strictest_class,
    strictest_severity,
)
from workflow.messages import (
    Classification,
    Hints,
    Proposal,
    Reason,
    ToolDefinition,
    canonical_json,
    sha256_hex,
)


def definition_hash(definition: ToolDefinition) -> str:
    """sha256 over the canonical JSON of description, input schema and annotations."""
    body = {
        "description": definition.description,
        "input_schema": definition.input_schema,
        "annotations": (
            definition.annotations.model_dump(mode="json", exclude_none=True)
            if definition.annotations
            else {}
        ),
    }
    return sha256_hex(canonical_json(body))


@dataclass
class _Acc:
    """Accumulates layer results; only ever moves up."""

    risk: RiskClass = RiskClass.READ
    severity: Severity = Severity.LOW
    categories: set[Category] = field(default_factory=set)
    reasons: list[Reason] = field(default_factory=list)
    fail_closed: bool = False
    known: bool = True

    def raise_to(
        self,
        rule: str,
        message: str,
        risk: RiskClass,
        severity: Severity,
        categories: frozenset[Category] | set[Category] = frozenset(),
    ) -> None:
        self.risk = strictest_class(self.risk, risk)
        self.severity = strictest_severity(self.severity, severity)
        self.categories |= set(categories)
        self.reasons.append(Reason(rule=rule, message=message, risk_class=risk, severity=severity))

    def note(self, rule: str, message: str) -> None:
        self.reasons.append(Reason(rule=rule, message=message))


def _table_rule(tool: str, tables: ClassifierTables, acc: _Acc) -> ToolRule | None:
    builtin = BUILTIN_TOOLS.get(tool)
    override = tables.overrides.get(tool)
    if builtin is None:
        return override
    if override is None:
        return builtin
    looser = (
        override.risk_class.order_key < builtin.risk_class.order_key
        or override.severity.rank < builtin.severity.rank
    )
    if looser:
        acc.note(
            "table.override_ignored",
            f"The override for `{tool}` would loosen its built-in classification "
            f"({builtin.risk_class}, {builtin.severity}); overrides may only tighten, so it "
            "was ignored.",
        )
        return builtin
    return override


def _hints(definition: ToolDefinition | None, acc: _Acc, tool: str) -> Hints:
    if definition is None:
        return Hints()
    ann = definition.annotations
    hints = Hints(
        read_only=ann.readOnlyHint if ann else None,
        destructive=ann.destructiveHint if ann else None,
        idempotent=ann.idempotentHint if ann else None,
        open_world=ann.openWorldHint if ann else None,
    )
    if hints.read_only and hints.destructive:
        acc.fail_closed = True
        acc.raise_to(
            "hints.incoherent",
            f"`{tool}` declares itself both read-only and destructive; incoherent metadata "
            "fails closed.",
            RiskClass.DESTRUCTIVE,
            Severity.CRITICAL,
            {Category.DESTRUCTIVE},
        )
        return hints
    if hints.destructive:
        acc.raise_to(
            "hints.destructive",
            f"The tool author marks `{tool}` as destructive.",
            RiskClass.DESTRUCTIVE,
            Severity.HIGH,
            {Category.DESTRUCTIVE},
        )
    elif hints.read_only is False or (hints.read_only is None and ann is not None):
        pass
    if hints.open_world:
        acc.raise_to(
            "hints.open_world",
            f"The tool author marks `{tool}` as reaching the outside world.",
            RiskClass.EGRESS if hints.read_only else RiskClass.EXTERNAL,
            Severity.MEDIUM,
            {Category.NETWORK},
        )
    if definition.requires_approval:
        acc.raise_to(
            "hints.requires_approval",
            f"The tool author says `{tool}` requires approval.",
            RiskClass.EXTERNAL,
            Severity.MEDIUM,
        )
    return hints


def classify(proposal: Proposal, tables: ClassifierTables = DEFAULT_TABLES) -> Classification:
    """Classify one proposal. Deterministic; the strictest layer wins."""
    acc = _Acc()
    tool = proposal.tool
    definition = proposal.tool_definition
    dhash = definition_hash(definition) if definition is not None else None

    rule = _table_rule(tool, tables, acc)
    pinned = tables.pinned.get(tool)
    if pinned is not None and dhash is not None and pinned != dhash:
        acc.known = False
        rule = None
        acc.note(
            "pin.mismatch",
            f"The definition of `{tool}` changed since it was pinned "
            f"({pinned[:12]}… now {dhash[:12]}…); it is treated as an unknown tool.",
        )

    if rule is None:
        acc.known = False
        acc.fail_closed = True
        acc.raise_to(
            "table.unknown_tool",
            f"`{tool}` is not a known tool; unknown tools fail closed.",
            RiskClass.EXEC,
            Severity.HIGH,
        )
    else:
        acc.raise_to(
            "table.builtin" if tool in BUILTIN_TOOLS else "table.override",
            f"`{tool}` is classified {rule.risk_class} ({rule.severity}) by name.",
            rule.risk_class,
            rule.severity,
            rule.categories,
        )

    hints = _hints(definition, acc, tool)
    return Classification(
        risk_class=acc.risk,
        severity=acc.severity,
        categories=sorted(acc.categories),
        hints=hints,
        fail_closed=acc.fail_closed,
        tool_known=acc.known,
        definition_hash=dhash,
        reasons=acc.reasons,
    )
