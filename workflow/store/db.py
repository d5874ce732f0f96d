"""Engine creation and versioned migrations for SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import URL, Connection, Engine, event, make_url, select, text
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlmodel import SQLModel

from workflow.errors import ConfigError
from workflow.store import schema

log = logging.getLogger("headgate.store")

# Migrations run in order, each once, recorded in `schema_version`. Version 1 creates the
# tables as `schema` defines them now, so a database created today has every later change
# already: a later migration brings an older database to the same shape and must be a no-op
# on a new one (DROP … IF EXISTS, a column added only when missing). Applied migrations are
# never edited.
_V1_TABLES = [
    schema.ProposalRow,
    schema.RequestRow,
    schema.DecisionRow,
    schema.OutcomeRow,
    schema.ExecutionRow,
    schema.OutboxRow,
    schema.AuditRow,
    schema.AuditHeadRow,
]


def _v1(conn: Connection) -> None:
    SQLModel.metadata.create_all(conn, tables=[t.__table__ for t in _V1_TABLES])  # type: ignore[attr-defined]
    conn.execute(schema.AuditHeadRow.__table__.insert().values(id=1, seq=0, hash="0" * 64))  # type: ignore[attr-defined]


def _v2(conn: Connection) -> None:
    # Indexes no query reads, kept up to date by every intake transaction (on SQLite each is
    # one more page written to the WAL per commit). Databases created now never had them.
    for index in ("ix_proposals_agent", "ix_proposals_status", "ix_audit_kind"):
        conn.execute(text(f"DROP INDEX IF EXISTS {index}"))


def _v3(conn: Connection) -> None:
    # outcomes.release_id loses its UNIQUE constraint: the id is derived from the proposal id
    # (the primary key), and the index of a random key wrote one more page per intake commit.
    if conn.dialect.name == "postgresql":
        conn.execute(text("ALTER TABLE outcomes DROP CONSTRAINT IF EXISTS outcomes_release_id_key"))
        return
    unique = conn.execute(
        text("SELECT 1 FROM pragma_index_list('outcomes') WHERE \"unique\" AND origin = 'u'")
    ).first()
    if unique is None:
        return
    # SQLite cannot drop a column constraint: rebuild the table in this transaction.
    conn.execute(text("ALTER TABLE outcomes RENAME TO outcomes_before_v3"))
    schema.OutcomeRow.__table__.create(conn)  # type: ignore[attr-defined]
    conn.execute(
        text(
            "INSERT INTO outcomes (proposal_id, outcome, release_id, reason, at) "
            "SELECT proposal_id, outcome, release_id, reason, at FROM outcomes_before_v3"
        )
    )
    conn.execute(text("DROP TABLE outcomes_before_v3"))


MIGRATIONS: list[Callable[[Connection], None]] = [_v1, _v2, _v3]


def create_engine(url: str, *, pool_size: int = 5) -> AsyncEngine:
    """An async engine for a `sqlite+aiosqlite://` or `postgresql+asyncpg://` URL."""
    try:
        if url.startswith("sqlite"):
            engine = create_async_engine(url, connect_args={"timeout": 30})
            event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
            return engine
        if url.startswith("postgresql"):
            if "+asyncpg" not in url:
                raise ConfigError(
                    "PostgreSQL URLs must use the asyncpg driver: postgresql+asyncpg://…",
                    key="database-url",
                )
            return create_async_engine(url, pool_size=pool_size, pool_pre_ping=True)
    except ArgumentError as exc:
        raise ConfigError(f"invalid database URL: {exc}", key="database-url") from exc
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"the database driver is not installed ({exc.name}); for PostgreSQL install "
            "`headgate[postgres]`",
            key="database-url",
        ) from exc
    raise ConfigError(
        "unsupported database URL; use sqlite+aiosqlite:///PATH or postgresql+asyncpg://…",
        key="database-url",
    )


def in_memory_sqlite(url: str | URL) -> bool:
    """Whether a database URL names an in-memory SQLite database (private to one connection's
    process: another engine or process would see another database)."""
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except ArgumentError:  # not a URL at all: `create_engine` says so
        return False
    return parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:")


def sqlite_sync_writer(engine: AsyncEngine) -> Engine | None:
    """A synchronous engine on the same SQLite file, for write transactions run whole as one
    synchronous function (no event-loop round trip per statement). None for PostgreSQL and for
    in-memory databases (another engine would see another database)."""
    url = engine.url
    if engine.dialect.name != "sqlite" or in_memory_sqlite(url):
        return None
    sync = create_sync_engine(
        url.set(drivername="sqlite"),
        # One transaction at a time (the store's write lock, which the service's intake
        # workers share), on the event loop's thread. A lock held by something else fails the
        # transaction after the busy timeout (the stage retries it later).
        connect_args={"timeout": 10, "check_same_thread": False},
        pool_size=1,
        max_overflow=0,
    )
    event.listen(sync, "connect", _sqlite_pragmas)
    # Checkpoints are the `WalCheckpointer`'s job, in a worker thread: an automatic one would
    # run inside a commit on the event loop and stall it (tens of ms when it syncs the file).
    event.listen(sync, "connect", _no_autocheckpoint)
    return sync


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    for pragma in (
        "journal_mode=WAL",
        "busy_timeout=10000",
        "synchronous=NORMAL",
        "foreign_keys=ON",
    ):
        cursor.execute(f"PRAGMA {pragma}")
    cursor.close()


def _no_autocheckpoint(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.execute("PRAGMA wal_autocheckpoint=0")
    dbapi_connection.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")


#: The size the write-ahead log file is cut back to when it starts over (bytes).
WAL_SIZE_LIMIT = 64 * 1024 * 1024


class SqliteWriteLock:
    """The write lock of one SQLite file, for the tasks of this process and for other processes.

    SQLite serialises writers itself, but a writer that finds the file locked polls (sleeping
    1, 2, 5, 10… ms between tries), on the event loop's thread. The service's processes (the
    main one and its intake workers) instead queue on an `flock` of a file beside the database
    and are woken the moment it is released; within a process, tasks queue on an asyncio lock
    first, so at most one of them waits for the file. The checkpointer's last pass holds it too
    (see `WalCheckpointer`). `path` None (an in-memory database): this process only.
    """

    def __init__(self, path: str | None):
        self._local = asyncio.Lock()
        self._path = f"{path}-writer.lock" if path else None
        self._fd: int | None = None

    async def __aenter__(self) -> None:
        await self._local.acquire()
        try:
            await self._lock_file()
        except BaseException:
            self._local.release()
            raise

    async def __aexit__(self, *exc: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._local.release()

    async def _lock_file(self) -> None:
        if self._path is None:
            return
        if self._fd is None:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        fd = self._fd
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        # Another process writes: wait in a thread, so the loop goes on meanwhile.
        waiting = asyncio.ensure_future(asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX))
        try:
            await asyncio.shield(waiting)
        except asyncio.CancelledError:
            await asyncio.wait([waiting])  # the thread may still get it: give it back
            if not waiting.cancelled() and waiting.exception() is None:
                fcntl.flock(fd, fcntl.LOCK_UN)
            raise

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class WalCheckpointer:
    """Copies the SQLite write-ahead log back into the database file from a worker thread.

    The writer commits on the event loop with automatic checkpoints off. After a commit,
    `committed()` starts a checkpoint when the last one is `interval` seconds old and none is
    running. The checkpoint's last pass holds the store's write lock: a commit landing
    meanwhile would leave the log never completely copied, and only a completely copied log is
    started over by the next commit (measured without the lock: the log grew to 6 GB in 4 minutes at
    600 proposals/s, its index mapped into memory with it). Writers wait for the lock; the
    event loop does not (the copy and its fsync run in the thread). The log file is cut back
    to `journal_size_limit` when it restarts.
    """

    def __init__(self, path: str, lock: SqliteWriteLock, interval: float = 1.0):
        self.path = path
        self.lock = lock
        self.interval = interval
        self._last = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        self._thread: asyncio.Future[None] | None = None  # the pass running in a worker thread
        self._closing = False
        self._conn: sqlite3.Connection | None = None

    def committed(self) -> None:
        if self._closing or (self._task is not None and not self._task.done()):
            return
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        self._task = asyncio.create_task(self._run())
        self._task.add_done_callback(_log_failure)

    async def _run(self) -> None:
        # First copy what is there while commits go on, then the few frames they added with
        # the lock held: writers wait for a short copy and sync, not for the whole log's.
        await asyncio.shield(self._pass())
        async with self.lock:
            done = self._pass()
            try:
                await asyncio.shield(done)
            except asyncio.CancelledError:
                await asyncio.wait([done])  # keep the lock until the thread is finished
                raise

    def _pass(self) -> asyncio.Future[None]:
        self._thread = asyncio.ensure_future(asyncio.to_thread(self._checkpoint))
        return self._thread

    def _checkpoint(self) -> None:
        if self._conn is None:
            self._conn = sqlite3.connect(self.path, timeout=10, check_same_thread=False)
        self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    async def close(self) -> None:
        """Start no more checkpoints; wait for the running one, then close the connection.

        The thread is waited for, not only the task: a cancelled task leaves its shielded pass
        running, and closing the connection under a statement in another thread would crash."""
        self._closing = True
        if self._task is not None:
            await asyncio.wait([self._task])
        if self._thread is not None:
            await asyncio.wait([self._thread])
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("SQLite checkpoint failed (%s); the next commit retries", task.exception())


async def migrate(engine: AsyncEngine) -> int:
    """Bring the schema to the newest version; safe to run from several replicas at once."""
    async with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            # One migrator at a time across replicas; released at commit.
            await conn.execute(text("SELECT pg_advisory_xact_lock(720431)"))
        await conn.run_sync(
            lambda c: schema.SchemaVersionRow.__table__.create(c, checkfirst=True)  # type: ignore[attr-defined]
        )
        current = (
            await conn.execute(
                select(schema.SchemaVersionRow.version)  # type: ignore[call-overload]
                .order_by(schema.SchemaVersionRow.version.desc())  # type: ignore[attr-defined]
                .limit(1)
            )
        ).scalar()
        current = current or 0
        for version in range(current + 1, len(MIGRATIONS) + 1):
            await conn.run_sync(MIGRATIONS[version - 1])
            await conn.execute(
                schema.SchemaVersionRow.__table__.insert().values(  # type: ignore[attr-defined]
                    version=version, applied_at=datetime.now(UTC)
                )
            )
        return len(MIGRATIONS)
