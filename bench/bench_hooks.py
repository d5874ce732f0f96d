"""What `headgate hook` adds to each tool call of a coding agent: an allowed read, end to end.

Run `python bench/bench_hooks.py [CALLS]` (default 40). It starts `headgate serve` in a temp
data dir (embedded nats-server with credentials, SQLite) and runs the hook as Claude Code does
— a new `headgate hook claude-code` process per call, the hook JSON on stdin — for a `Read` of
a project file, which the default policy allows at once. Each call is a new read (another file),
so every one is a full proposal → classification → release. Printed: p50 and p99 wall time
per call next to baselines measured in the same run: an empty interpreter (`python -c pass`),
the import of the hook's modules alone (its light path: `workflow.adapters.lite`), and, for
comparison, the import of the SDK path it replaced (`workflow.adapters.gate`, which
`headgate mcp-proxy` uses); plus the CPU time of each.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: What a hook process imports for a tool call (its parser, the light NATS client, the keys).
IMPORTS = "import workflow.launch, workflow.adapters.hook, workflow.adapters.lite"
#: What the SDK path imports (asyncio, nats-py, the pydantic wire models): the hook before.
SDK_IMPORTS = "import workflow.launch, workflow.adapters.hook, workflow.adapters.gate"


def headgate() -> str:
    found = shutil.which("headgate", path=str(Path(sys.executable).parent))
    return found or shutil.which("headgate") or "headgate"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def timed(argv: list[str], stdin: bytes = b"", *, quiet: bool = False) -> tuple[float, float, int]:
    """Wall ms, CPU ms (user + system of the child) and exit code of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, input=stdin, capture_output=True, check=False)
    wall = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    if proc.returncode not in (0,) and not quiet:
        sys.stderr.write(proc.stderr.decode(errors="replace"))
    return wall, cpu, proc.returncode


def read_event(n: int, cwd: Path) -> bytes:
    return json.dumps({
        "session_id": "bench-session", "transcript_path": "/dev/null", "cwd": str(cwd),
        "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": "Read",
        "tool_input": {"file_path": f"{cwd}/src/module_{n}.py"}, "tool_use_id": f"toolu_{n}",
    }).encode()  # fmt: skip


def start_serve(data: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [headgate(), "serve", "--data-dir", str(data)],
        stdout=subprocess.DEVNULL, stderr=(data.parent / "serve.log").open("wb"),
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (data / "nats.url").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"headgate serve did not start: see {data.parent / 'serve.log'}")
        time.sleep(0.1)
    return proc


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs, {calls} calls")
    with tempfile.TemporaryDirectory() as tmp:
        data, project = Path(tmp) / "data", Path(tmp) / "project"
        data.mkdir()
        project.mkdir()
        serve = start_serve(data)
        try:
            hook = [headgate(), "hook", "claude-code", "--data-dir", str(data), "--wait", "10"]
            warm, deadline = 0, time.monotonic() + 60
            while warm < 3:  # warm up: the service's API and first proposal, the OS caches
                if timed(hook, read_event(-1 - warm, project), quiet=True)[2] == 0:
                    warm += 1
                elif time.monotonic() > deadline:
                    raise SystemExit("the hook was never allowed: see the service's log")
                else:
                    time.sleep(0.2)
            base = [timed([sys.executable, "-c", "pass"]) for _ in range(calls)]
            imports = [timed([sys.executable, "-c", IMPORTS]) for _ in range(calls)]
            sdk = [timed([sys.executable, "-c", SDK_IMPORTS]) for _ in range(calls)]
            walls, cpus, failed = [], [], 0
            for n in range(calls):
                wall, cpu, code = timed(hook, read_event(n, project))
                walls.append(wall)
                cpus.append(cpu)
                failed += code != 0
        finally:
            os.killpg(serve.pid, signal.SIGTERM)
            serve.wait(30)
    baseline = statistics.median(w for w, _, _ in base)
    print(f"{'wall time per process':34} {'p50 ms':>8} {'p99 ms':>8} {'x python':>9} {'CPU ms':>7}")
    for label, runs in (
        ("python -c pass (baseline)", base),
        ("import the hook's modules (no I/O)", imports),
        ("import the SDK path's (no I/O)", sdk),
        ("headgate hook: an allowed read", list(zip(walls, cpus, [0] * len(walls), strict=True))),
    ):
        w = [r[0] for r in runs]
        p50 = statistics.median(w)
        cpu = statistics.median(r[1] for r in runs)
        print(f"{label:34} {p50:8.0f} {percentile(w, 0.99):8.0f} {p50 / baseline:9.1f} {cpu:7.0f}")
    print(f"{failed} of {calls} hook calls not allowed")


if __name__ == "__main__":
    main()
