"""Retention on SQLite and PostgreSQL: what is pruned, what stays, and an audit chain that
stays verifiable from its anchor, with the pruned records verifiable from their archive.

Time is a parameter: each pruning is given the moment before which things are old."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, update

from tests.store.test_repo import record
from workflow.effects import AuditEntry, DecisionRecord, OutboxEvent, OutcomeRecord, StepWrite
from workflow.outcomes import Outcome, RequestState
from workflow.store.chain import RECORD_FIELDS, ChainedRecord, verify_archive
from workflow.store.repo import Store
from workflow.store.requests import ConcurrentUpdate
from workflow.store.retention import AuditChainBroken
from workflow.store.schema import AuditRow
from workflow.store.tables import (
    AUDIT,
    AUDIT_ANCHOR,
    DECISIONS,
    ESCALATIONS,
    EXECUTIONS,
    OUTBOX,
    OUTCOMES,
    PROPOSALS,
    REQUESTS,
)

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
LATER = T0 + timedelta(days=31)


async def _count(store: Store, table: object, *where: object) -> int:
    async with store.db.engine.connect() as conn:
        query = select(func.count()).select_from(table)  # type: ignore[arg-type]
        return int((await conn.execute(query.where(*where))).scalar_one())  # type: ignore[arg-type]


async def _approve(store: Store, pid: str, at: datetime) -> None:
    loaded = await store.requests.load_for_proposal(pid)
    assert loaded is not None
    held, version = loaded
    write = StepWrite(
        request_id=held.request_id,
        expected_version=version,
        new_state=RequestState.APPROVED,
        decision=DecisionRecord(
            nonce=f"n-{pid}",
            request_id=held.request_id,
            approver="ann",
            key=None,
            signature=None,
            verdict="approve",
            accepted=True,
            refusal=None,
            message="ok",
            record=None,
            received_at=at,
        ),
        outcome=OutcomeRecord(pid, Outcome.RELEASED, f"rl_{pid}", "approved", at),
        proposal_status=(pid, Outcome.RELEASED),
        events=[OutboxEvent(f"released:{pid}", "headgate.released.agent-1", "{}", pid)],
        audit=[AuditEntry("decision.accepted", "ann", {}, pid, held.request_id)],
    )
    assert await store.requests.commit_step(write, at)


async def test_decided_proposals_are_pruned_with_what_belongs_to_them_held_ones_stay(
    store: Store,
) -> None:
    await store.proposals.record(
        [record("read", "read_file"), record("approved"), record("held")], T0
    )
    await _approve(store, "approved", T0)
    # Not older than the cutoff yet: nothing goes.
    assert await store.retention.prune_decided(T0) == 0
    assert await store.retention.prune_decided(LATER) == 2
    for table, column in ((PROPOSALS, PROPOSALS.c.id), (OUTCOMES, OUTCOMES.c.proposal_id)):
        assert await _count(store, table, column.in_(["read", "approved"])) == 0
    assert await _count(store, REQUESTS, REQUESTS.c.proposal_id == "approved") == 0
    assert await _count(store, DECISIONS) == 0
    assert await _count(store, OUTBOX, OUTBOX.c.proposal_id == "approved") == 0
    # The held proposal has no outcome: whatever its age, it stays, and can still be decided.
    assert await _count(store, PROPOSALS, PROPOSALS.c.id == "held") == 1
    loaded = await store.requests.load_for_proposal("held")
    assert loaded is not None
    assert loaded[0].state is RequestState.PENDING
    assert await store.retention.prune_decided(LATER) == 0


async def test_replicas_pruning_at_once_take_each_proposal_once_and_leave_nothing_behind(
    database_url: str,
) -> None:
    replicas = [await Store.open(database_url) for _ in range(2)]
    first = replicas[0]
    try:
        reads = [record(f"r{i}", "read_file") for i in range(30)]
        writes = [record(f"w{i}") for i in range(10)]
        await first.proposals.record([*reads, *writes, record("held")], T0)
        for rec in writes:
            await _approve(first, rec.id, T0)
        async with first.db.engine.begin() as conn:
            for rec in writes:
                assert rec.request is not None
                await conn.execute(
                    ESCALATIONS.insert().values(
                        request_id=rec.request.request_id, taken=1, updated_at=T0
                    )
                )
                await conn.execute(
                    EXECUTIONS.insert().values(
                        release_id=f"rl_{rec.id}",
                        proposal_id=rec.id,
                        agent="agent-1",
                        success=True,
                        summary="ran",
                        finished_at=T0,
                    )
                )

        async def drain(replica: Store) -> int:
            total = 0
            while n := await replica.retention.prune_decided(LATER, limit=3):
                total += n
            return total

        assert sum(await asyncio.gather(*(drain(r) for r in replicas))) == 40
        for table in (DECISIONS, ESCALATIONS, EXECUTIONS, OUTBOX):
            assert await _count(first, table) == 0
        for table in (PROPOSALS, OUTCOMES, REQUESTS):
            assert await _count(first, table) == (1 if table is not OUTCOMES else 0)
        loaded = await first.requests.load_for_proposal("held")
        assert loaded is not None
        assert loaded[0].state is RequestState.PENDING
    finally:
        for replica in replicas:
            await replica.close()


async def test_the_pruners_plain_records_are_the_stored_rows(store: Store) -> None:
    await _audit_at(store, T0, 5)
    rows = await store.audit.rows(after_seq=1)
    records = await store.audit.records(after_seq=1, limit=3)
    assert [r._asdict() for r in records] == [
        {f: getattr(row, f) for f in RECORD_FIELDS} for row in rows[:3]
    ]


async def test_pruning_decided_proposals_goes_in_bounded_chunks(store: Store) -> None:
    await store.proposals.record([record(f"r{i}", "read_file") for i in range(7)], T0)
    assert await store.retention.prune_decided(LATER, limit=3) == 3
    assert await store.retention.prune_decided(LATER, limit=3) == 3
    assert await store.retention.prune_decided(LATER, limit=3) == 1
    assert await _count(store, PROPOSALS) == 0


async def test_outbox_rows_go_once_published_and_past_the_cutoff(store: Store) -> None:
    events = [OutboxEvent(f"e{i}", "headgate.released.a", "{}", None) for i in range(3)]
    await store.outbox.save(events, T0)
    assert await store.retention.prune_outbox(LATER) == 0  # unpublished: kept for ever
    await store.outbox.mark_published(["e0", "e1"])
    assert await store.retention.prune_outbox(T0) == 0  # published, but not old yet
    assert await store.retention.prune_outbox(LATER) == 2
    assert [e.msg_id for e in await store.outbox.unpublished(LATER)] == ["e2"]


class Archive:
    """Collects what the pruner archives (the service writes it to a JSON Lines file)."""

    def __init__(self) -> None:
        self.rows: list[AuditRow] = []

    async def __call__(self, rows: Sequence[ChainedRecord]) -> str:
        # Read back as rows, as `headgate audit verify` reads an archive file.
        self.rows.extend(AuditRow(**{f: getattr(r, f) for f in RECORD_FIELDS}) for r in rows)
        return f"archive-{len(self.rows)}"


async def _audit_at(store: Store, at: datetime, n: int, kind: str = "test") -> None:
    await store.audit.append([AuditEntry(kind, "tester", {"i": i}) for i in range(n)], at)


async def test_pruned_audit_is_archived_and_both_parts_verify_against_the_anchor(
    store: Store,
) -> None:
    await _audit_at(store, T0, 5, "old")
    await _audit_at(store, LATER, 3, "new")
    archive = Archive()
    assert await store.retention.prune_audit(T0 + timedelta(days=1), archive, LATER) == 5
    assert [r.kind for r in archive.rows] == ["old"] * 5
    anchor = await store.audit.anchor()
    assert anchor == (5, archive.rows[-1].hash)
    stored = await store.audit.verify()
    assert stored.ok, stored.problem
    assert stored.anchor_seq == 5
    assert stored.checked == 4  # the three new records and the audit.pruned one
    assert verify_archive(archive.rows, anchor).ok
    # A second pruning continues the first: the archives chain one after the other.
    assert await store.retention.prune_audit(LATER + timedelta(seconds=1), archive, LATER) == 4
    assert (await store.audit.verify()).ok
    assert verify_archive(archive.rows, await store.audit.anchor()).ok


async def test_an_altered_archive_does_not_verify_against_the_anchor(store: Store) -> None:
    await _audit_at(store, T0, 4)
    await _audit_at(store, LATER, 1)
    archive = Archive()
    await store.retention.prune_audit(LATER, archive, LATER)
    anchor = await store.audit.anchor()
    forged = [r.model_copy(update={"data": '{"i":99}'}) if r.seq == 2 else r for r in archive.rows]
    assert not verify_archive(forged, anchor).ok
    other = [r.model_copy(update={"hash": "f" * 64}) if r.seq == 4 else r for r in archive.rows]
    assert not verify_archive(other, anchor).ok
    assert not verify_archive(archive.rows[:2], anchor).ok  # ends before the anchor


async def test_records_removed_from_the_start_are_not_mistaken_for_a_pruning(
    store: Store,
) -> None:
    await _audit_at(store, T0, 4)
    await _audit_at(store, LATER, 4)
    await store.retention.prune_audit(T0 + timedelta(days=1), Archive(), LATER)
    assert (await store.audit.verify()).ok
    # Someone deletes the next records and moves the anchor over them, hashes and all.
    rows = await store.audit.rows()
    async with store.db.engine.begin() as conn:
        await conn.execute(AUDIT.delete().where(AUDIT.c.seq <= rows[1].seq))
        await conn.execute(update(AUDIT_ANCHOR).values(seq=rows[1].seq, hash=rows[1].hash))
    broken = await store.audit.verify()
    assert not broken.ok
    assert "no audit.pruned record" in broken.problem


async def test_a_broken_chain_is_not_pruned(store: Store) -> None:
    await _audit_at(store, T0, 3)
    async with store.db.engine.begin() as conn:
        await conn.execute(update(AUDIT).where(AUDIT.c.seq == 2).values(data='{"forged":1}'))
    archive = Archive()
    with pytest.raises(AuditChainBroken):
        await store.retention.prune_audit(LATER, archive, LATER)
    assert archive.rows == []
    assert await _count(store, AUDIT) == 3


async def test_a_pruning_that_lost_a_race_deletes_nothing(store: Store) -> None:
    await _audit_at(store, T0, 3)

    class Racing(Archive):
        """Another replica prunes while this one archives."""

        async def __call__(self, rows: Sequence[ChainedRecord]) -> str:
            async with store.db.engine.begin() as conn:
                await conn.execute(update(AUDIT_ANCHOR).values(seq=1, hash=rows[0].hash))
            return await super().__call__(rows)

    with pytest.raises(ConcurrentUpdate):
        await store.retention.prune_audit(LATER, Racing(), LATER)
    assert await _count(store, AUDIT) == 3
