"""The pruner writes ONE audit archive per pass (bounded), not one per thousand records: the
records are read and checked a chunk at a time into one file, made durable, then deleted a
chunk per transaction, each `audit.pruned` record naming that file. A pass that stopped
between the archive and its last deletion is finished by the next without a second archive.
Archives of either kind verify against the anchor with `headgate audit verify --archive`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from workflow.effects import AuditEntry
from workflow.policy.retention import RetentionSpec
from workflow.service.retention import prune_audit, sweep_partials
from workflow.store.archive import (
    ArchiveWriter,
    archive_file,
    begin_pass,
    pass_under_way,
    read_jsonl,
)
from workflow.store.chain import PRUNED_KIND, verify_archive
from workflow.store.repo import Store
from workflow.store.retention import AuditChainBroken, AuditCut

T0 = datetime(2026, 11, 1, tzinfo=UTC)
OLD = T0 + timedelta(days=1)  # the cutoff: what was written at T0 is old
NOW = T0 + timedelta(days=2)


async def _store(url: str, old: int) -> Store:
    """`old` records written at T0, then 3 newer ones."""
    store = await Store.open(url)
    for start in range(0, old, 500):
        entries = [AuditEntry("old", "t", {"i": i}) for i in range(start, min(old, start + 500))]
        await store.audit.append(entries, T0)
    await store.audit.append([AuditEntry("new", "t", {"i": i}) for i in range(3)], NOW)
    return store


async def _pruned_records(store: Store) -> list[dict[str, object]]:
    return [json.loads(r.data) for r in await store.audit.rows() if r.kind == PRUNED_KIND]


def _archives(directory: Path) -> list[Path]:
    return sorted(directory.glob("audit-*.jsonl"))


async def test_one_pass_writes_one_archive_that_verifies(tmp_path: Path, database_url: str) -> None:
    store = await _store(database_url, 2500)
    try:
        directory = tmp_path / "archive"
        assert await prune_audit(store.retention, directory, OLD, NOW) == 2500
        (archive,) = _archives(directory)
        assert archive.name == "audit-000000000001-000000002500.jsonl"
        assert [p.name for p in directory.iterdir()] == [archive.name]  # no partial file left
        rows = read_jsonl(archive)
        assert [r.seq for r in rows] == list(range(1, 2501))
        anchor = await store.audit.anchor()
        assert anchor == (2500, rows[-1].hash)
        assert verify_archive(rows, anchor).ok
        check = await store.audit.verify()
        assert check.ok, check.problem
        # Deleted a thousand at a time, every confirmation naming the one archive.
        pruned = await _pruned_records(store)
        assert [(p["through_seq"], p["records"]) for p in pruned] == [
            (1000, 1000), (2000, 1000), (2500, 500),
        ]  # fmt: skip
        assert {p["archive"] for p in pruned} == {archive.name}
        assert await prune_audit(store.retention, directory, OLD, NOW) == 0  # nothing old left
        assert _archives(directory) == [archive]
    finally:
        await store.close()


async def test_an_archive_is_bounded_and_the_next_pass_continues_it(
    tmp_path: Path, database_url: str
) -> None:
    store = await _store(database_url, 600)
    try:
        directory = tmp_path / "archive"
        prune = prune_audit(store.retention, directory, OLD, NOW, chunk=100, most=250)
        assert await prune == 250
        assert await prune_audit(store.retention, directory, OLD, NOW, chunk=100, most=250) == 250
        assert await prune_audit(store.retention, directory, OLD, NOW, chunk=100, most=250) == 100
        archives = _archives(directory)
        assert [a.name for a in archives] == [
            "audit-000000000001-000000000250.jsonl",
            "audit-000000000251-000000000500.jsonl",
            "audit-000000000501-000000000600.jsonl",
        ]
        anchor = await store.audit.anchor()
        assert anchor[0] == 600
        assert verify_archive([r for a in archives for r in read_jsonl(a)], anchor).ok
        assert (await store.audit.verify()).ok
    finally:
        await store.close()


@pytest.mark.parametrize("deleted", [0, 100])
async def test_a_pass_stopped_after_its_archive_is_finished_without_a_second_one(
    tmp_path: Path, database_url: str, deleted: int
) -> None:
    """A crash after the archive was made durable, before all of it (or any) was deleted: the
    next pass deletes the rest under the same archive, so no two archives hold a record."""
    store = await _store(database_url, 300)
    try:
        directory = tmp_path / "archive"
        retention = store.retention
        anchor = await store.audit.anchor()
        rows = await retention.prunable_audit(anchor[0], OLD, 300)
        writer = ArchiveWriter(directory)
        writer.add(rows)
        archive = writer.close()
        if deleted:  # the pass deleted its first chunk, then stopped
            first = AuditCut(rows[deleted - 1].seq, rows[deleted - 1].hash, deleted)
            await retention.drop_audit(anchor, first, archive.name, NOW)

        assert pass_under_way(directory) is not None
        assert await prune_audit(retention, directory, OLD, NOW, chunk=100) == 300 - deleted
        assert _archives(directory) == [archive]
        assert pass_under_way(directory) is None
        anchor = await store.audit.anchor()
        assert anchor == (300, rows[-1].hash)
        assert verify_archive(read_jsonl(archive), anchor).ok
        assert (await store.audit.verify()).ok
        pruned = await _pruned_records(store)
        assert [p["through_seq"] for p in pruned] == [100, 200, 300]
        assert {p["archive"] for p in pruned} == {archive.name}
    finally:
        await store.close()


async def test_an_archive_that_does_not_match_the_stored_records_stops_pruning(
    tmp_path: Path,
) -> None:
    """The archive of a pass under way that does not hold the records as stored is evidence of
    something wrong: nothing is deleted."""
    store = await _store(f"sqlite+aiosqlite:///{tmp_path / 'headgate.db'}", 20)
    try:
        directory = tmp_path / "archive"
        rows = await store.retention.prunable_audit(0, OLD, 20)
        writer = ArchiveWriter(directory)
        writer.add(rows)
        archive = writer.close()  # the pass stopped here
        lines = archive.read_text().splitlines()
        forged = {**json.loads(lines[-1]), "hash": "f" * 64}
        archive.write_text("\n".join([*lines[:-1], json.dumps(forged)]) + "\n")
        with pytest.raises(AuditChainBroken, match="does not hold the stored records 1–20"):
            await prune_audit(store.retention, directory, OLD, NOW)
        assert await store.audit.anchor() == (0, rows[0].prev_hash)
        assert len(await store.audit.rows()) == 23
    finally:
        await store.close()


async def test_a_pass_that_ended_or_never_named_its_archive_leaves_nothing_to_finish(
    tmp_path: Path,
) -> None:
    """The record of a pass outlives it (stopped after its last deletion), or names an archive
    that never got its name (stopped before it: nothing was deleted): the next pass starts
    afresh."""
    store = await _store(f"sqlite+aiosqlite:///{tmp_path / 'headgate.db'}", 30)
    try:
        directory = tmp_path / "archive"
        directory.mkdir()
        begin_pass(directory, directory / "audit-000000000001-000000000010.jsonl", 1, 10)
        assert await prune_audit(store.retention, directory, OLD, NOW, most=10) == 10
        assert pass_under_way(directory) is None
        begin_pass(directory, directory / "audit-000000000001-000000000010.jsonl", 1, 10)
        assert await prune_audit(store.retention, directory, OLD, NOW) == 20  # the anchor: 10
        assert pass_under_way(directory) is None
        assert [a.name for a in _archives(directory)] == [
            "audit-000000000001-000000000010.jsonl",
            "audit-000000000011-000000000030.jsonl",
        ]
        anchor = await store.audit.anchor()
        rows = [r for a in _archives(directory) for r in read_jsonl(a)]
        assert verify_archive(rows, anchor).ok
    finally:
        await store.close()


@pytest.mark.slow
async def test_older_per_chunk_archives_and_a_pass_archive_verify_together(
    tmp_path: Path,
) -> None:
    """Archives written one per chunk (before this version) and the pass archives after them
    are checked in order by `headgate audit verify --archive`."""
    store = await _store(f"sqlite+aiosqlite:///{tmp_path / 'headgate.db'}", 1200)
    directory = tmp_path / "archive"

    async def per_chunk(rows: object) -> str:
        return archive_file(directory, rows).name  # type: ignore[arg-type]

    try:
        assert await store.retention.prune_audit(OLD, per_chunk, NOW, limit=200) == 200
        assert await store.retention.prune_audit(OLD, per_chunk, NOW, limit=200) == 200
        assert await prune_audit(store.retention, directory, OLD, NOW) == 800
    finally:
        await store.close()
    archives = [str(a) for a in _archives(directory)]
    assert [Path(a).name for a in archives] == [
        "audit-000000000001-000000000200.jsonl",
        "audit-000000000201-000000000400.jsonl",
        "audit-000000000401-000000001200.jsonl",
    ]
    cli = [sys.executable, "-m", "workflow", "audit", "verify", "--data-dir", str(tmp_path)]
    every = [arg for a in archives for arg in ("--archive", a)]
    done = subprocess.run([*cli, *every], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "archive intact: 1200 records verified" in done.stdout
    skipping = ["--archive", archives[0], "--archive", archives[2]]
    gap = subprocess.run([*cli, *skipping], capture_output=True, text=True, check=False)
    assert gap.returncode == 1


async def test_partial_files_left_by_interrupted_writers_are_swept_and_live_ones_kept(
    tmp_path: Path,
) -> None:
    """A writer killed mid-way leaves its partial file; the pruner removes it once it has not
    been written for an hour, and leaves alone a partial file being written (another
    replica's pass) and every archive, however old."""
    directory = tmp_path / "audit-archive"
    directory.mkdir()
    hours_ago = time.time() - 2 * 3600
    left = [directory / ".audit-000000000001.4242.partial", directory / "pruning-pass.json.partial"]
    kept = [
        directory / "audit-000000000001-000000001000.jsonl",  # an archive, old
        directory / ".audit-000000001001.4243.partial",  # being written now
    ]
    for path in left + kept:
        path.write_text("{}\n")
    for path in [*left, kept[0]]:
        os.utime(path, (hours_ago, hours_ago))
    spec = RetentionSpec(audit=86400, audit_archive="audit-archive")
    assert sorted(await sweep_partials(spec, tmp_path)) == sorted(left)
    assert sorted(directory.iterdir()) == sorted(kept)
    assert await sweep_partials(RetentionSpec(), tmp_path) == []  # no audit pruning: no sweep
    assert sorted(directory.iterdir()) == sorted(kept)


async def test_one_replica_prunes_the_audit_at_a_time(tmp_path: Path, postgres_url: str) -> None:
    """Two replicas on one PostgreSQL database: while one prunes the audit (it holds the
    advisory lock), the other's pass prunes nothing and writes no archive; after, it prunes."""
    first = await _store(postgres_url, 1500)
    second = await Store.open(postgres_url)
    try:
        directory = tmp_path / "archive"
        async with first.retention.pruning_audit() as mine:
            assert mine
            async with second.retention.pruning_audit() as theirs:
                assert not theirs  # not waited for
            assert await prune_audit(second.retention, directory, OLD, NOW) == 0
            assert not directory.exists() or _archives(directory) == []
        assert await prune_audit(second.retention, directory, OLD, NOW) == 1500
        assert len(_archives(directory)) == 1
        async with first.retention.pruning_audit() as mine:
            assert mine  # released by the pass that held it
    finally:
        await second.close()
        await first.close()


async def test_on_sqlite_the_one_writing_process_may_always_prune(tmp_path: Path) -> None:
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'h.db'}")
    try:
        async with store.retention.pruning_audit() as mine:
            assert mine
    finally:
        await store.close()
