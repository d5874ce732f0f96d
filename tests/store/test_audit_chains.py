"""PostgreSQL's audit chains: concurrent writers append to different chains instead of waiting
for each other's commit on one head row; each chain detects tampering as the single chain does,
a chain removed with its head row is detected, pruning and exports stay verifiable per chain,
and a database from before the chains upgrades with its records on chain 1."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Connection, delete, select, text, update

from tests.store.test_retention import LATER, T0, Archive
from workflow.effects import AuditEntry
from workflow.store.archive import read_jsonl
from workflow.store.chain import (
    GENESIS,
    PG_CHAINS,
    chain_base,
    chain_of,
    verify_archive,
)
from workflow.store.repo import Store
from workflow.store.tables import AUDIT, AUDIT_ANCHOR, AUDIT_HEAD


def _entries(kind: str, n: int) -> list[AuditEntry]:
    return [AuditEntry(kind, "tester", {"i": i}) for i in range(n)]


async def _two_at_once(store: Store, first: int = 3, second: int = 2) -> None:
    """Two transactions append while both are open: the second must not wait for the first
    (with one head row it waited until the first committed: here that would never happen,
    and the lock timeout turns the wait into an error)."""
    async with store.db.engine.connect() as a, store.db.engine.connect() as b:
        await a.begin()
        await b.begin()
        await b.execute(text("SET LOCAL lock_timeout = '60s'"))

        def append(kind: str, n: int, at: datetime) -> Callable[[Connection], None]:
            return lambda conn: store.audit.append_in(conn, _entries(kind, n), at)

        await a.run_sync(append("a", first, T0))
        await b.run_sync(append("b", second, T0))
        await b.commit()
        await a.commit()


async def test_concurrent_transactions_append_to_different_chains(pg_store: Store) -> None:
    await _two_at_once(pg_store)
    rows = await pg_store.audit.rows()
    by_chain: dict[int, list[str]] = {}
    for r in rows:
        by_chain.setdefault(chain_of(r.seq), []).append(r.kind)
    assert by_chain == {1: ["a"] * 3, 2: ["b"] * 2}
    assert [r.seq for r in rows if chain_of(r.seq) == 2] == [
        chain_base(2) + 1,
        chain_base(2) + 2,
    ]
    checked = await pg_store.audit.verify()
    assert checked.ok, checked.problem
    assert checked.checked == 5
    assert await pg_store.audit.chains() == list(range(1, PG_CHAINS + 1))
    # Alone again, a transaction takes the first chain.
    await pg_store.audit.append(_entries("c", 1), T0)
    assert chain_of((await pg_store.audit.rows())[3].seq) == 1


async def test_each_chain_detects_an_altered_record(pg_store: Store) -> None:
    await _two_at_once(pg_store)
    second = chain_base(2) + 2
    async with pg_store.db.engine.begin() as conn:
        await conn.execute(update(AUDIT).where(AUDIT.c.seq == second).values(actor="forger"))
    broken = await pg_store.audit.verify()
    assert not broken.ok
    assert broken.first_bad_seq == second
    assert "2:2 was altered" in broken.problem


async def test_each_chain_detects_records_cut_from_its_end(pg_store: Store) -> None:
    await _two_at_once(pg_store)
    async with pg_store.db.engine.begin() as conn:
        await conn.execute(delete(AUDIT).where(AUDIT.c.seq == chain_base(2) + 2))
    broken = await pg_store.audit.verify()
    assert not broken.ok
    assert "removed from the end" in broken.problem


async def test_a_chain_removed_with_its_head_row_is_detected(pg_store: Store) -> None:
    await _two_at_once(pg_store)
    async with pg_store.db.engine.begin() as conn:
        await conn.execute(delete(AUDIT).where(AUDIT.c.seq > chain_base(2)))
        await conn.execute(delete(AUDIT_HEAD).where(AUDIT_HEAD.c.id == 2))
        await conn.execute(delete(AUDIT_ANCHOR).where(AUDIT_ANCHOR.c.id == 2))
    broken = await pg_store.audit.verify()
    assert not broken.ok
    assert "audit chain 2 is missing" in broken.problem


async def test_a_record_moved_to_another_chain_is_detected(pg_store: Store) -> None:
    await _two_at_once(pg_store)
    # The last record of chain 1 moved to the end of chain 2, both heads made to agree.
    async with pg_store.db.engine.begin() as conn:
        moved, kept = (
            chain_base(2) + 3,
            await conn.execute(select(AUDIT.c.hash).where(AUDIT.c.seq == 2)),
        )
        await conn.execute(update(AUDIT).where(AUDIT.c.seq == 3).values(seq=moved))
        await conn.execute(
            update(AUDIT_HEAD).where(AUDIT_HEAD.c.id == 1).values(seq=2, hash=kept.scalar_one())
        )
        digest = (await conn.execute(select(AUDIT.c.hash).where(AUDIT.c.seq == moved))).scalar_one()
        await conn.execute(
            update(AUDIT_HEAD).where(AUDIT_HEAD.c.id == 2).values(seq=moved, hash=digest)
        )
    broken = await pg_store.audit.verify()
    assert not broken.ok
    assert broken.first_bad_seq == chain_base(2) + 3


async def test_pruning_anchors_each_chain_and_the_archives_verify(pg_store: Store) -> None:
    await _two_at_once(pg_store)  # at T0
    async with pg_store.db.engine.connect() as a, pg_store.db.engine.connect() as b:
        await a.begin()
        await b.begin()
        await a.run_sync(lambda c: pg_store.audit.append_in(c, _entries("new", 2), LATER))
        await b.run_sync(lambda c: pg_store.audit.append_in(c, _entries("new", 1), LATER))
        await a.commit()
        await b.commit()
    archive = Archive()
    pruned = await pg_store.retention.prune_audit(T0 + timedelta(days=1), archive, LATER)
    assert pruned == 5
    anchors = await pg_store.audit.anchors()
    assert anchors[1] == (3, archive.rows[2].hash)
    assert anchors[2] == (chain_base(2) + 2, archive.rows[4].hash)
    assert anchors[3] == (chain_base(3), GENESIS)
    checked = await pg_store.audit.verify()
    assert checked.ok, checked.problem
    assert checked.checked == 5  # the three new records and one audit.pruned per chain
    assert verify_archive(archive.rows, anchors).ok
    # An altered record of chain 2's archive, or chain 2's archive missing: refused.
    forged = [
        r.model_copy(update={"data": '{"i":9}'}) if r.seq == chain_base(2) + 1 else r
        for r in archive.rows
    ]
    assert not verify_archive(forged, anchors).ok
    assert not verify_archive(archive.rows[:3], anchors).ok
    # An export (what `headgate audit export` writes) of what is stored verifies too: chain
    # after chain, each from its anchor.
    exported = [r async for rows in pg_store.audit.batches(after_seq=anchors[1][0]) for r in rows]
    assert sorted({chain_of(r.seq) for r in exported}) == [1, 2]
    assert verify_archive(exported, anchors).ok


async def test_a_database_from_before_the_chains_upgrades(postgres_url: str) -> None:
    store = await Store.open(postgres_url)
    try:
        await store.audit.append(_entries("old", 3), T0)

        def downgrade(conn: Connection) -> None:
            # As a database at migration 7 was: 32-bit numbers, one head and anchor row.
            conn.execute(text("DELETE FROM audit_head WHERE id > 1"))
            conn.execute(text("DELETE FROM audit_anchor WHERE id > 1"))
            for table in ("audit", "audit_head", "audit_anchor"):
                conn.execute(text(f"ALTER TABLE {table} ALTER COLUMN seq TYPE INTEGER"))
            conn.execute(text("ALTER TABLE proposals DROP COLUMN stream_seq"))  # migration 9's
            conn.execute(text("DELETE FROM schema_version WHERE version >= 8"))

        async with store.db.engine.begin() as conn:
            await conn.run_sync(downgrade)
    finally:
        await store.close()
    store = await Store.open(postgres_url)
    try:
        assert await store.audit.chains() == list(range(1, PG_CHAINS + 1))
        async with store.db.engine.connect() as conn:
            kind = (
                await conn.execute(
                    text(
                        "SELECT data_type FROM information_schema.columns "
                        "WHERE table_name = 'audit' AND column_name = 'seq'"
                    )
                )
            ).scalar_one()
        assert kind == "bigint"
        await _two_at_once(store)
        checked = await store.audit.verify()
        assert checked.ok, checked.problem
        assert checked.checked == 8
        assert [r.kind for r in await store.audit.rows()][:3] == ["old"] * 3
    finally:
        await store.close()


@pytest.mark.slow
async def test_audit_export_and_verify_archive_commands_with_two_chains(
    postgres_url: str, tmp_path: Path
) -> None:
    """`audit export` writes every chain's records, chain after chain; `audit verify
    --archive` checks each against its chain's anchor; a forged line of chain 2 fails."""
    store = await Store.open(postgres_url)
    try:
        await _two_at_once(store)  # at T0
        await store.audit.append(_entries("new", 1), LATER)
        exported = tmp_path / "export.jsonl"
        cli = [sys.executable, "-m", "workflow", "audit"]
        where = ["--database-url", postgres_url]
        done = subprocess.run(
            [*cli, "export", "--out", str(exported), *where],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert [chain_of(r.seq) for r in read_jsonl(exported)] == [1, 1, 1, 1, 2, 2]

        async def archive(rows: object) -> str:
            return "export.jsonl"  # already written by `audit export`

        assert await store.retention.prune_audit(T0 + timedelta(days=1), archive, LATER) == 5
    finally:
        await store.close()
    verify = [*cli, "verify", "--archive", str(exported), *where]
    good = subprocess.run(verify, capture_output=True, text=True, check=False)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "archive intact" in good.stdout
    lines = exported.read_text().splitlines()
    forged = {**json.loads(lines[4]), "data": '{"i":7}'}
    exported.write_text("\n".join([*lines[:4], json.dumps(forged), *lines[5:]]) + "\n")
    bad = subprocess.run(verify, capture_output=True, text=True, check=False)
    assert bad.returncode == 1
    assert "archive broken at record 2:1" in bad.stdout


async def test_the_pruners_pass_writes_one_archive_per_chain(
    pg_store: Store, tmp_path: Path
) -> None:
    """The service's pruner (`workflow.service.retention.prune_audit`): one archive per chain
    pruned, each pass ended (no pass record left), the archives verifying against every
    chain's anchor; a pass under way is recorded per chain."""
    from workflow.service.retention import prune_audit
    from workflow.store.archive import begin_pass, pass_under_way

    await _two_at_once(pg_store)  # at T0: three records on chain 1, two on chain 2
    await pg_store.audit.append(_entries("new", 1), LATER)
    directory = tmp_path / "archive"
    assert await prune_audit(pg_store.retention, directory, T0 + timedelta(days=1), LATER) == 5
    archives = sorted(directory.glob("audit-*.jsonl"))
    assert sorted(p.name for p in directory.iterdir()) == [p.name for p in archives]
    rows = [r for path in archives for r in read_jsonl(path)]
    assert [sorted({chain_of(r.seq) for r in read_jsonl(p)}) for p in archives] == [[1], [2]]
    assert [p.name for p in archives] == [
        "audit-000000000001-000000000003.jsonl",
        f"audit-c02-{chain_base(2) + 1:016d}-{chain_base(2) + 2:016d}.jsonl",
    ]
    anchors = await pg_store.audit.anchors()
    assert anchors[1][0] == 3
    assert anchors[2][0] == chain_base(2) + 2
    assert verify_archive(rows, anchors).ok
    checked = await pg_store.audit.verify()
    assert checked.ok, checked.problem
    # Nothing old left: a second pass writes nothing.
    assert await prune_audit(pg_store.retention, directory, T0 + timedelta(days=1), LATER) == 0
    assert sorted(directory.glob("audit-*.jsonl")) == archives
    # Each chain's pass under way has a record of its own.
    begin_pass(directory, archives[1], chain_base(2) + 1, chain_base(2) + 2, chain=2)
    assert pass_under_way(directory, 1) is None
    under_way = pass_under_way(directory, 2)
    assert under_way is not None
    assert under_way.archive == archives[1]


def test_archive_names_list_the_chains_in_order_and_each_chains_archives_oldest_first() -> None:
    from workflow.store.archive import archive_name
    from workflow.store.chain import MAX_CHAINS

    names = [
        archive_name(chain_base(c) + start, chain_base(c) + start + 999, c)
        for c in range(1, MAX_CHAINS + 1)
        for start in (1, 1000, 999_000_001)
    ]
    assert sorted(names) == names
    assert names[0] == "audit-000000000001-000000001000.jsonl"  # the first chain's, as before
