"""What grows in the service's memory: a diagnostic, off unless `HEADGATE_TRACEMALLOC` is set.

`HEADGATE_TRACEMALLOC=SECONDS` starts `tracemalloc` when the service starts and, every SECONDS,
compares a snapshot of the Python heap with the one taken at the first tick, writing the
biggest differences (by the lines that allocated them) to `tracemalloc.log` in the data dir.
Each entry starts with the figures of what `tracemalloc` does not see: the process's RSS, the
C allocator's bytes in use and free (glibc's `mallinfo2`: free bytes growing while the bytes in
use stay flat is fragmentation) and SQLite's own heap (its page caches and prepared
statements). Tracing the Python heap costs the service most of its throughput: to follow the
C-side figures alone at full speed, set `HEADGATE_TRACEMALLOC=SECONDS,c`; to keep every
snapshot as well (`tracemalloc-NNN-Ss.snap` in the data dir, the NNNth taken S seconds after
the start; compare any two with `tracemalloc.Snapshot.load`), `HEADGATE_TRACEMALLOC=SECONDS,dump`.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

from workflow.store.engine import sqlite_memory_used

log = logging.getLogger("headgate.memtrace")

ENV = "HEADGATE_TRACEMALLOC"
#: Frames kept per allocation (more cost more, fewer group unrelated allocations together).
FRAMES = 8
TOP = 25


@dataclass(frozen=True, slots=True)
class TraceSpec:
    seconds: float
    python: bool  # trace the Python heap too (else only the C-side figures)
    dump: bool = False  # keep every snapshot in a file of its own


def spec_from_env() -> TraceSpec | None:
    """What `HEADGATE_TRACEMALLOC` asks for (`SECONDS`, `SECONDS,c` or `SECONDS,dump`); None
    when it is unset.
    A value that is not that is said and ignored (a diagnostic never stops the service)."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    number, _, mode = raw.partition(",")
    try:
        seconds = float(number)
    except ValueError:
        seconds = 0.0
    mode = mode.strip()
    if seconds <= 0 or mode not in ("", "c", "dump"):
        log.warning(
            "%s=%r is not SECONDS, SECONDS,c or SECONDS,dump; memory tracing stays off", ENV, raw
        )
        return None
    return TraceSpec(seconds, python=mode != "c", dump=mode == "dump")


def _rss_mb() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


_MALLINFO2 = (
    "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
    "fordblks", "keepcost",
)  # fmt: skip


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2]


def _load(name: str) -> ctypes.CDLL | None:
    path = ctypes.util.find_library(name)
    try:
        return ctypes.CDLL(path) if path else None
    except OSError:
        return None


def c_side_figures() -> str:
    """RSS, glibc's bytes in use / free (`mallinfo2`, all arenas) and SQLite's heap, as far as
    this platform tells them."""
    parts = [f"RSS {_rss_mb()} MB"]
    libc = _load("c")
    mallinfo2 = getattr(libc, "mallinfo2", None)
    if mallinfo2 is not None:
        mallinfo2.restype = _MallInfo2
        info = mallinfo2()
        in_use = (info.uordblks + info.hblkhd) / 2**20
        parts.append(f"malloc in use {in_use:.1f} MB, free {info.fordblks / 2**20:.1f} MB")
    used = sqlite_memory_used()
    if used is not None:
        parts.append(f"SQLite heap {used / 2**20:.1f} MB")
    return ", ".join(parts)


async def trace(data_dir: Path, spec: TraceSpec, stopping: asyncio.Event) -> None:
    """Write an entry every `spec.seconds` until `stopping` is set; with `spec.python`, the
    first snapshot of the Python heap is the baseline the later ones are compared with."""
    if spec.python:
        tracemalloc.start(FRAMES)
    out = data_dir / "tracemalloc.log"
    baseline: tracemalloc.Snapshot | None = None
    dumped = 0
    start = time.monotonic()
    log.info("memory tracing every %g s to %s", spec.seconds, out)
    while not stopping.is_set():
        try:
            await asyncio.wait_for(stopping.wait(), spec.seconds)
            break
        except TimeoutError:
            pass
        head = f"--- {time.monotonic() - start:.0f} s: {c_side_figures()}"
        if not spec.python:
            await asyncio.to_thread(_append, out, head + "\n")
            continue
        snap = await asyncio.to_thread(_snapshot)
        if spec.dump:
            dumped += 1
            name = f"tracemalloc-{dumped:03d}-{time.monotonic() - start:.0f}s.snap"
            await asyncio.to_thread(snap.dump, str(data_dir / name))
        traced, peak = tracemalloc.get_traced_memory()
        head += f", Python heap traced {traced / 2**20:.1f} MB (peak {peak / 2**20:.1f})\n"
        if baseline is None:
            baseline = snap
            text = head + "baseline\n"
        else:
            lines = [head]
            for stat in snap.compare_to(baseline, "traceback")[:TOP]:
                lines.append(
                    f"{stat.size_diff / 1024:+10.1f} KiB {stat.count_diff:+8d} blocks "
                    f"(now {stat.size / 1024:.1f} KiB)\n"
                )
                # File and line only: reading the source (`format()`) fills linecache, which
                # then shows up as growth of its own.
                lines.extend(f"      {f.filename}:{f.lineno}\n" for f in stat.traceback)
            text = "".join(lines)
        await asyncio.to_thread(_append, out, text)
    if spec.python:
        tracemalloc.stop()


def _snapshot() -> tracemalloc.Snapshot:
    return tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)]
    )


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)
