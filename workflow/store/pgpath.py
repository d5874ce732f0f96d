"""The PostgreSQL fast path: every write transaction of the hot paths is two statements,
so BEGIN, two round trips and COMMIT whatever the batch's size.

1. `PgStatements`: what must be known before the audit records can be chained — the intake's
   proposals insert (which ids were new, the digests of those already stored), or the
   collector's decisions, version-checked request updates and proposal statuses (which nonces
   were new, which requests moved) — together with the audit head's `FOR UPDATE`.
2. `PgInserts.run`: the rows that follow (requests, outcomes, outbox, audit) and the head's
   move to the new end of the chain.

Each table's rows go in as one array per column, expanded by `unnest` inside a data-modifying
`WITH` clause. PostgreSQL runs all of them in the one statement, atomically with the rest of
the transaction. The statements are built once per table set and column set (`text`,
prepared by asyncpg and cached per connection). SQLite keeps `workflow.store.fastpath`.

Once a process knows where its last commit left its audit chain's head, an intake batch is
one statement committed on its own (`PgInserts.at`), and so is a batch of approval steps
(`PgInserts.steps_at`), each run on a connection of its own without SQLAlchemy (`PgDirect`);
the collector's reads of a batch are one statement on the collector's (`DECISION_READS` in
`workflow.store.repo`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from enum import Enum
from typing import Any, NamedTuple

from sqlalchemy import Connection, Table, TextClause, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.ext.asyncio import AsyncEngine

from workflow.effects import DecisionRecord
from workflow.store import schema

log = logging.getLogger("headgate.store")

#: Seconds a `PgDirect` statement may take before its connection is given up. Its statements
#: take milliseconds; a connection that stopped answering without being closed (a network
#: partition, a server host gone in a failover) would otherwise hold its stage until the
#: kernel gives up on the socket, a quarter of an hour by Linux's defaults.
STATEMENT_TIMEOUT = 30.0

_DIALECT = postgresql.dialect()  # type: ignore[no-untyped-call]
_ASYNCPG = asyncpg_dialect()  # type: ignore[no-untyped-call]


class Compiled(NamedTuple):
    """A statement as asyncpg takes it: `$n` parameters, and the name of each in order."""

    sql: str
    names: tuple[str, ...]


class Positional(NamedTuple):
    """A statement and its arguments, for `PgDirect`."""

    sql: str
    args: tuple[Any, ...]


def positional(statement: TextClause) -> Compiled:
    """`statement` with its `:name` parameters numbered as asyncpg takes them (a name used
    twice is one parameter)."""
    compiled = statement.compile(dialect=_ASYNCPG)
    return Compiled(compiled.string, tuple(compiled.positiontup or ()))


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
        self._positional: dict[tuple[Any, ...], Compiled] = {}

    def run(self, conn: Connection, inserts: Sequence[Insert], head: Head | None = None) -> None:
        """Insert every table's rows and, with `head`, move that audit chain's head row to
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
            params["head_chain"], params["head_seq"], params["head_hash"] = head
        conn.execute(statement, params)

    def at(
        self,
        inserts: Sequence[Insert],
        old: Head,
        new: Head,
        freezes: Sequence[str] | None = None,
    ) -> Positional:
        """One statement, to be committed on its own (`PgDirect`): the rows of every insert,
        each of the first insert's rows new (its `ignore` conflict skips none), and
        `old.chain`'s head moved from `old` to `new` — the head this process's last append
        left, no lock taken before — and, with `freezes`, exactly those freezes in force.
        Anything else (a row of the first insert already stored, the head moved by another
        writer, a freeze put in force or lifted) fails the statement, which `PgDirect` raises
        as `HeadMoved`, and nothing is written: the caller locks a head and writes in a
        transaction instead."""
        present = [i for i in inserts if i.rows]
        params: dict[str, Any] = {"first_rows": len(present[0].rows)}
        if freezes is not None:
            params["freezes"] = list(freezes)
        return self._at(present, old, new, params, freezes is not None, False)

    def steps_at(
        self,
        decisions: Sequence[DecisionRecord],
        steps: Sequence[StepRow],
        inserts: Sequence[Insert],
        old: Head,
        new: Head,
    ) -> Positional:
        """`at` for a batch of approval steps: the decisions recorded, each nonce new; every
        step applied as `PgStatements.apply_steps` applies it (the same clauses: one lock
        order), each request update finding its request at the version expected and each
        status set; the rows of `inserts` (outcomes, events, audit). Anything else fails the
        statement as `at`'s fails."""
        # In the order `apply_steps` takes them.
        decisions = sorted(decisions, key=lambda d: (d.request_id, d.nonce))
        steps = sorted(steps, key=lambda s: s.request_id)
        params: dict[str, Any] = {
            **_arrays("d", decisions, len(DecisionRecord._fields)),
            **_arrays("s", steps, len(StepRow._fields)),
            "decision_rows": len(decisions),
            "moved_rows": sum(s.b_version is not None for s in steps),
            "status_rows": sum(s.proposal_id is not None for s in steps),
        }
        return self._at([i for i in inserts if i.rows], old, new, params, False, True)

    def _at(
        self,
        present: Sequence[Insert],
        old: Head,
        new: Head,
        params: dict[str, Any],
        freezes: bool,
        steps: bool,
    ) -> Positional:
        shape = (
            freezes,
            steps,
            *((i.table.name, tuple(i.rows[0]._fields), i.ignore) for i in present),
        )
        statement = self._positional.get(shape)
        if statement is None:
            statement = self._positional[shape] = positional(
                self._build_at(present, freezes, steps)
            )
        for n, insert in enumerate(present):
            for k in range(len(insert.rows[0]._fields)):
                params[f"t{n}_{k}"] = [_value(row[k]) for row in insert.rows]
        params["head_chain"], params["head_seq"], params["head_hash"] = new
        params["old_seq"], params["old_hash"] = old.seq, old.hash
        return Positional(statement.sql, tuple(params[n] for n in statement.names))

    @classmethod
    def _build_at(cls, inserts: Sequence[Insert], freezes: bool, steps: bool) -> TextClause:
        if steps:
            first = "d"
            clauses = [_decisions_clause(), *_step_clauses(_COUNTS), *cls._clauses(inserts)]
            checks = [
                "(SELECT count(*) FROM d) = CAST(:decision_rows AS BIGINT)",
                "(SELECT count(*) FROM u) = CAST(:moved_rows AS BIGINT)",
                "(SELECT count(*) FROM st) = CAST(:status_rows AS BIGINT)",
            ]
        else:
            first = "t0"
            clauses = cls._clauses(inserts, returning=True)
            checks = ["(SELECT count(*) FROM t0) = CAST(:first_rows AS BIGINT)"]
            if freezes:
                checks.append(FREEZES_UNCHANGED)
        clauses.append(
            "h AS (UPDATE audit_head SET seq = :head_seq, hash = :head_hash "
            "WHERE id = :head_chain AND seq = :old_seq AND hash = :old_hash RETURNING id)"
        )
        # Unless the head moved as expected and every first row was new (and every step
        # applied), the statement fails on a cast of a sentence to an integer, so none of its
        # writes is kept and the line the server logs for it (`invalid input syntax for type
        # integer: "headgate: …"`) says what happened. The sentence ends in a count the server
        # only knows when it runs the statement: a constant would be cast, and fail, when the
        # statement is planned.
        return text(
            f"WITH {', '.join(clauses)} SELECT CASE WHEN (SELECT count(*) FROM h) = 1 "
            f"AND {' AND '.join(checks)} THEN 1 "
            f"ELSE CAST('{HEAD_MOVED_SENTENCE} (new rows: ' || "
            f"CAST((SELECT count(*) FROM {first}) AS VARCHAR) || ')' AS INTEGER) END"
        )

    @staticmethod
    def _clauses(inserts: Sequence[Insert], returning: bool = False) -> list[str]:
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
            if returning and n == 0:
                sql += " RETURNING 1"
            clauses.append(f"t{n} AS ({sql})")
        return clauses

    @classmethod
    def _build(cls, inserts: Sequence[Insert], head: bool) -> TextClause:
        clauses = cls._clauses(inserts)
        main = (
            "UPDATE audit_head SET seq = :head_seq, hash = :head_hash WHERE id = :head_chain"
            if head
            else "SELECT 1"
        )
        prefix = f"WITH {', '.join(clauses)} " if clauses else ""
        return text(prefix + main)


# --------------------------------------------------------------------------- locking the head


#: What `PgInserts.at`'s statement meets when its guess was wrong: its own failed cast (the
#: head moved or a first row was stored already), a unique key taken (a record number another
#: writer used, a row of a stored proposal), a deadlock (PostgreSQL chose this statement to
#: fail).
_HEAD_MOVED = frozenset({"22P02", "23505", "40P01"})

#: The sentence of the failure of `PgInserts.at`'s statement, as the server logs it (no quote
#: in it: it is a literal of the statement).
HEAD_MOVED_SENTENCE = (
    "headgate: the audit chain head was not where this process left it, or a proposal of the "
    "batch was stored already, or the freezes in force changed; nothing was written, the "
    "batch is written in a transaction"
)

#: True when the freezes in force are exactly those of `:freezes` (a list of distinct ids):
#: as many, and none outside it (ids are the table's key).
FREEZES_UNCHANGED = (
    "(SELECT count(*) FROM freezes WHERE lifted_at IS NULL) = "
    "cardinality(CAST(:freezes AS VARCHAR[])) AND NOT EXISTS (SELECT 1 FROM freezes WHERE "
    "lifted_at IS NULL AND freeze_id <> ALL(CAST(:freezes AS VARCHAR[])))"
)


class HeadMoved(Exception):
    """`PgInserts.at`'s statement wrote nothing: the chain's head was not where this process
    left it, or a row was stored already, or the freezes in force changed."""

    def __init__(self, chain: int):
        super().__init__(f"audit chain {chain} moved, or a row was stored already")
        self.chain = chain


class DirectFailed(Exception):
    """`PgDirect`'s statement failed otherwise than by its own refusal (the connection lost,
    the server refusing it for another reason): whether it was committed is not known, and
    the connection is closed (the next statement opens another)."""

    def __init__(self, cause: Exception):
        super().__init__(
            f"PostgreSQL statement failed ({type(cause).__name__}: {cause}); "
            "its connection is opened again for the next one"
        )


class PgDirect:
    """A connection of its own on asyncpg, without SQLAlchemy, for the statements committed on
    their own (`PgInserts.at`: the intake's batch, or the collector's batch of approval steps,
    in one statement), and for the collector's reads of a batch (`fetch`).

    Through SQLAlchemy (`run_sync`'s greenlet, the parameters bound and processed, an
    execution context, a pool check-out and check-in) that one statement took about a sixth of
    an intake worker's CPU at batches of one (docs/bench.md, sixteenth pass); here it is
    asyncpg's own call, the statement prepared once per connection and cached by its text.
    The connection is opened on first use with the engine's own connect arguments (host,
    credentials, `ssl` from the URL). Any failure but the statement's own refusal (`HeadMoved`)
    closes it, whatever state it was left in, and the next use opens another.

    `plan_each_run`: its statements are planned for their arguments every time
    (`plan_cache_mode = force_custom_plan`, set on the session when statements are cached,
    that is, not behind a pooler in transaction mode, where every statement is planned anew
    anyway). A cached statement's generic plan is chosen after five runs when it costs no more
    than theirs: on a new database that is while its tables are nearly empty, and the plan,
    sequential scans and hash joins, is then kept as the tables grow until an analyze replaces
    it. Measured in a minute's soak at 500/s: the collector's reads took 2.2 ms of the
    server's time each and a quarter of a core at 75 a second, its steps' statement 0.15
    core; planned each run, 0.03 and 0.08 core. The intake's statement reads no table but by
    its keys, and planning it each run cost its server process 0.25 core against 0.15.

    A server that refuses the setting (before PostgreSQL 12 there is none) leaves the plans
    to PostgreSQL, with a warning.

    `observers`: called with each statement's text once it has run, and what it raised
    (None when it succeeded); the store's tests count the round trips with them.

    `timeout`: seconds a statement may take; then it fails as a lost connection does
    (`DirectFailed`), and the next statement opens another. Opening the connection has as long
    (then `TimeoutError`, the statement not sent).
    """

    #: How `plan_each_run` is asked of the session.
    PLAN_EACH_RUN = "SET plan_cache_mode = force_custom_plan"

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        plan_each_run: bool = False,
        timeout: float = STATEMENT_TIMEOUT,
    ):
        args, kwargs = engine.dialect.create_connect_args(engine.url)
        # Options of SQLAlchemy's asyncpg adapter, not of `asyncpg.connect`; its statement
        # cache's size is asyncpg's own (0 behind a pooler in transaction mode, as there).
        for key in ("async_creator_fn", "prepared_statement_name_func"):
            kwargs.pop(key, None)
        cache = kwargs.pop("prepared_statement_cache_size", None)
        if cache is not None:
            kwargs["statement_cache_size"] = int(cache)
        self._custom_plans = plan_each_run and kwargs.get("statement_cache_size", 100) != 0
        kwargs.setdefault("timeout", timeout)
        self._args, self._kwargs = args, kwargs
        self.timeout = timeout
        self._conn: Any = None
        #: One statement at a time on the connection (asyncpg runs one per connection).
        self._busy = asyncio.Lock()
        self.observers: list[Callable[[str, BaseException | None], object]] = []

    async def execute(self, statement: Positional, chain: int) -> None:
        """Run `statement` in autocommit (committed when it returns). `HeadMoved` (for audit
        chain `chain`) when the server refused it as `PgInserts.at`'s statement refuses."""
        await self._run(statement, chain)

    async def fetch(self, statement: Positional) -> Any:
        """Run a read and return its one row (an `asyncpg.Record`; None when it has none)."""
        return await self._run(statement, None)

    async def _run(self, statement: Positional, chain: int | None) -> Any:
        async with self._busy:
            conn = self._conn
            if conn is None or conn.is_closed():
                import asyncpg

                conn = await asyncpg.connect(*self._args, **self._kwargs)
                if self._custom_plans:
                    try:
                        await conn.execute(self.PLAN_EACH_RUN, timeout=self.timeout)
                    except asyncpg.PostgresError as exc:
                        # A server before PostgreSQL 12 has no such setting: its plans are
                        # PostgreSQL's choice, as on the intake's connection.
                        self._custom_plans = False
                        log.warning(
                            "PostgreSQL refused %r (%s): the collector's statements keep "
                            "PostgreSQL's choice of plan",
                            self.PLAN_EACH_RUN,
                            exc,
                        )
                    except BaseException:
                        conn.terminate()
                        raise
                self._conn = conn
            try:
                if chain is None:
                    row = await conn.fetchrow(statement.sql, *statement.args, timeout=self.timeout)
                else:
                    row = await conn.execute(statement.sql, *statement.args, timeout=self.timeout)
            except BaseException as exc:
                for observer in self.observers:
                    observer(statement.sql, exc)
                if chain is not None and getattr(exc, "sqlstate", None) in _HEAD_MOVED:
                    raise HeadMoved(chain) from exc
                # Lost, cancelled mid-statement, or refused otherwise: its state is not known.
                self.close()
                if isinstance(exc, Exception):
                    raise DirectFailed(exc) from exc
                raise
            for observer in self.observers:
                observer(statement.sql, None)
            return row

    def close(self) -> None:
        """Close the connection at once (a statement under way is abandoned)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()

    async def aclose(self) -> None:
        """Close the connection the way a client says goodbye (the service stopping)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close(timeout=5)
            except Exception:
                conn.terminate()


class Head(NamedTuple):
    """The head of one of the audit chains as a statement locked it (`FOR UPDATE`): the
    appends of the transaction chain after it."""

    chain: int
    seq: int
    hash: str


#: The first audit chain whose head no other transaction holds (`SKIP LOCKED`): concurrent
#: writers (intake processes, the collector, replicas) append to different chains instead of
#: waiting for each other's commit. No row when all are held (the caller then waits for one).
#: `head_prefer`: the chain tried first (the process's own, see `Database.pg_prefer`), so
#: the processes keep to one chain each and `PgInserts.at`'s statement finds its head where
#: it was.
HEAD_FREE = (
    "SELECT id, seq, hash FROM audit_head ORDER BY id <> :head_prefer, id "
    "LIMIT 1 FOR UPDATE SKIP LOCKED"
)
_HEAD_CTE = f"head AS ({HEAD_FREE})"
_HEAD_ROW = "SELECT 9, CAST(id AS VARCHAR) || ':' || CAST(seq AS VARCHAR), hash FROM head"


class ProposalsInserted(NamedTuple):
    new: set[str]
    existing_digests: dict[str, str]
    #: None: every chain's head was held by another transaction.
    head: Head | None


class StepsApplied(NamedTuple):
    new_nonces: set[str]
    moved_requests: set[str]
    #: None: every chain's head was held by another transaction.
    head: Head | None


def _unnest(prefix: str, table: Table, columns: Sequence[str]) -> str:
    return ", ".join(
        f"CAST(:{prefix}_{k} AS {_array_type(table, c)})" for k, c in enumerate(columns)
    )


def _arrays(prefix: str, rows: Sequence[Sequence[Any]], width: int) -> dict[str, list[Any]]:
    return {f"{prefix}_{k}": [_value(row[k]) for row in rows] for k in range(width)}


def _head(row: Any) -> Head:
    chain, seq = str(row[1]).split(":")
    return Head(int(chain), int(seq), str(row[2]))


class PgStatements:
    """The intake's and the collector's first statement of a transaction, each one round trip
    that also locks the audit chain's head (the second statement is `PgInserts.run`).

    The sub-statements of a `WITH` clause run on one snapshot; the `UNION ALL` of the main
    query reads them in order, so rows are written before the head is locked, the order the
    writers always took (no new lock-order deadlock between replicas)."""

    def __init__(self) -> None:
        self._proposals: Table = schema.ProposalRow.__table__  # type: ignore[attr-defined]
        self._by_columns: dict[tuple[str, ...], TextClause] = {}
        self._steps: TextClause | None = None

    def insert_proposals(
        self, conn: Connection, rows: Sequence[NamedTuple], prefer: int = 1
    ) -> ProposalsInserted:
        """Insert the proposals whose id is new, read the digests of those already stored and
        lock the audit head, in one statement. An id a concurrent transaction inserted and
        committed while this one waited is in neither set: the caller reads it."""
        columns = tuple(rows[0]._fields)
        statement = self._by_columns.get(columns)
        if statement is None:
            statement = self._by_columns[columns] = self._build_proposals(columns)
        # In id order: replicas inserting overlapping ids take their index locks in one order,
        # so neither waits for the other in a cycle (in arrival order they deadlocked).
        rows = sorted(rows, key=lambda row: str(row.id))  # type: ignore[attr-defined]
        params = {**_arrays("p", rows, len(columns)), "head_prefer": prefer}
        new: set[str] = set()
        existing: dict[str, str] = {}
        head = None
        for row in conn.execute(statement, params):
            if row[0] == 0:
                new.add(row[1])
            elif row[0] == 1:
                existing[row[1]] = row[2]
            else:
                head = _head(row)
        return ProposalsInserted(new, existing, head)

    def _build_proposals(self, columns: tuple[str, ...]) -> TextClause:
        table = self._proposals.name
        ids = f"CAST(:p_{columns.index('id')} AS {_array_type(self._proposals, 'id')})"
        return text(
            f"WITH ins AS (INSERT INTO {table} ({', '.join(columns)}) "
            f"SELECT * FROM unnest({_unnest('p', self._proposals, columns)}) "
            "ON CONFLICT (id) DO NOTHING RETURNING id), "
            f"old AS (SELECT id, digest FROM {table} WHERE id = ANY({ids})), {_HEAD_CTE} "
            "SELECT 0, id, CAST(NULL AS VARCHAR) FROM ins "
            f"UNION ALL SELECT 1, id, digest FROM old UNION ALL {_HEAD_ROW}"
        )

    def apply_steps(
        self,
        conn: Connection,
        decisions: Sequence[DecisionRecord],
        steps: Sequence[StepRow],
        prefer: int = 1,
    ) -> StepsApplied:
        """Record the decisions whose nonce is new; apply each step whose nonce is new (or
        that has none): its version-checked request update and its proposal's status; lock
        the audit head. One statement; it reports the new nonces and the requests it moved
        (a step whose request was at another version moved nothing: the caller rolls back)."""
        if self._steps is None:
            self._steps = self._build_steps()
        # In request id order (a request has one step per batch): replicas applying decisions
        # on the same requests lock their rows, and the decisions' unique keys, in one order,
        # so neither waits for the other in a cycle (in batch order they deadlocked).
        decisions = sorted(decisions, key=lambda d: (d.request_id, d.nonce))
        steps = sorted(steps, key=lambda s: s.request_id)
        params = {
            **_arrays("d", decisions, len(DecisionRecord._fields)),
            **_arrays("s", steps, len(StepRow._fields)),
            "head_prefer": prefer,
        }
        new_nonces: set[str] = set()
        moved: set[str] = set()
        head = None
        for row in conn.execute(self._steps, params):
            if row[0] == 0:
                new_nonces.add(row[1])
            elif row[0] == 1:
                moved.add(row[1])
            elif row[0] == 9:
                head = _head(row)
        return StepsApplied(new_nonces, moved, head)

    def _build_steps(self) -> TextClause:
        return text(
            f"WITH {_decisions_clause()}, {', '.join(_step_clauses(_COUNTS))}, {_HEAD_CTE} "
            "SELECT 0, nonce, CAST(NULL AS VARCHAR) FROM d "
            "UNION ALL SELECT 1, request_id, NULL FROM u "
            f"UNION ALL SELECT 2, id, NULL FROM st UNION ALL {_HEAD_ROW}"
        )


def _decisions_clause() -> str:
    """The `WITH` clause `d` recording the decisions (`DecisionRecord`s in the `:d_k` arrays)
    whose nonce is new (each such nonce)."""
    dec: Table = schema.DecisionRow.__table__  # type: ignore[attr-defined]
    columns = DecisionRecord._fields
    return (
        f"d AS (INSERT INTO {dec.name} ({', '.join(columns)}) "
        f"SELECT * FROM unnest({_unnest('d', dec, columns)}) "
        "ON CONFLICT (nonce) DO NOTHING RETURNING nonce)"
    )


#: `PgStatements.apply_steps`: a step counts when it has no nonce or its nonce is new.
_COUNTS = "(s.nonce IS NULL OR s.nonce IN (SELECT nonce FROM d))"


def _step_clauses(counts: str) -> list[str]:
    """The `WITH` clauses applying approval steps (`StepRow`s in the `:s_k` arrays) where
    `counts` holds: `s` the steps, `u` the version-checked request updates (each the request's
    id), `st` the proposals' statuses (each the proposal's id)."""
    req: Table = schema.RequestRow.__table__  # type: ignore[attr-defined]
    dec: Table = schema.DecisionRow.__table__  # type: ignore[attr-defined]
    prop: Table = schema.ProposalRow.__table__  # type: ignore[attr-defined]
    step_types = {
        "request_id": (req, "request_id"),
        "nonce": (dec, "nonce"),
        "b_version": (req, "version"),
        "requirement": (req, "requirement"),
        "expires_at": (req, "expires_at"),
        "state": (req, "state"),
        "closed_at": (req, "closed_at"),
        "proposal_id": (prop, "id"),
        "status": (prop, "status"),
    }
    arrays = ", ".join(
        f"CAST(:s_{k} AS {_array_type(*step_types[c])})" for k, c in enumerate(StepRow._fields)
    )
    return [
        f"s AS (SELECT * FROM unnest({arrays}) AS s({', '.join(StepRow._fields)}))",
        f"u AS (UPDATE {req.name} r SET version = s.b_version + 1, "
        "requirement = COALESCE(s.requirement, r.requirement), "
        "expires_at = COALESCE(s.expires_at, r.expires_at), "
        "state = COALESCE(s.state, r.state), closed_at = COALESCE(s.closed_at, r.closed_at) "
        "FROM s WHERE s.b_version IS NOT NULL AND r.request_id = s.request_id "
        f"AND r.version = s.b_version AND {counts} RETURNING r.request_id)",
        f"st AS (UPDATE {prop.name} p SET status = s.status FROM s "
        f"WHERE s.proposal_id IS NOT NULL AND p.id = s.proposal_id AND {counts} "
        "RETURNING p.id)",
    ]


class StepRow(NamedTuple):
    """One approval step as `PgStatements.apply_steps` applies it: None leaves a column as it
    is (`b_version` None: no request update; `proposal_id` None: no status)."""

    request_id: str
    nonce: str | None
    b_version: int | None
    requirement: str | None
    expires_at: datetime | None
    state: Enum | None
    closed_at: datetime | None
    proposal_id: str | None
    status: Enum | None
