"""Builders shared by the policy tests (a module, not fixtures, so hypothesis can use them)."""

from __future__ import annotations

from typing import Any

import nkeys

from workflow.classify.taxonomy import Category, RiskClass, Severity
from workflow.messages import Classification, Proposal, ToolDefinition
from workflow.policy.load import load_policy_text
from workflow.policy.model import Policy


def user_key(n: int) -> str:
    """A valid public user nkey, deterministic per `n`."""
    seed = nkeys.encode_seed(bytes([n]) * 32, nkeys.PREFIX_BYTE_USER)
    key: bytes = nkeys.from_seed(seed).public_key
    return key.decode()


def proposal(
    tool: str = "write_file",
    *,
    workspace: str = "default",
    source: str | None = None,
    agent: str = "coder",
    definition: ToolDefinition | None = None,
    arguments: dict[str, Any] | None = None,
) -> Proposal:
    return Proposal(
        id="p-1",
        agent=agent,
        workspace=workspace,
        source=source,
        tool=tool,
        arguments=arguments or {},
        tool_definition=definition,
    )


def classified(
    risk: RiskClass = RiskClass.WRITE_LOCAL,
    severity: Severity = Severity.MEDIUM,
    *,
    known: bool = True,
    fail_closed: bool = False,
    categories: tuple[Category, ...] = (),
) -> Classification:
    return Classification(
        risk_class=risk,
        severity=severity,
        tool_known=known,
        fail_closed=fail_closed,
        categories=list(categories),
    )


def policy(text: str = "") -> Policy:
    return load_policy_text(text, "test.toml")
