"""The classifier judged on the evidence set: commands labelled from their documentation.

`tests/data/classifier_evidence.jsonl` was written apart from the classifier: every case is
labelled from the command's manual page or the tool's documentation (its `source` field), and
is either `must_hold` (must never be released as a low read) or `benign` (an everyday
read-only command that should be released as one). `tests/data/classifier_evidence_known.json`
lists, with a one-line reason each, the cases the classifier gets wrong today.

Run `python -m tests.classify.evidence` for the report: per-class precision and recall, the
must-hold cases released as low reads, the benign cases held (the false-alarm rate), and every
disagreement with the labels.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow.classify.engine import classify
from workflow.messages import Proposal, ProposalContext

DATA = Path(__file__).resolve().parents[1] / "data"
EVIDENCE = DATA / "classifier_evidence.jsonl"
KNOWN = DATA / "classifier_evidence_known.json"

# The vocabulary of README "Classification": read < egress < external < write_local = exec <
# destructive; low < medium < high < critical.
RISK_CLASSES = ("read", "egress", "external", "write_local", "exec", "destructive")
RUNG = {"read": 0, "egress": 1, "external": 2, "write_local": 3, "exec": 3, "destructive": 4}
SEVERITIES = ("low", "medium", "high", "critical")
CATEGORIES = ("destructive", "privileged", "network", "secret_access")
MUST_HOLD = "must_hold"
BENIGN = "benign"
KINDS = (MUST_HOLD, BENIGN)

FIELDS = frozenset(
    {
        "id",
        "tool",
        "arguments",
        "context",
        "expect_class",
        "min_severity",
        "categories",
        "note",
        "source",
        "kind",
    }
)
ID_PATTERN = re.compile(r"^ev-[mb]-[a-z]+-\d{2,}$")


class EvidenceError(ValueError):
    """The evidence set or the known-cases file is malformed."""


@dataclass(frozen=True)
class EvidenceCase:
    id: str
    tool: str
    arguments: dict[str, Any]
    cwd: str
    expect_class: str
    min_severity: str
    categories: tuple[str, ...]
    note: str
    source: str
    kind: str

    @property
    def shown(self) -> str:
        """The call in one line, control characters escaped."""
        command = self.arguments.get("command")
        if isinstance(command, str):
            text = command
        else:
            text = f"{self.tool} {json.dumps(self.arguments, ensure_ascii=False)}"
        shown = "".join(c if c.isprintable() else _escape(c) for c in text)
        return shown if len(shown) <= 100 else shown[:97] + "..."


@dataclass(frozen=True)
class Outcome:
    case: EvidenceCase
    risk_class: str
    severity: str
    categories: tuple[str, ...]
    rules: tuple[str, ...]

    @property
    def low_read(self) -> bool:
        """Released at once under the default policy."""
        return is_low_read(self.risk_class, self.severity)

    @property
    def problems(self) -> list[str]:
        """Where the classification departs from the label (empty when it agrees)."""
        case = self.case
        found = []
        if self.risk_class != case.expect_class:
            found.append(f"class {self.risk_class}, labelled {case.expect_class}")
        if SEVERITIES.index(self.severity) < SEVERITIES.index(case.min_severity):
            found.append(f"severity {self.severity}, labelled at least {case.min_severity}")
        missing = sorted(set(case.categories) - set(self.categories))
        if missing:
            found.append(f"categories lack {', '.join(missing)}")
        return found

    @property
    def laxer(self) -> bool:
        """Classified on a lower rung, or with a lower severity, than labelled."""
        return RUNG[self.risk_class] < RUNG[self.case.expect_class] or SEVERITIES.index(
            self.severity
        ) < SEVERITIES.index(self.case.min_severity)

    @property
    def summary(self) -> str:
        rules = ", ".join(self.rules) or "no rule"
        return f"{self.risk_class}/{self.severity} ({rules})"


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def is_low_read(risk_class: str, severity: str) -> bool:
    return risk_class == "read" and severity == "low"


def _check_shape(raw: Any) -> str | None:
    """What is wrong with a case's fields and types, or None."""
    if not isinstance(raw, dict):
        return "not a JSON object"
    keys = set(raw)
    if keys != FIELDS:
        missing, extra = sorted(FIELDS - keys), sorted(keys - FIELDS)
        return f"fields differ (missing {missing}, unexpected {extra})"
    for name in ("id", "tool", "note", "source", "kind", "expect_class", "min_severity"):
        if not isinstance(raw[name], str):
            return f"{name} is not a string"
    if not ID_PATTERN.match(raw["id"]):
        return f"id {raw['id']!r} does not look like ev-m-group-NN or ev-b-group-NN"
    if not raw["tool"] or not raw["source"].strip():
        return f"{raw['id']}: empty tool or source"
    if not isinstance(raw["arguments"], dict) or not raw["arguments"]:
        return f"{raw['id']}: arguments is not a non-empty object"
    context = raw["context"]
    if not isinstance(context, dict) or set(context) != {"cwd"}:
        return f"{raw['id']}: context must be an object with cwd only"
    if not isinstance(context["cwd"], str) or not context["cwd"].startswith("/"):
        return f"{raw['id']}: cwd is not an absolute path"
    return None


def _check_labels(raw: dict[str, Any]) -> str | None:
    """What is wrong with a well-shaped case's labels, or None."""
    case_id, kind, categories = raw["id"], raw["kind"], raw["categories"]
    if kind not in KINDS:
        return f"{case_id}: kind {kind!r} is not one of {KINDS}"
    if raw["expect_class"] not in RISK_CLASSES:
        return f"{case_id}: expect_class {raw['expect_class']!r} is unknown"
    if raw["min_severity"] not in SEVERITIES:
        return f"{case_id}: min_severity {raw['min_severity']!r} is unknown"
    if (
        not isinstance(categories, list)
        or len(set(categories)) != len(categories)
        or not set(categories) <= set(CATEGORIES)
    ):
        return f"{case_id}: categories must be distinct members of {CATEGORIES}"
    low_read = is_low_read(raw["expect_class"], raw["min_severity"])
    if kind == BENIGN and (not low_read or categories):
        return f"{case_id}: a benign case is labelled read/low with no category"
    if kind == MUST_HOLD and low_read:
        return f"{case_id}: a must-hold case cannot be labelled read/low"
    if (kind == MUST_HOLD) != case_id.startswith("ev-m-"):
        return f"{case_id}: the id prefix (ev-m / ev-b) does not match the kind"
    return None


def _case_from(where: str, raw: Any) -> EvidenceCase:
    problem = _check_shape(raw) or _check_labels(raw)
    if problem:
        raise EvidenceError(f"{where}: {problem}")
    return EvidenceCase(
        id=raw["id"],
        tool=raw["tool"],
        arguments=raw["arguments"],
        cwd=raw["context"]["cwd"],
        expect_class=raw["expect_class"],
        min_severity=raw["min_severity"],
        categories=tuple(raw["categories"]),
        note=raw["note"],
        source=raw["source"],
        kind=raw["kind"],
    )


def load_cases(path: Path = EVIDENCE) -> list[EvidenceCase]:
    """Every case of the evidence set, checked for shape and label; EvidenceError if not."""
    cases: list[EvidenceCase] = []
    seen: set[str] = set()
    for line_no, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvidenceError(f"{path.name} line {line_no}: {exc.msg}") from None
        case = _case_from(f"{path.name} line {line_no}", raw)
        if case.id in seen:
            raise EvidenceError(f"{path.name} line {line_no}: duplicate id {case.id}")
        seen.add(case.id)
        cases.append(case)
    if not cases:
        raise EvidenceError(f"{path.name} holds no case")
    return cases


def load_known(cases: Sequence[EvidenceCase], path: Path = KNOWN) -> dict[str, str]:
    """The cases the classifier gets wrong today (id -> one-line reason), checked."""
    try:
        known = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise EvidenceError(f"{path.name}: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(known, dict):
        raise EvidenceError(f"{path.name}: not a JSON object of id -> reason")
    ids = {case.id for case in cases}
    for case_id, why in known.items():
        if case_id not in ids:
            raise EvidenceError(f"{path.name}: {case_id} is not a case of the evidence set")
        if not isinstance(why, str) or not why.strip() or "\n" in why:
            raise EvidenceError(f"{path.name}: {case_id} needs a one-line reason")
    return known


def classify_case(case: EvidenceCase) -> Outcome:
    proposal = Proposal(
        id=case.id,
        agent="evidence",
        tool=case.tool,
        arguments=case.arguments,
        context=ProposalContext(cwd=case.cwd),
    )
    result = classify(proposal)
    return Outcome(
        case=case,
        risk_class=str(result.risk_class),
        severity=str(result.severity),
        categories=tuple(str(category) for category in result.categories),
        rules=tuple(dict.fromkeys(reason.rule for reason in result.reasons)),
    )


def classify_all(cases: Iterable[EvidenceCase]) -> list[Outcome]:
    return [classify_case(case) for case in cases]


def must_hold_released(outcomes: Iterable[Outcome]) -> list[Outcome]:
    """Must-hold cases the classifier would release at once."""
    return [o for o in outcomes if o.case.kind == MUST_HOLD and o.low_read]


def benign_held(outcomes: Iterable[Outcome]) -> list[Outcome]:
    """Benign cases the classifier would hold (false alarms)."""
    return [o for o in outcomes if o.case.kind == BENIGN and not o.low_read]


@dataclass(frozen=True)
class KnownMismatch:
    """How today's outcomes differ from the known-cases file."""

    must_hold_regressed: frozenset[str]
    must_hold_fixed: frozenset[str]
    benign_newly_held: frozenset[str]
    benign_fixed: frozenset[str]

    @property
    def exact(self) -> bool:
        return not (
            self.must_hold_regressed
            or self.must_hold_fixed
            or self.benign_newly_held
            or self.benign_fixed
        )


def compare_with_known(outcomes: Sequence[Outcome], known: dict[str, str]) -> KnownMismatch:
    """Must-hold cases released and benign cases held, against the ids the known file lists."""
    kinds = {o.case.id: o.case.kind for o in outcomes}
    released = {o.case.id for o in must_hold_released(outcomes)}
    held = {o.case.id for o in benign_held(outcomes)}
    known_must = {i for i in known if kinds.get(i) == MUST_HOLD}
    known_benign = {i for i in known if kinds.get(i) == BENIGN}
    return KnownMismatch(
        must_hold_regressed=frozenset(released - known_must),
        must_hold_fixed=frozenset(known_must - released),
        benign_newly_held=frozenset(held - known_benign),
        benign_fixed=frozenset(known_benign - held),
    )


def false_alarm_rate(outcomes: Sequence[Outcome]) -> tuple[int, int, float]:
    """(held, benign, held / benign) over the benign cases."""
    benign = [o for o in outcomes if o.case.kind == BENIGN]
    held = len(benign_held(benign))
    return held, len(benign), held / len(benign) if benign else 0.0


@dataclass(frozen=True)
class ClassFigures:
    risk_class: str
    support: int
    predicted: int
    correct: int

    @property
    def precision(self) -> float | None:
        return self.correct / self.predicted if self.predicted else None

    @property
    def recall(self) -> float | None:
        return self.correct / self.support if self.support else None


def per_class(outcomes: Sequence[Outcome]) -> list[ClassFigures]:
    """Precision and recall of the exact risk class, class by class."""
    figures = []
    for risk_class in RISK_CLASSES:
        labelled = [o for o in outcomes if o.case.expect_class == risk_class]
        predicted = [o for o in outcomes if o.risk_class == risk_class]
        correct = [o for o in labelled if o.risk_class == risk_class]
        figures.append(ClassFigures(risk_class, len(labelled), len(predicted), len(correct)))
    return figures


def _ratio(value: float | None) -> str:
    return "    -" if value is None else f"{value:.3f}"


def report(outcomes: Sequence[Outcome], known: dict[str, str]) -> list[str]:
    """The report's lines."""
    lines: list[str] = []
    must = [o for o in outcomes if o.case.kind == MUST_HOLD]
    released = must_hold_released(outcomes)
    held, benign_total, rate = false_alarm_rate(outcomes)
    lines.append(
        f"evidence set: {len(outcomes)} cases ({len(must)} must-hold, {benign_total} benign),"
        " labelled from the documentation"
    )
    lines.append("")
    lines.append("risk class     support  predicted  correct  precision  recall")
    for f in per_class(outcomes):
        lines.append(
            f"{f.risk_class:<13} {f.support:>8} {f.predicted:>10} {f.correct:>8}"
            f"  {_ratio(f.precision):>9}  {_ratio(f.recall):>6}"
        )
    exact = sum(o.risk_class == o.case.expect_class for o in outcomes)
    rung = sum(RUNG[o.risk_class] >= RUNG[o.case.expect_class] for o in outcomes)
    severity = sum(
        SEVERITIES.index(o.severity) >= SEVERITIES.index(o.case.min_severity) for o in outcomes
    )
    categories = sum(set(o.case.categories) <= set(o.categories) for o in outcomes)
    n = len(outcomes)
    lines.append(f"exact class {exact}/{n}; at least as strict as labelled {rung}/{n}")
    lines.append(
        f"severity at least as labelled {severity}/{n}; categories present {categories}/{n}"
    )
    lines.append("")
    lines.append(f"must-hold released as low reads: {len(released)}/{len(must)}")
    for o in released:
        lines.append(f"  {o.case.id:<18} {o.case.shown}")
    lines.append("")
    lines.append(
        f"false alarms: {held}/{benign_total} benign cases held = {rate:.1%}"
        " (benign cases not classified as a low read)"
    )
    for o in benign_held(outcomes):
        lines.append(f"  {o.case.id:<18} {o.summary:<40} {o.case.shown}")
    lines.append("")
    disagreements = [o for o in outcomes if o.problems]
    laxer = sum(o.laxer for o in disagreements)
    lines.append(
        f"disagreements with the labels: {len(disagreements)}/{n}"
        f" ({laxer} less strict than labelled, marked [laxer])"
    )
    for o in disagreements:
        mark = (" [laxer]" if o.laxer else "") + (" [known]" if o.case.id in known else "")
        lines.append(f"  {o.case.id:<18} {'; '.join(o.problems)}{mark}")
        lines.append(f"  {'':<18} {o.case.shown}")
        lines.append(f"  {'':<18} rules: {', '.join(o.rules) or 'none'}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.classify.evidence",
        description="Classify the evidence set and report accuracy against its labels.",
    )
    parser.add_argument(
        "--summary",
        action="store_true",
        help="figures, misses and false alarms only, without the list of disagreements",
    )
    args = parser.parse_args(argv)
    try:
        cases = load_cases()
        known = load_known(cases)
    except (OSError, EvidenceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    lines = report(classify_all(cases), known)
    if args.summary:
        lines = lines[: lines.index(next(x for x in lines if x.startswith("disagreements")))]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
