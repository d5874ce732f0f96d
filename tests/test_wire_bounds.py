"""Every field at the wire is bounded and every timestamp timezone-aware, so what the service
accepts always fits its columns, its state machine and the records a verifier reads back."""

from __future__ import annotations

import typing
from datetime import datetime
from typing import Any

import pytest
from pydantic import AwareDatetime, BaseModel

from workflow.controls import CONTROL_MODELS
from workflow.messages import WIRE_MODELS, ApprovalDecision
from workflow.store import audit

#: The models the service (or an approver's client) receives from someone else.
RECEIVED = [
    "proposal",
    "decision",
    "cancel",
    "executed",
    "api_pending_query",
    "api_get_query",
    "api_offered_query",
    "api_web_invite",
    "api_web_invitation_query",
    "api_web_register",
    "api_web_passkey_query",
    "api_grant_issue",
    "api_grant_list_query",
    "api_grant_revoke",
    "api_freeze",
    "api_freezes_query",
]


def _plain_datetimes(annotation: Any, where: str) -> list[str]:
    """The places inside `annotation` that accept a naive datetime."""
    if annotation is datetime:
        return [where]
    if annotation is AwareDatetime:
        return []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [
            found
            for name, field in annotation.model_fields.items()
            for found in _plain_datetimes(field.annotation, f"{annotation.__name__}.{name}")
        ]
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        args = args[:1]
    return [found for arg in args for found in _plain_datetimes(arg, where)]


ALL = WIRE_MODELS | CONTROL_MODELS


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_timestamp_on_the_wire_is_timezone_aware(name: str) -> None:
    assert _plain_datetimes(ALL[name], name) == []


def _unbounded(node: Any, defs: dict[str, Any], where: str, seen: set[str]) -> list[str]:
    """The strings without maxLength and arrays without maxItems in a JSON Schema."""
    if isinstance(node, list):
        return [u for i, n in enumerate(node) for u in _unbounded(n, defs, f"{where}[{i}]", seen)]
    if not isinstance(node, dict):
        return []
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[1]
        if name in seen:
            return []
        return _unbounded(defs[name], defs, name, seen | {name})
    found = []
    kind = node.get("type")
    bounded = any(k in node for k in ("maxLength", "enum", "const", "format"))
    if kind == "string" and not bounded:
        found.append(where)
    if kind == "array" and "maxItems" not in node:
        found.append(where)
    for key, value in node.items():
        if key in ("$defs", "default", "examples"):
            continue
        found += _unbounded(value, defs, f"{where}.{key}", seen)
    return found


@pytest.mark.parametrize("name", RECEIVED)
def test_every_string_and_list_received_is_bounded(name: str) -> None:
    schema = ALL[name].model_json_schema()
    assert _unbounded(schema, schema.get("$defs", {}), name, set()) == []


def test_an_unverified_actor_fits_the_audit_column() -> None:
    """A refused decision is audited as `unverified:<approver>`: the longest approver the wire
    accepts still fits the `actor` column, so PostgreSQL stores what SQLite stores."""
    longest = ApprovalDecision.model_fields["approver"].metadata
    max_length = next(m.max_length for m in longest if hasattr(m, "max_length"))
    assert len("unverified:") + max_length <= audit.ACTOR_LENGTH
