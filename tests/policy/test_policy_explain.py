"""Rendering a verdict's trail for `headgate explain`."""

from __future__ import annotations

import json

from tests.policy.policy_helpers import classified, policy, proposal
from workflow.classify.taxonomy import RiskClass, Severity
from workflow.messages import Reason
from workflow.policy.engine import evaluate
from workflow.policy.explain import explain_data, explain_lines, explain_text


def test_explain_text_numbers_every_trail_step_with_its_decision() -> None:
    p = policy('[workspaces.acme.classes]\nexec = "deny"\n')
    call = proposal("run_shell", workspace="acme")
    verdict = evaluate(call, classified(RiskClass.EXEC, Severity.HIGH), p)
    lines = explain_lines(verdict, proposal=call)
    assert lines[0] == "Proposal p-1: coder calls `run_shell` (workspace acme)."
    assert lines[1].startswith("Decision: deny. The workspace `acme` applies: it denies exec")
    assert lines[2] == f"Policy trail (revision {p.revision}):"
    assert lines[3].startswith("  1. risk_class  [ hold]  The call is classified exec (high)")
    assert lines[4].startswith("  2. workspace   [ deny]  The workspace `acme` applies")


def test_explain_text_shows_the_requirement_and_the_classifier_reasons() -> None:
    classification = classified(RiskClass.WRITE_LOCAL, Severity.MEDIUM).model_copy(
        update={"reasons": [Reason(rule="table.builtin", message="`write_file` writes a file.")]}
    )
    verdict = evaluate(proposal(), classification, policy("[approval]\nquorum = 2\n"))
    text = explain_text(verdict, classification)
    assert "Requirement: 2 approvals, expires in 1h." in text
    assert "Classification: write_local (medium)." in text
    assert "  - `write_file` writes a file." in text


def test_explain_data_is_json_serialisable_and_complete() -> None:
    call = proposal(source="prod")
    classification = classified()
    verdict = evaluate(call, classification, policy())
    data = explain_data(verdict, classification, call)
    assert json.loads(json.dumps(data)) == data
    assert data["decision"] == "require_approval"
    assert data["requirement"]["quorum"] == 1
    assert [s["step"] for s in data["trail"]] == ["risk_class", "requirement"]
    assert data["proposal"]["source"] == "prod"
    assert data["classification"]["risk_class"] == "write_local"
