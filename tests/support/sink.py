"""A real local HTTP endpoint that records what it receives and can be told to fail."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Sink:
    """`failures` requests are answered 503 before the sink starts answering 200."""

    failures: int = 0
    received: list[Received] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _arrived: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self._arrived = threading.Condition(self._lock)

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Sink:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with sink._lock:
                    failing = sink.failures > 0
                    if failing:
                        sink.failures -= 1
                    else:
                        sink.received.append(Received(self.path, dict(self.headers), body))
                    status = 503 if failing else 200
                    sink.answered.append(status)
                    sink._arrived.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def fail_next(self, count: int) -> None:
        with self._lock:
            self.failures = count

    def wait_for(self, count: int, timeout: float = 15.0) -> list[Received]:
        """Block until `count` requests were answered 200 (call it through asyncio.to_thread)."""
        with self._lock:
            if not self._arrived.wait_for(lambda: len(self.received) >= count, timeout):
                raise AssertionError(
                    f"the sink received {len(self.received)} of {count} requests in {timeout}s"
                )
            return list(self.received)
