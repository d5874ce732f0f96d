"""Layer 7 wired into the service: a configured model may raise a shell call, never lower it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.service.helpers import propose, running_service

SEEN: list[dict[str, Any]] = []


class _Model(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that calls every command destructive."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        SEEN.append(body)
        answer = {"risk": "destructive", "categories": ["destructive"],
                  "reason": "It wipes the working tree."}  # fmt: skip
        data = json.dumps({"choices": [{"message": {"content": json.dumps(answer)}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def model_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Model)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_configured_model_raises_a_shell_read_to_denied(
    nats_url: str, tmp_path: Path, model_url: str
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(
        f'[classifier.model_classifier]\nenabled = true\nbase_url = "{model_url}"\n'
        'model = "test"\ntimeout_seconds = 5\n'
    )
    async with running_service(nats_url, tmp_path, policy_path=policy) as h:
        shell = await propose(h.nc, h.subjects, tool="run_shell", arguments={"command": "ls -la"},
                              context={"cwd": "/work/repo", "shell": "bash"})  # fmt: skip
        (blocked,) = await h.observer.wait_for("blocked", shell)
        assert blocked["outcome"] == "denied"
        assert blocked["classification"]["risk_class"] == "destructive"
        assert any("wipes the working tree" in r["message"]
                   for r in blocked["classification"]["reasons"])  # fmt: skip
        # A non-shell call is not sent to the model at all.
        read = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        await h.observer.wait_for("released", read)
    assert len(SEEN) == 1
    sent = json.dumps(SEEN[0])
    assert "ls -la" in sent
    assert "/work/repo" in sent
