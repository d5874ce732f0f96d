"""Pure helpers over a tool catalog (an MCP `tools/list` answer) for the CLI and the service.

* `parse_catalog` / `load_catalog_text`: the answer -> `CatalogTool`s (name + definition).
* `review_catalog` / `unreviewed_tools` / `inherited_tools`: "no silent defaults" — every tool
  that is not a pure read and has no explicit entry, and which tools inherit an entry through
  their fingerprint (same server kind + same definition hash), so the service can audit it.
* `offered_tools`: which tools an agent should be offered at all (the call is still decided
  again when it is made).
* `pin_tools`: write the current definition hashes into the policy's `[lock]` section,
  keeping the file's comments and layout.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import tomlkit
import tomlkit.exceptions
from pydantic import ValidationError

from workflow.classify.engine import classify
from workflow.classify.taxonomy import RiskClass, Severity
from workflow.errors import ConfigError
from workflow.messages import (
    Classification,
    Decision,
    OfferedReply,
    OfferedTool,
    Proposal,
    ToolAnnotations,
    ToolDefinition,
    definition_hash,
)
from workflow.policy.engine import evaluate
from workflow.policy.load import load_policy_text
from workflow.policy.model import Policy
from workflow.policy.problems import PolicyProblem, PolicyValidationError
from workflow.policy.schema import fingerprint


@dataclass(frozen=True)
class CatalogTool:
    """One tool as its server describes it."""

    name: str
    definition: ToolDefinition

    @property
    def hash(self) -> str:
        return definition_hash(self.definition)

    @property
    def fingerprint(self) -> str | None:
        """Server kind + definition hash; None when the server kind is not known."""
        server = self.definition.server
        return fingerprint(server, self.hash) if server else None


# --------------------------------------------------------------------------- parsing


def _tool_list(answer: Any, where: str, source: str) -> tuple[list[Any], str | None]:
    if not isinstance(answer, dict):
        raise ConfigError(
            "expected a tools/list answer: an object with a `tools` list", source=source, key=where
        )
    server = answer.get("server_kind", answer.get("server"))
    body = answer.get("result", answer)
    if not isinstance(body, dict) or not isinstance(body.get("tools"), list):
        raise ConfigError(
            "expected a `tools` list (or `result.tools`) in the tools/list answer",
            source=source,
            key=where,
        )
    server = body.get("server_kind", body.get("server", server))
    if server is not None and not isinstance(server, str):
        raise ConfigError("the server kind must be a string", source=source, key=where)
    return list(body["tools"]), server


def _tool(item: Any, server: str | None, where: str, source: str) -> CatalogTool:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
        raise ConfigError("every tool needs a non-empty string `name`", source=source, key=where)
    name = item["name"]
    try:
        annotations = item.get("annotations")
        definition = ToolDefinition(
            description=item.get("description") or "",
            input_schema=item.get("inputSchema", item.get("input_schema")) or {},
            annotations=ToolAnnotations.model_validate(annotations) if annotations else None,
            requires_approval=item.get("requires_approval"),
            server=item.get("server_kind", item.get("server", server)),
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise ConfigError(
            f"the tool `{name}` has an invalid {field or 'definition'}: {first['msg']}",
            source=source,
            key=where,
        ) from None
    return CatalogTool(name=name, definition=definition)


def parse_catalog(
    data: Any, *, server: str | None = None, source: str = "catalog"
) -> list[CatalogTool]:
    """Tools from a `tools/list` answer, a JSON-RPC response carrying one, or a list of them.

    The server kind (for fingerprints) comes from a tool's own `server`, else the answer's
    `server`/`server_kind`, else `server`. Other tool fields (title, outputSchema, ...) are
    ignored: only description, input schema and annotations define a tool.
    """
    answers = data if isinstance(data, list) else [data]
    found: dict[str, CatalogTool] = {}
    for i, answer in enumerate(answers):
        where = f"[{i}]" if isinstance(data, list) else ""
        items, answer_server = _tool_list(answer, where or "(top level)", source)
        for j, item in enumerate(items):
            tool = _tool(item, answer_server or server, f"{where}tools[{j}]", source)
            previous = found.get(tool.name)
            if previous is not None and previous.definition != tool.definition:
                raise ConfigError(
                    f"the tool `{tool.name}` appears twice with different definitions; a "
                    "catalog must name each tool once",
                    source=source,
                    key=f"{where}tools[{j}]",
                )
            found[tool.name] = tool
    return sorted(found.values(), key=lambda t: t.name)


def load_catalog_text(
    text: str, source: str = "catalog", *, server: str | None = None
) -> list[CatalogTool]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"the catalog is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
            source=source,
        ) from None
    return parse_catalog(data, server=server, source=source)


# --------------------------------------------------------------------------- review


@dataclass(frozen=True)
class UnreviewedTool:
    """A tool that is not a pure read and that no policy entry (own or inherited) covers."""

    name: str
    risk_class: RiskClass
    severity: Severity
    tool_known: bool
    reasons: list[str]
    fingerprint: str | None = None
    unpinned_twin: str | None = None

    def sentence(self) -> str:
        text = (
            f"`{self.name}` is classified {self.risk_class} ({self.severity}) without an "
            f"explicit [tools.{self.name}] entry"
        )
        if self.unpinned_twin:
            text += (
                f"; it has the same fingerprint as tools.{self.unpinned_twin}, which would be "
                f"inherited once tools.{self.unpinned_twin} is pinned with its server kind "
                "(`headgate tools pin`)"
            )
        return text + "."


@dataclass(frozen=True)
class Inheritance:
    """`tool` has no entry of its own and inherits the entry of `inherited_from`."""

    tool: str
    inherited_from: str
    fingerprint: str

    def sentence(self) -> str:
        return (
            f"`{self.tool}` inherits the entry tools.{self.inherited_from}: same server kind "
            f"and same definition ({self.fingerprint})."
        )


@dataclass(frozen=True)
class CatalogReview:
    unreviewed: list[UnreviewedTool]
    inherited: list[Inheritance]
    reviewed: list[str]
    reads: list[str]


def _classify(policy: Policy, tool: CatalogTool) -> Classification:
    call = _proposal(tool, agent="catalog", workspace="default", source=None)
    return classify(call, policy.tables_for(tool.name, tool.definition))


def _proposal(tool: CatalogTool, *, agent: str, workspace: str, source: str | None) -> Proposal:
    try:
        return Proposal(
            id="catalog",
            agent=agent,
            workspace=workspace,
            source=source,
            tool=tool.name,
            tool_definition=tool.definition,
        )
    except ValidationError as exc:
        field = ".".join(str(p) for p in exc.errors()[0]["loc"])
        raise ConfigError(f"{exc.errors()[0]['msg']}", key=field) from None


def is_pure_read(classification: Classification) -> bool:
    return (
        classification.risk_class is RiskClass.READ
        and classification.severity is Severity.LOW
        and classification.tool_known
        and not classification.fail_closed
    )


def review_catalog(policy: Policy, catalog: Iterable[CatalogTool]) -> CatalogReview:
    tools = list(catalog)
    unreviewed: list[UnreviewedTool] = []
    inherited: list[Inheritance] = []
    reviewed: list[str] = []
    reads: list[str] = []
    # Reviewed entries whose fingerprint is only known from this catalog (not pinned).
    twins: dict[str, str] = {}
    for tool in tools:
        entry = policy.tools.get(tool.name)
        if entry is not None and entry.reviewed and tool.fingerprint:
            twins.setdefault(tool.fingerprint, tool.name)
    for tool in tools:
        match = policy.tool_entry(tool.name, tool.definition)
        if match is not None and match.entry.reviewed:
            reviewed.append(tool.name)
            if match.inherited and match.fingerprint:
                inherited.append(Inheritance(tool.name, match.name, match.fingerprint))
            continue
        classification = _classify(policy, tool)
        if is_pure_read(classification):
            reads.append(tool.name)
            continue
        twin = twins.get(tool.fingerprint) if tool.fingerprint else None
        unreviewed.append(
            UnreviewedTool(
                name=tool.name,
                risk_class=classification.risk_class,
                severity=classification.severity,
                tool_known=classification.tool_known,
                reasons=[r.message for r in classification.reasons],
                fingerprint=tool.fingerprint,
                unpinned_twin=twin if twin != tool.name else None,
            )
        )
    return CatalogReview(unreviewed, inherited, reviewed, reads)


def unreviewed_tools(policy: Policy, catalog: Iterable[CatalogTool]) -> list[UnreviewedTool]:
    """Every tool that is not a pure read and has no explicit entry, own or inherited."""
    return review_catalog(policy, catalog).unreviewed


def inherited_tools(policy: Policy, catalog: Iterable[CatalogTool]) -> list[Inheritance]:
    """Which tools inherit which entry by fingerprint (for the audit log)."""
    return review_catalog(policy, catalog).inherited


# --------------------------------------------------------------------------- offering


def offered_tools(
    policy: Policy,
    catalog: Iterable[CatalogTool],
    agent: str,
    workspace: str,
    read_only: bool = False,
    *,
    source: str | None = None,
) -> OfferedReply:
    """Split the catalog into tools to offer as allowed, as approvable, and not at all.

    Without arguments a call is judged by its tool alone; the real call is decided again when
    it is made. `read_only` (a planning mode) offers reads only: every other tool is denied.
    """
    result = OfferedReply(allowed=[], approvable=[], denied=[])
    for tool in catalog:
        call = _proposal(tool, agent=agent, workspace=workspace, source=source)
        classification = classify(call, policy.tables_for(tool.name, tool.definition))
        verdict = evaluate(call, classification, policy)
        if read_only and classification.risk_class is not RiskClass.READ:
            result.denied.append(
                OfferedTool(
                    name=tool.name,
                    decision=Decision.DENY,
                    reason=f"Read-only mode offers reads only, and `{tool.name}` is classified "
                    f"{classification.risk_class}.",
                )
            )
            continue
        bucket = {
            Decision.ALLOW: result.allowed,
            Decision.REQUIRE_APPROVAL: result.approvable,
            Decision.DENY: result.denied,
        }[verdict.decision]
        bucket.append(OfferedTool(name=tool.name, decision=verdict.decision, reason=verdict.reason))
    return result


# --------------------------------------------------------------------------- pinning


def pin_tools(policy_text: str, catalog: Sequence[CatalogTool], *, source: str = "policy") -> str:
    """The policy text with each catalog tool's current definition hash pinned.

    A tool whose `[tools.<name>]` entry has its own `pin` gets that pin updated; every other
    tool is written to `[lock]` (with its server kind, when known, so that tools with the same
    fingerprint can inherit its entry). Comments and layout are kept; the result is validated.
    """
    try:
        doc = tomlkit.parse(policy_text)
    except tomlkit.exceptions.ParseError as exc:
        raise PolicyValidationError(
            [PolicyProblem("(syntax)", f"the file is not valid TOML: {exc}", exc.line)],
            source=source,
        ) from None
    tools_table: Any = doc.get("tools")
    lock: Any = doc.get("lock")
    for tool in sorted(catalog, key=lambda t: t.name):
        entry = tools_table.get(tool.name) if tools_table is not None else None
        if entry is not None and "pin" in entry:
            if entry["pin"] != tool.hash:
                entry["pin"] = tool.hash
            continue
        if lock is None:
            lock = tomlkit.table()
            lock.comment("Definition hashes recorded by `headgate tools pin`.")
            doc.add("lock", lock)
        value: Any = tool.hash
        if tool.definition.server:
            value = tomlkit.inline_table()
            value.update({"hash": tool.hash, "server": tool.definition.server})
        current = lock.get(tool.name)
        if current is not None and _lock_value(current) == _lock_value(value):
            continue
        lock[tool.name] = value
    text = tomlkit.dumps(doc)
    load_policy_text(text, source)
    return text


def _lock_value(value: Any) -> tuple[str, str | None]:
    if isinstance(value, str):
        return str(value), None
    return str(value.get("hash")), value.get("server")
