"""Versioned migrations for SQLite and PostgreSQL, recorded in `schema_version`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy import Connection, inspect, select, text
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import SQLModel

from workflow.errors import HeadgateError
from workflow.store import schema

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


def _v4(conn: Connection) -> None:
    # The web inbox: approvers' passkeys and the one-time links that register them; how far
    # each request climbed its escalation ladder.
    tables = [schema.PasskeyRow, schema.InviteRow, schema.EscalationRow]
    SQLModel.metadata.create_all(
        conn,
        tables=[t.__table__ for t in tables],  # type: ignore[attr-defined]
        checkfirst=True,
    )


def _v5(conn: Connection) -> None:
    # Approvers' grants (and the proposal each use released) and freezes.
    tables = [schema.GrantRow, schema.GrantUseRow, schema.FreezeRow]
    SQLModel.metadata.create_all(
        conn,
        tables=[t.__table__ for t in tables],  # type: ignore[attr-defined]
        checkfirst=True,
    )


def _v6(conn: Connection) -> None:
    # A grant may be limited to one client session (proposal context `session_id`).
    if conn.dialect.name == "postgresql":
        conn.execute(text("ALTER TABLE grants ADD COLUMN IF NOT EXISTS session_id VARCHAR(200)"))
        return
    columns = {row[1] for row in conn.execute(text("PRAGMA table_info(grants)"))}
    if "session_id" not in columns:
        conn.execute(text("ALTER TABLE grants ADD COLUMN session_id VARCHAR(200)"))


def _v7(conn: Connection) -> None:
    # Retention: the anchor the audit chain starts from once its oldest records are pruned,
    # and the index the pruner finds decided proposals by (an append-ordered time: inserts
    # land on the index's last page).
    anchor = schema.AuditAnchorRow.__table__  # type: ignore[attr-defined]
    anchor.create(conn, checkfirst=True)
    if conn.execute(select(anchor.c.id)).first() is None:
        conn.execute(anchor.insert().values(id=1, seq=0, hash="0" * 64))
    conn.execute(text("CREATE INDEX IF NOT EXISTS ix_outcomes_at ON outcomes (at)"))


def _v8(conn: Connection) -> None:
    # PostgreSQL: several audit chains (`store.audit`): 64-bit sequence numbers (chain `c`
    # numbers from `chain_base(c)`), and a head and an anchor row per chain. The records
    # already stored are chain 1's and verify as before. SQLite keeps one chain.
    if conn.dialect.name != "postgresql":
        return
    from workflow.store.chain import GENESIS, PG_CHAINS, chain_base

    for table in ("audit", "audit_head", "audit_anchor"):
        conn.execute(text(f"ALTER TABLE {table} ALTER COLUMN seq TYPE BIGINT"))
    for chain in range(2, PG_CHAINS + 1):
        for table in ("audit_head", "audit_anchor"):
            conn.execute(
                text(
                    f"INSERT INTO {table} (id, seq, hash) VALUES (:id, :seq, :hash) "
                    "ON CONFLICT (id) DO NOTHING"
                ),
                {"id": chain, "seq": chain_base(chain), "hash": GENESIS},
            )


def _v9(conn: Connection) -> None:
    # The stream sequence of the message each proposal and each decision was recorded from:
    # that message, come back unacked, has its events sent again, where another copy does not
    # (the intake's `_copies`) or is a replay (the collector). Rows recorded before have none
    # and are judged as before (by their times, by the delivery count).
    for table in ("proposals", "decisions"):
        if conn.dialect.name == "postgresql":
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS stream_seq BIGINT"))
            continue
        columns = {row[1] for row in conn.execute(text(f"PRAGMA table_info({table})"))}
        if "stream_seq" not in columns:
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN stream_seq BIGINT"))


MIGRATIONS: list[Callable[[Connection], None]] = [_v1, _v2, _v3, _v4, _v5, _v6, _v7, _v8, _v9]


class NoSchema(HeadgateError):
    """The database holds no Headgate schema, and it was not to be created."""


async def migrate(engine: AsyncEngine, *, create: bool = True) -> int:
    """Bring the schema to the newest version; safe to run from several replicas at once.
    `create=False`: a database without Headgate's schema is left as it is (`NoSchema`) — a
    command that only reads must not turn a mistyped database into an empty Headgate one."""
    async with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            # One migrator at a time across replicas; released at commit.
            await conn.execute(text("SELECT pg_advisory_xact_lock(720431)"))
        table = schema.SchemaVersionRow.__tablename__
        if not create and not await conn.run_sync(lambda c: inspect(c).has_table(table)):
            raise NoSchema("it has no schema_version table")
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
