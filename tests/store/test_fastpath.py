"""The SQLite fast path's DB-API inserts store exactly what SQLAlchemy Core would store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, create_engine, text
from sqlmodel import SQLModel

from workflow.effects import OutcomeRecord
from workflow.outcomes import Outcome
from workflow.store import schema
from workflow.store.fastpath import PreparedInsert, SqliteInserts, in_chunks, sqlite_datetime
from workflow.store.outbox import OutboxRecord

OUTBOX = schema.OutboxRow.__table__  # type: ignore[attr-defined]
OUTCOMES = schema.OutcomeRow.__table__  # type: ignore[attr-defined]


def _engine() -> Engine:
    engine = create_engine("sqlite://")
    SQLModel.metadata.create_all(engine, tables=[OUTBOX, OUTCOMES])
    return engine


def _raw(engine: Engine, table: str) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(f"SELECT * FROM {table} ORDER BY 1"))]


def _outbox_row(msg_id: str, at: datetime, published: bool = False) -> OutboxRecord:
    return OutboxRecord(msg_id, "hg.released.agent-1", '{"x": "é"}', None, "p1", published, at)


# No deadline: each example opens a database, which takes longer on a busy machine.
@settings(deadline=None)
@given(
    st.datetimes(
        min_value=datetime(1970, 1, 2),
        max_value=datetime(2200, 1, 1),
        timezones=st.sampled_from(
            [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]
        ),
    ),
    st.booleans(),
)
def test_rows_are_stored_as_core_stores_them(at: datetime, published: bool) -> None:
    core, fast = _engine(), _engine()
    with core.begin() as conn:
        conn.execute(OUTBOX.insert(), [_outbox_row("m1", at, published)._asdict()])
    with fast.begin() as conn:
        SqliteInserts().run(conn, OUTBOX, [_outbox_row("m1", at, published)])
    assert _raw(fast, "outbox") == _raw(core, "outbox")
    with fast.connect() as conn:  # and Core reads it back as the same instant
        stored = conn.execute(OUTBOX.select()).one()
    assert stored.created_at == at.astimezone(UTC)
    assert stored.published is published


def test_outbox_inserts_ignore_a_msg_id_already_held() -> None:
    engine = _engine()
    now = datetime.now(UTC)
    inserts = SqliteInserts()
    with engine.begin() as conn:
        inserts.run(conn, OUTBOX, [_outbox_row("m1", now)], or_ignore=True)
        inserts.run(conn, OUTBOX, [_outbox_row("m1", now), _outbox_row("m2", now)], or_ignore=True)
    assert [r[0] for r in _raw(engine, "outbox")] == ["m1", "m2"]


def test_a_duplicate_without_or_ignore_fails_the_transaction() -> None:
    engine = _engine()
    row = OutcomeRecord("p1", Outcome.RELEASED, "r1", "ok", datetime.now(UTC))
    with pytest.raises(Exception, match="UNIQUE"), engine.begin() as conn:
        SqliteInserts().run(conn, OUTCOMES, [row, row])
    assert _raw(engine, "outcomes") == []


def test_bad_rows_are_refused_clearly() -> None:
    with pytest.raises(KeyError, match="no column 'nope'"):
        PreparedInsert(OUTBOX, ["msg_id", "nope"])
    with pytest.raises(ValueError, match="naive datetime"):
        sqlite_datetime(datetime(2026, 1, 1))
    assert sqlite_datetime(None) is None


def test_in_chunks_stays_under_the_parameter_limit_and_keeps_every_value() -> None:
    values = [f"id{i}" for i in range(1201)]
    chunks = list(in_chunks(values, size=500))
    assert [len(c) for c, _ in chunks] == [500, 500, 201]
    assert [v for c, _ in chunks for v in c] == values
    assert all(marks.count("?") == len(c) for c, marks in chunks)
    assert list(in_chunks([])) == []
