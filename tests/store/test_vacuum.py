"""Space after pruning: SQLite reuses the freed pages but keeps its size until `headgate db
vacuum` rebuilds it (writers wait meanwhile, nothing is lost); PostgreSQL leaves it to
autovacuum."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from workflow.effects import AuditEntry
from workflow.store.maintenance import space, vacuum
from workflow.store.repo import Store
from workflow.store.schema import AuditRow

T0 = datetime(2026, 11, 1, tzinfo=UTC)


async def _append_big(store: Store, records: int, at: datetime) -> None:
    """`records` audit records of 4 KB."""
    for _ in range(records // 250):
        entries = [AuditEntry("big", "t", {"pad": "x" * 4000, "i": i}) for i in range(250)]
        await store.audit.append(entries, at)


async def _fill_and_prune(store: Store, records: int) -> None:
    """`records` audit records of 4 KB, then all of them pruned."""
    await _append_big(store, records, T0)
    await store.audit.append([AuditEntry("new", "t", {})], T0 + timedelta(days=2))

    async def discard(rows: object) -> str:
        return "discarded"

    while await store.retention.prune_audit(T0 + timedelta(days=1), discard, T0, limit=1000):
        pass


async def test_pruned_space_is_reused_and_given_back_by_vacuum(tmp_path: Path) -> None:
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'headgate.db'}")
    try:
        await _fill_and_prune(store, 2000)
        pruned = await space(store.db)
        assert pruned is not None
        assert pruned.free_bytes > 6_000_000  # the 8 MB of records are free pages now
        # New rows go into the free pages: the file does not grow.
        await _append_big(store, 1000, T0 + timedelta(days=2))
        reused = await space(store.db)
        assert reused is not None
        assert reused.size_bytes <= pruned.size_bytes * 1.05
        # A writer arriving during the rebuild waits for it, and its rows are kept.
        late = asyncio.create_task(
            store.audit.append([AuditEntry("late", "t", {})], T0 + timedelta(days=3))
        )
        done = await vacuum(store.db)
        await late
        assert done is not None
        assert done.after.free_bytes == 0
        assert done.after.size_bytes < done.before.size_bytes - 3_000_000
        assert done.after.file_bytes < done.before.file_bytes - 3_000_000
        assert (await store.audit.last(1))[0].kind == "late"
        assert (await store.audit.verify()).ok
    finally:
        await store.close()


async def test_postgresql_leaves_the_space_to_autovacuum(postgres_url: str) -> None:
    store = await Store.open(postgres_url)
    try:
        assert await space(store.db) is None
        assert await vacuum(store.db) is None
    finally:
        await store.close()


@pytest.mark.slow
def test_db_vacuum_and_audit_tail_commands(tmp_path: Path) -> None:
    async def build() -> list[AuditRow]:
        store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'headgate.db'}")
        try:
            await _fill_and_prune(store, 1000)
            return await store.audit.rows()
        finally:
            await store.close()

    stored = asyncio.run(build())
    cli = [sys.executable, "-m", "workflow"]
    where = ["--data-dir", str(tmp_path)]

    def run(*args: str) -> str:
        done = subprocess.run([*cli, *args, *where], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    looked = json.loads(run("db", "vacuum", "--dry-run", "--json"))
    assert looked["vacuumed"] is False
    assert looked["free_bytes_before"] > 2_000_000
    done = json.loads(run("db", "vacuum", "--json"))
    assert done["vacuumed"] is True
    assert done["free_bytes_after"] == 0
    assert done["size_bytes_after"] < looked["size_bytes_before"] - 2_000_000
    assert done["file_bytes_after"] < looked["file_bytes_before"] - 2_000_000
    tail = [json.loads(line) for line in run("audit", "tail", "-n", "2", "--json").splitlines()]
    assert [r["seq"] for r in tail] == [r.seq for r in stored[-2:]]
    assert "audit chain intact" in run("audit", "verify")
