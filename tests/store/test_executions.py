"""Execution reports recorded a batch at a time: one read for who each release went to, one
transaction for the batch, in order — the first report of a release is stored, every later
one (in the batch or before it) is audited as a repeat, a refused one only audited."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from tests.store.test_repo import NOW, record
from workflow.effects import AuditEntry, ExecutionRecord
from workflow.routing import release_id_for
from workflow.store.executions import Report
from workflow.store.repo import Store
from workflow.store.tables import EXECUTIONS


def report(pid: str, summary: str) -> Report:
    rid = release_id_for(pid)
    row = ExecutionRecord(rid, pid, "agent-1", True, summary, NOW)
    data = {"release_id": rid, "summary": summary}
    return Report(
        row,
        AuditEntry("executed", "agent-1", data, pid),
        AuditEntry("executed.repeated", "agent-1", data, pid),
    )


def refused(pid: str) -> Report:
    return Report(None, AuditEntry("executed.refused", "agent-2", {"message": "no"}, pid))


async def test_a_batch_of_reports_is_recorded_in_order_in_one_transaction(store: Store) -> None:
    await store.proposals.record(
        [record("p1", tool="read_file"), record("p2", tool="read_file")], NOW
    )
    before = len(await store.audit.rows())
    kept = await store.executions.record_many(
        [
            report("p1", "first"),
            refused("p1"),
            report("p1", "second"),
            report("p2", "only"),
            report("p1", "third"),
        ],
        NOW,
    )
    assert kept == [True, False, False, True, False]
    rows = (await store.audit.rows())[before:]
    assert [r.kind for r in rows] == [
        "executed", "executed.refused", "executed.repeated", "executed", "executed.repeated",
    ]  # fmt: skip
    assert [r.seq for r in rows] == list(range(rows[0].seq, rows[0].seq + 5))
    async with store.db.engine.connect() as conn:
        stored = (await conn.execute(select(EXECUTIONS).order_by(EXECUTIONS.c.proposal_id))).all()
    assert [(r.proposal_id, r.summary) for r in stored] == [("p1", "first"), ("p2", "only")]
    # A later batch: the release is recorded already.
    assert await store.executions.record_many([report("p2", "again")], NOW) == [False]
    assert (await store.audit.rows())[-1].kind == "executed.repeated"
    assert (await store.audit.verify()).ok


async def test_a_batch_is_recorded_whole_or_not_at_all(store: Store) -> None:
    """One transaction: a report that cannot be recorded leaves nothing of its batch."""
    await store.proposals.record(
        [record("p1", tool="read_file"), record("p2", tool="read_file")], NOW
    )
    before = len(await store.audit.rows())
    broken = report("p2", "x")._replace(audit=AuditEntry("executed", "agent-1", {"x": {1}}, "p2"))
    with pytest.raises(TypeError):
        await store.executions.record_many([report("p1", "first"), broken], NOW)
    assert len(await store.audit.rows()) == before
    async with store.db.engine.connect() as conn:
        assert (await conn.execute(select(EXECUTIONS))).all() == []
    # Retried without the broken one: the first report is the one stored.
    assert await store.executions.record_many([report("p1", "first")], NOW) == [True]


async def test_owners_are_read_for_a_batch_at_once(store: Store) -> None:
    await store.proposals.record(
        [record("p1", tool="read_file"), record("p2", tool="delete_file", path="build/o.o")], NOW
    )
    found = await store.executions.owners(
        [
            ("p1", release_id_for("p1")),
            ("p2", release_id_for("p2")),  # denied: never released
            ("p1", release_id_for("p2")),  # not its release
            ("p9", release_id_for("p9")),  # unknown
        ]
    )
    assert found == {("p1", release_id_for("p1")): "agent-1"}
    assert await store.executions.owners([]) == {}
