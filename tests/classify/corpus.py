"""The labeled classifier corpus: loading, judging one case, and per-class precision/recall.

Run `python -m tests.classify.corpus` to print the report.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow.classify.engine import classify
from workflow.classify.taxonomy import RiskClass, Severity
from workflow.messages import Classification, Proposal

CORPUS = Path(__file__).resolve().parents[1] / "data" / "classifier_corpus.jsonl"


@dataclass(frozen=True)
class Case:
    id: str
    proposal: Proposal
    expect_class: RiskClass
    min_severity: Severity
    categories: frozenset[str]
    raw: dict[str, Any]

    @property
    def consequential(self) -> bool:
        return self.expect_class is not RiskClass.READ or self.min_severity is not Severity.LOW

    @property
    def label(self) -> str:
        return str(self.raw.get("arguments", {}).get("command") or self.raw)


def load_cases(path: Path = CORPUS) -> list[Case]:
    cases = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        raw = json.loads(line)
        body = {
            k: raw[k]
            for k in ("tool", "arguments", "context", "capability", "tool_definition")
            if k in raw
        }
        cases.append(
            Case(
                id=raw["id"],
                proposal=Proposal(id=raw["id"], agent="corpus", **body),
                expect_class=RiskClass(raw["expect_class"]),
                min_severity=Severity(raw["min_severity"]),
                categories=frozenset(raw.get("categories", [])),
                raw=raw,
            )
        )
    return cases


def problems(case: Case, got: Classification) -> list[str]:
    """What is wrong with `got` for this case (empty: it is right)."""
    out = []
    if got.risk_class is not case.expect_class:
        out.append(f"class {got.risk_class} != {case.expect_class}")
    if got.severity.rank < case.min_severity.rank:
        out.append(f"severity {got.severity} < {case.min_severity}")
    missing = case.categories - {str(c) for c in got.categories}
    if missing:
        out.append(f"missing categories {sorted(missing)}")
    return out


def precision_recall(
    pairs: list[tuple[RiskClass, RiskClass]],
) -> dict[RiskClass, tuple[float, float, int]]:
    """Per class: (precision, recall, support) over (expected, got) pairs."""
    tp: Counter[RiskClass] = Counter()
    predicted: Counter[RiskClass] = Counter()
    actual: Counter[RiskClass] = Counter()
    for expected, got in pairs:
        actual[expected] += 1
        predicted[got] += 1
        if expected is got:
            tp[expected] += 1
    return {
        c: (
            tp[c] / predicted[c] if predicted[c] else 1.0,
            tp[c] / actual[c] if actual[c] else 1.0,
            actual[c],
        )
        for c in RiskClass
    }


def main() -> None:
    cases = load_cases()
    pairs = []
    wrong = 0
    for case in cases:
        got = classify(case.proposal)
        pairs.append((case.expect_class, got.risk_class))
        issues = problems(case, got)
        if issues:
            wrong += 1
            print(f"{case.id} {case.label!r}: {'; '.join(issues)}")
    print(f"\n{len(cases)} cases, {len(cases) - wrong} fully right, {wrong} with a problem")
    print(f"{'class':<12} {'precision':>9} {'recall':>7} {'support':>8}")
    for cls, (p, r, n) in precision_recall(pairs).items():
        print(f"{cls.value:<12} {p:>9.3f} {r:>7.3f} {n:>8}")


if __name__ == "__main__":
    main()
