"""The policy file's model, loading and validation errors.

Minimal first cut: per-risk-class decisions, per-tool decisions, unknown_tool, approvers and the
default TTL. The layered workspace/source sections build on this.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workflow.classify.tables import ClassifierTables
from workflow.classify.taxonomy import RiskClass
from workflow.errors import PolicyError
from workflow.messages import ApprovalRequirement, Decision, canonical_json, sha256_hex


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Approver(Strict):
    key: str = Field(description="Public nkey of the approver (starts with U).")
    roles: list[str] = Field(default_factory=lambda: ["approver"])
    workspaces: list[str] = Field(default_factory=lambda: ["*"])
    agents: list[str] = Field(
        default_factory=list,
        description="Agent names this person runs: they can never approve those agents' calls.",
    )

    def may_approve_for(self, workspace: str) -> bool:
        return "*" in self.workspaces or workspace in self.workspaces


class Policy(Strict):
    default_ttl_seconds: int = Field(default=3600, ge=1)
    unknown_tool: Decision = Decision.REQUIRE_APPROVAL
    classes: dict[RiskClass, Decision] = Field(
        default_factory=lambda: {
            RiskClass.READ: Decision.ALLOW,
            RiskClass.EGRESS: Decision.REQUIRE_APPROVAL,
            RiskClass.EXTERNAL: Decision.REQUIRE_APPROVAL,
            RiskClass.WRITE_LOCAL: Decision.REQUIRE_APPROVAL,
            RiskClass.EXEC: Decision.REQUIRE_APPROVAL,
            RiskClass.DESTRUCTIVE: Decision.DENY,
        }
    )
    approval: ApprovalRequirement = Field(default_factory=ApprovalRequirement)
    approvers: dict[str, Approver] = Field(default_factory=dict)
    tables: ClassifierTables = Field(default_factory=ClassifierTables)

    @property
    def revision(self) -> str:
        return sha256_hex(canonical_json(self.model_dump(mode="json")))[:16]

    def classifier_tables(self) -> ClassifierTables:
        return self.tables

    def approver_by_key(self, key: str) -> tuple[str, Approver] | None:
        for name, approver in self.approvers.items():
            if approver.key == key:
                return name, approver
        return None


def default_policy(*, ttl_seconds: int = 3600, approvers: dict[str, Approver] | None = None) -> Policy:
    return Policy(default_ttl_seconds=ttl_seconds, approvers=approvers or {})


def load_policy(path: Path) -> Policy:
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise PolicyError(f"cannot read the policy file: {exc.strerror}", source=str(path)) from exc
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"not valid TOML: {exc}", source=str(path)) from exc
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise PolicyError(first["msg"], source=str(path), key=key) from exc
