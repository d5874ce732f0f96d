"""Catalog helpers: parsing tools/list answers, unreviewed tools, inheritance, offering, pinning."""

from __future__ import annotations

import json
import tomllib
from typing import Any

import pytest

from tests.policy.policy_helpers import policy
from workflow.errors import ConfigError
from workflow.messages import Decision, ToolDefinition, definition_hash
from workflow.policy.catalog import (
    CatalogTool,
    inherited_tools,
    load_catalog_text,
    offered_tools,
    parse_catalog,
    pin_tools,
    review_catalog,
    unreviewed_tools,
)
from workflow.policy.load import load_policy_text
from workflow.policy.problems import PolicyValidationError

QUERY: dict[str, Any] = {
    "name": "main_query",
    "description": "Run a SQL query against the database.",
    "inputSchema": {"type": "object", "properties": {"sql": {"type": "string"}}},
}
ANSWER: dict[str, Any] = {
    "server": "postgres-mcp",
    "tools": [
        QUERY,
        {**QUERY, "name": "reports_query"},
        {"name": "read_file", "description": "Read a file.", "inputSchema": {"type": "object"}},
        {"name": "write_file", "description": "Write a file.", "inputSchema": {"type": "object"}},
        {
            "name": "frobnicate",
            "description": "Does things.",
            "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": True},
        },
    ],
}


def catalog() -> list[CatalogTool]:
    return parse_catalog(ANSWER)


def query_hash() -> str:
    return definition_hash(
        ToolDefinition(description=QUERY["description"], input_schema=QUERY["inputSchema"])
    )


@pytest.mark.parametrize(
    "data",
    [
        ANSWER,
        {"jsonrpc": "2.0", "id": 1, "result": ANSWER},
        {"server": "postgres-mcp", "result": {"tools": ANSWER["tools"]}},
        [ANSWER],
    ],
)
def test_a_tools_list_answer_parses_in_every_shape(data: Any) -> None:
    tools = parse_catalog(data)
    assert [t.name for t in tools] == sorted(t["name"] for t in ANSWER["tools"])
    query = next(t for t in tools if t.name == "main_query")
    assert query.definition.server == "postgres-mcp"
    assert query.hash == query_hash()
    assert query.fingerprint == f"postgres-mcp:{query_hash()}"


def test_the_server_kind_can_be_given_by_the_caller() -> None:
    tools = parse_catalog({"tools": [QUERY]}, server="sqlite-mcp")
    assert tools[0].fingerprint == f"sqlite-mcp:{query_hash()}"
    assert parse_catalog({"tools": [QUERY]})[0].fingerprint is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{", "not valid JSON"),
        ('{"tool": []}', "expected a `tools` list"),
        ('{"tools": [{"description": "x"}]}', "non-empty string `name`"),
        (
            '{"tools": [{"name": "a", "description": "x"}, {"name": "a", "description": "y"}]}',
            "appears twice with different definitions",
        ),
    ],
)
def test_a_bad_catalog_is_an_error_naming_the_file(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_catalog_text(text, "tools.json")
    assert str(caught.value).startswith("tools.json")
    assert fragment in str(caught.value)


def test_every_tool_that_is_not_a_pure_read_and_has_no_entry_is_unreviewed() -> None:
    found = {t.name: t for t in unreviewed_tools(policy(""), catalog())}
    assert set(found) == {"main_query", "reports_query", "write_file", "frobnicate"}
    assert not found["frobnicate"].tool_known
    assert "without an explicit [tools.write_file] entry" in found["write_file"].sentence()


def test_an_explicit_entry_reviews_a_tool() -> None:
    p = policy(
        '[tools.write_file]\ndecision = "require_approval"\n'
        '[tools.frobnicate]\nrisk_class = "external"\nseverity = "medium"\n'
    )
    review = review_catalog(p, catalog())
    assert {t.name for t in review.unreviewed} == {"main_query", "reports_query"}
    assert set(review.reviewed) == {"write_file", "frobnicate"}
    assert review.reads == ["read_file"]


def test_a_tool_with_the_same_fingerprint_inherits_a_pinned_entry() -> None:
    p = policy(
        '[tools.main_query]\nrisk_class = "read"\nseverity = "low"\n'
        f'[lock]\nmain_query = {{ hash = "{query_hash()}", server = "postgres-mcp" }}\n'
    )
    inherited = inherited_tools(p, catalog())
    assert [(i.tool, i.inherited_from) for i in inherited] == [("reports_query", "main_query")]
    assert inherited[0].fingerprint == f"postgres-mcp:{query_hash()}"
    assert "inherits the entry tools.main_query" in inherited[0].sentence()
    assert "reports_query" not in {t.name for t in unreviewed_tools(p, catalog())}


def test_an_unpinned_twin_is_named_so_the_operator_knows_to_pin_it() -> None:
    p = policy('[tools.main_query]\nrisk_class = "read"\nseverity = "low"\n')
    found = {t.name: t for t in unreviewed_tools(p, catalog())}
    assert found["reports_query"].unpinned_twin == "main_query"
    assert "headgate tools pin" in found["reports_query"].sentence()


def test_entries_reviewed_differently_for_the_same_fingerprint_are_not_inherited() -> None:
    lock = f'{{ hash = "{query_hash()}", server = "postgres-mcp" }}'
    p = policy(
        '[tools.main_query]\nrisk_class = "read"\nseverity = "low"\n'
        '[tools.prod_query]\nrisk_class = "external"\nseverity = "high"\n'
        f"[lock]\nmain_query = {lock}\nprod_query = {lock}\n"
    )
    assert inherited_tools(p, catalog()) == []


def test_offered_tools_split_into_allowed_approvable_and_denied() -> None:
    p = policy(
        '[tools.main_query]\nrisk_class = "read"\nseverity = "low"\n'
        '[tools.frobnicate]\ndecision = "deny"\n'
    )
    offered = offered_tools(p, catalog(), "coder", "default")
    assert [t.name for t in offered.allowed] == ["main_query", "read_file"]
    assert [t.name for t in offered.approvable] == ["reports_query", "write_file"]
    assert [t.name for t in offered.denied] == ["frobnicate"]
    assert all(t.decision is Decision.DENY for t in offered.denied)


def test_read_only_mode_offers_reads_only() -> None:
    p = policy('[tools.main_query]\nrisk_class = "read"\nseverity = "low"\n')
    offered = offered_tools(p, catalog(), "coder", "default", read_only=True)
    allowed, approvable, denied = offered.allowed, offered.approvable, offered.denied
    assert [t.name for t in allowed] == ["main_query", "read_file"]
    assert approvable == []
    assert {t.name for t in denied} == {"reports_query", "write_file", "frobnicate"}
    assert "Read-only mode offers reads only" in denied[0].reason


def test_a_workspace_section_changes_what_is_offered_there() -> None:
    p = policy('[workspaces.prod.classes]\nwrite_local = "deny"\n')
    offered = offered_tools(p, catalog(), "coder", "prod")
    assert "write_file" in [t.name for t in offered.denied]


POLICY_TEXT = """\
# Headgate policy for the team.
mode = "all_writes"  # hold every write

[tools.write_file]
decision = "require_approval"  # reviewed 2026-01
pin = "0000000000000000000000000000000000000000000000000000000000000000"

# Pins written by headgate.
[lock]
# keep this one
read_file = "1111111111111111111111111111111111111111111111111111111111111111"
"""


def test_pin_tools_writes_the_lock_and_keeps_comments() -> None:
    tools = catalog()
    text = pin_tools(POLICY_TEXT, tools)
    for comment in (
        "# Headgate policy for the team.",
        "# hold every write",
        "# reviewed 2026-01",
        "# Pins written by headgate.",
        "# keep this one",
    ):
        assert comment in text
    data = tomllib.loads(text)
    hashes = {t.name: t.hash for t in tools}
    assert data["tools"]["write_file"]["pin"] == hashes["write_file"]
    assert "write_file" not in data["lock"]
    assert data["lock"]["main_query"] == {"hash": hashes["main_query"], "server": "postgres-mcp"}
    p = load_policy_text(text, "policy.toml")
    assert p.pinned_hash("read_file") == hashes["read_file"]
    assert p.classifier_tables().pinned["frobnicate"] == hashes["frobnicate"]


def test_pin_tools_round_trips_and_is_idempotent() -> None:
    once = pin_tools(POLICY_TEXT, catalog())
    assert pin_tools(once, catalog()) == once


def test_pin_tools_creates_the_lock_section_when_missing() -> None:
    text = pin_tools('mode = "all_writes"\n', parse_catalog({"tools": [QUERY]}))
    assert tomllib.loads(text)["lock"] == {"main_query": query_hash()}
    assert text.startswith('mode = "all_writes"\n')


def test_pin_tools_refuses_a_policy_that_is_not_toml() -> None:
    with pytest.raises(PolicyValidationError) as caught:
        pin_tools("[lock\n", catalog(), source="policy.toml")
    assert str(caught.value).startswith("policy.toml, line 1")


def test_a_pinned_tool_becomes_unknown_when_its_definition_changes() -> None:
    text = pin_tools("", catalog())
    changed = parse_catalog(
        json.loads(json.dumps(ANSWER).replace("Write a file.", "Write any file anywhere."))
    )
    found = {t.name: t for t in unreviewed_tools(load_policy_text(text), changed)}
    assert not found["write_file"].tool_known
