"""nats-server processes started from the configs in deploy/ (ports and store dirs rewritten)."""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workflow.service.embedded import find_nats_server

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
NATS_DIR = DEPLOY / "nats"
CLUSTER_NODES = [NATS_DIR / "cluster" / f"node-{i}.conf" for i in (1, 2, 3)]


# ---------------------------------------------------------------------- config rewriting
_ADDRESS = re.compile(r"\b(?:127\.0\.0\.1|0\.0\.0\.0|localhost):(\d{2,5})\b")
_STORE_DIR = re.compile(r"(?m)^(\s*store_dir:\s*).*$")


def free_ports(count: int) -> list[int]:
    """Ports the kernel just handed out; the sockets stay open until all are chosen."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_map(texts: list[str]) -> dict[int, int]:
    """One free port for every distinct port the configs name (so routes stay consistent)."""
    ports = sorted({int(m.group(1)) for text in texts for m in _ADDRESS.finditer(text)})
    return dict(zip(ports, free_ports(len(ports)), strict=True))


def rewrite_config(text: str, ports: Mapping[int, int], store_dir: Path) -> str:
    """The same config on loopback with ``ports`` swapped and JetStream under ``store_dir``."""
    text = _ADDRESS.sub(lambda m: f"127.0.0.1:{ports[int(m.group(1))]}", text)
    text, count = _STORE_DIR.subn(lambda m: f'{m.group(1)}"{store_dir}"', text)
    assert count == 1, "a Headgate nats config names exactly one JetStream store_dir"
    return text


def top_level_port(text: str, key: str) -> int:
    found = re.search(rf"(?m)^{key}:\s*\S+:(\d+)\s*$", text)
    assert found is not None, f"no top-level {key}: in config"
    return int(found.group(1))


# ---------------------------------------------------------------------- server processes
@dataclass
class NatsProcess:
    name: str
    config: Path
    client_port: int
    monitor_port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.client_port}"

    def start(self) -> None:
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [find_nats_server(), "-c", str(self.config)],
                cwd=self.config.parent,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def monitor(self, path: str) -> dict[str, Any]:
        url = f"http://127.0.0.1:{self.monitor_port}{path}"
        with urllib.request.urlopen(url, timeout=2) as response:
            data: dict[str, Any] = json.loads(response.read())
            return data

    def assert_running(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"{self.name} exited:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited after 5 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)


@dataclass
class Servers:
    """Every server a fixture started; the finaliser stops all of them, whatever happened."""

    started: list[NatsProcess] = field(default_factory=list)

    def start(self, server: NatsProcess) -> NatsProcess:
        self.started.append(server)
        server.start()
        return server

    def stop_all(self) -> None:
        for server in self.started:
            server.stop()


def wait_until(predicate: Any, what: str, servers: list[NatsProcess], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        for server in servers:
            server.assert_running()
        try:
            if predicate():
                return
        except (OSError, urllib.error.URLError, KeyError, ValueError) as exc:
            last = exc
        time.sleep(0.05)
    logs = "\n".join(f"--- {s.name}\n{s.log.read_text()[-1500:]}" for s in servers)
    raise AssertionError(f"timed out waiting for {what} (last error: {last!r})\n{logs}")


def stage_nats_dir(tmp: Path) -> Path:
    """A temp copy of deploy/nats (relative includes keep working)."""
    target = tmp / "nats"
    shutil.copytree(NATS_DIR, target)
    return target


def meta_group_formed(node: NatsProcess) -> bool:
    meta = node.monitor("/jsz").get("meta_cluster", {})
    return bool(meta.get("leader")) and meta.get("cluster_size") == 3


def start_cluster(tmp: Path, servers: Servers) -> list[NatsProcess]:
    """The 3-node cluster of deploy/nats/cluster on free loopback ports, formed."""
    staged = stage_nats_dir(tmp)
    originals = [path.read_text() for path in CLUSTER_NODES]
    ports = port_map(originals)
    nodes = []
    for i, original in enumerate(originals, start=1):
        config = staged / "cluster" / f"node-{i}.conf"
        text = rewrite_config(original, ports, tmp / f"store-{i}")
        config.write_text(text)
        nodes.append(
            NatsProcess(
                f"node-{i}",
                config,
                top_level_port(text, "listen"),
                top_level_port(text, "http"),
                tmp / f"node-{i}.log",
            )
        )
    for node in nodes:
        servers.start(node)
    wait_until(lambda: all(meta_group_formed(n) for n in nodes), "a meta leader of 3", nodes)
    return nodes
