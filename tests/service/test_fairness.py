"""A flooding agent cannot push other agents' calls back by more than its backlog cap, nor
queue an approval behind its calls."""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.js.errors import APIError

from tests.service.helpers import (
    decision,
    propose,
    running_service,
    send_decision,
    unique_prefix,
    wait_until,
)
from workflow.store.priority import PriorityLock


async def test_a_flooding_agent_is_refused_past_its_backlog_while_others_get_through(
    nats_url: str, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    async with running_service(nats_url, tmp_path, prefix=prefix, per_agent_backlog=20):
        pass  # creates the streams with a cap of 20 queued proposals per agent
    # Nothing consumes now: the flood queues up to the cap, then JetStream refuses it.
    async with running_service(
        nats_url, tmp_path / "observer-only", prefix=prefix, per_agent_backlog=20
    ) as h:
        await h.service.stop()  # keep its connections for publishing, stop consuming
        flood = [
            await propose(
                h.nc, h.subjects, agent="flood", tool="read_file", arguments={"path": f"f{i}"}
            )
            for i in range(20)
        ]
        with pytest.raises(APIError, match="maximum messages per subject exceeded"):
            await propose(h.nc, h.subjects, agent="flood", tool="read_file")
        quiet = await propose(h.nc, h.subjects, agent="quiet", tool="read_file")
    async with running_service(nats_url, tmp_path, prefix=prefix, per_agent_backlog=20) as h:
        # The queued proposals may be released before the harness's observer subscribes: ask
        # the service for the outcome instead of waiting for the event.
        await wait_until(lambda: h.service_history(quiet), lambda r: r["status"] == "released")
        for pid in flood:
            assert (await h.service_history(pid))["status"] == "released"


async def test_a_decision_is_applied_before_an_intake_flood_queued_before_it(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    """The event loop's turn is taken; a flood of reads queues for it, then an approval: when
    the turn frees, the approval is committed before the flood's first batch (the audit chain
    records the order of commits), and every call still gets its outcome."""
    async with running_service(nats_url, tmp_path, database_url=database_url) as h:
        assert h.service.ctx is not None
        held = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "a.txt"})
        (item,) = await h.observer.wait_for("inbox", held)
        gate = h.service.ctx.turns
        await gate.acquire()
        try:
            flood = [
                await propose(h.nc, h.subjects, agent=f"reader-{i % 4}", tool="read_file",
                              arguments={"path": f"f{i}"})
                for i in range(300)
            ]  # fmt: skip
            await wait_until(lambda: _waiting(gate), lambda w: w[1] >= 1)
            await send_decision(
                h.nc, h.subjects, decision(h.key, item["request_id"], item["proposal_digest"])
            )
            await wait_until(lambda: _waiting(gate), lambda w: w[0] >= 1)
        finally:
            gate.release()
        await h.observer.wait_for("released", held)
        await h.observer.wait_for("released", count=301, timeout=30)
        rows = await h.service.ctx.store.audit.rows()
        accepted = next(r.seq for r in rows if r.kind == "decision.accepted")
        flooded = [r.seq for r in rows if r.proposal_id in set(flood)]
        assert len(flooded) >= 300
        assert accepted < min(flooded)


async def _waiting(gate: PriorityLock) -> tuple[int, int]:
    return gate.waiting
