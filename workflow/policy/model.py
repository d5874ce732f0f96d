"""The policy: the whole file as one frozen model, and the questions the engine asks it
(decisions by class and tool, approval requirements, pins and fingerprints, approvers).

A `Policy` is made by `workflow.policy.load` (which also checks `workflow.policy.rules`) or
`default_policy`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from workflow.classify.tables import ClassifierTables
from workflow.classify.taxonomy import RiskClass, Severity
from workflow.escalation import EscalationSpec
from workflow.messages import (
    ApprovalRequirement,
    Decision,
    ToolDefinition,
    canonical_json,
    definition_hash,
    sha256_hex,
)
from workflow.notify.config import NotifyConfig
from workflow.policy.durations import Duration
from workflow.policy.requirement import ApprovalSpec
from workflow.policy.retention import RetentionSpec
from workflow.policy.schema import (
    DEFAULT_CLASS_DECISIONS,
    Approver,
    GrantLimits,
    Layer,
    LockEntry,
    Rule,
    Strict,
    Token,
    ToolEntry,
    ToolMatch,
    ToolName,
    fingerprint,
)


class GlobalApproval(ApprovalSpec):
    """`[approval]`: the requirement for every held call, and the ladder it climbs while it
    waits (`[approval.escalation]`)."""

    escalation: EscalationSpec = Field(default_factory=EscalationSpec)

    @model_validator(mode="before")
    @classmethod
    def _from_spec(cls, data: Any) -> Any:
        """A plain `ApprovalSpec` (built in code) is accepted as it is, without a ladder."""
        if isinstance(data, ApprovalSpec) and not isinstance(data, GlobalApproval):
            return data.model_dump()
        return data


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
    approval: GlobalApproval = Field(default_factory=GlobalApproval)
    classes: dict[RiskClass, Rule] = Field(default_factory=dict, validate_default=True)
    tools: dict[ToolName, ToolEntry] = Field(default_factory=dict)
    workspaces: dict[Token, Layer] = Field(default_factory=dict)
    sources: dict[Token, Layer] = Field(default_factory=dict)
    approvers: dict[Token, Approver] = Field(default_factory=dict)
    lock: dict[ToolName, LockEntry] = Field(default_factory=dict)
    classifier: ClassifierTables = Field(default_factory=ClassifierTables)
    notify: NotifyConfig = Field(
        default_factory=NotifyConfig, description="Notification channels and routes."
    )
    retention: RetentionSpec = Field(
        default_factory=RetentionSpec, description="How long decided proposals and audit are kept."
    )
    grants: GrantLimits = Field(
        default_factory=GrantLimits, description="Approvers' grants: the longest they last."
    )

    @model_validator(mode="after")
    def _escalation_names_channels(self) -> Policy:
        for i, step in enumerate(self.approval.escalation.steps):
            unknown = [c for c in step.channels if c not in self.notify.channels]
            if unknown:
                raise ValueError(
                    f"approval.escalation.steps[{i}] names the channel {unknown[0]!r}, which "
                    f"is not one of notify.channels ({', '.join(sorted(self.notify.channels))})"
                )
        return self

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
