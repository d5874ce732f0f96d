"""The Grafana dashboard in deploy/ only charts metrics the service exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from workflow.service.metrics import Metrics

DASHBOARD = (
    Path(__file__).resolve().parent.parent / "deploy" / "grafana" / "headgate-dashboard.json"
)


def exported_names() -> set[str]:
    """Every sample name the service's metrics can export (labelled ones have none yet)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    return {
        family.name + suffix
        for family in Metrics().registry.collect()
        for suffix in suffixes[family.type]
    }


def test_every_dashboard_query_uses_an_exported_metric() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"headgate_[a-z_]+", e)}
    assert used
    assert used <= exported_names(), used - exported_names()


def test_the_dashboard_covers_the_metrics_operators_need() -> None:
    titles = " ".join(p["title"] for p in json.loads(DASHBOARD.read_text())["panels"]).lower()
    for topic in ("latency", "pending", "time to approval", "refused", "dead letters"):
        assert topic in titles
