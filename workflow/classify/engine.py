"""The layered classifier (DESIGN §4). Pure: no I/O, no clock, no environment.

Each layer contributes findings; the accumulator keeps the strictest class and severity any
of them implies, so no layer can lower another. Every finding becomes a reason.
"""

from __future__ import annotations

from workflow.classify.arguments import argument_targets
from workflow.classify.findings import Accumulator, Finding, finding, note
from workflow.classify.hints import hint_findings, hints_of
from workflow.classify.hosts import host_findings, url_findings
from workflow.classify.shell import command_findings
from workflow.classify.tables import BUILTIN_TOOLS, DEFAULT_TABLES, ClassifierTables, ToolRule
from workflow.classify.targets import Access, check_path, path_rules
from workflow.classify.taxonomy import Capability, Category, RiskClass, Severity, parse_capability
from workflow.masking import masked_reasons
from workflow.messages import Classification, Proposal
from workflow.messages import definition_hash as definition_hash  # re-exported

_COMMAND_KEYS = frozenset({"command", "cmd"})

_CAPABILITY: dict[Capability, tuple[RiskClass, Severity, tuple[Category, ...], str]] = {
    Capability.READ: (RiskClass.READ, Severity.LOW, (), "reads"),
    Capability.LIST: (RiskClass.READ, Severity.LOW, (), "lists"),
    Capability.WRITE: (RiskClass.WRITE_LOCAL, Severity.MEDIUM, (), "writes local data"),
    Capability.PERSIST: (RiskClass.WRITE_LOCAL, Severity.MEDIUM, (), "persists data"),
    Capability.EXEC: (RiskClass.EXEC, Severity.HIGH, (), "executes code"),
    Capability.EGRESS_FETCH: (
        RiskClass.EGRESS,
        Severity.MEDIUM,
        (Category.NETWORK,),
        "fetches from the network",
    ),
    Capability.EGRESS_PROVIDER: (
        RiskClass.EXTERNAL,
        Severity.MEDIUM,
        (Category.NETWORK,),
        "sends data to an outside provider",
    ),
    Capability.AUTHZ: (
        RiskClass.EXTERNAL,
        Severity.CRITICAL,
        (Category.PRIVILEGED,),
        "changes authorisation (who may do what)",
    ),
}


#: The rule id of each declared capability (declared in rulebook/tools.py).
CAPABILITY_RULES: dict[Capability, str] = {
    Capability.READ: "capability.read",
    Capability.LIST: "capability.list",
    Capability.WRITE: "capability.write",
    Capability.PERSIST: "capability.persist",
    Capability.EXEC: "capability.exec",
    Capability.EGRESS_FETCH: "capability.egress_fetch",
    Capability.EGRESS_PROVIDER: "capability.egress_provider",
    Capability.AUTHZ: "capability.authz",
}


def _table_rule(tool: str, tables: ClassifierTables, acc: Accumulator) -> ToolRule | None:
    builtin = BUILTIN_TOOLS.get(tool)
    override = tables.overrides.get(tool)
    if builtin is None or override is None:
        return builtin or override
    looser = (
        override.risk_class.rung < builtin.risk_class.rung
        or override.severity.rank < builtin.severity.rank
        or not builtin.categories <= override.categories
        or (builtin.takes_command and not override.takes_command)
    )
    if looser:
        acc.add(
            note(
                "table.override_ignored",
                f"The override for `{tool}` ({override.risk_class}, {override.severity}) would "
                f"loosen its built-in classification ({builtin.risk_class}, "
                f"{builtin.severity}); overrides may only tighten, so it was ignored.",
            )
        )
        return builtin
    return override


def _capability(proposal: Proposal) -> list[Finding]:
    declared = proposal.capability
    if declared is None:
        return []
    cap = parse_capability(declared)
    if cap is None:
        return [
            finding(
                "capability.unknown",
                f"The proposal declares the verb `{declared[:60]}`, which is not one Headgate "
                "knows; an unknown verb fails closed (exec, critical).",
                RiskClass.EXEC,
                Severity.CRITICAL,
                fail_closed=True,
            )
        ]
    risk, sev, cats, what = _CAPABILITY[cap]
    return [
        finding(
            CAPABILITY_RULES[cap],
            f"The proposal declares `{cap.value}`: it {what} ({risk}, {sev}).",
            risk,
            sev,
            *cats,
        )
    ]


def _command(proposal: Proposal) -> str | list[str] | None:
    for key in ("command", "cmd", "argv", "args"):
        value = proposal.arguments.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return value
    return None


def _unknown(tool: str, why: str) -> Finding:
    return finding(
        "table.unknown_tool",
        f"`{tool}` {why}; unknown tools fail closed (exec, high).",
        RiskClass.EXEC,
        Severity.HIGH,
        fail_closed=True,
    )


def _tool_layer(
    proposal: Proposal, tables: ClassifierTables, acc: Accumulator, pin_broken: bool
) -> ToolRule | None:
    tool = proposal.tool
    rule = None if pin_broken else _table_rule(tool, tables, acc)
    is_shell = not pin_broken and tables.is_shell_tool(tool)
    if pin_broken:
        acc.add(_unknown(tool, "lost its classification because its definition changed"))
    elif rule is None and not is_shell:
        acc.add(_unknown(tool, "is not a known tool"))
    elif not is_shell and rule is not None:
        builtin = rule is BUILTIN_TOOLS.get(tool)
        source = "built-in table" if builtin else "operator override"
        acc.add(
            finding(
                "table.builtin" if builtin else "table.override",  # both in rulebook/tools.py
                f"The {source} classifies `{tool}` as {rule.risk_class} ({rule.severity}).",
                rule.risk_class,
                rule.severity,
                *sorted(rule.categories),
            )
        )
    command = _command(proposal)
    if is_shell and command is None:
        acc.add(
            finding(
                "shell.no_command",
                f"`{tool}` runs shell commands but the proposal carries no `command` argument "
                "to analyse; it fails closed (exec, high).",
                RiskClass.EXEC,
                Severity.HIGH,
                fail_closed=True,
            )
        )
    if command is not None and (is_shell or rule is None):
        ctx = proposal.context
        acc.extend(
            command_findings(command, ctx.cwd if ctx else None, ctx.shell if ctx else None, tables)
        )
    return None if is_shell else rule


def _target_layer(
    proposal: Proposal, tables: ClassifierTables, rule: ToolRule | None, acc: Accumulator
) -> None:
    cap = parse_capability(proposal.capability) if proposal.capability else None
    reading = (
        rule is not None
        and rule.risk_class is RiskClass.READ
        and cap in (None, Capability.READ, Capability.LIST)
        and acc.risk is RiskClass.READ
    )
    access = Access.READ if reading else Access.WRITE
    found = argument_targets(proposal.arguments, _COMMAND_KEYS)
    if found.overflow is not None:
        acc.add(
            finding(
                "target.too_many",
                f"The arguments of `{proposal.tool}` hold {found.overflow}; the rest cannot "
                "be checked, so the call fails closed (exec, high).",
                RiskClass.EXEC,
                Severity.HIGH,
                fail_closed=True,
            )
        )
    rules = path_rules(tables)
    cwd = proposal.context.cwd if proposal.context else None
    via = f"`{proposal.tool}`"
    for path in found.paths:
        acc.extend(check_path(path, cwd, rules, access, via))
    trusted = tuple(tables.trusted_hosts)
    for url in found.urls:
        acc.extend(url_findings(url, trusted, via))
    for host in found.hosts:
        acc.extend(host_findings(host, trusted, via))


def classify(proposal: Proposal, tables: ClassifierTables = DEFAULT_TABLES) -> Classification:
    """Classify one proposal. Deterministic; the strictest layer wins."""
    acc = Accumulator()
    tool = proposal.tool
    definition = proposal.tool_definition
    dhash = definition_hash(definition) if definition is not None else None

    pinned = tables.pinned.get(tool)
    pin_broken = pinned is not None and pinned != dhash
    if pinned is not None and pin_broken:
        now = f"now {dhash[:12]}…" if dhash else "now no definition at all"
        acc.add(
            note(
                "pin.mismatch",
                f"The definition of `{tool}` changed since it was pinned ({pinned[:12]}…, "
                f"{now}); it is treated as an unknown tool.",
            )
        )
    rule = _tool_layer(proposal, tables, acc, pin_broken)
    acc.extend(_capability(proposal))
    hints = hints_of(definition)
    acc.extend(hint_findings(tool, definition, hints, rule.risk_class if rule else None))
    _target_layer(proposal, tables, rule, acc)
    return Classification(
        risk_class=acc.risk,
        severity=acc.severity,
        categories=sorted(acc.categories),
        hints=hints,
        fail_closed=acc.fail_closed,
        tool_known=not pin_broken and (rule is not None or tables.is_shell_tool(tool)),
        definition_hash=dhash,
        # Reasons quote commands, paths and URLs; whoever reads them (pending, the inbox, the
        # audit, a notifier) reads them masked: a secret in the call never leaves through them.
        reasons=masked_reasons(acc.reasons(), proposal),
    )
