"""The database engine: creation for SQLite and PostgreSQL, and `Database`, the one place where
transactions and reads are run (the aggregates of `workflow.store` build on it).

Writes that belong together (a state change, the events that report it and its audit records)
happen in one transaction. SQLite has one writer at a time, so in-process writes queue on a lock
instead of meeting `database is locked`; on PostgreSQL concurrent transactions append their audit
records to different chains (`workflow.store.audit`) and do not wait for each other.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import URL, Connection, Engine, Table, event, make_url, select
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from workflow.errors import ConfigError, HeadgateError
from workflow.store.chain import PG_CHAINS
from workflow.store.fastpath import SqliteInserts
from workflow.store.migrations import migrate
from workflow.store.pgpath import Head, HeadMoved, PgDirect, PgInserts, PgStatements, Positional
from workflow.store.priority import PriorityLock
from workflow.store.sqlite_writer import SqliteWriteLock, WalCheckpointer

T = TypeVar("T")


class DatabaseUnavailable(HeadgateError):
    """The database could not be reached or opened (`Database.open`)."""


def shown_url(url: str) -> str:
    """`url` as it may be printed: its password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy can parse: say nothing of it
        return "(the database URL given)"


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
            # No pre-ping: it is one more round trip per transaction and per read. A connection
            # the server dropped fails its transaction once (the stage retries it) and is
            # replaced by the pool.
            return create_async_engine(url, pool_size=pool_size, max_overflow=pool_size)
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


def table(model: Any) -> Table:
    """The Core table of a sqlmodel table model."""
    return model.__table__  # type: ignore[no-any-return]


def sqlite_memory_used() -> int | None:
    """SQLite's heap in bytes (`sqlite3_memory_used`, all connections); None where the
    library cannot be loaded."""
    lib = _sqlite_library()
    return int(lib.sqlite3_memory_used()) if lib is not None else None


@functools.cache
def _sqlite_library() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("sqlite3")
    try:
        lib = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    if lib is not None:
        lib.sqlite3_memory_used.restype = ctypes.c_int64
    return lib


async def _in_thread(engine: Engine, body: Callable[[Connection], T]) -> T:
    """Run `body` as one transaction of `engine` in a worker thread. A cancelled caller still
    waits for the transaction to end: the caller's lock must outlive it."""

    def run() -> T:
        with engine.begin() as conn:
            return body(conn)

    running = asyncio.ensure_future(asyncio.to_thread(run))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        await asyncio.wait({running})
        raise


class Database:
    """An engine and the two ways to use it: `transact` (one write transaction) and `read`.

    SQLite: write transactions run as one synchronous function on a synchronous engine of the
    same file (no event-loop round trip per statement), serialised by `SqliteWriteLock`; reads
    run on that connection too; the hot inserts go through `workflow.store.fastpath`.
    PostgreSQL: both through `run_sync` on asyncpg, with Core statements built once, but the
    intake's and the collector's one-statement batches, which run on asyncpg directly
    (`transact_at_head`), and the collector's reads of a batch (`Store.decision_reads`).
    """

    def __init__(self, engine: AsyncEngine):
        self.engine = engine
        self.dialect = engine.dialect.name
        self._sync_writer = sqlite_sync_writer(engine)
        #: SQLite: the synchronous writer's one connection, kept checked out (see `_writer`).
        self._writer_conn: Connection | None = None
        #: SQLite: a second synchronous connection for background transactions, run in a
        #: worker thread under the same write lock (the event loop goes on meanwhile).
        self._background_writer = sqlite_sync_writer(engine)
        self._write_lock = (
            SqliteWriteLock(
                str(self._sync_writer.url.database) if self._sync_writer is not None else None
            )
            if self.dialect == "sqlite"
            else None
        )
        self._checkpointer = (
            WalCheckpointer(str(self._sync_writer.url.database), self._write_lock)
            if self._sync_writer is not None and self._write_lock is not None
            else None
        )
        #: PostgreSQL: this process's write transactions queue here, urgent ones first (an
        #: approval step does not wait behind the intake batches queued before it; other
        #: processes append to other audit chains). SQLite: the write lock's own.
        self.gate = self._write_lock.local if self._write_lock is not None else PriorityLock()
        #: PostgreSQL: a transaction's inserts in one statement (see `pgpath`); None on SQLite.
        self.pg_inserts = PgInserts() if self.dialect == "postgresql" else None
        #: PostgreSQL: the first statement of the intake's and the collector's transactions.
        self.pg_statements = PgStatements() if self.dialect == "postgresql" else None
        #: PostgreSQL: the connection the intake's one statement runs on
        #: (`transact_at_head`).
        self.pg_direct = PgDirect(engine) if self.dialect == "postgresql" else None
        #: PostgreSQL: the connection of the collector's reads of a batch
        #: (`Store.decision_reads`) and its steps' one statement, its statements planned for
        #: their arguments every run (see `PgDirect`).
        self.pg_collector = (
            PgDirect(engine, plan_each_run=True) if self.dialect == "postgresql" else None
        )
        #: PostgreSQL: the engine's pool without a transaction around each statement (see
        #: `read`).
        self._reader = (
            engine.execution_options(isolation_level="AUTOCOMMIT")
            if self.dialect == "postgresql"
            else engine
        )
        #: SQLite: the DB-API inserts (see `fastpath`); None on PostgreSQL.
        self.sqlite_inserts = SqliteInserts() if self.dialect == "sqlite" else None
        self._core_inserts: dict[tuple[str, bool], Any] = {}
        #: PostgreSQL: the audit chain this process appends to when its head is free (the one
        #: its last transaction used), and that head as the process's last commit left it
        #: (None: not known). This process's write transactions run one at a time (`gate`),
        #: so between them only another process or replica moves it (see `transact_at_head`).
        self.pg_prefer = 1
        self.pg_head: Head | None = None
        self._appended: Head | None = None

    @classmethod
    async def open(cls, url: str, *, pool_size: int = 5, create: bool = True) -> Database:
        """Open the database at `url` and bring its schema to the newest version; with
        `create=False`, `NoSchema` when it holds no Headgate schema (nothing is created)."""
        db = cls(create_engine(url, pool_size=pool_size))
        try:
            await migrate(db.engine, create=create)
        except (OSError, SQLAlchemyError) as exc:
            await db.close()
            reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
            raise DatabaseUnavailable(
                f"cannot open the database {shown_url(url)}: {reason}"
            ) from exc
        except BaseException:
            await db.close()
            raise
        return db

    async def close(self) -> None:
        if self._checkpointer is not None:
            await self._checkpointer.close()
        if self._writer_conn is not None:
            self._writer_conn.close()
            self._writer_conn = None
        for direct in (self.pg_direct, self.pg_collector):
            if direct is not None:
                await direct.aclose()
        for sync in (self._sync_writer, self._background_writer):
            if sync is not None:
                sync.dispose()
        if self._write_lock is not None:
            self._write_lock.close()
        await self.engine.dispose()

    @property
    def fast(self) -> bool:
        """Whether the SQLite DB-API fast path is in use (the write lock serialises writes)."""
        return self.sqlite_inserts is not None

    def insert(self, table: Table) -> Any:
        """`INSERT` in this dialect (with `on_conflict_do_nothing` available)."""
        module = postgresql if self.dialect == "postgresql" else sqlite
        return module.insert(table)

    def insert_rows(
        self,
        conn: Connection,
        table: Table,
        rows: Sequence[NamedTuple],
        *,
        ignore: Sequence[str] = (),
    ) -> None:
        """Insert row records into `table`; `ignore`: the key columns whose conflict skips a
        row instead of failing the transaction."""
        if not rows:
            return
        if self.sqlite_inserts is not None:
            self.sqlite_inserts.run(conn, table, rows, or_ignore=bool(ignore))
            return
        key = (table.name, bool(ignore))
        statement = self._core_inserts.get(key)
        if statement is None:
            statement = (
                self.insert(table).on_conflict_do_nothing(index_elements=list(ignore))
                if ignore
                else table.insert()
            )
            self._core_inserts[key] = statement
        conn.execute(statement, [r._asdict() for r in rows])

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite database file; None on PostgreSQL and in memory."""
        writer = self._sync_writer
        return Path(str(writer.url.database)) if writer is not None else None

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Hold the writer for work outside a transaction (SQLite's `VACUUM`): every writer
        of the database's processes waits meanwhile."""
        if self._write_lock is None:
            async with self.gate.hold():
                yield
            return
        async with self._write_lock.hold():
            yield

    @asynccontextmanager
    async def _write(
        self, urgent: bool, background: bool = False
    ) -> AsyncIterator[AsyncConnection]:
        lock = self.gate if self._write_lock is None else self._write_lock
        async with lock.hold(urgent=urgent, background=background):
            self._appended = None
            try:
                async with self.engine.begin() as conn:
                    yield conn
            except BaseException:
                self.pg_head = None  # committed or not: unknown
                raise
            if self._appended is not None:
                self.pg_head = self._appended
                self.pg_prefer = self._appended.chain

    def appended(self, head: Head) -> None:
        """The transaction under way moved an audit chain's head to `head` (PostgreSQL): once
        it commits, this process's next transactions try that chain first."""
        self._appended = head

    async def transact_at_head(
        self,
        body: Callable[[Head], tuple[Positional, Head]],
        *,
        urgent: bool = False,
        on: PgDirect | None = None,
    ) -> bool:
        """PostgreSQL: run one statement committed on its own (one round trip, no BEGIN and no
        COMMIT of their own, on `PgDirect`'s connection: `on`, else the intake's
        `pg_direct`) after the audit head this process's
        last transaction left, when one is known: `body` chains its records after that head
        and returns the statement and the new head (`PgInserts.at`). False when it wrote
        nothing — no head known, or `HeadMoved` (another process or replica appended to that
        chain meanwhile, or a row was stored already): the caller then runs its transaction
        as before (`transact`), which locks a free head, preferring another chain than the one
        that moved. `urgent`: as `transact`'s."""
        direct = on or self.pg_direct
        assert direct is not None, "PostgreSQL only"
        async with self.gate.hold(urgent=urgent):
            head = self.pg_head
            if head is None:
                return False
            self.pg_head = None
            statement, moved = body(head)
            try:
                await direct.execute(statement, head.chain)
            except HeadMoved:
                self.pg_prefer = head.chain % PG_CHAINS + 1
                return False
            self.pg_head = moved
            return True

    async def transact(
        self, body: Callable[[Connection], T], *, urgent: bool = False, background: bool = False
    ) -> T:
        """Run `body` as one write transaction (commit on return, rollback on exception).

        `urgent`: an approval step (a decision, cancel or expiry): it goes before the other
        writers of this process waiting at that moment (see `PriorityLock`). `background`:
        housekeeping (the retention pruner): it goes after them, and on SQLite runs in a worker
        thread on a connection of its own rather than on the event loop, so a long deletion
        does not stop the stages meanwhile (their writes wait for the lock; their reads go on),
        and returns once a checkpoint has copied what it wrote to the log.

        SQLite: the whole transaction runs synchronously on the event loop's thread, on the
        synchronous writer, serialised by the write lock like every other write. A transaction
        of the service is a few statements over prepared rows (about 0.3 ms for one proposal,
        20 ms for a batch of 256): cheaper than a hop to a worker thread, which also made the
        two threads queue for the GIL (measured: read p50 at 200/s 3.7 → 3.2 ms, p90 9 → 4.7).
        PostgreSQL: through `run_sync` on asyncpg.
        """
        writer = self._sync_writer
        if writer is None or self._write_lock is None:
            async with self._write(urgent, background) as conn:
                return await conn.run_sync(body)
        if background and self._background_writer is not None:
            async with self._write_lock.hold(background=True):
                result = await _in_thread(self._background_writer, body)
            if self._checkpointer is not None:
                # Its frames copied before the next one lands (see `after_bulk_commit`).
                await self._checkpointer.after_bulk_commit()
            return result
        async with self._write_lock.hold(urgent=urgent):
            kept = self._writer(writer)
            with kept.begin():
                result = body(kept)
        if self._checkpointer is not None:
            self._checkpointer.committed()
        return result

    def _writer(self, writer: Engine) -> Connection:
        """The synchronous writer's connection, checked out of its pool once and kept: a
        checkout and a check-in cost about as much as a one-proposal transaction's statements
        (30 µs against 4 µs for BEGIN and COMMIT on the kept connection), twice per batch of
        the intake and of the collector. Only the event loop's thread uses it, one
        transaction or read at a time, as it used the pool's one connection. An invalidated
        connection (a failed DB-API connection) is replaced."""
        conn = self._writer_conn
        if conn is None or conn.closed or conn.invalidated:
            if conn is not None:
                conn.close()
            conn = self._writer_conn = writer.connect()
        return conn

    async def read(self, body: Callable[[Connection], T], *, background: bool = False) -> T:
        """Run `body` as a read.

        SQLite: synchronously on the writer's connection — an indexed lookup costs less than
        the hop to aiosqlite's thread and back (≈ 0.2 ms, several per decision). Nothing else
        uses that connection meanwhile: writes are synchronous too. `background` (a long read
        of housekeeping): in a worker thread on the background connection instead, without
        the write lock (a reader of the write-ahead log waits for no writer), so the loop goes
        on. PostgreSQL: `run_sync` on a pooled connection in autocommit mode: each statement is
        one round trip, without the BEGIN before it and the ROLLBACK after (the intake reads
        the freezes for every batch). Under READ COMMITTED every statement took a snapshot of
        its own anyway.
        """
        if background and self._background_writer is not None:
            return await _in_thread(self._background_writer, body)
        writer = self._sync_writer
        if writer is not None:
            kept = self._writer(writer)
            try:
                return body(kept)
            finally:
                # What the pool's check-in did: end the transaction a Core statement began,
                # so no snapshot outlives the read (it would hold back the checkpoints).
                if kept.in_transaction():
                    kept.rollback()
        async with self._reader.connect() as conn:
            return await conn.run_sync(body)

    async def release_memory(self) -> int:
        """SQLite: free the background connection's page cache (`PRAGMA shrink_memory`), in
        its worker thread; returns the bytes SQLite's heap gave back (0 on PostgreSQL).

        For the pruner, after a pass: what the pass read stays cached on that connection
        until its next transaction, which drops it unread anyway (in WAL mode a connection's
        cache is discarded once another connection has committed, and the writer commits many
        times in the seconds between two passes): up to `cache_size` (2 MB) held for nothing,
        counted as growth by a soak. The writer's cache, which the hot path uses, is kept."""
        if self._background_writer is None:
            return 0

        def shrink(conn: Connection) -> int:
            before = sqlite_memory_used() or 0
            conn.exec_driver_sql("PRAGMA shrink_memory")
            return max(0, before - (sqlite_memory_used() or 0))

        return await _in_thread(self._background_writer, shrink)

    async def ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(select(1))
