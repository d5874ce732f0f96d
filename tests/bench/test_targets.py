"""Which read p50 target a `headgate bench` run is judged by (the issue's, per store)."""

from __future__ import annotations

import pytest

from workflow.bench.runner import read_p50_target


@pytest.mark.parametrize(
    ("database", "rate", "config_rate", "expected"),
    [
        ("sqlite", 1664.0, None, 2.0),  # half the mix maximum, measured in the round
        ("sqlite", 500.0, 500.0, None),  # a rate given: not the target's
        ("postgresql", 500.0, 500.0, 3.0),
        ("postgresql", 1844.0, None, None),  # half the mix maximum: not the target's 500/s
        ("postgresql", 200.0, 200.0, None),
        ("postgresql", None, None, None),
    ],
)
def test_the_read_p50_target_applies_at_its_own_rate(
    database: str, rate: float | None, config_rate: float | None, expected: float | None
) -> None:
    assert read_p50_target(database, rate, config_rate) == expected
