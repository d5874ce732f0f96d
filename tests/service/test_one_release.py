"""One `released` event on the wire per proposal, ever: a core NATS subscriber of
`<prefix>.released.<agent>` (how the README's agent listens) counts every event the service
sends, and a duplicate that JetStream drops still reaches it. A proposal published again, a
signed decision replayed from `api.get`, a redelivered replay, and a duplicate arriving after
the streams' duplicate window all leave the count at one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from nats.aio.msg import Msg

from tests.service.helpers import (
    FakeClock,
    Harness,
    decision,
    propose,
    running_service,
    send_decision,
    wait_until,
)
from workflow.service import collector, intake, publishing, streams


@asynccontextmanager
async def counting(h: Harness, agent: str = "agent-1") -> AsyncIterator[dict[str, int]]:
    """Counts the `released` events per proposal that a core subscriber receives."""
    seen: dict[str, int] = {}

    async def on(msg: Msg) -> None:
        pid = json.loads(msg.data)["proposal_id"]
        seen[pid] = seen.get(pid, 0) + 1

    sub = await h.nc.subscribe(h.subjects.released(agent), cb=on)
    await h.nc.flush()
    try:
        yield seen
    finally:
        await sub.unsubscribe()


async def settled(h: Harness) -> None:
    """Wait until everything published before now went through the intake: a later read is
    released (the intake takes proposals in order)."""
    marker = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "marker"})
    await h.observer.wait_for("released", marker)


def _raw_proposal(pid: str, path: str = "a") -> bytes:
    body = {"id": pid, "agent": "agent-1", "tool": "read_file", "arguments": {"path": path}}
    return json.dumps(body).encode()


async def test_a_proposal_published_again_without_a_msg_id_is_released_once_on_the_wire(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    async with running_service(nats_url, tmp_path, database_url=database_url) as h:
        async with counting(h) as seen:
            pid = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
            await h.observer.wait_for("released", pid)
            js = h.nc.jetstream()
            for _ in range(3):
                await js.publish(h.subjects.proposals("agent-1"), _raw_proposal(pid))
            await settled(h)
            await drained(h, seen)
            assert seen[pid] == 1
        assert len(await h.stream_events(h.subjects.released("agent-1"), pid)) == 1
        assert (await h.service_history(pid))["status"] == "released"


async def test_a_held_proposal_published_again_is_not_offered_again(
    nats_url: str, tmp_path: Path
) -> None:
    """The inbox item and the `held` event are events too: a copy of the proposal sends
    neither again."""
    async with running_service(nats_url, tmp_path) as h:
        pid = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "a.txt"})
        await h.observer.wait_for("inbox", pid)
        body = {"id": pid, "agent": "agent-1", "tool": "write_file", "arguments": {"path": "a.txt"}}
        await h.nc.jetstream().publish(h.subjects.proposals("agent-1"), json.dumps(body).encode())
        await settled(h)
        assert len(h.observer.of("inbox", pid)) == 1
        assert len(h.observer.of("held", pid)) == 1


async def test_a_duplicate_after_the_duplicate_window_is_not_stored_again(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the streams' duplicate window JetStream no longer drops a re-sent event: the
    results stream would store a second release."""
    monkeypatch.setattr(streams, "DUPLICATE_WINDOW", 0.5)
    async with running_service(nats_url, tmp_path) as h:
        async with counting(h) as seen:
            pid = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
            await h.observer.wait_for("released", pid)
            await asyncio.sleep(1.0)  # the server's duplicate window passes
            await h.nc.jetstream().publish(h.subjects.proposals("agent-1"), _raw_proposal(pid))
            await settled(h)
            await drained(h, seen)
            assert seen[pid] == 1
        assert len(await h.stream_events(h.subjects.released("agent-1"), pid)) == 1


def _replayed(history: dict[str, Any]) -> bytes:
    """A decision rebuilt from what `api.get` returns: the signed text and its signature."""
    (record,) = history["approvals"]
    body = json.loads(record["signed"])
    body["signature"] = record["signature"]
    return json.dumps(body).encode()


async def test_a_signed_decision_replayed_from_api_get_does_not_release_again(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    async with running_service(nats_url, tmp_path, database_url=database_url) as h:
        async with counting(h) as seen:
            pid = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "a.txt"})
            (item,) = await h.observer.wait_for("inbox", pid)
            await send_decision(
                h.nc, h.subjects, decision(h.key, item["request_id"], item["proposal_digest"])
            )
            await h.observer.wait_for("released", pid)
            replay = _replayed(await h.service_history(pid))
            js = h.nc.jetstream()
            for _ in range(3):
                await js.publish(h.subjects.decisions(item["request_id"]), replay)
            # The replays are refused (audited); a later decision shows they were processed.
            later = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "b"})
            (other,) = await h.observer.wait_for("inbox", later)
            await send_decision(
                h.nc, h.subjects, decision(h.key, other["request_id"], other["proposal_digest"])
            )
            await h.observer.wait_for("released", later)
            await drained(h, seen)
            assert seen[pid] == 1
        assert len(await h.stream_events(h.subjects.released("agent-1"), pid)) == 1


async def test_a_replayed_decision_that_is_redelivered_does_not_release_again(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay whose first delivery fails comes back as a redelivery. It is not the message
    the decision was recorded from (the stream sequence its row keeps), so it is refused as a
    replay: no second release."""
    async with running_service(nats_url, tmp_path, retry_base_delay=0.1) as h:
        assert h.service.ctx is not None
        ctx = h.service.ctx
        async with counting(h) as seen:
            pid = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "a.txt"})
            (item,) = await h.observer.wait_for("inbox", pid)
            await send_decision(
                h.nc, h.subjects, decision(h.key, item["request_id"], item["proposal_digest"])
            )
            await h.observer.wait_for("released", pid)
            await ctx.marker.flush()  # the release is confirmed and marked published
            real, real_batch = ctx.store.requests.load, ctx.store.decision_reads
            loads = 0

            async def failing_once(ident: str) -> Any:
                nonlocal loads
                loads += 1
                if loads == 1:
                    raise OSError("database is locked")
                return await real(ident)

            async def batch_failing_once(idents: list[str], nonces: list[str]) -> Any:
                nonlocal loads
                loads += 1
                if loads == 1:
                    raise OSError("database is locked")
                return await real_batch(idents, nonces)

            # The collector reads what a batch needs at once (`decision_reads`), a request
            # alone otherwise (`load`): the first read of either fails.
            monkeypatch.setattr(ctx.store.requests, "load", failing_once)
            monkeypatch.setattr(ctx.store, "decision_reads", batch_failing_once)
            replay = _replayed(await h.service_history(pid))
            await h.nc.jetstream().publish(h.subjects.decisions(item["request_id"]), replay)
            await wait_until(lambda: _collector_idle(h, loads), bool)
            assert loads == 2  # the replay failed once and was redelivered
            await drained(h, seen)
            assert seen[pid] == 1
            assert [r["refusal"] for r in await _refusals(h)] == ["replay"]


async def _refusals(h: Harness) -> list[dict[str, Any]]:
    assert h.service.ctx is not None
    rows = await h.service.ctx.store.audit.rows()
    return [json.loads(r.data) for r in rows if r.kind == "decision.refused"]


async def test_a_decision_whose_message_returns_as_a_first_delivery_is_not_a_replay(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decision is committed, its release is not confirmed (the outbox keeps it), and its
    message comes back with delivery count 1, as a nats-server killed right after handing it
    out can send it. The collector knows its own message by the stream sequence: it re-sends
    the unconfirmed release and refuses nothing."""
    async with running_service(nats_url, tmp_path, retry_base_delay=0.1) as h:
        async with counting(h) as seen:
            pid = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "a.txt"})
            (item,) = await h.observer.wait_for("inbox", pid)
            real_send = publishing.send_events
            sends = 0

            async def losing_the_first(*args: Any) -> Any:
                nonlocal sends
                sends += 1
                if sends == 1:  # committed; the publish is lost and the message not acked
                    raise ConnectionResetError("nats-server went away")
                return await real_send(*args)

            monkeypatch.setattr(collector, "send_events", losing_the_first)
            monkeypatch.setattr(collector, "attempts", lambda msg: 1)
            await send_decision(
                h.nc, h.subjects, decision(h.key, item["request_id"], item["proposal_digest"])
            )
            await h.observer.wait_for("released", pid, timeout=15)
            await drained(h, seen)
            assert seen[pid] == 1
            assert sends >= 2
            assert await _refusals(h) == []
            assert len((await h.service_history(pid))["approvals"]) == 1


async def _collector_idle(h: Harness, loads: int) -> bool:
    """The replay was redelivered (loaded a second time) and nothing is left to process."""
    if loads < 2:
        return False
    info = await h.nc.jetstream().consumer_info(h.subjects.stream("decisions"), "collector")
    return bool(info.num_pending == 0 and info.num_ack_pending == 0)


async def drained(h: Harness, seen: dict[str, int], agent: str = "agent-1") -> None:
    """Wait until the core subscriber has received everything the service published on the
    released subject so far: a message published after them arrives after them."""
    await h.nc.publish(h.subjects.released(agent), b'{"proposal_id": "sentinel"}')
    await wait_until(lambda: _value(seen.get("sentinel", 0)), bool)


async def _value(value: int) -> int:
    return value


@pytest.mark.parametrize("reached", [False, True], ids=["lost", "stored"])
async def test_a_redelivery_past_the_duplicate_window_sends_only_what_the_stream_lacks(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reached: bool
) -> None:
    """Committed, then the publish failed (or only its confirmation did), the outbox could not
    keep the events, and the redelivery comes after the duplicate window (the service was
    down for long): the stream is searched, a release it lacks is sent (nothing is lost), a
    release it holds is not sent again (no second one on the wire or in the stream)."""
    clock = FakeClock()
    async with running_service(nats_url, tmp_path, retry_base_delay=0.1, clock=clock) as h:
        assert h.service.ctx is not None
        store = h.service.ctx.store
        real_publish = publishing.publish_events
        publishes = 0

        async def failing_once(*args: Any) -> Any:
            nonlocal publishes
            publishes += 1
            if publishes == 1:
                if reached:
                    await real_publish(*args)  # stored; only the confirmation is "lost"
                clock.advance(streams.DUPLICATE_WINDOW + 60)  # the service was down
                raise TimeoutError("no PubAck")
            return await real_publish(*args)

        async def save_failing(*args: Any) -> None:
            raise OSError("disk I/O error")

        monkeypatch.setattr(intake, "publish_events", failing_once)
        monkeypatch.setattr(store.outbox, "save", save_failing)
        async with counting(h) as seen:
            pid = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
            await h.observer.wait_for("released", pid)
            await wait_until(lambda: _intake_idle(h), bool)
            await drained(h, seen)
            assert seen[pid] == 1
        assert len(await h.stream_events(h.subjects.released("agent-1"), pid)) == 1


async def _intake_idle(h: Harness) -> bool:
    info = await h.nc.jetstream().consumer_info(h.subjects.stream("proposals"), "intake")
    return bool(info.num_pending == 0 and info.num_ack_pending == 0)
