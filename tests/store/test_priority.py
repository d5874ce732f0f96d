"""The writer's queue: approval steps are committed before the intake batches waiting with them."""

from __future__ import annotations

import asyncio
import time
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


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@given(st.lists(st.sampled_from(["urgent", "normal", "background"]), min_size=1, max_size=12))
def test_background_waiters_go_last_while_they_are_not_overdue(arrivals: list[str]) -> None:
    async def run() -> list[int]:
        lock = PriorityLock(patience=1.0, clock=Clock())
        order: list[int] = []
        await lock.acquire()

        async def waiter(i: int, kind: str) -> None:
            async with lock.hold(urgent=kind == "urgent", background=kind == "background"):
                order.append(i)

        tasks = []
        for i, kind in enumerate(arrivals):
            tasks.append(asyncio.create_task(waiter(i, kind)))
            await asyncio.sleep(0)
        assert lock.waiting_background == arrivals.count("background")
        lock.release()
        await asyncio.gather(*tasks)
        assert not lock.locked()
        return order

    order = asyncio.run(run())
    by = {
        k: [i for i, a in enumerate(arrivals) if a == k] for k in ("urgent", "normal", "background")
    }
    assert order == by["urgent"] + by["normal"] + by["background"]


async def test_an_overdue_background_waiter_goes_before_the_normal_ones_not_the_urgent() -> None:
    clock = Clock()
    lock = PriorityLock(patience=1.0, clock=clock)
    await lock.acquire()
    order: list[str] = []

    async def waiter(name: str, urgent: bool = False, background: bool = False) -> None:
        async with lock.hold(urgent=urgent, background=background):
            order.append(name)

    tasks = [asyncio.create_task(waiter("prune", background=True))]
    await _until(lambda: lock.waiting_background == 1)
    tasks += [asyncio.create_task(waiter(f"intake-{i}")) for i in range(3)]
    await _until(lambda: lock.waiting == (0, 3))
    tasks.append(asyncio.create_task(waiter("approval", urgent=True)))
    await _until(lambda: lock.waiting == (1, 3))
    clock.now = 1.5  # the pruner has waited past its patience
    lock.release()
    await asyncio.gather(*tasks)
    assert order == ["approval", "prune", "intake-0", "intake-1", "intake-2"]


async def test_a_cancelled_background_waiter_leaves_the_lock_to_the_next() -> None:
    lock = PriorityLock()
    await lock.acquire()
    order: list[str] = []

    async def waiter(name: str, background: bool) -> None:
        async with lock.hold(background=background):
            order.append(name)

    gone = asyncio.create_task(waiter("cancelled", True))
    kept = asyncio.create_task(waiter("kept", True))
    await _until(lambda: lock.waiting_background == 2)
    gone.cancel()
    await asyncio.sleep(0)
    lock.release()
    await kept
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert order == ["kept"]
    assert not lock.locked()
    with pytest.raises(ValueError, match="not both"):
        await lock.acquire(urgent=True, background=True)


async def test_a_background_transaction_leaves_the_event_loop_running(store: Store) -> None:
    """The pruner's transactions do not stop the stages: on SQLite they run off the event loop
    (a body that blocks its thread for 0.3 s lets the loop tick meanwhile); a normal SQLite
    transaction runs on the loop's thread (the loop does not tick)."""
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    def slow(conn: object) -> None:
        time.sleep(0.3)

    running = asyncio.create_task(ticker())
    try:
        await asyncio.sleep(0.02)
        ticks = 0
        await store.db.transact(slow, background=True)
        assert ticks > 0
        if store.db.dialect == "sqlite":
            ticks = 0
            await store.db.transact(slow)
            assert ticks == 0
    finally:
        running.cancel()
