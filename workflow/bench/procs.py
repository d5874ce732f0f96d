"""The processes under test: launching them, waiting until they work, and what they cost.

CPU time and memory come from /proc (Linux); elsewhere they are reported as unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from workflow.errors import HeadgateError

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True, slots=True)
class Usage:
    """CPU seconds (user + system) and memory of one process at one moment."""

    cpu: float | None
    rss_mb: float | None
    peak_rss_mb: float | None


def usage_tree(pid: int) -> Usage:
    """`usage` of a process and its children together (the service with its intake workers):
    CPU seconds and RSS summed, peak RSS summed over the processes' own peaks."""
    total = usage(pid)
    for child in _children(pid):
        part = usage(child)
        total = Usage(_sum(total.cpu, part.cpu), _sum(total.rss_mb, part.rss_mb),
                      _sum(total.peak_rss_mb, part.peak_rss_mb))  # fmt: skip
    return total


def _sum(a: float | None, b: float | None) -> float | None:
    return a if b is None else b if a is None else a + b


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def usage(pid: int) -> Usage:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        cpu = (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime
        rss = peak = None
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
        return Usage(cpu, rss, peak)
    except (OSError, ValueError, IndexError):
        return Usage(None, None, None)


@dataclass
class Child:
    """A process under test, with its log file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def usage(self) -> Usage:
        """The process's usage, with its children's (the service's intake workers)."""
        return usage_tree(self.pid)

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise HeadgateError(
                f"the {self.name} process exited with code {self.process.returncode}: {tail}"
            )

    def stop(self, timeout: float = 15.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_service(
    url: str,
    data_dir: Path,
    prefix: str,
    *,
    database_url: str | None = None,
    policy: Path | None = None,
    intake_processes: int = 1,
) -> Child:
    """`headgate serve` against `url` on its own prefix, logging warnings to a file."""
    data_dir.mkdir(parents=True, exist_ok=True)
    log = data_dir / "service.log"
    args = [
        sys.executable, "-m", "workflow", "serve", "--nats-url", url, "--data-dir", str(data_dir),
        "--prefix", prefix, "--log-level", "warning",
    ]  # fmt: skip
    if database_url:
        args += ["--database-url", database_url]
    if policy is not None:
        args += ["--policy", str(policy)]
    if intake_processes > 1:
        args += ["--intake-processes", str(intake_processes)]
    with log.open("wb") as out:
        process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    return Child("service", process, log)


async def wait_service_ready(nc: NATS, child: Child, api_subject: str, timeout: float) -> None:
    """Until the service answers a query on its API (it has started its stages by then)."""
    deadline = time.monotonic() + timeout
    while True:
        child.check_alive()
        try:
            await nc.request(api_subject, b'{"limit": 1}', timeout=1.0)
            return
        except (NoRespondersError, NatsTimeoutError):
            pass
        if time.monotonic() > deadline:
            raise HeadgateError(f"the service did not answer within {timeout:.0f}s")
        await asyncio.sleep(0.1)


def start_relay(url: str, log_dir: Path, prefix: str, batch: int) -> Child:
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / "relay.log"
    args = [
        sys.executable, "-m", "workflow.bench.relay", "--url", url, "--prefix", prefix,
        "--batch", str(batch),
    ]  # fmt: skip
    with log.open("wb") as err:
        process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err
        )
    return Child("relay", process, log)


async def wait_relay_ready(child: Child, timeout: float) -> None:
    assert child.process.stdout is not None
    stdout = child.process.stdout
    try:
        line = await asyncio.wait_for(asyncio.to_thread(stdout.readline), timeout)
    except TimeoutError as exc:
        raise HeadgateError(f"the relay did not start within {timeout:.0f}s") from exc
    if line.strip() != b"ready":
        child.check_alive()
        raise HeadgateError(f"the relay said {line!r} instead of ready")


def stop_all(children: list[Child]) -> None:
    for child in children:
        with contextlib.suppress(Exception):
            child.stop()
