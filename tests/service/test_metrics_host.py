"""Where the metrics listen: loopback unless told otherwise, and a taken port is one line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.service.helpers import running_service


async def test_metrics_listen_on_loopback_by_default(nats_url: str, tmp_path: Path) -> None:
    async with running_service(nats_url, tmp_path, metrics_port=0) as h:
        health = h.service.health
        assert health is not None
        assert health._server is not None
        hosts = {sock.getsockname()[0] for sock in health._server.sockets}
    assert hosts == {"127.0.0.1"}


async def test_metrics_host_can_be_chosen(nats_url: str, tmp_path: Path) -> None:
    async with running_service(nats_url, tmp_path, metrics_port=0, metrics_host="0.0.0.0") as h:
        health = h.service.health
        assert health is not None
        assert health._server is not None
        assert {s.getsockname()[0] for s in health._server.sockets} == {"0.0.0.0"}


def test_a_taken_metrics_port_is_a_one_line_error(tmp_path: Path, nats_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEADGATE_")}
        done = subprocess.run(
            [sys.executable, "-m", "workflow", "serve", "--nats-url", nats_url,
             "--metrics-port", str(port), "--prefix", "hgmetrics"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False, env=env,
        )  # fmt: skip
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if not line[:2].isdigit()]
    assert errors == [
        f"error: cannot serve metrics on 127.0.0.1:{port}: Address already in use; pass "
        "another --metrics-port (0 picks a free one) or --metrics-host"
    ], done.stderr
    assert "Traceback" not in done.stderr
