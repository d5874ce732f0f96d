"""Risk vocabulary: classes, severities, categories and their strictness order.

Pure: imports nothing from the rest of Headgate, so the wire models can use it.
"""

from __future__ import annotations

from enum import StrEnum


class RiskClass(StrEnum):
    """What a tool call does to the world, from harmless to irreversible."""

    READ = "read"
    EGRESS = "egress"
    EXTERNAL = "external"
    WRITE_LOCAL = "write_local"
    EXEC = "exec"
    DESTRUCTIVE = "destructive"

    @property
    def rung(self) -> int:
        """Strictness rung: read < egress < external < write_local = exec < destructive."""
        return _RUNG[self]

    @property
    def order_key(self) -> tuple[int, int]:
        """Total order used to pick the strictest class; ties on a rung break towards exec."""
        return CLASS_ORDER[self]


_RUNG = {
    RiskClass.READ: 0,
    RiskClass.EGRESS: 1,
    RiskClass.EXTERNAL: 2,
    RiskClass.WRITE_LOCAL: 3,
    RiskClass.EXEC: 3,
    RiskClass.DESTRUCTIVE: 4,
}
_TIE = {c: 1 if c is RiskClass.EXEC else 0 for c in RiskClass}
#: `RiskClass.order_key` as a plain lookup (no property call), for the classifier's hot loops.
#: Every class has its own key, so "strictest" never has to break a tie between two classes.
CLASS_ORDER: dict[RiskClass, tuple[int, int]] = {c: (_RUNG[c], _TIE[c]) for c in RiskClass}


class Severity(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return SEVERITY_RANK[self]


#: `Severity.rank` as a plain lookup, for the classifier's hot loops.
SEVERITY_RANK: dict[Severity, int] = {s: i for i, s in enumerate(Severity)}


class Category(StrEnum):
    DESTRUCTIVE = "destructive"
    PRIVILEGED = "privileged"
    NETWORK = "network"
    SECRET_ACCESS = "secret_access"


class Capability(StrEnum):
    """Verbs a proposal may declare. An undeclared verb fails closed."""

    READ = "read"
    LIST = "list"
    WRITE = "write"
    PERSIST = "persist"
    EXEC = "exec"
    EGRESS_FETCH = "egress_fetch"
    EGRESS_PROVIDER = "egress_provider"
    AUTHZ = "authz"


def strictest_class(*classes: RiskClass) -> RiskClass:
    """The strictest of the given classes (max rung); read when none is given."""
    return max(classes, key=CLASS_ORDER.__getitem__, default=RiskClass.READ)


def strictest_severity(*severities: Severity) -> Severity:
    return max(severities, key=SEVERITY_RANK.__getitem__, default=Severity.LOW)


def parse_capability(value: str) -> Capability | None:
    """The declared verb as a Capability, or None when it is not one we know (fails closed)."""
    try:
        return Capability(value.strip().lower())
    except ValueError:
        return None


def is_stricter_or_equal(a: tuple[RiskClass, Severity], b: tuple[RiskClass, Severity]) -> bool:
    """True when (class, severity) `a` is at least as strict as `b` on both axes."""
    return a[0].rung >= b[0].rung and a[1].rank >= b[1].rank
