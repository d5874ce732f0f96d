"""The PostgreSQL fast path: a transaction's inserts and its audit chain's new head in one
statement, so one round trip to the server instead of one per table and one more for the head.

Each table's rows go in as one array per column, expanded by `unnest` inside a data-modifying
`WITH` clause; the chain head's `UPDATE` is the statement's main clause. PostgreSQL runs all
of them in the one statement, atomically with the rest of the transaction. The statements are
built once per table set and column set (`text`, prepared by asyncpg and cached per
connection). SQLite keeps `workflow.store.fastpath`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import Enum
from typing import Any, NamedTuple

from sqlalchemy import Connection, Table, TextClause, text
from sqlalchemy.dialects import postgresql

_DIALECT = postgresql.dialect()  # type: ignore[no-untyped-call]


class Insert(NamedTuple):
    """Rows for one table; `ignore`: the key whose conflict skips a row."""

    table: Table
    rows: Sequence[NamedTuple]
    ignore: tuple[str, ...] = ()


def _array_type(table: Table, column: str) -> str:
    return f"{table.c[column].type.compile(dialect=_DIALECT)}[]"


def _value(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime) and value.tzinfo is None:
        raise ValueError("naive datetime given to a UTC column")
    return value


class PgInserts:
    """Builds and caches the one-statement inserts."""

    def __init__(self) -> None:
        self._statements: dict[tuple[Any, ...], TextClause] = {}

    def run(
        self, conn: Connection, inserts: Sequence[Insert], head: tuple[int, str] | None = None
    ) -> None:
        """Insert every table's rows and, with `head`, move the audit chain's head row to
        (seq, hash), in one statement."""
        present = [i for i in inserts if i.rows]
        if not present and head is None:
            return
        shape = (
            *((i.table.name, tuple(i.rows[0]._fields), i.ignore) for i in present),
            head is not None,
        )
        statement = self._statements.get(shape)
        if statement is None:
            statement = self._statements[shape] = self._build(present, head is not None)
        params: dict[str, Any] = {}
        for n, insert in enumerate(present):
            for k in range(len(insert.rows[0]._fields)):
                params[f"t{n}_{k}"] = [_value(row[k]) for row in insert.rows]
        if head is not None:
            params["head_seq"], params["head_hash"] = head
        conn.execute(statement, params)

    @staticmethod
    def _build(inserts: Sequence[Insert], head: bool) -> TextClause:
        clauses = []
        for n, insert in enumerate(inserts):
            columns = insert.rows[0]._fields
            arrays = ", ".join(
                f"CAST(:t{n}_{k} AS {_array_type(insert.table, c)})" for k, c in enumerate(columns)
            )
            sql = (
                f"INSERT INTO {insert.table.name} ({', '.join(columns)}) "
                f"SELECT * FROM unnest({arrays})"
            )
            if insert.ignore:
                sql += f" ON CONFLICT ({', '.join(insert.ignore)}) DO NOTHING"
            clauses.append(f"t{n} AS ({sql})")
        main = (
            "UPDATE audit_head SET seq = :head_seq, hash = :head_hash WHERE id = 1"
            if head
            else "SELECT 1"
        )
        prefix = f"WITH {', '.join(clauses)} " if clauses else ""
        return text(prefix + main)
