"""The whole path over a real nats-server: propose → classify → route → approve → release."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.service.helpers import (
    FakeClock,
    decision,
    propose,
    running_service,
    send_decision,
    unique_prefix,
    wait_until,
)
from workflow.messages import Executed
from workflow.service import intake, publishing
from workflow.service.background import republish_once


async def test_read_is_released_at_once(nats_url: str, tmp_path: Path, database_url: str) -> None:
    async with running_service(nats_url, tmp_path, database_url=database_url) as h:
        pid = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "README.md"})
        (released,) = await h.observer.wait_for("released", pid, timeout=2)
        assert released["tool"] == "read_file"
        assert released["classification"]["risk_class"] == "read"
        assert released["verdict"]["decision"] == "allow"


async def test_an_execution_report_must_name_a_release_of_its_proposal(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    """An execution report is recorded as `executed` only for the release of its own proposal;
    another proposal's release id, or one that was never issued, is `executed.unreleased`."""
    async with running_service(nats_url, tmp_path, database_url=database_url) as h:
        read = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        other = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "b"})
        (released,) = await h.observer.wait_for("released", read)
        await h.observer.wait_for("released", other)
        js = h.nc.jetstream()
        reports = [
            (read, released["release_id"]),  # the real one
            (other, released["release_id"]),  # another proposal's release
            (read, "rl_never_issued"),
        ]
        for pid, release_id in reports:
            report = Executed(
                release_id=release_id,
                proposal_id=pid,
                agent="agent-1",
                success=True,
                finished_at=datetime.now(UTC),
            )
            await js.publish(h.subjects.executed("agent-1"), report.model_dump_json().encode())
        kinds = await wait_until(
            h.audit_kinds, lambda k: k.count("executed") + k.count("executed.unreleased") == 3
        )
        assert kinds.count("executed") == 1
        assert kinds.count("executed.unreleased") == 2


async def test_write_file_is_held_then_released_once_after_approval(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    async with running_service(nats_url, tmp_path, database_url=database_url) as h:
        pid = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "a.txt"})
        (item,) = await h.observer.wait_for("inbox", pid)
        assert h.observer.of("released", pid) == []
        await send_decision(
            h.nc, h.subjects, decision(h.key, item["request_id"], item["proposal_digest"])
        )
        (released,) = await h.observer.wait_for("released", pid)
        assert len(released["approvals"]) == 1
        assert released["request_id"] == item["request_id"]


async def test_reject_blocks_the_call_as_rejected(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    async with running_service(nats_url, tmp_path, database_url=database_url) as h:
        pid = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "a.txt"})
        (item,) = await h.observer.wait_for("inbox", pid)
        d = decision(
            h.key, item["request_id"], item["proposal_digest"], "reject", reason="not this file"
        )
        await send_decision(h.nc, h.subjects, d)
        (blocked,) = await h.observer.wait_for("blocked", pid)
        assert blocked["outcome"] == "rejected"
        assert "not this file" in blocked["reason"]
        assert h.observer.of("released", pid) == []


async def test_destructive_call_is_denied_with_the_reason(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    async with running_service(nats_url, tmp_path, database_url=database_url) as h:
        pid = await propose(h.nc, h.subjects, tool="delete_file", arguments={"path": "a.txt"})
        (blocked,) = await h.observer.wait_for("blocked", pid)
        assert blocked["outcome"] == "denied"
        assert "destructive" in blocked["reason"]
        assert h.observer.of("inbox", pid) == []


async def test_held_request_expires_when_its_ttl_passes(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    clock = FakeClock()
    async with running_service(
        nats_url, tmp_path, database_url=database_url, sweep_interval=0.2, clock=clock
    ) as h:
        pid = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "a.txt"})
        await h.observer.wait_for("inbox", pid)
        clock.advance(3600)  # the default TTL
        (blocked,) = await h.observer.wait_for("blocked", pid, timeout=5)
        assert blocked["outcome"] == "expired"
        assert "expired" in blocked["reason"]


async def test_request_expires_even_when_the_service_was_down_at_expiry(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    prefix = unique_prefix()
    clock = FakeClock()
    async with running_service(
        nats_url, tmp_path, database_url=database_url, prefix=prefix, clock=clock
    ) as h:
        pid = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "a.txt"})
        await h.observer.wait_for("inbox", pid)
    clock.advance(3600)  # the TTL passes while nothing runs
    async with running_service(
        nats_url,
        tmp_path,
        database_url=database_url,
        prefix=prefix,
        sweep_interval=0.2,
        clock=clock,
    ) as h:
        history = await h.service_history(pid)
        if history["status"] != "expired":
            (blocked,) = await h.observer.wait_for("blocked", pid, timeout=5)
            assert blocked["outcome"] == "expired"
        assert (await h.service_history(pid))["status"] == "expired"


async def test_the_same_proposal_published_twice_has_one_outcome(
    nats_url: str, tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="headgate.intake")
    async with running_service(nats_url, tmp_path, database_url=database_url) as h:
        pid = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        await h.observer.wait_for("released", pid)
        # The server drops the second publish (same Nats-Msg-Id); a publish without the header
        # reaches the service, which recognises the proposal id and, since this is not the
        # message the proposal was recorded from, sends nothing again: a core subscriber
        # sees one `released` event.
        await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"}, pid=pid)
        await h.nc.jetstream().publish(
            h.subjects.proposals("agent-1"),
            json.dumps(
                {"id": pid, "agent": "agent-1", "tool": "read_file", "arguments": {"path": "a"}}
            ).encode(),
        )
        marker = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "b"})
        await h.observer.wait_for("released", marker)
        released = await h.stream_events(h.subjects.released("agent-1"), pid)
        assert len(released) == 1
        assert len(h.observer.of("released", pid)) == 1
        assert (await h.service_history(pid))["status"] == "released"
        # The copy is logged with its stream message and delivery (what a lost event's
        # inquiry starts from).
        copies = [m for r in caplog.records if "was recorded before" in (m := r.getMessage())]
        assert len(copies) == 1, copies
        assert f"{pid} was recorded before (stream message " in copies[0]
        assert copies[0].endswith(", delivery 1): another copy, nothing sent")


async def test_a_reused_id_with_different_content_is_dead_lettered(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    async with running_service(nats_url, tmp_path, database_url=database_url) as h:
        pid = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        await h.observer.wait_for("released", pid)
        await h.nc.jetstream().publish(
            h.subjects.proposals("agent-1"),
            json.dumps(
                {"id": pid, "agent": "agent-1", "tool": "write_file", "arguments": {"path": "a"}}
            ).encode(),
        )
        (dead,) = await h.observer.wait_for("dead")
        assert "already used for a different proposal" in dead["error"]
        assert h.observer.of("inbox", pid) == []


async def test_pending_requests_survive_a_restart_and_can_be_approved(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    prefix = unique_prefix()
    async with running_service(nats_url, tmp_path, database_url=database_url, prefix=prefix) as h:
        pid = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "a.txt"})
        (item,) = await h.observer.wait_for("inbox", pid)
    async with running_service(nats_url, tmp_path, database_url=database_url, prefix=prefix) as h:
        assert (await h.service_history(pid))["status"] == "pending"
        await send_decision(
            h.nc, h.subjects, decision(h.key, item["request_id"], item["proposal_digest"])
        )
        (released,) = await h.observer.wait_for("released", pid)
        assert released["proposal_id"] == pid


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b"{not json", "invalid proposal"),
        (b'{"id": "x1", "agent": "agent-1", "arguments": {}}', "tool: Field required"),
        (
            b'{"id": "x2", "agent": "agent-1", "tool": "read_file", "colour": 1}',
            "colour: Extra inputs are not permitted",
        ),
        (
            b'{"id": "x3", "agent": "someone-else", "tool": "read_file"}',
            "an agent may only propose as itself",
        ),
    ],
)
async def test_bad_proposals_go_to_the_dead_letter_subject_with_the_error(
    nats_url: str, tmp_path: Path, database_url: str, payload: bytes, error: str
) -> None:
    async with running_service(nats_url, tmp_path, database_url=database_url) as h:
        await h.nc.jetstream().publish(h.subjects.proposals("agent-1"), payload)
        (dead,) = await h.observer.wait_for("dead")
        assert error in dead["error"]
        assert dead["payload"] == payload.decode()
        # The service keeps running: a good proposal still goes through.
        pid = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        await h.observer.wait_for("released", pid)


async def test_a_decision_for_an_unknown_request_is_refused_and_recorded(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    async with running_service(nats_url, tmp_path, database_url=database_url) as h:
        d = decision(h.key, "rq_doesnotexist", "0" * 64)
        await send_decision(h.nc, h.subjects, d)
        pid = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        await h.observer.wait_for("released", pid)
        await wait_until(lambda: h.audit_kinds(), lambda kinds: "decision.refused" in kinds)
        rows = await h.service.ctx.store.audit.rows()  # type: ignore[union-attr]
        refused = [r for r in rows if r.kind == "decision.refused"]
        assert "There is no approval request rq_doesnotexist" in refused[0].data


async def test_a_message_is_not_acked_until_its_effects_are_committed(
    nats_url: str, tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_service(nats_url, tmp_path, database_url=database_url) as h:
        store = h.service.ctx.store  # type: ignore[union-attr]
        real = store.proposals.record
        calls = 0

        async def failing_once(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise OSError("database is locked")
            return await real(*args, **kwargs)

        monkeypatch.setattr(store.proposals, "record", failing_once)
        pid = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        # The first attempt fails before commit: no event, no ack; redelivery succeeds.
        (released,) = await h.observer.wait_for("released", pid, timeout=10)
        assert calls == 2
        assert released["proposal_id"] == pid


@pytest.mark.parametrize("returns_as", ["redelivery", "first delivery"])
async def test_events_lost_after_the_commit_are_rebuilt_from_the_row_when_the_message_returns(
    nats_url: str,
    tmp_path: Path,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    returns_as: str,
) -> None:
    """Committed, but neither published nor kept in the outbox (as after a crash): the
    proposal is not acked, and when its message comes back the events are rebuilt from the
    row and sent. Also when it comes back as a first delivery, as a nats-server killed right
    after handing it out can send it: the row keeps the message's stream sequence."""
    async with running_service(
        nats_url, tmp_path, database_url=database_url, retry_base_delay=0.1
    ) as h:
        store = h.service.ctx.store  # type: ignore[union-attr]
        real_publish = publishing.send_events
        real_save = store.outbox.save
        publishes = 0

        async def publish_failing_once(*args: Any) -> Any:
            nonlocal publishes
            publishes += 1
            if publishes == 1:
                raise TimeoutError("no PubAck")
            return await real_publish(*args)

        async def save_failing(*args: Any) -> None:
            raise OSError("disk I/O error")

        monkeypatch.setattr(intake, "send_events", publish_failing_once)
        monkeypatch.setattr(store.outbox, "save", save_failing)
        if returns_as == "first delivery":
            monkeypatch.setattr(intake, "attempts", lambda msg: 1)
        pid = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        (released,) = await h.observer.wait_for("released", pid, timeout=10)
        assert publishes == 2
        # the first delivery's moment, not the second's
        (row,) = await store.proposals.stored([pid])
        assert datetime.fromisoformat(released["released_at"]) == row.received_at
        assert row.stream_seq is not None
        assert len(await h.stream_events(h.subjects.released("agent-1"), pid)) == 1
        assert await store.outbox.events_for([pid]) == []
        monkeypatch.setattr(store.outbox, "save", real_save)


async def test_events_that_cannot_be_published_are_kept_in_the_outbox_and_republished(
    nats_url: str, tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_service(nats_url, tmp_path, database_url=database_url) as h:
        ctx = h.service.ctx
        assert ctx is not None
        real_publish = publishing.send_events

        async def publish_failing_once(*args: Any) -> Any:
            monkeypatch.setattr(intake, "send_events", real_publish)
            raise TimeoutError("no PubAck")

        monkeypatch.setattr(intake, "send_events", publish_failing_once)
        intakes = 0
        real_record = ctx.store.proposals.record

        async def counting(*args: Any) -> Any:
            nonlocal intakes
            intakes += 1
            return await real_record(*args)

        monkeypatch.setattr(ctx.store.proposals, "record", counting)
        pid = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        await wait_until(lambda: ctx.store.outbox.events_for([pid]), bool, timeout=5)
        assert [e.msg_id for e in await ctx.store.outbox.events_for([pid])] == [f"released:{pid}"]
        await asyncio.sleep(1.5)  # acked: no redelivery comes back through the intake
        assert intakes == 1
        assert h.observer.of("released", pid) == []
        assert await republish_once(ctx, grace=0) == 1
        (released,) = await h.observer.wait_for("released", pid, timeout=5)
        assert released["proposal_id"] == pid
        await wait_until(lambda: ctx.store.outbox.unpublished(ctx.now()), lambda left: left == [])
