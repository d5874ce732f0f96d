"""`headgate bench` on a tiny load: it runs end to end and its JSON has sane fields.

No timing thresholds: the figures depend on the machine. This checks that every phase ran,
nothing was lost, the outcomes were the expected ones and the summary is complete.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from workflow.cli.bench import bench

pytestmark = pytest.mark.slow

PHASES = ("relay_max", "reads_max", "mix_max", "relay_rate", "mix_rate")


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    app = typer.Typer()
    app.command()(bench)
    result = CliRunner().invoke(
        app,
        ["--json", "--count", "300", "--rounds", "1", "--rate", "400", "--warmup", "50"],
    )
    assert result.exit_code == 0, result.output
    start = result.stdout.index("{")
    return json.loads(result.stdout[start:])  # type: ignore[no-any-return]


def test_every_phase_ran_and_lost_nothing(report: dict[str, Any]) -> None:
    (only,) = report["rounds"]
    for name in PHASES:
        phase = only[name]
        assert (phase["published"], phase["completed"], phase["lost"]) == (300, 300, 0), name


def test_outcomes_were_the_expected_ones(report: dict[str, Any]) -> None:
    (only,) = report["rounds"]
    assert [only[name]["unexpected"] for name in PHASES] == [0] * len(PHASES)


def test_headgate_latencies_cover_every_kind(report: dict[str, Any]) -> None:
    hg = report["summary"]["headgate"]
    for kind in ("read_latency_ms", "approved_latency_ms", "held_latency_ms", "denied_latency_ms"):
        lat = hg[kind]
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"], kind


def test_relay_baseline_is_measured(report: dict[str, Any]) -> None:
    relay = report["summary"]["relay"]
    assert relay["throughput"] > 0
    assert relay["latency_ms"]["p50"] > 0


def test_ratios_and_resources_are_reported(report: dict[str, Any]) -> None:
    s = report["summary"]
    assert all(s["ratios"][k] > 0 for k in ("read_throughput", "mix_throughput", "read_p50"))
    assert s["headgate"]["cpu_s_per_1000"] > 0
    assert report["service_peak_rss_mb"] > 0
    # SQLite's read p50 target is at half the mix maximum: at --rate 400 it is not judged.
    assert s["targets"]["read_p50_target"] is None
    assert s["targets"]["read_p50_within_target"] is None


def test_the_bot_approved_every_held_call(report: dict[str, Any]) -> None:
    assert report["bot"]["errors"] == 0
    assert report["bot"]["decisions_sent"] > 0


@pytest.mark.parametrize("given", [["--rate", "30"], ["--soak-share", "0.1"]])
def test_a_soak_runs_at_the_rate_or_share_given(given: list[str]) -> None:
    app = typer.Typer()
    app.command()(bench)
    result = CliRunner().invoke(
        app, ["--json", "--soak", "0.1", *given, "--count", "100", "--warmup", "20"]
    )
    assert result.exit_code == 0, result.output
    soak = json.loads(result.stdout[result.stdout.index("{") :])["soak"]
    if given[0] == "--rate":
        assert soak["rate"] == 30
        assert soak["max_throughput"] > 30
    else:
        assert soak["rate"] == round(soak["max_throughput"] * 0.1, 1)
    assert soak["lost"] == 0
    assert soak["completed"] == soak["published"] > 0
    # A soak shorter than a minute still has its row: what completed in its few seconds.
    [row] = soak["minutes"]
    assert row["seconds"] < 60
    assert row["completed"] == soak["completed"]
    assert row["read_ms"]["count"] > 0


def test_a_soak_shorter_than_a_minute_prints_its_row() -> None:
    app = typer.Typer()
    app.command()(bench)
    result = CliRunner().invoke(
        app, ["--soak", "0.1", "--soak-share", "0.2", "--count", "100", "--warmup", "20"]
    )
    assert result.exit_code == 0, result.output
    assert "0.20 × the max of" in result.output
    rows = [line for line in result.output.splitlines() if re.match(r"│ 1 \(\d", line)]
    assert len(rows) == 1, result.output
    assert re.search(r"^│[^│]+│\s+[1-9][\d.]*\s+│", rows[0]), rows[0]  # its throughput


def test_executions_are_reported_as_a_hook_reports_them() -> None:
    """--executions: every release is reported as executed, and the service records each
    report as the release's owner's (none refused, none unreleased)."""
    app = typer.Typer()
    app.command()(bench)
    result = CliRunner().invoke(
        app, ["--json", "--executions", "--keep", "--soak", "0.1", "--rate", "50",
              "--warmup", "20", "--count", "100"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout[result.stdout.index("{") :])
    kept = Path(report["kept"])
    try:
        assert report["config"]["executions"] is True
        sent = report["executions"]["reports_sent"]
        assert report["executions"]["errors"] == 0
        assert sent > 0
        with contextlib.closing(sqlite3.connect(kept / "service" / "headgate.db")) as db:
            kinds = dict(db.execute("SELECT kind, count(*) FROM audit GROUP BY kind").fetchall())
            (rows,) = db.execute("SELECT count(*) FROM executions").fetchone()
        released = kinds["released"]
        assert 0 < rows <= sent <= released
        assert kinds.get("executed") == rows
        assert not {"executed.refused", "executed.unreleased", "executed.repeated"} & set(kinds)
    finally:
        shutil.rmtree(kept, ignore_errors=True)


def test_sigterm_stops_what_the_bench_started(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "workflow", "bench", "--soak", "5", "--count", "100"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    pids: list[int] = []
    for line in proc.stderr:
        found = re.search(r"service pid (\d+) .*relay pid (\d+)", line)
        if found:
            pids = [int(found.group(1)), int(found.group(2))]
            break
    assert pids, "the bench never started its service"
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    for pid in pids:
        for _ in range(100):
            if not _alive(pid):
                break
            time.sleep(0.1)
        assert not _alive(pid), f"process {pid} outlived the bench"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A child that exited but was not reaped yet by its (gone) parent counts as stopped.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    return False
