"""Percentiles of latency samples and medians across rounds."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

QUANTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))


def percentile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between the closest ranks of an ascending sequence."""
    if not ordered:
        raise ValueError("no samples")
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(seconds: Sequence[float]) -> dict[str, float | int] | None:
    """count, p50, p90, p99 and max in milliseconds; None without samples."""
    if not seconds:
        return None
    ordered = sorted(seconds)
    out: dict[str, float | int] = {"count": len(ordered)}
    for name, q in QUANTILES:
        out[name] = round(percentile(ordered, q) * 1000, 3)
    out["max"] = round(ordered[-1] * 1000, 3)
    return out


def median_of(values: Sequence[Any]) -> float | None:
    nums = [float(v) for v in values if isinstance(v, int | float)]
    return statistics.median(nums) if nums else None


def median_summary(summaries: Sequence[dict[str, Any] | None]) -> dict[str, float] | None:
    """Per field, the median over rounds of a latency summary."""
    present = [s for s in summaries if s]
    if not present:
        return None
    out: dict[str, float] = {}
    for key in ("count", "p50", "p90", "p99", "max"):
        value = median_of([s.get(key) for s in present])
        if value is not None:
            out[key] = round(value, 3)
    return out


def ratio(a: float | None, b: float | None, digits: int = 3) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return round(a / b, digits)
