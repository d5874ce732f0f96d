"""The shape of a rule declaration, the deciding reason of a classification, and the
markdown listing of the rulebook."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from workflow.classify.taxonomy import CLASS_ORDER, SEVERITY_RANK, Category, RiskClass, Severity
from workflow.messages import Reason


@dataclass(frozen=True)
class RuleSpec:
    """One rule: `risk` is None for a note that explains without raising the result;
    `severity` names the severity it gives (or the range, "high or critical")."""

    id: str
    risk: RiskClass | None
    severity: str
    categories: tuple[Category, ...]
    matches: str
    domain: str = ""


def rule(
    id: str,
    risk: RiskClass | None,
    severity: Severity | str,
    matches: str,
    *categories: Category,
    domain: str,
) -> RuleSpec:
    return RuleSpec(id, risk, str(severity), tuple(categories), matches, domain)


def deciding_reason(reasons: Sequence[Reason], risk: RiskClass, severity: Severity) -> int | None:
    """The index of the reason that decided the result (what Cedar calls the determining
    policy): the first that gives the final class, preferring one that also gives the final
    severity. None when no reason gives the class (a read with no findings)."""
    best: int | None = None
    for i, r in enumerate(reasons):
        if r.risk_class is None or CLASS_ORDER[r.risk_class] != CLASS_ORDER[risk]:
            continue
        if r.severity is not None and SEVERITY_RANK[r.severity] == SEVERITY_RANK[severity]:
            return i
        best = i if best is None else best
    return best


def render_markdown(specs: Iterable[RuleSpec]) -> str:
    """docs/rules.md: one table per domain."""
    lines = [
        "# Classifier rules",
        "",
        "Generated from `workflow/classify/rulebook/` by "
        "`python -m workflow.classify.rulebook > docs/rules.md`; do not edit by hand "
        "(`tests/classify/test_rulebook.py` fails when it drifts). `headgate rules` prints the "
        "same list; `headgate classify --explain` marks the rule that decided a result.",
        "",
    ]
    by_domain: dict[str, list[RuleSpec]] = {}
    for spec in specs:
        by_domain.setdefault(spec.domain, []).append(spec)
    for domain, items in by_domain.items():
        lines += [
            f"## {domain}",
            "",
            "| rule | class | severity | categories | matches |",
            "|---|---|---|---|---|",
        ]
        for s in items:
            cats = ", ".join(c.value for c in s.categories)
            risk = s.risk.value if s.risk is not None else "(note)"
            matches = s.matches.replace("|", "\\|")
            lines.append(f"| `{s.id}` | {risk} | {s.severity} | {cats} | {matches} |")
        lines.append("")
    return "\n".join(lines)
