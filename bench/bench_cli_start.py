"""Cold start of the `headgate` command: wall time and CPU time of a fresh interpreter.

Run `python bench/bench_cli_start.py [ROUNDS]`. Each command runs ROUNDS times (default 9) in
a new process; the medians are printed next to two baselines measured in the same run: an
empty interpreter (`python -c pass`) and the command-line libraries alone (`import typer,
rich.console`), which every command pays for. The client-side commands are run against an
unreachable NATS URL (`nats://127.0.0.1:1`), so they do everything up to connecting.

CPU time (user + system of the child) is less sensitive than wall time to other work on the
machine; on a busy machine both grow, so compare the ratios to the baselines.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNREACHABLE = "nats://127.0.0.1:1"


def _cli(*argv: str) -> str:
    return (
        f"import sys; sys.argv = ['headgate', *{list(argv)!r}]\n"
        "from workflow.cli import main\nmain()"
    )


COMMANDS = {
    "python -c pass": "pass",
    "import typer, rich.console": "import typer, rich.console",
    "headgate --help": _cli("--help"),
    "headgate propose --help": _cli("propose", "--help"),
    "headgate propose": _cli("propose", "--agent", "a", "--tool", "t", "--nats-url", UNREACHABLE),
    "headgate pending": _cli("pending", "--nats-url", UNREACHABLE),
    "headgate approve": _cli("approve", "x", "--nats-url", UNREACHABLE),
}


def measure(code: str, rounds: int) -> tuple[float, float]:
    """Median wall and CPU milliseconds of `python -c code`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    walls, cpus = [], []
    for _ in range(rounds):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", code],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            check=False,
        )
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls) * 1000, statistics.median(cpus) * 1000


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs, {rounds} rounds")
    print(f"{'command':28} {'wall ms':>8} {'CPU ms':>8} {'CPU - libs':>11}")
    libs = 0.0
    for label, code in COMMANDS.items():
        wall, cpu = measure(code, rounds)
        if label.startswith("import typer"):
            libs = cpu
        extra = f"{cpu - libs:11.0f}" if label.startswith("headgate") else ""
        print(f"{label:28} {wall:8.0f} {cpu:8.0f} {extra}")


if __name__ == "__main__":
    main()
