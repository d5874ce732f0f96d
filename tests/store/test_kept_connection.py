"""SQLite: the synchronous writer keeps one connection for its transactions and reads
(`Database._writer`). It must behave as a connection fresh from the pool each time: a failed
transaction leaves nothing behind, and a read leaves no snapshot open."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import Connection, text

from workflow.store.engine import Database


async def test_a_failed_transaction_leaves_the_kept_connection_usable(tmp_path: Path) -> None:
    db = await Database.open(f"sqlite+aiosqlite:///{tmp_path / 'hg.db'}")
    try:
        await db.transact(lambda conn: conn.execute(text("CREATE TABLE t (x INTEGER)")))

        def fails(conn: Connection) -> None:
            conn.execute(text("INSERT INTO t VALUES (1)"))
            raise RuntimeError("the body failed")

        with pytest.raises(RuntimeError):
            await db.transact(fails)
        await db.transact(lambda conn: conn.execute(text("INSERT INTO t VALUES (2)")))
        rows = await db.read(lambda conn: [r[0] for r in conn.execute(text("SELECT x FROM t"))])
        assert rows == [2]  # the failed one rolled back, the next one committed
    finally:
        await db.close()


async def test_a_read_leaves_no_snapshot_that_holds_back_a_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "hg.db"
    db = await Database.open(f"sqlite+aiosqlite:///{path}")
    try:
        await db.transact(lambda conn: conn.execute(text("CREATE TABLE t (x INTEGER)")))
        await db.transact(lambda conn: conn.execute(text("INSERT INTO t VALUES (1)")))
        assert await db.read(lambda conn: conn.execute(text("SELECT count(*) FROM t")).scalar())
        await db.transact(lambda conn: conn.execute(text("INSERT INTO t VALUES (2)")))
        other = sqlite3.connect(path)
        try:
            busy, frames, copied = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        finally:
            other.close()
        # A snapshot left open by the read would keep the frames written after it uncopied.
        assert (busy, copied) == (0, frames)
    finally:
        await db.close()


async def test_the_background_connection_gives_its_page_cache_back(tmp_path: Path) -> None:
    """What a pruning pass read stays in the background connection's cache until its next
    transaction discards it; `release_memory` frees it at once, and holds nothing back after."""
    db = await Database.open(f"sqlite+aiosqlite:///{tmp_path / 'hg.db'}")
    try:
        await db.transact(lambda conn: conn.execute(text("CREATE TABLE t (x BLOB)")))
        await db.transact(
            lambda conn: conn.execute(
                text(
                    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)"
                    " INSERT INTO t SELECT randomblob(1000) FROM n"
                )
            )
        )
        # A pass's worth of reading on the background connection: 3 MB, more than its cache.
        await db.read(
            lambda conn: conn.execute(text("SELECT sum(length(x)) FROM t")).scalar(),
            background=True,
        )
        freed = await db.release_memory()
        assert freed > 1_000_000  # most of the 2,000 KiB cache the scan filled
        assert await db.release_memory() < 100_000  # nothing left to give back
        # The connection works on after it (the cache refills as needed).
        count = await db.read(
            lambda conn: conn.execute(text("SELECT count(*) FROM t")).scalar(), background=True
        )
        assert count == 3000
    finally:
        await db.close()


async def test_release_memory_needs_no_background_connection() -> None:
    db = await Database.open("sqlite+aiosqlite:///:memory:")  # no synchronous writers in memory
    try:
        assert await db.release_memory() == 0
    finally:
        await db.close()
