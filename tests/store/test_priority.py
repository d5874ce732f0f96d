"""The writer's queue: approval steps are committed before the intake batches waiting with them."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.store.test_repo import record
from workflow.effects import AuditEntry, StepWrite
from workflow.outcomes import RequestState
from workflow.store.priority import PriorityLock
from workflow.store.repo import Store

NOW = datetime(2026, 12, 1, 4, 0, tzinfo=UTC)


async def _until(done: object) -> None:
    """Let the loop run until `done()` holds (the waiters have queued)."""
    assert callable(done)
    for _ in range(10_000):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError("the waiters never queued")


@given(st.lists(st.booleans(), min_size=1, max_size=12))
def test_urgent_waiters_are_served_first_then_the_others_in_arrival_order(
    arrivals: list[bool],
) -> None:
    async def run() -> list[int]:
        lock = PriorityLock()
        order: list[int] = []
        await lock.acquire()

        async def waiter(i: int, urgent: bool) -> None:
            async with lock.hold(urgent=urgent):
                order.append(i)

        tasks = []
        for i, urgent in enumerate(arrivals):
            tasks.append(asyncio.create_task(waiter(i, urgent)))
            await asyncio.sleep(0)  # queued in this order
        assert lock.waiting == (sum(arrivals), len(arrivals) - sum(arrivals))
        lock.release()
        await asyncio.gather(*tasks)
        assert not lock.locked()
        return order

    order = asyncio.run(run())
    urgent = [i for i, u in enumerate(arrivals) if u]
    normal = [i for i, u in enumerate(arrivals) if not u]
    assert order == urgent + normal


async def test_a_cancelled_waiter_leaves_the_lock_to_the_next() -> None:
    lock = PriorityLock()
    await lock.acquire()
    order: list[str] = []

    async def waiter(name: str, urgent: bool) -> None:
        async with lock.hold(urgent=urgent):
            order.append(name)

    gone = asyncio.create_task(waiter("cancelled", True))
    kept = asyncio.create_task(waiter("normal", False))
    await _until(lambda: lock.waiting == (1, 1))
    gone.cancel()
    lock.release()
    await kept
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert order == ["normal"]
    assert not lock.locked()


async def test_an_approval_step_commits_before_the_intake_batches_queued_before_it(
    store: Store,
) -> None:
    """While the writer is busy, intake batches queue, then an approval step: the step is
    committed first (the audit chain records the order of commits)."""
    intake = record("held")
    assert intake.request is not None
    await store.proposals.record([intake], NOW)
    loaded = await store.requests.load(intake.request.request_id)
    assert loaded is not None
    held, version = loaded
    step = StepWrite(
        request_id=held.request_id,
        expected_version=version,
        new_state=RequestState.REJECTED,
        audit=[AuditEntry("decision.accepted", "tester", {"verdict": "reject"}, "held")],
    )
    gate = store.db.gate
    await gate.acquire()
    flood = [
        asyncio.create_task(store.proposals.record([record(f"read-{i}", "read_file")], NOW))
        for i in range(5)
    ]
    await _until(lambda: gate.waiting == (0, 5))
    decided = asyncio.create_task(store.requests.commit_steps([(step, NOW)]))
    await _until(lambda: gate.waiting == (1, 5))
    gate.release()
    assert await decided == [True]
    await asyncio.gather(*flood)
    rows = await store.audit.rows()
    seq = {r.kind: r.seq for r in rows if r.proposal_id == "held" and r.kind != "proposal"}
    flood_seqs = [r.seq for r in rows if (r.proposal_id or "").startswith("read-")]
    assert len(flood_seqs) >= 5
    assert seq["decision.accepted"] < min(flood_seqs)
    assert (await store.audit.verify()).ok
