"""Metrics, health and readiness over HTTP, from a service on a real nats-server."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.service.helpers import decision, propose, running_service, send_decision, wait_until
from workflow.service.embedded import EmbeddedNats


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def test_metrics_count_proposals_decisions_and_outcomes(
    nats_url: str, tmp_path: Path
) -> None:
    async with running_service(nats_url, tmp_path, metrics_port=0) as h:
        assert h.service.health is not None
        port = h.service.health.port
        read = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        write = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "a"})
        await h.observer.wait_for("released", read)
        (item,) = await h.observer.wait_for("inbox", write)
        await send_decision(
            h.nc, h.subjects, decision(h.key, item["request_id"], item["proposal_digest"])
        )
        await h.observer.wait_for("released", write)

        async def scrape() -> str:
            return (await asyncio.to_thread(get, port, "/metrics"))[1]

        text = await wait_until(
            scrape, lambda t: 'headgate_outcomes_total{outcome="released"} 2.0' in t
        )
        assert 'headgate_proposals_total{decision="allow",risk_class="read"} 1.0' in text
        assert 'headgate_decisions_accepted_total{verdict="approve"} 1.0' in text
        assert "headgate_time_to_approval_seconds_count 1.0" in text
        assert 'headgate_stage_batch_seconds_count{stage="intake"}' in text
        assert 'headgate_stage_message_age_seconds_count{stage="intake"}' in text


async def test_readyz_reports_each_dependency_and_healthz_answers(
    fresh_nats: EmbeddedNats, tmp_path: Path
) -> None:
    async with running_service(fresh_nats.url, tmp_path, metrics_port=0) as h:
        assert h.service.health is not None
        port = h.service.health.port
        status, body = await asyncio.to_thread(get, port, "/readyz")
        assert status == 200
        assert json.loads(body) == {
            "service": "ok",
            "nats": "ok",
            "database": "ok",
            "streams": "ok",
            "api": "ok",
            "stages": "ok",
        }
        assert await asyncio.to_thread(get, port, "/healthz") == (200, "ok\n")
        fresh_nats.kill()
        status, body = await wait_until(
            lambda: asyncio.to_thread(get, port, "/readyz"), lambda r: r[0] == 503
        )
        assert json.loads(body)["nats"] == "disconnected"
        assert (await asyncio.to_thread(get, port, "/nope"))[0] == 404


async def test_the_trace_context_of_a_proposal_reaches_its_release(
    nats_url: str, tmp_path: Path
) -> None:
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    async with running_service(nats_url, tmp_path) as h:
        got: asyncio.Queue[tuple[str, dict[str, str]]] = asyncio.Queue()

        async def on(msg: Any) -> None:
            await got.put((msg.subject, dict(msg.headers or {})))

        await h.nc.subscribe(h.subjects.released("agent-1"), cb=on)
        await h.nc.subscribe(h.subjects.held("agent-1"), cb=on)
        body = {"id": "traced-1", "agent": "agent-1", "tool": "write_file",
                "arguments": {"path": "a"}}  # fmt: skip
        await h.nc.jetstream().publish(
            h.subjects.proposals("agent-1"), json.dumps(body).encode(),
            headers={"Nats-Msg-Id": "traced-1", "traceparent": traceparent},
        )  # fmt: skip
        subject, headers = await asyncio.wait_for(got.get(), 5)
        assert subject == h.subjects.held("agent-1")
        # Same trace (without OpenTelemetry installed the context passes through unchanged).
        assert headers["traceparent"].split("-")[1] == traceparent.split("-")[1]
        (item,) = await h.observer.wait_for("inbox", "traced-1")
        await send_decision(
            h.nc, h.subjects, decision(h.key, item["request_id"], item["proposal_digest"])
        )
        subject, headers = await asyncio.wait_for(got.get(), 5)
        assert subject == h.subjects.released("agent-1")
        assert headers["traceparent"].split("-")[1] == traceparent.split("-")[1]
