"""The SQLite fast path: the only code that talks to the DB-API under SQLAlchemy.

Batch inserts: SQLAlchemy Core spends more per row than SQLite itself on the service's hot
inserts (building parameters, running a bind processor per value: measured ≈ 30 µs of the
≈ 100 µs a read's rows cost, and ≈ 25 µs per statement executed). Here each insert is compiled
once per table and column set and executed as one DB-API `executemany` over tuples on the
connection's sqlite3 connection, inside the same SQLAlchemy transaction. Values are stored
exactly as SQLAlchemy would store them (the tests read them back through the async engine),
so reads and every other write keep using Core. PostgreSQL keeps Core everywhere.

Rows are the store's typed row records (`NamedTuple`s whose field names are the table's
columns, see `workflow.effects`): a record's values are the statement's parameters as they are.
The few other statements the hot paths run on SQLite (the audit chain's head, looking up
existing proposal ids, marking outbox events published) are here too, as plain SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from enum import Enum
from typing import Any, NamedTuple

from sqlalchemy import Boolean, Connection, Table

from workflow.store.schema import UTCDateTime

Converter = Callable[[Any], Any]


def sqlite_datetime(value: datetime | None) -> str | None:
    """The text SQLAlchemy's SQLite DATETIME stores for a `UTCDateTime` value (UTC, naive)."""
    if value is None:
        return None
    if value.tzinfo is None:
        raise ValueError("naive datetime given to a UTC column")
    v = value.astimezone(UTC)
    return (
        f"{v.year:04d}-{v.month:02d}-{v.day:02d} "
        f"{v.hour:02d}:{v.minute:02d}:{v.second:02d}.{v.microsecond:06d}"
    )


def from_sqlite_datetime(value: str | None) -> datetime | None:
    """A `UTCDateTime` value as SQLAlchemy reads it back from SQLite (aware, UTC)."""
    if value is None:
        return None
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


def _sqlite_bool(value: bool | None) -> int | None:
    return None if value is None else int(value)


def _last_datetime() -> Converter:
    """`sqlite_datetime` remembering its last value: a batch's rows share one timestamp."""
    last: list[Any] = [None, None]

    def convert(value: datetime | None) -> str | None:
        if value is not last[0]:
            last[:] = [value, sqlite_datetime(value)]
        return last[1]  # type: ignore[no-any-return]

    return convert


def _converter(table: Table, column: str) -> Converter | None:
    kind = table.c[column].type
    if isinstance(kind, UTCDateTime):
        return _last_datetime()
    if isinstance(kind, Boolean):
        return _sqlite_bool
    return None


def in_chunks(values: Sequence[str], size: int = 500) -> Iterator[tuple[tuple[str, ...], str]]:
    """`values` in chunks well under SQLite's limit on bound parameters, each with the
    `?, ?, …` list for its `IN (…)`."""
    for i in range(0, len(values), size):
        chunk = tuple(values[i : i + size])
        yield chunk, ", ".join("?" * len(chunk))


def dbapi(conn: Connection) -> Any:
    """The sqlite3 connection under a SQLAlchemy connection (in its current transaction)."""
    return conn.connection.driver_connection


class PreparedInsert:
    """`INSERT [OR IGNORE] INTO table (columns) VALUES (?, …)` with per-column conversions."""

    def __init__(self, table: Table, columns: Sequence[str], *, or_ignore: bool = False):
        unknown = [c for c in columns if c not in table.c]
        if unknown:
            raise KeyError(f"{table.name} has no column {unknown[0]!r}")
        self.columns = tuple(columns)
        verb = "INSERT OR IGNORE" if or_ignore else "INSERT"
        self.sql = (
            f"{verb} INTO {table.name} ({', '.join(self.columns)}) "
            f"VALUES ({', '.join('?' * len(self.columns))})"
        )
        self._converters = [(i, f) for i, c in enumerate(columns) if (f := _converter(table, c))]

    def params(self, row: NamedTuple) -> tuple[Any, ...]:
        if not self._converters:
            return tuple(row)
        values = list(row)
        for i, convert in self._converters:
            values[i] = convert(values[i])
        return tuple(values)

    def run(self, conn: Connection, rows: Sequence[NamedTuple]) -> None:
        if rows:
            dbapi(conn).executemany(self.sql, [self.params(r) for r in rows])


class SqliteInserts:
    """Prepared inserts by table, column set and conflict handling, built on first use."""

    def __init__(self) -> None:
        self._prepared: dict[tuple[str, tuple[str, ...], bool], PreparedInsert] = {}

    def run(
        self,
        conn: Connection,
        table: Table,
        rows: Sequence[NamedTuple],
        *,
        or_ignore: bool = False,
    ) -> None:
        """Insert `rows` (row records of one type: their fields are the columns)."""
        if not rows:
            return
        columns = tuple(rows[0]._fields)
        key = (table.name, columns, or_ignore)
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = self._prepared[key] = PreparedInsert(table, columns, or_ignore=or_ignore)
        prepared.run(conn, rows)


# --------------------------------------------------------------------------- other statements


def audit_head(conn: Connection) -> tuple[int, str]:
    """The audit chain's last sequence number and hash (the write lock serialises appends)."""
    seq, digest = dbapi(conn).execute("SELECT seq, hash FROM audit_head WHERE id = 1").fetchone()
    return int(seq), str(digest)


def move_audit_head(conn: Connection, seq: int, digest: str) -> None:
    dbapi(conn).execute("UPDATE audit_head SET seq = ?, hash = ? WHERE id = 1", (seq, digest))


def proposal_digests(conn: Connection, ids: Sequence[str]) -> dict[str, str]:
    """Digest by proposal id, for the ids already stored."""
    found: dict[str, str] = {}
    for chunk, marks in in_chunks(ids):
        sql = f"SELECT id, digest FROM proposals WHERE id IN ({marks})"
        found.update(dbapi(conn).execute(sql, chunk).fetchall())
    return found


def mark_published(conn: Connection, msg_ids: Sequence[str]) -> None:
    for chunk, marks in in_chunks(msg_ids):
        dbapi(conn).execute(f"UPDATE outbox SET published = 1 WHERE msg_id IN ({marks})", chunk)


def existing_keys(conn: Connection, table: str, column: str, keys: Sequence[str]) -> set[str]:
    """Which of `keys` are stored in `table.column` (a column of the store's own schema)."""
    found: set[str] = set()
    for chunk, marks in in_chunks(keys):
        sql = f"SELECT {column} FROM {table} WHERE {column} IN ({marks})"
        found.update(row[0] for row in dbapi(conn).execute(sql, chunk))
    return found


def select_in(
    conn: Connection, select: str, column: str, keys: Sequence[str], tail: str = ""
) -> list[tuple[Any, ...]]:
    """`<select> WHERE <column> IN (…) <tail>` over `keys`, in chunks (`select` and `tail` are
    the store's own SQL, never input); the rows as tuples, in the order SQLite returns them
    per chunk. `tail` may add conditions after the IN (`AND …`) and an `ORDER BY`."""
    rows: list[tuple[Any, ...]] = []
    for chunk, marks in in_chunks(keys):
        sql = f"{select} WHERE {column} IN ({marks}) {tail}"
        rows.extend(dbapi(conn).execute(sql, chunk).fetchall())
    return rows


def update_requests(
    conn: Connection, columns: Sequence[str], rows: Sequence[dict[str, Any]]
) -> int:
    """`UPDATE requests SET <columns> WHERE request_id = b_request_id AND version = b_version`
    for each row (its `b_*` keys are the condition); returns how many rows changed."""
    sets = [c for c in columns if not c.startswith("b_")]
    sql = (
        f"UPDATE requests SET {', '.join(f'{c} = ?' for c in sets)} "
        "WHERE request_id = ? AND version = ?"
    )
    params = [
        tuple(
            sqlite_datetime(v) if isinstance(v, datetime) else str(v) if isinstance(v, Enum) else v
            for v in (*(row[c] for c in sets), row["b_request_id"], row["b_version"])
        )
        for row in rows
    ]
    cursor = dbapi(conn).executemany(sql, params)
    return int(cursor.rowcount)
