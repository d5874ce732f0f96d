"""Proposals.record reports as new exactly the rows it inserted, for batches larger than one
insertmanyvalues page mixed with existing ids: on SQLite (look up, then insert through the
DB-API) and on PostgreSQL (one executemany with RETURNING)."""

from __future__ import annotations

from sqlalchemy import func, select

from tests.store.test_repo import NOW, record
from workflow.store.repo import Store
from workflow.store.tables import AUDIT, OUTBOX, OUTCOMES, PROPOSALS


async def test_a_large_mixed_batch_reports_exactly_the_new_ids(store: Store) -> None:
    old = [f"p{i}" for i in range(0, 1500, 3)]
    first = await store.proposals.record([record(i, tool="read_file") for i in old], NOW)
    assert first.new == set(old)
    everything = [f"p{i}" for i in range(1500)]
    batch = [record(i, tool="read_file") for i in reversed(everything)]
    batch.append(record("p1", tool="read_file"))  # a duplicate within the batch
    again = await store.proposals.record(batch, NOW)
    assert again.new == set(everything) - set(old)
    assert set(again.existing_digests) == set(old)
    async with store.db.engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(PROPOSALS))).scalar() == 1500
        n_outcomes = (await conn.execute(select(func.count()).select_from(OUTCOMES))).scalar()
        n_out = (await conn.execute(select(func.count()).select_from(OUTBOX))).scalar()
        n_audit = (await conn.execute(select(func.count()).select_from(AUDIT))).scalar()
    assert n_outcomes == 1500  # one outcome per proposal, none twice
    assert n_out == 0  # the intake's events are published, not stored
    assert n_audit == 3000  # the proposal and its release, once each
    assert (await store.audit.verify()).ok


async def test_an_empty_and_a_single_batch(store: Store) -> None:
    assert (await store.proposals.record([], NOW)).new == set()
    assert (await store.proposals.record([record("solo")], NOW)).new == {"solo"}
    assert (await store.proposals.record([record("solo")], NOW)).new == set()
