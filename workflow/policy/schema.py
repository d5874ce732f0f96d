"""The policy file's sections as pydantic models (`extra="forbid"` everywhere, so a typo is an
error): approvers, rules, tool entries, lock entries, workspace and source layers.

The whole file is `workflow.policy.model.Policy`; reading and validating one is
`workflow.policy.load`; the rules a policy must satisfy beyond field types are
`workflow.policy.rules`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from workflow.classify.tables import ToolRule
from workflow.classify.taxonomy import Category, RiskClass, Severity
from workflow.messages import Decision
from workflow.policy.durations import Duration
from workflow.policy.requirement import ApprovalSpec, Role
from workflow.signing import decode_user_key

Token = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")]
ToolName = Annotated[str, Field(min_length=1, max_length=200)]


def _check_hash(value: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{64}", value):
        raise ValueError(
            f"{value!r} is not a definition hash (64 lowercase hex characters, as written by "
            "`headgate tools pin`)"
        )
    return value


DefinitionHash = Annotated[str, AfterValidator(_check_hash)]
ServerKind = Annotated[str, Field(min_length=1, max_length=200)]

DEFAULT_CLASS_DECISIONS: dict[RiskClass, Decision] = {
    RiskClass.READ: Decision.ALLOW,
    RiskClass.EGRESS: Decision.REQUIRE_APPROVAL,
    RiskClass.EXTERNAL: Decision.REQUIRE_APPROVAL,
    RiskClass.WRITE_LOCAL: Decision.REQUIRE_APPROVAL,
    RiskClass.EXEC: Decision.REQUIRE_APPROVAL,
    RiskClass.DESTRUCTIVE: Decision.DENY,
}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Approver(Strict):
    """A person who may approve held calls, identified by the key that signs their decisions."""

    key: str = Field(description="Public nkey of the approver (a user key, starts with U).")
    roles: list[Role] = Field(default_factory=lambda: ["approver"], min_length=1)
    workspaces: list[Annotated[str, Field(pattern=r"^(\*|[A-Za-z0-9_-]+)$")]] = Field(
        default_factory=lambda: ["*"],
        min_length=1,
        description='Workspaces this approver may approve for; ["*"] means all.',
    )
    agents: list[Token] = Field(
        default_factory=list,
        description="Agent names this person runs: they can never approve those agents' calls.",
    )

    @field_validator("key")
    @classmethod
    def _check_key(cls, key: str) -> str:
        if decode_user_key(key) is None:
            raise ValueError(
                f"{key!r} is not a public user nkey (56 characters starting with U, as "
                "printed by `headgate keys new`)"
            )
        return key

    def may_approve_for(self, workspace: str) -> bool:
        return "*" in self.workspaces or workspace in self.workspaces

    def runs_agent(self, agent: str) -> bool:
        """True when this person runs `agent`: they may never approve its proposals."""
        return agent in self.agents

    def may_approve(self, *, workspace: str, agent: str) -> bool:
        return self.may_approve_for(workspace) and not self.runs_agent(agent)


class Rule(Strict):
    """A decision and/or an approval requirement. `exec = "deny"` is short for a decision."""

    decision: Decision | None = None
    approval: ApprovalSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"decision": data} if isinstance(data, str) else data


class ToolEntry(Strict):
    """`[tools.<name>]`: how the operator reviewed one tool."""

    risk_class: RiskClass | None = Field(default=None, description="Classify the tool as this.")
    severity: Severity | None = None
    categories: list[Category] | None = None
    takes_command: bool | None = Field(
        default=None, description="A shell tool: its class is what analysing the command finds."
    )
    decision: Decision | None = Field(
        default=None, description="The global decision for this tool (replaces the class's)."
    )
    approval: ApprovalSpec | None = None
    allow_max_severity: Severity | None = Field(
        default=None,
        description="An allow for this tool holds up to this severity (default: the global one).",
    )
    pin: DefinitionHash | None = Field(
        default=None, description="Definition hash this entry was reviewed under."
    )
    server: ServerKind | None = Field(
        default=None, description="Kind of server offering the tool, for fingerprint inheritance."
    )

    @model_validator(mode="after")
    def _risk_fields_go_together(self) -> ToolEntry:
        if self.risk_class is None:
            stray = [
                name
                for name in ("severity", "categories", "takes_command")
                if getattr(self, name) is not None
            ]
            if stray:
                raise ValueError(f"{', '.join(stray)} needs risk_class to be set as well")
        elif self.severity is None:
            raise ValueError(f"risk_class = {self.risk_class!r} needs a severity as well")
        return self

    @property
    def reviewed(self) -> bool:
        """An explicit classification: the entry sets the tool's risk class or its decision."""
        return self.risk_class is not None or self.decision is not None

    def tool_rule(self) -> ToolRule | None:
        if self.risk_class is None or self.severity is None:
            return None
        return ToolRule(
            risk_class=self.risk_class,
            severity=self.severity,
            categories=frozenset(self.categories or ()),
            takes_command=bool(self.takes_command),
        )


class LockEntry(Strict):
    """`[lock]` value: a definition hash, or `{ hash = "...", server = "postgres-mcp" }`."""

    hash: DefinitionHash
    server: ServerKind | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"hash": data} if isinstance(data, str) else data


class Layer(Strict):
    """`[workspaces.<name>]` or `[sources.<name>]`: entries that may only tighten."""

    mode: Literal["default", "all_writes"] | None = None
    unknown_tool: Decision | None = None
    approval: ApprovalSpec | None = Field(
        default=None, description="Requirement for every call held in this workspace/source."
    )
    classes: dict[RiskClass, Rule] = Field(default_factory=dict)
    tools: dict[ToolName, Rule] = Field(default_factory=dict)


@dataclass(frozen=True)
class ToolMatch:
    """The `[tools.<name>]` entry that applies to a tool, possibly inherited by fingerprint."""

    name: str
    entry: ToolEntry
    inherited: bool = False
    fingerprint: str | None = None


def fingerprint(server: str, dhash: str) -> str:
    """Same server kind + same definition = same tool, whatever a connection calls it."""
    return f"{server}:{dhash}"


class GrantLimits(Strict):
    """`[grants]`: how far an approver's grant may reach."""

    enabled: bool = Field(default=True, description="false: grants are refused and unused.")
    max_ttl: Duration = Field(
        default=8 * 3600, description="The longest a grant may last (a grant always expires)."
    )
