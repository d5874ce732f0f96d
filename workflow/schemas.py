"""Generate `schemas/`: one JSON Schema per wire message and an AsyncAPI 3 document.

The files are committed; `headgate schemas --check` (and a test) fails when they drift from the
pydantic models, so the language-neutral contract can never silently diverge from the code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workflow import __version__
from workflow.messages import WIRE_MODELS

#: Channel -> (address, message schema file, direction from the agent's or approver's view).
CHANNELS: dict[str, tuple[str, str, str]] = {
    "proposals": ("headgate.proposals.{agent}", "proposal", "agents publish"),
    "inbox": ("headgate.inbox.{workspace}", "inbox_item", "approvers consume (durable)"),
    "decisions": ("headgate.decisions.{request_id}", "decision", "approvers publish"),
    "cancel": ("headgate.cancel.{agent}", "cancel", "agents publish"),
    "held": ("headgate.held.{agent}", "held", "agents consume (durable)"),
    "released": ("headgate.released.{agent}", "released", "agents consume (durable)"),
    "blocked": ("headgate.blocked.{agent}", "blocked", "agents consume (durable)"),
    "executed": ("headgate.executed.{agent}", "executed", "agents publish"),
    "dead": ("headgate.dead.{stage}", "dead_letter", "operators inspect"),
    "api_pending": ("headgate.api.pending", "api_pending_query", "request/reply"),
    "api_get": ("headgate.api.get", "api_get_query", "request/reply"),
    "api_offered": ("headgate.api.offered", "api_offered_query", "request/reply"),
    "escalated": ("headgate.escalated.{workspace}", "escalated", "notifiers consume (durable)"),
    "notified": ("headgate.notified.{workspace}", "notified", "operators inspect"),
    "api_web_invite": ("headgate.api.web.invite", "api_web_invite", "request/reply"),
    "api_web_invitation": (
        "headgate.api.web.invitation",
        "api_web_invitation_query",
        "request/reply",
    ),
    "api_web_register": ("headgate.api.web.register", "api_web_register", "request/reply"),
    "api_web_passkey": ("headgate.api.web.passkey", "api_web_passkey_query", "request/reply"),
}


def render() -> dict[str, str]:
    """File name -> file content for every generated file."""
    files: dict[str, str] = {}
    for name, model in WIRE_MODELS.items():
        schema = model.model_json_schema(mode="serialization")
        schema["$id"] = f"https://headgate.dev/schemas/{name}.json"
        files[f"{name}.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    files["asyncapi.json"] = json.dumps(_asyncapi(), indent=2, sort_keys=True) + "\n"
    return files


def _asyncapi() -> dict[str, Any]:
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    for channel, (address, message, role) in CHANNELS.items():
        params: dict[str, dict[str, Any]] = {
            p.strip("{}"): {} for p in address.split(".") if p.startswith("{")
        }
        channels[channel] = {
            "address": address,
            "description": role,
            "messages": {message: {"payload": {"$ref": f"./{message}.json"}}},
            **({"parameters": params} if params else {}),
        }
        operations[f"{channel}"] = {
            "action": "send" if "publish" in role or role == "request/reply" else "receive",
            "channel": {"$ref": f"#/channels/{channel}"},
        }
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "Headgate",
            "version": __version__,
            "description": "Approval gateway for AI-agent tool calls on NATS JetStream.",
        },
        "defaultContentType": "application/json",
        "channels": channels,
        "operations": operations,
    }


def write_schemas(out: Path, *, check: bool = False) -> list[str]:
    """Write (or with `check`, only compare) the files; returns the names that differ."""
    changed = []
    for name, content in render().items():
        path = out / name
        if not path.exists() or path.read_text() != content:
            changed.append(name)
            if not check:
                out.mkdir(parents=True, exist_ok=True)
                path.write_text(content)
    return changed
