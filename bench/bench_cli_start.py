"""Cold start of the `headgate` command: wall time and CPU time of a fresh interpreter.

Run `python bench/bench_cli_start.py [ROUNDS]`. Each command runs ROUNDS times (default 9) in
a new process; the medians are printed next to two baselines measured in the same run: an
empty interpreter (`python -c pass`) and the command-line libraries alone (`import typer,
rich.console`), which every command pays for. The client-side commands are run against an
unreachable NATS URL (`nats://127.0.0.1:1`), so they do everything up to connecting: in a
directory of their own, with an empty data dir and an approver key, so that `approve` and
`reject` get that far too.

The commands run as installed: with the bytecode of the package compiled once beforehand (in a
cache of this run's own, whatever PYTHONDONTWRITEBYTECODE says), not compiled again in every
process.

CPU time (user + system of the child) is less sensitive than wall time to other work on the
machine; on a busy machine both grow, so compare the ratios to the baselines (the last column:
CPU time over that of `import typer, rich.console`).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from workflow.signing import ApproverKey

ROOT = Path(__file__).resolve().parents[1]
UNREACHABLE = ("--nats-url", "nats://127.0.0.1:1")


def _cli(*argv: str) -> str:
    return (
        f"import sys; sys.argv = ['headgate', *{list(argv)!r}]\n"
        "from workflow.cli import main\nmain()"
    )


LIBS = "import typer, rich.console"
COMMANDS = {
    "python -c pass": "pass",
    LIBS: LIBS,
    "headgate --help": _cli("--help"),
    "headgate propose --help": _cli("propose", "--help"),
    "headgate propose": _cli("propose", "--agent", "a", "--tool", "t", *UNREACHABLE),
    "headgate pending": _cli("pending", *UNREACHABLE),
    "headgate approve": _cli("approve", "rq_x", "--key", "approver.seed", *UNREACHABLE),
    "headgate reject": _cli(
        "reject", "rq_x", "--reason", "no", "--key", "approver.seed", *UNREACHABLE
    ),
    "headgate show": _cli("show", "rq_x", *UNREACHABLE),
    "headgate inbox": _cli("inbox", *UNREACHABLE),
}


def measure(code: str, rounds: int, env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Median wall and CPU milliseconds of `python -c code`."""
    walls, cpus = [], []
    for _ in range(rounds):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", code],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            check=False,
        )
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls) * 1000, statistics.median(cpus) * 1000


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    with tempfile.TemporaryDirectory(prefix="hg-cli-start-") as tmp:
        here = Path(tmp)
        (here / "data").mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEADGATE_")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env |= {
            "PYTHONPATH": str(ROOT),
            "PYTHONPYCACHEPREFIX": str(here / "pycache"),
            "HEADGATE_DATA_DIR": str(here / "data"),
        }
        ApproverKey.generate().write(here / "approver.seed")
        subprocess.run(  # the bytecode an installed package has
            [sys.executable, "-m", "compileall", "-q", str(ROOT / "workflow")],
            env=env,
            check=True,
        )
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs, {rounds} rounds")
        print(f"{'command':28} {'wall ms':>8} {'CPU ms':>8} {'CPU - libs':>11} {'/ libs':>7}")
        libs = 0.0
        for label, code in COMMANDS.items():
            wall, cpu = measure(code, rounds, env, here)
            if label == LIBS:
                libs = cpu
            extra = f"{cpu - libs:11.0f} {cpu / libs:7.2f}" if label.startswith("headgate") else ""
            print(f"{label:28} {wall:8.0f} {cpu:8.0f} {extra}")


if __name__ == "__main__":
    main()
