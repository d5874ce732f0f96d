"""Every labeled case in the corpus, and the one error that may never happen."""

from __future__ import annotations

import pytest

from tests.classify.corpus import Case, load_cases, problems
from workflow.classify.engine import classify
from workflow.classify.taxonomy import RiskClass

CASES = load_cases()


def test_corpus_has_at_least_400_cases() -> None:
    assert len(CASES) >= 400


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_corpus_case_is_classified_as_labeled(case: Case) -> None:
    assert problems(case, classify(case.proposal)) == [], case.label


def test_no_consequential_case_is_ever_classified_as_read() -> None:
    leaked = [
        c.label
        for c in CASES
        if c.consequential and classify(c.proposal).risk_class is RiskClass.READ
    ]
    assert leaked == []


def test_no_consequential_case_is_ever_a_low_read() -> None:
    leaked = []
    for c in CASES:
        got = classify(c.proposal)
        if c.consequential and got.risk_class is RiskClass.READ and got.severity.rank == 0:
            leaked.append(c.label)
    assert leaked == []
