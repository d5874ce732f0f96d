"""`schemas/` is generated from the pydantic models; this fails when the two drift apart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from workflow.controls import CONTROL_MODELS
from workflow.messages import WIRE_MODELS
from workflow.notify.broker import build_app as notifier_app
from workflow.schemas import render, write_schemas
from workflow.service.broker import build_app
from workflow.service.streams import service_consumers
from workflow.subjects import Subjects

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


def test_committed_schemas_match_the_models() -> None:
    stale = write_schemas(SCHEMAS, check=True)
    assert stale == [], f"run `headgate schemas --out schemas`: {stale} differ from the models"


def test_every_wire_model_has_a_schema_and_the_asyncapi_document_lists_every_handler() -> None:
    files = render()
    models = WIRE_MODELS | CONTROL_MODELS
    assert set(files) == {f"{name}.json" for name in models} | {"asyncapi.json"}
    asyncapi = json.loads(files["asyncapi.json"])
    received = {
        _wildcard(_channel(asyncapi, op)["address"])
        for op in asyncapi["operations"].values()
        if op["action"] == "receive"
    }
    assert received == subscribed_subjects()
    assert {"headgate.api.explain", "headgate.api.status.*", "headgate.cancel.*"} <= received
    assert {"headgate.api.web.invite", "headgate.api.web.passkey"} <= received
    assert {"headgate.api.grant.issue", "headgate.api.freeze"} <= received
    # The notifier's consumers, the outcomes one with both of its filters.
    assert {"headgate.inbox.*", "headgate.released.*", "headgate.blocked.*",
            "headgate.escalated.*"} <= received  # fmt: skip
    sent = {name for name, op in asyncapi["operations"].items() if op["action"] == "send"}
    assert sent == {
        "inbox",
        "held",
        "released",
        "blocked",
        "dead",
        "escalated",
        "notified",
        "controls",
        "grants",
    }


def subscribed_subjects() -> set[str]:
    """What the service reads: the FastStream applications' subscribers (the API; the
    notifier's consumers) and the batch stages' consumers — taken from the running code, not
    from the document."""
    subjects = Subjects()
    app = build_app(subjects)
    mine = {_wildcard(getattr(sub, "subject").broker_address) for sub in app.subscribers}  # noqa: B009
    notifier = {
        _wildcard(address)
        for sub in notifier_app(subjects).subscribers
        for address in getattr(sub, "filter_subjects")  # noqa: B009
    }
    stages = {
        _wildcard(f) for spec in service_consumers(subjects).values() for f in spec.filter_subjects
    }
    return mine | notifier | stages


def _channel(document: dict[str, Any], operation: dict[str, Any]) -> dict[str, Any]:
    """The channel an operation's `$ref` points to (`#/channels/<url-quoted name>`)."""
    ref = operation["channel"]["$ref"]
    assert ref.startswith("#/channels/"), ref
    channel: dict[str, Any] = document["channels"][unquote(ref.removeprefix("#/channels/"))]
    return channel


def _wildcard(subject: str) -> str:
    """`a.b.>` and `a.b.*` alike: the service's subjects have one token after the kind."""
    return subject.replace(">", "*")


def test_the_check_mode_reports_a_changed_file(tmp_path: Path) -> None:
    write_schemas(tmp_path)
    (tmp_path / "proposal.json").write_text("{}")
    assert write_schemas(tmp_path, check=True) == ["proposal.json"]
