"""Giving the space of pruned rows back to the file system (`headgate db vacuum`).

What a user sees as the database grows, by backend:

- SQLite reuses the pages the retention pruner frees for the rows written after it, so with
  `[retention]` the file stops growing once the first records are pruned — but it never
  shrinks by itself: after retention is first enabled on a large database, or after a burst,
  the file keeps its largest size. `vacuum` rebuilds it without the free pages. It is not
  done automatically: a rebuild rewrites the whole file and holds the write lock meanwhile,
  and a file that shrinks after every pruning pass only grows again with the next writes
  (`auto_vacuum=INCREMENTAL` would also cost every write its pointer-map pages).
- PostgreSQL: autovacuum marks the space of deleted rows reusable (the tables stop growing
  the same way); nothing is done here. Giving it back to the file system takes
  `VACUUM FULL`, which locks each table exclusively while it is rewritten: a database
  administrator's call, outside Headgate. Without autovacuum (off on the server, or
  `autovacuum_enabled = false` on a table) the space is never reused: `autovacuum` finds it,
  for `serve`'s warning at start and `headgate db vacuum`.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection

from workflow.store.engine import Database


@dataclass(frozen=True, slots=True)
class SpaceReport:
    """A SQLite database's size (its pages), how much of it is free pages (reused by new
    rows, not given back), and what its files take on disk (with the write-ahead log)."""

    path: Path
    size_bytes: int
    free_bytes: int
    file_bytes: int


@dataclass(frozen=True, slots=True)
class Vacuumed:
    before: SpaceReport
    after: SpaceReport


async def space(db: Database) -> SpaceReport | None:
    """The SQLite file's size and free pages; None on PostgreSQL or in memory."""
    path = db.sqlite_path
    if path is None:
        return None

    def body(conn: Connection) -> tuple[int, int, int]:
        pragma = conn.exec_driver_sql
        page_size = pragma("PRAGMA page_size").scalar()
        pages = pragma("PRAGMA page_count").scalar()
        free = pragma("PRAGMA freelist_count").scalar()
        return int(page_size or 0), int(pages or 0), int(free or 0)

    page_size, pages, free = await db.read(body)
    on_disk = sum(p.stat().st_size for p in _files(path) if p.exists())
    return SpaceReport(path, page_size * pages, page_size * free, on_disk)


def _files(path: Path) -> list[Path]:
    return [path, path.with_name(path.name + "-wal")]


#: Attempts at truncating the write-ahead log after `VACUUM` (50 ms apart).
TRUNCATE_TRIES = 600


async def vacuum(db: Database) -> Vacuumed | None:
    """Rebuild the SQLite file without its free pages and truncate the write-ahead log;
    None on PostgreSQL (autovacuum's job, see above).

    It holds the write lock the service's processes share, so a running service's writes
    (approvals too) wait until it is done rather than fail; reads go on."""
    path = db.sqlite_path
    if path is None:
        return None
    before = await space(db)
    assert before is not None

    def rebuild() -> None:
        raw = sqlite3.connect(path, timeout=30, isolation_level=None)
        try:
            raw.execute("VACUUM")
            # The rebuilt file went through the log: copy it back and cut the log to nothing.
            # A checkpoint another connection is running meanwhile (the service's, which
            # copies most of the log without the write lock) makes this one return busy at
            # once rather than wait: try again until it is through.
            for _ in range(TRUNCATE_TRIES):
                busy, _log, _copied = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                if not busy:
                    break
                time.sleep(0.05)
        finally:
            raw.close()

    async with db.exclusive():
        await asyncio.to_thread(rebuild)
    after = await space(db)
    assert after is not None
    return Vacuumed(before, after)


#: The tables the pruner deletes from (`workflow.store.retention`): their dead rows are what
#: autovacuum must make reusable.
PRUNED_TABLES = (
    "proposals", "requests", "decisions", "escalations", "outcomes", "executions", "outbox",
    "audit",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Autovacuum:
    """Whether PostgreSQL's autovacuum reaches the tables the pruner deletes from."""

    #: `autovacuum` and `track_counts` (autovacuum needs both on).
    server_on: bool
    track_counts: bool
    #: Headgate's tables with `autovacuum_enabled = false` in their storage parameters.
    disabled_tables: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.server_on and self.track_counts and not self.disabled_tables

    def problem(self) -> str | None:
        """What is wrong and what to do, in a few sentences; None when autovacuum runs."""
        if self.ok:
            return None
        causes = []
        fixes = []
        if not self.server_on:
            causes.append("autovacuum is off on the server (autovacuum = off)")
            fixes.append(
                "turn it on: ALTER SYSTEM SET autovacuum = on; SELECT pg_reload_conf(); "
                "(or autovacuum = on in postgresql.conf)"
            )
        if not self.track_counts:
            causes.append("track_counts is off, without which autovacuum does nothing")
            fixes.append("ALTER SYSTEM SET track_counts = on; SELECT pg_reload_conf();")
        if self.disabled_tables:
            tables = ", ".join(self.disabled_tables)
            causes.append(f"autovacuum is disabled on {tables} (autovacuum_enabled = false)")
            resets = (f"ALTER TABLE {t} RESET (autovacuum_enabled)" for t in self.disabled_tables)
            fixes.append("; ".join(resets))
        return (
            "retention on PostgreSQL: "
            + " and ".join(causes)
            + ": the space of the rows the pruner deletes is never reused and the tables keep "
            "growing. To fix it, "
            + "; ".join(fixes)
            + ". Or VACUUM Headgate's tables yourself after pruning, e.g. hourly: vacuumdb "
            "--dbname=DB " + " ".join(f"--table={t}" for t in PRUNED_TABLES) + "."
        )


async def autovacuum(db: Database) -> Autovacuum | None:
    """Whether autovacuum reaches Headgate's tables; None on SQLite (it reuses free pages by
    itself)."""
    if db.dialect != "postgresql":
        return None

    def body(conn: Connection) -> Autovacuum:
        on = conn.exec_driver_sql("SHOW autovacuum").scalar() == "on"
        counts = conn.exec_driver_sql("SHOW track_counts").scalar() == "on"
        rows = conn.exec_driver_sql(
            "SELECT c.relname, c.reloptions FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') "
            "AND c.reloptions IS NOT NULL"
        ).all()
        disabled = tuple(
            sorted(
                name for name, options in rows if name in PRUNED_TABLES and _disabled(options or [])
            )
        )
        return Autovacuum(on, counts, disabled)

    return await db.read(body)


def _disabled(options: list[str]) -> bool:
    """`reloptions` say `autovacuum_enabled` is false (PostgreSQL's boolean spellings)."""
    for option in options:
        name, _, value = option.partition("=")
        if name.strip().lower() == "autovacuum_enabled":
            return value.strip().lower() in {"false", "off", "no", "0", "f", "n", "of"}
    return False
