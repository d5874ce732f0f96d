"""The PostgreSQL fast path: an intake batch and a batch of approval steps are two statements
each (BEGIN, two round trips, COMMIT) whatever their size, and store what they stored before;
replicas inserting the same ids at once each learn which ids were theirs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event, func, select

from tests.store.test_repo import record
from tests.store.test_steps import KINDS, NOW, step
from workflow.store.repo import Store
from workflow.store.tables import AUDIT, PROPOSALS


@contextmanager
def statements(store: Store) -> Iterator[list[str]]:
    """The statements sent to the server meanwhile (BEGIN and COMMIT are not among them)."""
    sent: list[str] = []

    def seen(*args: Any) -> None:
        sent.append(str(args[2]))

    engine = store.db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", seen)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", seen)


async def test_an_intake_batch_is_two_statements_whatever_its_size(pg_store: Store) -> None:
    for size in (1, 64):
        tools = ("write_file", "read_file")
        batch = [record(f"p{size}-{n}", tools[n % 2]) for n in range(size)]
        with statements(pg_store) as sent:
            result = await pg_store.proposals.record(batch, NOW)
        assert len(sent) == 2, sent
        assert result.new == {r.id for r in batch}
        assert result.existing_digests == {}
    # A redelivery: the stored digests come back from the same statement; nothing appended.
    again = [record("p1-0"), record("fresh")]
    with statements(pg_store) as sent:
        result = await pg_store.proposals.record(again, NOW)
    assert len(sent) == 2, sent
    assert result.new == {"fresh"}
    assert result.existing_digests == {"p1-0": again[0].proposal.digest}
    assert (await pg_store.audit.verify()).ok


async def test_a_batch_of_steps_is_two_statements_whatever_its_size(pg_store: Store) -> None:
    pids = [f"{kind}-{n}" for n in range(10) for kind in KINDS]
    await pg_store.proposals.record([record(p) for p in pids], NOW)
    steps = []
    for n, pid in enumerate(pids):
        loaded = await pg_store.requests.load_for_proposal(pid)
        assert loaded is not None
        held, version = loaded
        steps.append((step(pid.split("-")[0], held.request_id, pid, version, n), NOW))
    with statements(pg_store) as sent:
        assert await pg_store.requests.commit_steps(steps) == [True] * len(steps)
    assert len(sent) == 2, sent
    # Replayed: every nonce is taken, nothing is written, not even the audit.
    with_nonce = [(w, at) for w, at in steps if w.decision is not None]
    before = await pg_store.audit.rows()
    assert await pg_store.requests.commit_steps(with_nonce) == [False] * len(with_nonce)
    assert await pg_store.audit.rows() == before
    assert (await pg_store.audit.verify()).ok


async def test_replicas_recording_the_same_ids_at_once_each_store_them_once(
    postgres_url: str,
) -> None:
    stores = [await Store.open(postgres_url) for _ in range(3)]
    try:
        ids = [f"shared-{n}" for n in range(40)]
        batches = [[record(i) for i in ids[k::2] + ids[: 10 + 5 * k]] for k in range(3)]
        results = await asyncio.gather(
            *(s.proposals.record(b, NOW) for s, b in zip(stores, batches, strict=True))
        )
        news = [r.new for r in results]
        assert set().union(*news) == set(ids)
        assert sum(len(n) for n in news) == len(ids)  # each id new for exactly one replica
        for result, batch in zip(results, batches, strict=True):
            assert result.new | set(result.existing_digests) == {r.id for r in batch}
        async with stores[0].db.engine.connect() as conn:
            count = (await conn.execute(select(func.count()).select_from(PROPOSALS))).scalar()
            proposals_audited = (
                await conn.execute(
                    select(func.count(AUDIT.c.proposal_id.distinct())).where(
                        AUDIT.c.kind == "proposal"
                    )
                )
            ).scalar()
        assert count == proposals_audited == len(ids)
        assert (await stores[0].audit.verify()).ok
    finally:
        for s in stores:
            await s.close()
