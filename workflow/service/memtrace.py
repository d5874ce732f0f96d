"""What grows in the service's memory: a diagnostic, off unless `HEADGATE_TRACEMALLOC` is set.

`HEADGATE_TRACEMALLOC=SECONDS` starts `tracemalloc` when the service starts and, every SECONDS,
compares a snapshot of the Python heap with the one taken at the first tick, writing the
biggest differences (by the line that allocated them) to `tracemalloc.log` in the data dir,
with the traced total and the process's RSS. What the C libraries allocate (SQLite's page
cache, OpenSSL, the allocator's own free lists) is not traced: RSS growing while the traced
total stays flat points there. Tracing costs the service a good part of its throughput: use it
to find a leak, not to measure speed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import tracemalloc
from pathlib import Path

log = logging.getLogger("headgate.memtrace")

ENV = "HEADGATE_TRACEMALLOC"
#: Frames kept per allocation (more cost more, fewer group unrelated allocations together).
FRAMES = 8
TOP = 25


def interval_from_env() -> float | None:
    """The seconds between snapshots `HEADGATE_TRACEMALLOC` asks for; None when it is unset.
    A value that is not a positive number is said and ignored (a diagnostic never stops the
    service)."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if seconds <= 0:
        log.warning("%s=%r is not a number of seconds; memory tracing stays off", ENV, raw)
        return None
    return seconds


def _rss_mb() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


async def trace(data_dir: Path, interval: float, stopping: asyncio.Event) -> None:
    """Snapshot every `interval` seconds until `stopping` is set; the first is the baseline."""
    tracemalloc.start(FRAMES)
    out = data_dir / "tracemalloc.log"
    baseline: tracemalloc.Snapshot | None = None
    start = time.monotonic()
    log.info("memory tracing every %g s to %s", interval, out)
    while not stopping.is_set():
        try:
            await asyncio.wait_for(stopping.wait(), interval)
            break
        except TimeoutError:
            pass
        snap = await asyncio.to_thread(_snapshot)
        traced, peak = tracemalloc.get_traced_memory()
        head = (
            f"--- {time.monotonic() - start:.0f} s: traced {traced / 2**20:.1f} MB "
            f"(peak {peak / 2**20:.1f}), RSS {_rss_mb()} MB\n"
        )
        if baseline is None:
            baseline = snap
            text = head + "baseline\n"
        else:
            diff = snap.compare_to(baseline, "traceback")
            lines = [head]
            for stat in diff[:TOP]:
                lines.append(
                    f"{stat.size_diff / 1024:+10.1f} KiB {stat.count_diff:+8d} blocks "
                    f"(now {stat.size / 1024:.1f} KiB)\n"
                )
                # File and line only: reading the source (`format()`) fills linecache, which
                # then shows up as growth of its own.
                lines.extend(f"      {f.filename}:{f.lineno}\n" for f in stat.traceback)
            text = "".join(lines)
        await asyncio.to_thread(_append, out, text)
    tracemalloc.stop()


def _snapshot() -> tracemalloc.Snapshot:
    return tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)]
    )


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)
