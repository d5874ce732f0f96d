"""The policy file's model, loading and validation errors.

The policy is TOML validated by these pydantic models (`extra="forbid"` everywhere, so a typo
is an error). `load_policy(path)` and `load_policy_text(text, source)` turn every problem into a
`PolicyValidationError` naming the file, the line, the key path and what is wrong. The rules a
policy must satisfy beyond field types (workspace and source sections only tighten, destructive
approval needs a quorum of two, ...) live in `workflow.policy.rules`.
"""

from __future__ import annotations

import base64
import binascii
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import nkeys
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from workflow.classify.engine import definition_hash
from workflow.classify.tables import ClassifierTables, ToolRule
from workflow.classify.taxonomy import Category, RiskClass, Severity
from workflow.messages import (
    ApprovalRequirement,
    Decision,
    ToolDefinition,
    canonical_json,
    sha256_hex,
)
from workflow.policy.durations import Duration
from workflow.policy.problems import PolicyProblem as PolicyProblem  # re-exported
from workflow.policy.problems import PolicyValidationError as PolicyValidationError
from workflow.policy.requirement import ApprovalSpec, Role
from workflow.policy.source import error_message, error_path, render_key

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


def _valid_user_nkey(key: str) -> bool:
    if len(key) != 56 or not key.startswith("U"):
        return False
    try:
        raw = base64.b32decode(key + "=" * (-len(key) % 8))
    except (binascii.Error, ValueError):
        return False
    return len(raw) == 35 and bytes(nkeys.crc16_checksum(raw[:-2])) == raw[-2:]


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
        if not _valid_user_nkey(key):
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


class Policy(Strict):
    """The whole policy file. Frozen; `revision` is a stable hash of its effective content."""

    mode: Literal["default", "all_writes"] = Field(
        default="default", description='"all_writes": every non-read call needs approval.'
    )
    unknown_tool: Decision = Decision.REQUIRE_APPROVAL
    default_ttl: Duration = 3600
    allow_max_severity: Severity = Field(
        default=Severity.LOW,
        description="An allow holds only for calls up to this severity; above it, approval.",
    )
    approval: ApprovalSpec = Field(default_factory=ApprovalSpec)
    classes: dict[RiskClass, Rule] = Field(default_factory=dict, validate_default=True)
    tools: dict[ToolName, ToolEntry] = Field(default_factory=dict)
    workspaces: dict[Token, Layer] = Field(default_factory=dict)
    sources: dict[Token, Layer] = Field(default_factory=dict)
    approvers: dict[Token, Approver] = Field(default_factory=dict)
    lock: dict[ToolName, LockEntry] = Field(default_factory=dict)
    classifier: ClassifierTables = Field(default_factory=ClassifierTables)

    @field_validator("classes")
    @classmethod
    def _fill_classes(cls, given: dict[RiskClass, Rule]) -> dict[RiskClass, Rule]:
        """Every class gets an explicit decision so the revision covers the defaults too."""
        return {
            risk: Rule(
                decision=(given.get(risk) or Rule()).decision or default,
                approval=(given.get(risk) or Rule()).approval,
            )
            for risk, default in DEFAULT_CLASS_DECISIONS.items()
        }

    @model_validator(mode="after")
    def _check_rules(self) -> Policy:
        from workflow.policy.rules import policy_problems

        problems = policy_problems(self)
        if problems:
            raise PolicyValidationError(problems)
        return self

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Policy:
        """A copy without the cached revision and tables (they describe the original).

        Like pydantic's, this does not validate `update`: build a changed policy with
        `Policy.model_validate` when the change comes from outside.
        """
        copy = super().model_copy(update=update, deep=deep)
        for name in _CACHED:
            copy.__dict__.pop(name, None)
        return copy

    # ------------------------------------------------------------------ identity

    @cached_property
    def revision(self) -> str:
        """Stable short hash of the effective policy (same content = same revision)."""
        return sha256_hex(canonical_json(_normalise(self.model_dump(mode="python"))))[:16]

    @property
    def default_ttl_seconds(self) -> int:
        return self.approval.ttl or self.default_ttl

    # ------------------------------------------------------------------ decisions

    def class_decision(self, risk: RiskClass) -> Decision:
        rule = self.classes.get(risk)
        return (rule.decision if rule else None) or DEFAULT_CLASS_DECISIONS[risk]

    def default_requirement(self) -> ApprovalRequirement:
        """The `[approval]` section, with `default_ttl` when it sets no ttl."""
        return self.approval.apply(ApprovalRequirement(ttl_seconds=self.default_ttl))

    def global_requirement(
        self, risk: RiskClass | None, entry: ToolEntry | None = None
    ) -> ApprovalRequirement:
        """Default, then the class's approval, then the tool's: the most specific wins."""
        req = self.default_requirement()
        if risk is not None and (rule := self.classes.get(risk)) and rule.approval is not None:
            class_spec = rule.approval
            req = class_spec.apply(req)
        if entry is not None and entry.approval is not None:
            req = entry.approval.apply(req)
        return req

    @cached_property
    def class_requirements(self) -> dict[RiskClass, ApprovalRequirement]:
        """`global_requirement(risk)` for every class, built once for the engine's hot path.

        Shared by every call evaluated under this policy: derive new requirements from them,
        never hand one out (`evaluate` copies the one its verdict carries).
        """
        return {risk: self.global_requirement(risk) for risk in RiskClass}

    # ------------------------------------------------------------------ tools

    def pinned_hash(self, tool: str) -> str | None:
        entry = self.tools.get(tool)
        if entry is not None and entry.pin is not None:
            return entry.pin
        lock = self.lock.get(tool)
        return lock.hash if lock is not None else self.classifier.pinned.get(tool)

    def server_kind(self, tool: str) -> str | None:
        entry = self.tools.get(tool)
        if entry is not None and entry.server is not None:
            return entry.server
        lock = self.lock.get(tool)
        return lock.server if lock is not None else None

    @cached_property
    def fingerprint_index(self) -> dict[str, list[str]]:
        """Fingerprint -> names of reviewed, pinned entries with a server kind."""
        index: dict[str, list[str]] = {}
        for name in sorted(self.tools):
            server, dhash = self.server_kind(name), self.pinned_hash(name)
            if self.tools[name].reviewed and server and dhash:
                index.setdefault(fingerprint(server, dhash), []).append(name)
        return index

    def inheritance_source(self, fp: str) -> str | None:
        """The one reviewed entry a tool with fingerprint `fp` inherits, if unambiguous.

        Several entries with the same fingerprint inherit only when they agree; entries that
        were reviewed differently on purpose (a prod and a dev database) leave a third tool
        unreviewed rather than guess between them.
        """
        names = self.fingerprint_index.get(fp, [])
        if not names:
            return None
        first = self.tools[names[0]]
        if any(
            self.tools[n].model_dump(exclude={"pin"}) != first.model_dump(exclude={"pin"})
            for n in names[1:]
        ):
            return None
        return names[0]

    def tool_entry(self, tool: str, definition: ToolDefinition | None = None) -> ToolMatch | None:
        """The entry for `tool`: its own, else one inherited by fingerprint."""
        own = self.tools.get(tool)
        if own is not None:
            return ToolMatch(name=tool, entry=own)
        if definition is None or not definition.server:
            return None
        fp = fingerprint(definition.server, definition_hash(definition))
        source = self.inheritance_source(fp)
        if source is None:
            return None
        return ToolMatch(name=source, entry=self.tools[source], inherited=True, fingerprint=fp)

    @cached_property
    def merged_tables(self) -> ClassifierTables:
        overrides = dict(self.classifier.overrides)
        pinned = dict(self.classifier.pinned)
        for name, entry in self.tools.items():
            if (rule := entry.tool_rule()) is not None:
                overrides[name] = rule
        for name in set(self.tools) | set(self.lock):
            if (dhash := self.pinned_hash(name)) is not None:
                pinned[name] = dhash
        return self.classifier.model_copy(update={"overrides": overrides, "pinned": pinned})

    def classifier_tables(self) -> ClassifierTables:
        """The `[classifier]` section merged with `[tools.*]` risk entries and `[lock]` pins."""
        return self.merged_tables

    def tables_for(self, tool: str, definition: ToolDefinition | None = None) -> ClassifierTables:
        """The tables to classify one call with, including an inherited entry's rule and pin."""
        match = self.tool_entry(tool, definition)
        if match is None or not match.inherited or definition is None:
            return self.merged_tables
        overrides = dict(self.merged_tables.overrides)
        if (rule := match.entry.tool_rule()) is not None:
            overrides[tool] = rule
        pinned = {**self.merged_tables.pinned, tool: definition_hash(definition)}
        return self.merged_tables.model_copy(update={"overrides": overrides, "pinned": pinned})

    # ------------------------------------------------------------------ approvers

    def approver_by_key(self, key: str) -> tuple[str, Approver] | None:
        for name, approver in self.approvers.items():
            if approver.key == key:
                return name, approver
        return None


_CACHED = ("revision", "fingerprint_index", "merged_tables", "class_requirements")


def _normalise(value: Any) -> Any:
    """Plain JSON-able data with sets sorted, so the revision does not depend on hash order."""
    if isinstance(value, BaseModel):
        return _normalise(value.model_dump(mode="python"))
    if isinstance(value, dict):
        return {str(k): _normalise(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted((_normalise(v) for v in value), key=canonical_json)
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def default_policy(
    *, ttl_seconds: int = 3600, approvers: dict[str, Approver] | None = None
) -> Policy:
    return Policy(default_ttl=ttl_seconds, approvers=approvers or {})


def load_policy_text(text: str, source: str = "<policy>") -> Policy:
    """Parse and validate a policy. Raises `PolicyValidationError` (a `PolicyError`)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _syntax_error(str(exc), source) from None
    try:
        return Policy.model_validate(data)
    except PolicyValidationError as exc:
        raise exc.located(text, source) from None
    except ValidationError as exc:
        problems = [
            PolicyProblem(
                key=render_key(error_path(err["loc"])) or "(top level)",
                message=error_message(Policy, err),
                path=tuple(error_path(err["loc"])),
            )
            for err in exc.errors()
        ]
        raise PolicyValidationError(problems).located(text, source) from None


def load_policy(path: Path) -> Policy:
    """Read and validate the policy file at `path`."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise PolicyValidationError(
            [PolicyProblem("(file)", f"the policy file cannot be read: {reason}")],
            source=str(path),
        ) from None
    except UnicodeDecodeError:
        raise PolicyValidationError(
            [PolicyProblem("(file)", "the policy file is not UTF-8 text")], source=str(path)
        ) from None
    return load_policy_text(text, str(path))


def _syntax_error(message: str, source: str) -> PolicyValidationError:
    line: int | None = None
    m = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
    if m:
        line = int(m.group(1))
        message = message[: m.start()] + f" (column {m.group(2)})"
    elif m2 := re.search(r"\s*\(at end of document\)$", message):
        message = message[: m2.start()] + " (at the end of the file)"
    return PolicyValidationError(
        [PolicyProblem("(syntax)", f"the file is not valid TOML: {message}", line)], source=source
    )
