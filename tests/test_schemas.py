"""`schemas/` is generated from the pydantic models; this fails when the two drift apart."""

from __future__ import annotations

import json
from pathlib import Path

from workflow.messages import WIRE_MODELS
from workflow.schemas import render, write_schemas

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


def test_committed_schemas_match_the_models() -> None:
    stale = write_schemas(SCHEMAS, check=True)
    assert stale == [], f"run `headgate schemas --out schemas`: {stale} differ from the models"


def test_every_wire_model_has_a_schema_and_the_asyncapi_document_names_it() -> None:
    files = render()
    assert set(files) == {f"{name}.json" for name in WIRE_MODELS} | {"asyncapi.json"}
    asyncapi = json.loads(files["asyncapi.json"])
    refs = {
        m["payload"]["$ref"]
        for ch in asyncapi["channels"].values()
        for m in ch["messages"].values()
    }
    assert "./proposal.json" in refs
    assert "./decision.json" in refs


def test_the_check_mode_reports_a_changed_file(tmp_path: Path) -> None:
    write_schemas(tmp_path)
    (tmp_path / "proposal.json").write_text("{}")
    assert write_schemas(tmp_path, check=True) == ["proposal.json"]
