"""Prometheus metrics and the /metrics, /healthz, /readyz endpoints.

The HTTP side is a few lines on `asyncio.start_server` rather than a web framework: three GET
routes, no request bodies, and it shares the service's event loop (a readiness check can look at
the live NATS connection and database without threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Awaitable, Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from workflow.errors import ConfigError

log = logging.getLogger("headgate.metrics")

_LATENCY = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
#: A message's wait before its stage: as batch latency, and the redelivery delays above it.
_AGE = (*_LATENCY, 30, 60, 300)
_APPROVAL = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 86400)


class Metrics:
    """Every metric the service exports, on its own registry (several services per process in
    tests must not collide)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.proposals = Counter(
            "headgate_proposals",
            "Proposals classified, by risk class and policy decision.",
            ["risk_class", "decision"],
            registry=r,
        )
        self.duplicates = Counter(
            "headgate_proposal_duplicates", "Proposals seen again (redelivery or republish).",
            registry=r,
        )  # fmt: skip
        self.stage_seconds = Histogram(
            "headgate_stage_batch_seconds",
            "Time to process one fetched batch (commit, publish, ack), by stage.",
            ["stage"],
            buckets=_LATENCY,
            registry=r,
        )
        self.message_age = Histogram(
            "headgate_stage_message_age_seconds",
            "How long a batch's first message had been in JetStream when its stage took the "
            "batch (the queueing before the stage; a redelivered message's includes the "
            "redelivery delay), by stage.",
            ["stage"],
            buckets=_AGE,
            registry=r,
        )
        self.batch_size = Histogram(
            "headgate_stage_batch_size",
            "Messages per fetched batch, by stage.",
            ["stage"],
            buckets=(1, 2, 5, 10, 25, 50, 100, 256, 512),
            registry=r,
        )
        self.pending = Gauge(
            "headgate_pending_requests", "Approval requests waiting for decisions.", registry=r
        )
        self.time_to_approval = Histogram(
            "headgate_time_to_approval_seconds",
            "From hold to release by approval.",
            buckets=_APPROVAL,
            registry=r,
        )
        self.time_to_decision = Histogram(
            "headgate_time_to_decision_seconds",
            "From hold to an accepted decision, by the channel it came through "
            "(passkey: the web inbox; key: an nkeys-signed decision from the CLI or an SDK).",
            ["channel"],
            buckets=_APPROVAL,
            registry=r,
        )
        self.escalations = Counter(
            "headgate_escalation_steps", "Escalation steps taken, by action.", ["action"],
            registry=r,
        )  # fmt: skip
        self.outcomes = Counter(
            "headgate_outcomes", "Terminal outcomes, by outcome.", ["outcome"], registry=r
        )
        self.expired = Counter(
            "headgate_requests_expired", "Requests closed because no one answered.", registry=r
        )
        self.decisions = Counter(
            "headgate_decisions_accepted", "Accepted decisions, by verdict.", ["verdict"],
            registry=r,
        )  # fmt: skip
        self.refused = Counter(
            "headgate_decisions_refused",
            "Refused decisions, by reason (bad_signature, replay, no_role, …).",
            ["reason"],
            registry=r,
        )
        self.dead_letters = Counter(
            "headgate_dead_letters", "Messages sent to the dead-letter subject, by stage.",
            ["stage"], registry=r,
        )  # fmt: skip
        self.stage_errors = Counter(
            "headgate_stage_errors",
            "Failures a stage survived, by stage and kind (handler: a batch raised; ack, nak: "
            "settling a message failed; dead_letter: publishing a dead letter failed).",
            ["stage", "kind"],
            registry=r,
        )
        self.stage_restarts = Counter(
            "headgate_stage_restarts",
            "Stages and periodic tasks restarted after they stopped, by name.",
            ["stage"],
            registry=r,
        )
        self.redeliveries = Counter(
            "headgate_redeliveries",
            "Messages delivered more than once (a failure or crash before the ack), by stage.",
            ["stage"],
            registry=r,
        )
        self.hook_answers = Counter(
            "headgate_http_hook_answers",
            "HTTP hook requests answered (`serve --hook-listen`), by client and answer: allow, "
            "deny, defer, none (an after or session event), refused (a wrong bearer token).",
            ["client", "answer"],
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


Probe = Callable[[], Awaitable[tuple[bool, dict[str, str]]]]


class HealthServer:
    """GET /metrics, /healthz (the process serves), /readyz (NATS, database and streams)."""

    def __init__(
        self, metrics: Metrics | None, ready: Probe, host: str = "127.0.0.1", port: int = 0
    ):
        #: None until the service has its metrics: /metrics answers 503 meanwhile.
        self.metrics = metrics
        self.ready = ready
        self.host, self.port = host, port
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        """Listen; a `ConfigError` naming the address when it cannot (taken, not local)."""
        try:
            self._server = await asyncio.start_server(self._handle, self.host, self.port)
        except OSError as exc:
            why = os.strerror(exc.errno) if exc.errno else str(exc)
            raise ConfigError(
                f"cannot serve metrics on {self.host}:{self.port}: {why}; pass another "
                "--metrics-port (0 picks a free one) or --metrics-host"
            ) from None
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics and health on http://%s:%d (/metrics /healthz /readyz)",
                 self.host, self.port)  # fmt: skip
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            method, path, *_ = request.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            path = path.split("?", 1)[0]
            if method != "GET":
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET only\n"
            elif path == "/metrics" and self.metrics is None:
                status, ctype, body = "503 Service Unavailable", "text/plain", b"starting\n"
            elif path == "/metrics" and self.metrics is not None:
                status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, self.metrics.render()
            elif path == "/healthz":
                status, ctype, body = "200 OK", "text/plain", b"ok\n"
            elif path == "/readyz":
                ok, checks = await self.ready()
                status = "200 OK" if ok else "503 Service Unavailable"
                ctype, body = "application/json", json.dumps(checks).encode() + b"\n"
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"not found\n"
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
