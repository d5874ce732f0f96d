"""No message can end a stage, and readiness tells a stage that stopped or stalled.

Each case over a real nats-server: the failure happens, then a later message is still
processed. Before stages settled their messages this way, each of these ended a stage's pull
loop for good while the process stayed up and `/readyz` answered 200.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from nats.aio.msg import Msg

from tests.service.helpers import (
    Harness,
    decision,
    propose,
    running_service,
    send_decision,
    wait_until,
)
from tests.service.test_observability import get
from workflow.classify.engine import classify
from workflow.messages import Cancel
from workflow.service.collector import Collector
from workflow.service.intake import Intake
from workflow.service.publishing import DEAD_PAYLOAD_LIMIT, publish_events
from workflow.service.streams import ensure_consumer

#: Retry backoff for these tests: 0.05 s, 0.1 s, … instead of 1 s, 2 s, …
FAST_RETRY = 0.05


async def dead_letter(h: Harness, stage: str, timeout: float = 10.0) -> dict[str, Any]:
    """The one dead letter of `stage` (waits for it)."""
    found = await wait_until(
        lambda: asyncio.sleep(0, [e for e in h.observer.of("dead") if e.get("stage") == stage]),
        bool,
        timeout,
    )
    assert len(found) == 1
    return found[0]


def errors(h: Harness, stage: str, kind: str) -> float:
    assert h.service.ctx is not None
    value = h.service.ctx.metrics.stage_errors.labels(stage, kind)._value.get()
    return float(value)


async def read_released(h: Harness) -> None:
    """A read proposed now is released: the intake still runs."""
    pid = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "README.md"})
    await h.observer.wait_for("released", pid)


async def approval_released(h: Harness) -> None:
    """A write approved now is released: the collector still runs."""
    pid = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "x.txt"})
    (item,) = await h.observer.wait_for("inbox", pid)
    await send_decision(
        h.nc, h.subjects, decision(h.key, item["request_id"], item["proposal_digest"])
    )
    await h.observer.wait_for("released", pid)


async def test_a_handler_that_raises_naks_its_batch_and_the_stage_goes_on(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = Intake.__call__
    raised = 0

    async def raising_once(self: Intake, msgs: Sequence[Msg]) -> None:
        nonlocal raised
        if raised == 0:
            raised += 1
            raise RuntimeError("a bug in the handler")
        await real(self, msgs)

    monkeypatch.setattr(Intake, "__call__", raising_once)
    async with running_service(nats_url, tmp_path, retry_base_delay=FAST_RETRY) as h:
        first = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        await h.observer.wait_for("released", first)  # naked, redelivered, processed
        assert raised == 1
        await read_released(h)
        assert errors(h, "intake", "handler") == 1


async def test_an_ack_that_fails_does_not_end_the_stage(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_ack = Msg.ack
    failed = 0

    async def failing_once(self: Msg) -> None:
        nonlocal failed
        if failed == 0:
            failed += 1
            raise TimeoutError("the connection went away")
        await real_ack(self)

    monkeypatch.setattr(Msg, "ack", failing_once)
    async with running_service(nats_url, tmp_path) as h:
        await read_released(h)  # its ack fails after the release is published
        await wait_until(lambda: asyncio.sleep(0, errors(h, "intake", "ack")), lambda n: n == 1)
        assert failed == 1
        await read_released(h)
        await approval_released(h)


async def test_a_dead_letter_publish_that_times_out_is_retried_and_the_stage_goes_on(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    timeouts = 0

    async def timing_out_once(js: Any, events: Any, signer: Any) -> list[str]:
        nonlocal timeouts
        if timeouts == 0:
            timeouts += 1
            raise TimeoutError("nats: timeout")
        return await publish_events(js, events, signer)

    # The dead letter's publish (ServiceContext.dead) times out the first time.
    monkeypatch.setattr("workflow.service.context.publish_events", timing_out_once)
    async with running_service(nats_url, tmp_path, retry_base_delay=FAST_RETRY) as h:
        await h.nc.jetstream().publish(h.subjects.proposals("agent-1"), b"not json")
        letter = await dead_letter(h, "intake")
        assert letter["_subject"] == h.subjects.dead("intake")
        assert timeouts == 1
        assert errors(h, "intake", "dead_letter") == 1
        await read_released(h)


async def test_a_900_kb_malformed_cancel_on_an_agents_own_subject_kills_nothing(
    nats_url: str, tmp_path: Path
) -> None:
    async with running_service(nats_url, tmp_path) as h:
        body = b'{"proposal_id": "' + b'\\"' * 450_000 + b'"}'
        assert len(body) > 900_000
        await h.nc.jetstream().publish(h.subjects.cancel("agent-1"), body)
        letter = await dead_letter(h, "collector")
        assert letter["stage"] == "collector"
        assert letter["truncated"] is True
        assert letter["payload_size"] == len(body)
        assert letter["payload_sha256"] == hashlib.sha256(body).hexdigest()
        assert len(letter["payload"]) <= DEAD_PAYLOAD_LIMIT
        assert "invalid cancel" in letter["error"]
        await approval_released(h)
        # A valid cancel after it is processed too.
        pid = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "y.txt"})
        await h.observer.wait_for("inbox", pid)
        cancel = Cancel(proposal_id=pid, agent="agent-1", reason="not needed")
        await h.nc.jetstream().publish(
            h.subjects.cancel("agent-1"), cancel.model_dump_json().encode()
        )
        (blocked,) = await h.observer.wait_for("blocked", pid)
        assert blocked["outcome"] == "cancelled"


async def test_a_large_proposal_that_raises_in_classification_is_dead_lettered_and_no_more(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def exploding(proposal: Any, tables: Any) -> Any:
        if proposal.tool == "explode":
            raise RecursionError("maximum recursion depth exceeded")
        return classify(proposal, tables)

    monkeypatch.setattr("workflow.service.intake.classify", exploding)
    async with running_service(nats_url, tmp_path, retry_base_delay=FAST_RETRY) as h:
        big = {"data": "x" * 900_000}
        pid = await propose(h.nc, h.subjects, tool="explode", arguments=big)
        letter = await dead_letter(h, "intake", timeout=30)
        assert letter["truncated"] is True
        assert letter["deliveries"] == 5
        assert "RecursionError" in letter["error"]
        assert letter["payload_size"] > 900_000
        assert h.observer.of("released", pid) == []
        assert h.observer.of("blocked", pid) == []
        await read_released(h)


async def test_readyz_reports_a_stalled_stage_until_it_moves_again(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hanging_now, hang = asyncio.Event(), asyncio.Event()
    real = Collector.__call__

    async def hanging(self: Collector, msgs: Sequence[Msg]) -> None:
        hanging_now.set()
        await hang.wait()
        await real(self, msgs)

    monkeypatch.setattr(Collector, "__call__", hanging)
    async with running_service(nats_url, tmp_path, metrics_port=0) as h:
        try:
            await stall_and_recover(h, hanging_now, hang)
        finally:
            hang.set()  # a failed assertion must not leave the stage hanging at shutdown


async def stall_and_recover(h: Harness, hanging_now: asyncio.Event, hang: asyncio.Event) -> None:
    assert h.service.health is not None
    port = h.service.health.port
    ahead = 0.0  # the supervisor's clock runs this far ahead of the real one
    h.service.supervisor.clock = lambda: time.monotonic() + ahead
    pid = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "x.txt"})
    (item,) = await h.observer.wait_for("inbox", pid)
    approval = decision(h.key, item["request_id"], item["proposal_digest"])
    await send_decision(h.nc, h.subjects, approval)
    await asyncio.wait_for(hanging_now.wait(), 10)
    ahead = 3600.0  # an hour later, as far as the supervisor can tell
    # The other stage beats again within a second of the jump; the hanging collector cannot.
    only_the_collector = re.compile(r"collector stalled: no progress for 36\d\d s")
    status, _ = await wait_until(
        lambda: asyncio.to_thread(get, port, "/readyz"),
        lambda r: bool(only_the_collector.fullmatch(json.loads(r[1])["stages"])),
    )
    assert status == 503
    hang.set()
    await wait_until(lambda: asyncio.to_thread(get, port, "/readyz"), lambda r: r[0] == 200)
    await h.observer.wait_for("released", pid)


async def test_readyz_reports_a_stopped_stage_which_is_started_again(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    allowed = asyncio.Event()

    async def refusing_the_collector(js: Any, spec: Any, deadline: float = 60.0) -> None:
        if spec.durable == "collector" and not allowed.is_set():
            raise RuntimeError("consumer collector: insufficient resources")
        await ensure_consumer(js, spec, deadline)

    monkeypatch.setattr("workflow.service.stage.ensure_consumer", refusing_the_collector)
    async with running_service(nats_url, tmp_path, metrics_port=0) as h:
        assert h.service.health is not None
        port = h.service.health.port
        h.service.supervisor.backoff_base = h.service.supervisor.backoff_max = 0.2
        status, body = await wait_until(
            lambda: asyncio.to_thread(get, port, "/readyz"),
            lambda r: "collector stopped" in json.loads(r[1])["stages"],
        )
        assert status == 503
        assert "insufficient resources" in json.loads(body)["stages"]
        await read_released(h)  # the other stages run meanwhile
        allowed.set()
        await wait_until(lambda: asyncio.to_thread(get, port, "/readyz"), lambda r: r[0] == 200)
        await approval_released(h)
        assert h.service.supervisor.tasks["collector"].restarts >= 1


async def test_headgate_dead_lists_dead_letters_with_their_errors(
    nats_url: str, tmp_path: Path
) -> None:
    async with running_service(nats_url, tmp_path) as h:
        await h.nc.jetstream().publish(h.subjects.proposals("agent-1"), b'{"id": "p-bad"}')
        await dead_letter(h, "intake")
        await h.nc.jetstream().publish(h.subjects.executed("agent-1"), b"[]")
        await dead_letter(h, "auditor")

        def dead(*args: str) -> subprocess.CompletedProcess[str]:
            run = [sys.executable, "-m", "workflow", "dead", "--nats-url", nats_url,
                   "--prefix", h.subjects.prefix, *args]  # fmt: skip
            env = {**os.environ, "COLUMNS": "200"}  # a table row on one line
            return subprocess.run(run, capture_output=True, text=True, check=False, env=env)

        everything = dead("--json")
        assert everything.returncode == 0, everything.stderr
        letters = json.loads(everything.stdout)
        assert [letter["stage"] for letter in letters] == ["intake", "auditor"]
        assert "invalid proposal" in letters[0]["error"]
        assert "agent: Field required" in letters[0]["error"]
        intake_only = json.loads(dead("--stage", "intake", "--json").stdout)
        assert [letter["stage"] for letter in intake_only] == ["intake"]
        table = dead("--stage", "auditor")
        assert table.returncode == 0
        assert "invalid execution report" in table.stdout
        wrong = dead("--stage", "nowhere")
        assert wrong.returncode == 2
        assert "--stage must be one of" in wrong.stderr
