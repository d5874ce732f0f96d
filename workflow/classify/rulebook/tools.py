"""Rules about tools as a whole: declared capabilities, the built-in table and operator
overrides, definition pins, MCP annotations and the optional model check."""

from __future__ import annotations

from workflow.classify.rulebook.spec import rule
from workflow.classify.taxonomy import Category, RiskClass

DOMAIN = "tools"
D, P, N = Category.DESTRUCTIVE, Category.PRIVILEGED, Category.NETWORK

RULES = (
    rule("capability.read", RiskClass.READ, "low", "a proposal declaring `read`", domain=DOMAIN),
    rule("capability.list", RiskClass.READ, "low", "a proposal declaring `list`", domain=DOMAIN),
    rule(
        "capability.write",
        RiskClass.WRITE_LOCAL,
        "medium",
        "a proposal declaring `write`",
        domain=DOMAIN,
    ),
    rule(
        "capability.persist",
        RiskClass.WRITE_LOCAL,
        "medium",
        "a proposal declaring `persist`",
        domain=DOMAIN,
    ),
    rule("capability.exec", RiskClass.EXEC, "high", "a proposal declaring `exec`", domain=DOMAIN),
    rule(
        "capability.egress_fetch",
        RiskClass.EGRESS,
        "medium",
        "a proposal declaring `egress_fetch`",
        N,
        domain=DOMAIN,
    ),
    rule(
        "capability.egress_provider",
        RiskClass.EXTERNAL,
        "medium",
        "a proposal declaring `egress_provider`",
        N,
        domain=DOMAIN,
    ),
    rule(
        "capability.authz",
        RiskClass.EXTERNAL,
        "critical",
        "a proposal declaring `authz`",
        P,
        domain=DOMAIN,
    ),
    rule(
        "capability.unknown",
        RiskClass.EXEC,
        "critical",
        "a proposal declaring a verb Headgate does not know; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "table.builtin",
        None,
        "as the table says",
        "a tool in the built-in table (its class, severity and categories)",
        domain=DOMAIN,
    ),
    rule(
        "table.override",
        None,
        "as the override says",
        "a tool an operator override classifies",
        domain=DOMAIN,
    ),
    rule(
        "table.override_ignored",
        None,
        "-",
        "note: an override that would loosen a built-in tool is ignored",
        domain=DOMAIN,
    ),
    rule(
        "table.unknown_tool",
        RiskClass.EXEC,
        "high",
        "a tool that is not known (or lost its pin); fails closed",
        domain=DOMAIN,
    ),
    rule(
        "pin.mismatch",
        None,
        "-",
        "note: a pinned tool whose definition hashes differently",
        domain=DOMAIN,
    ),
    rule(
        "hints.incoherent",
        RiskClass.DESTRUCTIVE,
        "critical",
        "MCP annotations saying read-only and destructive at once; fails closed",
        D,
        domain=DOMAIN,
    ),
    rule(
        "hints.destructive",
        RiskClass.DESTRUCTIVE,
        "high",
        "MCP `destructiveHint`",
        D,
        domain=DOMAIN,
    ),
    rule(
        "hints.not_read_only",
        RiskClass.WRITE_LOCAL,
        "medium",
        "MCP `readOnlyHint: false`",
        domain=DOMAIN,
    ),
    rule(
        "hints.open_world",
        RiskClass.EGRESS,
        "medium",
        "MCP `openWorldHint`",
        N,
        domain=DOMAIN,
    ),
    rule(
        "hints.requires_approval",
        RiskClass.EXTERNAL,
        "medium",
        "a tool definition saying it requires approval",
        domain=DOMAIN,
    ),
    rule(
        "model.answer",
        None,
        "as the model says",
        "the optional model check raising the result",
        domain=DOMAIN,
    ),
    rule(
        "model.failed",
        None,
        "-",
        "note: the optional model check failed; nothing changes",
        domain=DOMAIN,
    ),
    rule(
        "target.too_many",
        RiskClass.EXEC,
        "high",
        "a tool argument list longer than the limit; fails closed past it",
        domain=DOMAIN,
    ),
)
