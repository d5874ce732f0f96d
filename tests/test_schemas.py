"""`schemas/` is generated from the pydantic models; this fails when the two drift apart."""

from __future__ import annotations

import json
from pathlib import Path

from workflow.controls import CONTROL_MODELS
from workflow.messages import WIRE_MODELS
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
        _wildcard(asyncapi["channels"][name]["address"])
        for name, op in asyncapi["operations"].items()
        if op["action"] == "receive"
    }
    assert received == subscribed_subjects()
    assert {"headgate.api.explain", "headgate.api.status.*", "headgate.cancel.*"} <= received
    assert {"headgate.api.web.invite", "headgate.api.web.passkey"} <= received
    assert {"headgate.api.grant.issue", "headgate.api.freeze"} <= received
    sent = {name for name, op in asyncapi["operations"].items() if op["action"] == "send"}
    assert sent == {"inbox", "held", "released", "blocked", "dead", "escalated", "notified"}


def subscribed_subjects() -> set[str]:
    """What the service reads: the FastStream application's subscribers (API, auditor) and the
    batch stages' consumers — taken from the running code, not from the document."""
    subjects = Subjects()
    app = build_app(subjects)
    mine = {_wildcard(getattr(sub, "subject").broker_address) for sub in app.subscribers}  # noqa: B009
    stages = {
        _wildcard(f)
        for name, spec in service_consumers(subjects).items()
        if name != "auditor"  # on FastStream: one of the application's subscribers
        for f in spec.filter_subjects
    }
    return mine | stages


def _wildcard(subject: str) -> str:
    """`a.b.>` and `a.b.*` alike: the service's subjects have one token after the kind."""
    return subject.replace(">", "*")


def test_the_check_mode_reports_a_changed_file(tmp_path: Path) -> None:
    write_schemas(tmp_path)
    (tmp_path / "proposal.json").write_text("{}")
    assert write_schemas(tmp_path, check=True) == ["proposal.json"]
