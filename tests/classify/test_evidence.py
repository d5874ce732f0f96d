"""The evidence set: labels written from the documentation, and what the classifier makes of them.

The cases the classifier gets wrong today are listed, each with a reason, in
`tests/data/classifier_evidence_known.json`. These tests pass while that list is exact: a
must-hold case newly released as a low read fails, a benign case newly held fails, and so does
a listed case that is now right (take it off the list).
"""

from __future__ import annotations

import json
from collections.abc import Set as AbstractSet
from dataclasses import replace
from pathlib import Path

import pytest

from tests.classify.evidence import (
    BENIGN,
    CATEGORIES,
    KINDS,
    MUST_HOLD,
    RISK_CLASSES,
    SEVERITIES,
    EvidenceCase,
    EvidenceError,
    Outcome,
    classify_all,
    compare_with_known,
    false_alarm_rate,
    load_cases,
    load_known,
    main,
    must_hold_released,
)


@pytest.fixture(scope="module")
def cases() -> list[EvidenceCase]:
    return load_cases()


@pytest.fixture(scope="module")
def known(cases: list[EvidenceCase]) -> dict[str, str]:
    return load_known(cases)


@pytest.fixture(scope="module")
def outcomes(cases: list[EvidenceCase]) -> list[Outcome]:
    return classify_all(cases)


def _listing(ids: AbstractSet[str], known: dict[str, str] | None = None) -> str:
    return "\n".join(f"  {i}" + (f": {known[i]}" if known else "") for i in sorted(ids))


def test_every_case_has_a_source_a_kind_and_valid_labels(cases: list[EvidenceCase]) -> None:
    # load_cases rejects a malformed case; this states what the set as a whole holds.
    assert all(case.source.strip() for case in cases)
    assert {case.kind for case in cases} == set(KINDS)
    assert {case.expect_class for case in cases} <= set(RISK_CLASSES)
    assert {case.min_severity for case in cases} <= set(SEVERITIES)
    assert {c for case in cases for c in case.categories} <= set(CATEGORIES)
    for case in cases:
        if case.kind == BENIGN:
            assert (case.expect_class, case.min_severity, case.categories) == ("read", "low", ())
        else:
            assert (case.expect_class, case.min_severity) != ("read", "low"), case.id
    must = sum(case.kind == MUST_HOLD for case in cases)
    assert must >= 200
    assert len(cases) - must >= 200


def test_the_known_file_lists_cases_of_the_set_with_a_reason(
    cases: list[EvidenceCase], known: dict[str, str]
) -> None:
    ids = {case.id for case in cases}
    assert set(known) <= ids
    assert all(why.strip() and "\n" not in why for why in known.values())


def test_no_must_hold_case_is_released_as_a_low_read_except_the_known_ones(
    outcomes: list[Outcome], known: dict[str, str]
) -> None:
    mismatch = compare_with_known(outcomes, known)
    assert not mismatch.must_hold_regressed, (
        "must-hold cases released as low reads (fix the classifier, never the label):\n"
        + _listing(mismatch.must_hold_regressed)
    )
    assert not mismatch.must_hold_fixed, (
        "no longer released as low reads; remove them from classifier_evidence_known.json:\n"
        + _listing(mismatch.must_hold_fixed, known)
    )


def test_every_benign_case_held_is_known_with_a_reason(
    outcomes: list[Outcome], known: dict[str, str]
) -> None:
    held, total, rate = false_alarm_rate(outcomes)
    print(f"false alarms on the evidence set: {held}/{total} benign cases held = {rate:.1%}")
    mismatch = compare_with_known(outcomes, known)
    assert not mismatch.benign_newly_held, (
        "benign cases held that are not in classifier_evidence_known.json:\n"
        + _listing(mismatch.benign_newly_held)
    )
    assert not mismatch.benign_fixed, (
        "benign cases now released as low reads; remove them from the known file:\n"
        + _listing(mismatch.benign_fixed, known)
    )


def test_the_bookkeeping_notices_a_regression_and_a_fix(
    outcomes: list[Outcome], known: dict[str, str]
) -> None:
    assert compare_with_known(outcomes, known).exact
    released = next((o for o in outcomes if o.case.kind == MUST_HOLD and o.low_read), None)
    if released is None:  # no must-hold case is released today: release one, as a regression
        first_held = next(o for o in outcomes if o.case.kind == MUST_HOLD)
        released = replace(first_held, risk_class="read", severity="low")
        outcomes = [released if o is first_held else o for o in outcomes]
    held = next((o for o in outcomes if o.case.kind == BENIGN and not o.low_read), None)
    if held is None:  # no benign case is held today: hold one, as a regression would
        first = next(o for o in outcomes if o.case.kind == BENIGN)
        held = replace(first, risk_class="exec", severity="high")
        outcomes = [held if o is first else o for o in outcomes]
    right = next(o for o in outcomes if o.case.kind == MUST_HOLD and not o.low_read)
    released_benign = next(o for o in outcomes if o.case.kind == BENIGN and o.low_read)
    forgotten = {i: w for i, w in known.items() if i not in {released.case.id, held.case.id}}
    mismatch = compare_with_known(outcomes, forgotten)
    assert mismatch.must_hold_regressed == {released.case.id}
    assert mismatch.benign_newly_held == {held.case.id}
    stale = {**known, right.case.id: "was wrong", released_benign.case.id: "was held"}
    mismatch = compare_with_known(outcomes, stale)
    assert mismatch.must_hold_fixed == {right.case.id}
    assert mismatch.benign_fixed == {released_benign.case.id}


def test_a_case_without_a_source_is_rejected(tmp_path: Path) -> None:
    case = {
        "id": "ev-m-x-01",
        "tool": "run_shell",
        "arguments": {"command": "rm -rf build"},
        "context": {"cwd": "/home/agent/proj"},
        "expect_class": "destructive",
        "min_severity": "high",
        "categories": ["destructive"],
        "note": "",
        "source": " ",
        "kind": "must_hold",
    }
    path = tmp_path / "evidence.jsonl"
    path.write_text(json.dumps(case) + "\n")
    with pytest.raises(EvidenceError, match="empty tool or source"):
        load_cases(path)
    path.write_text(json.dumps({**case, "source": "man 1 rm", "kind": "maybe"}) + "\n")
    with pytest.raises(EvidenceError, match="kind 'maybe'"):
        load_cases(path)
    benign = {**case, "id": "ev-b-x-01", "source": "man 1 rm", "kind": "benign"}
    path.write_text(json.dumps(benign) + "\n")
    with pytest.raises(EvidenceError, match="benign case is labelled read/low"):
        load_cases(path)


def test_a_known_entry_that_names_no_case_is_rejected(
    tmp_path: Path, cases: list[EvidenceCase]
) -> None:
    path = tmp_path / "known.json"
    path.write_text(json.dumps({"ev-m-nope-01": "gone"}))
    with pytest.raises(EvidenceError, match="not a case of the evidence set"):
        load_known(cases, path)
    path.write_text(json.dumps({cases[0].id: ""}))
    with pytest.raises(EvidenceError, match="one-line reason"):
        load_known(cases, path)


def test_the_report_prints_figures_misses_and_false_alarms(
    capsys: pytest.CaptureFixture[str], outcomes: list[Outcome]
) -> None:
    assert main(["--summary"]) == 0
    out = capsys.readouterr().out
    held, total, rate = false_alarm_rate(outcomes)
    released = must_hold_released(outcomes)
    assert f"false alarms: {held}/{total} benign cases held = {rate:.1%}" in out
    assert f"must-hold released as low reads: {len(released)}/" in out
    assert all(o.case.id in out for o in released)
    assert "precision" in out
    assert "disagreements" not in out
