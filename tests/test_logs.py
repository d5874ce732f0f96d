"""Structured logs: the ids of the proposal or request a line concerns are on the line."""

from __future__ import annotations

import json
import logging

from workflow.cli.logs import ConsoleFormatter, JsonFormatter


def record(**extra: str) -> logging.LogRecord:
    rec = logging.LogRecord("headgate.collector", logging.INFO, __file__, 1,
                            "decision %s accepted", ("approve",), None)  # fmt: skip
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_json_lines_carry_the_proposal_and_request_ids() -> None:
    line = JsonFormatter().format(record(proposal_id="p1", request_id="rq_1", stage="collector"))
    data = json.loads(line)
    assert data["msg"] == "decision approve accepted"
    assert data["proposal_id"] == "p1"
    assert data["request_id"] == "rq_1"
    assert data["level"] == "info"


def test_console_lines_end_with_the_ids_and_omit_absent_ones() -> None:
    assert ConsoleFormatter().format(record(proposal_id="p1")).endswith("[proposal_id=p1]")
    assert ConsoleFormatter().format(record()).endswith("decision approve accepted")


def test_an_intake_workers_lines_name_the_process() -> None:
    console = ConsoleFormatter("intake worker pid 42").format(record())
    assert "headgate.collector [intake worker pid 42]: decision approve accepted" in console
    data = json.loads(JsonFormatter("intake worker pid 42").format(record()))
    assert data["process"] == "intake worker pid 42"
    assert "process" not in json.loads(JsonFormatter().format(record()))
