"""One rule that fired (`Finding`) and the accumulator that keeps only the strictest result.

Pure data. Every layer of the classifier produces findings; the accumulator folds them with
max-rung semantics, so no layer can lower what another found.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workflow.classify.taxonomy import (
    CLASS_ORDER,
    SEVERITY_RANK,
    Category,
    RiskClass,
    Severity,
    strictest_class,
    strictest_severity,
)
from workflow.messages import Reason


@dataclass(frozen=True, slots=True)
class Finding:
    """A rule that fired: its stable id, a sentence for the approver and what it implies.

    `risk` is None for a note that explains something without raising the result.
    """

    rule: str
    message: str
    risk: RiskClass | None = None
    severity: Severity | None = None
    categories: frozenset[Category] = frozenset()
    fail_closed: bool = False

    def reason(self) -> Reason:
        return Reason(
            rule=self.rule, message=self.message, risk_class=self.risk, severity=self.severity
        )


def note(rule: str, message: str) -> Finding:
    return Finding(rule, message)


def finding(
    rule: str,
    message: str,
    risk: RiskClass,
    severity: Severity,
    *categories: Category,
    fail_closed: bool = False,
) -> Finding:
    return Finding(rule, message, risk, severity, frozenset(categories), fail_closed)


@dataclass
class Accumulator:
    """Folds findings; the class, severity and categories only ever move up."""

    risk: RiskClass = RiskClass.READ
    severity: Severity = Severity.LOW
    categories: set[Category] = field(default_factory=set)
    findings: list[Finding] = field(default_factory=list)
    fail_closed: bool = False
    known: bool = True

    def add(self, item: Finding) -> None:
        if item in self.findings:
            return
        self.findings.append(item)
        # strictest_class / strictest_severity of the two, spelled out: this runs per finding.
        risk, severity = item.risk, item.severity
        if risk is not None and CLASS_ORDER[risk] > CLASS_ORDER[self.risk]:
            self.risk = risk
        if severity is not None and SEVERITY_RANK[severity] > SEVERITY_RANK[self.severity]:
            self.severity = severity
        if item.categories:
            self.categories |= item.categories
        self.fail_closed = self.fail_closed or item.fail_closed

    def extend(self, items: list[Finding] | tuple[Finding, ...]) -> None:
        for item in items:
            self.add(item)

    def reasons(self) -> list[Reason]:
        return [f.reason() for f in self.findings]


def fold(items: list[Finding] | tuple[Finding, ...]) -> tuple[RiskClass, Severity]:
    """The strictest class and severity among the findings (read/low when there are none)."""
    risks = [f.risk for f in items if f.risk is not None]
    sevs = [f.severity for f in items if f.severity is not None]
    return strictest_class(*risks), strictest_severity(*sevs)
