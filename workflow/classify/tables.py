"""The built-in tool table and the operator's tables the classifier reads.

`ClassifierTables` is everything configurable about classification; the policy file builds one
(`Policy.classifier_tables()`), and `DEFAULT_TABLES` is what ships.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from workflow.classify.taxonomy import Category, RiskClass, Severity


class ToolRule(BaseModel):
    """How a tool is classified by name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    risk_class: RiskClass
    severity: Severity
    categories: frozenset[Category] = frozenset()
    takes_command: bool = Field(
        default=False, description="A shell tool: its class is what analysing the command finds."
    )


def _rule(
    risk: RiskClass, sev: Severity, *cats: Category, takes_command: bool = False
) -> ToolRule:
    return ToolRule(
        risk_class=risk, severity=sev, categories=frozenset(cats), takes_command=takes_command
    )


R, EG, EX, W, X, D = (
    RiskClass.READ,
    RiskClass.EGRESS,
    RiskClass.EXTERNAL,
    RiskClass.WRITE_LOCAL,
    RiskClass.EXEC,
    RiskClass.DESTRUCTIVE,
)
LOW, MED, HIGH, CRIT = Severity.LOW, Severity.MEDIUM, Severity.HIGH, Severity.CRITICAL
NET = Category.NETWORK

#: Tools known by name. Reviewed list: a tool missing here is unknown and fails closed.
BUILTIN_TOOLS: dict[str, ToolRule] = {
    # reads
    "read_file": _rule(R, LOW),
    "list_directory": _rule(R, LOW),
    "list_dir": _rule(R, LOW),
    "glob": _rule(R, LOW),
    "grep": _rule(R, LOW),
    "search_files": _rule(R, LOW),
    "get_file_info": _rule(R, LOW),
    # local writes
    "write_file": _rule(W, MED),
    "edit_file": _rule(W, MED),
    "replace_in_file": _rule(W, MED),
    "apply_patch": _rule(W, MED),
    "create_directory": _rule(W, LOW),
    "move_file": _rule(W, MED),
    # destructive
    "delete_file": _rule(D, HIGH, Category.DESTRUCTIVE),
    "delete_directory": _rule(D, HIGH, Category.DESTRUCTIVE),
    # exec
    "run_shell": _rule(X, HIGH, takes_command=True),
    "bash": _rule(X, HIGH, takes_command=True),
    "shell": _rule(X, HIGH, takes_command=True),
    "run_python": _rule(X, HIGH),
    # egress
    "web_fetch": _rule(EG, MED, NET),
    "web_search": _rule(EG, MED, NET),
    "http_request": _rule(EX, HIGH, NET),
    # external side effects
    "send_email": _rule(EX, HIGH, NET),
    "send_message": _rule(EX, HIGH, NET),
    "create_issue": _rule(EX, MED, NET),
}


class ClassifierTables(BaseModel):
    """Operator-configurable classification tables (from the policy file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    overrides: dict[str, ToolRule] = Field(
        default_factory=dict,
        description="Per-tool rules. For a built-in tool they may only tighten it.",
    )
    pinned: dict[str, str] = Field(
        default_factory=dict, description="Tool name -> pinned definition hash."
    )


DEFAULT_TABLES = ClassifierTables()
