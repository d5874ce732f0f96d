"""The memory trace a soak turns on with `HEADGATE_TRACEMALLOC`: off unless asked, a bad value
said and ignored, and when on, a baseline then the differences against it in the data dir."""

from __future__ import annotations

import asyncio
import logging
import tracemalloc
from pathlib import Path

import pytest

from workflow.service import memtrace


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("60", memtrace.TraceSpec(60.0, python=True)),
        ("0.5", memtrace.TraceSpec(0.5, python=True)),
        ("60,c", memtrace.TraceSpec(60.0, python=False)),
        ("60,dump", memtrace.TraceSpec(60.0, python=True, dump=True)),
        ("60,x", None),
        ("0", None),
        ("-3", None),
        ("x", None),
    ],
)
def test_the_interval_is_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: memtrace.TraceSpec | None
) -> None:
    if value is None:
        monkeypatch.delenv(memtrace.ENV, raising=False)
    else:
        monkeypatch.setenv(memtrace.ENV, value)
    assert memtrace.spec_from_env() == expected


def test_a_value_that_is_not_seconds_is_said(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(memtrace.ENV, "often")
    with caplog.at_level(logging.WARNING, "headgate.memtrace"):
        assert memtrace.spec_from_env() is None
    assert "'often' is not SECONDS, SECONDS,c or SECONDS,dump" in caplog.text


async def test_the_trace_writes_a_baseline_then_what_grew_since(tmp_path: Path) -> None:
    stopping = asyncio.Event()
    kept: list[bytes] = []
    task = asyncio.create_task(memtrace.trace(tmp_path, memtrace.TraceSpec(0.01, True), stopping))
    log = tmp_path / "tracemalloc.log"
    while log.read_text().count("---") < 3 if log.exists() else True:
        kept.append(b"x" * 100_000)  # something that grows between snapshots
        await asyncio.sleep(0.01)
    stopping.set()
    await task
    text = log.read_text()
    assert text.index("baseline") < text.index("KiB")
    assert "test_memtrace.py" in text  # the growing line is named
    assert "RSS" in text


async def test_the_c_side_figures_alone_cost_no_tracing(tmp_path: Path) -> None:
    stopping = asyncio.Event()
    task = asyncio.create_task(memtrace.trace(tmp_path, memtrace.TraceSpec(0.01, False), stopping))
    log = tmp_path / "tracemalloc.log"
    while not log.exists() or log.read_text().count("---") < 2:
        await asyncio.sleep(0.01)
    stopping.set()
    await task
    assert not tracemalloc.is_tracing()
    assert "malloc in use" in log.read_text()  # glibc, as on the machines this runs on


async def test_dump_keeps_every_snapshot_for_any_two_to_be_compared(tmp_path: Path) -> None:
    stopping = asyncio.Event()
    spec = memtrace.TraceSpec(0.01, python=True, dump=True)
    task = asyncio.create_task(memtrace.trace(tmp_path, spec, stopping))
    while len(list(tmp_path.glob("tracemalloc-*.snap"))) < 3:
        await asyncio.sleep(0.01)
    stopping.set()
    await task
    first, *_, last = sorted(
        tmp_path.glob("tracemalloc-*.snap"),
    )
    diff = tracemalloc.Snapshot.load(str(last)).compare_to(
        tracemalloc.Snapshot.load(str(first)), "lineno"
    )
    assert diff is not None
