"""Proposals as the intake stores them: the proposal row with its request, outcome and audit
records in one transaction, and what a redelivery needs to rebuild the events it published."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, select

from workflow.effects import IntakeRecord, StoredIntake
from workflow.store import fastpath
from workflow.store.audit import AuditLog
from workflow.store.engine import Database
from workflow.store.pgpath import Head, Insert, Positional
from workflow.store.tables import AUDIT, DECISIONS, FREEZES, OUTCOMES, PROPOSALS, REQUESTS


def stored_intakes(rows: Iterable[Any], received: Callable[[Any], datetime]) -> list[StoredIntake]:
    """Proposal rows read as `_STORED`'s columns, `received` reading their time."""
    return [
        StoredIntake(
            id=pid,
            payload=payload,
            classification=classification,
            verdict=verdict,
            trace=json.loads(trace) if trace else None,
            received_at=received(at),
            stream_seq=seq,
        )
        for pid, payload, classification, verdict, trace, at, seq in rows
    ]


_STORED = select(
    PROPOSALS.c.id,
    PROPOSALS.c.payload,
    PROPOSALS.c.classification,
    PROPOSALS.c.verdict,
    PROPOSALS.c.trace,
    PROPOSALS.c.received_at,
    PROPOSALS.c.stream_seq,
).where(PROPOSALS.c.id.in_(bindparam("ids", expanding=True)))


_FREEZE_IDS = select(FREEZES.c.freeze_id).where(FREEZES.c.lifted_at.is_(None))
_FREEZE_IDS_SQL = "SELECT freeze_id FROM freezes WHERE lifted_at IS NULL"


class FreezesChanged(Exception):
    """A freeze was put in force or lifted after the batch was decided: nothing was written."""

    def __init__(self) -> None:
        super().__init__("the freezes in force changed while the batch was decided")


@dataclass(frozen=True, slots=True)
class IntakeResult:
    new: set[str]
    existing_digests: dict[str, str]


class Proposals:
    def __init__(self, db: Database, audit: AuditLog):
        self.db = db
        self.audit = audit
        # executemany ("insertmanyvalues") with RETURNING: one cached statement for every batch
        # size; ON CONFLICT because another replica may insert the same id (PostgreSQL).
        self._insert_new = (
            db.insert(PROPOSALS)
            .on_conflict_do_nothing(index_elements=["id"])
            .returning(PROPOSALS.c.id)
        )

    async def record(
        self, records: Sequence[IntakeRecord], now: datetime, freezes: Sequence[str] | None = None
    ) -> IntakeResult:
        """Insert new proposals with their rows and audit records; report which ids already
        existed. Their events are not stored (see `IntakeRecord`).

        `freezes`: the ids of the freezes in force the records were decided on. The records
        are written only if exactly those are in force when they are; otherwise nothing is
        written and `FreezesChanged` is raised (the caller reads them again and decides anew).
        """
        unique: dict[str, IntakeRecord] = {}
        for rec in records:
            unique.setdefault(rec.id, rec)
        if not unique:
            return IntakeResult(new=set(), existing_digests={})
        known = None if freezes is None else sorted(set(freezes))
        if self.db.pg_inserts is not None and await self.db.transact_at_head(
            lambda head: self._record_at(head, unique, now, known)
        ):
            return IntakeResult(new=set(unique), existing_digests={})
        return await self.db.transact(lambda conn: self._record(conn, unique, now, known))

    def _record_at(
        self,
        head: Head,
        unique: dict[str, IntakeRecord],
        now: datetime,
        freezes: list[str] | None,
    ) -> tuple[Positional, Head]:
        """PostgreSQL, one statement: every proposal taken as new, its records chained after
        `head` (see `Database.transact_at_head`: nothing is written when a proposal was stored
        or the head moved), and the head it leaves."""
        pg = self.db.pg_inserts
        assert pg is not None
        fresh = list(unique.values())
        rows, moved = self.audit.chained([a for r in fresh for a in r.audit], now, head)
        inserts = [
            # In id order, as `PgStatements.insert_proposals` takes them (one lock order).
            Insert(PROPOSALS, [unique[i].proposal for i in sorted(unique)], ignore=("id",)),
            Insert(REQUESTS, [r.request for r in fresh if r.request is not None]),
            Insert(OUTCOMES, [r.outcome for r in fresh if r.outcome is not None]),
            Insert(AUDIT, rows),
        ]
        return pg.at(inserts, head, moved, freezes), moved

    def _record(
        self,
        conn: Connection,
        unique: dict[str, IntakeRecord],
        now: datetime,
        freezes: list[str] | None,
    ) -> IntakeResult:
        if freezes is not None and self._freezes_in_force(conn) != freezes:
            raise FreezesChanged()
        ids = list(unique)
        head: Head | None = None
        pg = self.db.pg_statements
        if pg is not None:
            # One statement: the insert, the stored digests and the audit head's lock.
            got = pg.insert_proposals(conn, [unique[i].proposal for i in ids], self.db.pg_prefer)
            new, existing, head = got.new, got.existing_digests, got.head
            raced = [i for i in ids if i not in new and i not in existing]
            if raced:  # inserted by another replica while this statement waited
                existing.update(self._digests(conn, raced))
        elif self.db.fast:
            # Under the write lock nothing else inserts: look up, then insert what is new.
            existing = fastpath.proposal_digests(conn, ids)
            new = {i for i in ids if i not in existing}
            self.db.insert_rows(conn, PROPOSALS, [unique[i].proposal for i in ids if i in new])
        else:
            inserted = conn.execute(
                self._insert_new, [r.proposal._asdict() for r in unique.values()]
            )
            new = {row[0] for row in inserted}
            others = [i for i in ids if i not in new]
            existing = self._digests(conn, others) if others else {}
        fresh = [r for r in unique.values() if r.id in new]
        inserts = [
            Insert(REQUESTS, [r.request for r in fresh if r.request is not None]),
            Insert(OUTCOMES, [r.outcome for r in fresh if r.outcome is not None]),
        ]
        self.audit.append_in(
            conn, [a for r in fresh for a in r.audit], now, also=inserts, head=head
        )
        return IntakeResult(new=new, existing_digests=existing)

    def _freezes_in_force(self, conn: Connection) -> list[str]:
        """The ids of the freezes in force, sorted, inside the caller's transaction."""
        if self.db.fast:
            rows = fastpath.dbapi(conn).execute(_FREEZE_IDS_SQL).fetchall()
        else:
            rows = list(conn.execute(_FREEZE_IDS))
        return sorted(str(row[0]) for row in rows)

    @staticmethod
    def _digests(conn: Connection, ids: Sequence[str]) -> dict[str, str]:
        rows = conn.execute(
            select(PROPOSALS.c.id, PROPOSALS.c.digest).where(PROPOSALS.c.id.in_(ids))
        )
        return {row.id: row.digest for row in rows}

    async def stored(self, proposal_ids: Iterable[str]) -> list[StoredIntake]:
        """The stored rows of these proposals, to rebuild the events their intake published."""
        ids = list(proposal_ids)
        if not ids:
            return []
        return await self.db.read(lambda conn: self.stored_in(conn, ids))

    def stored_in(self, conn: Connection, ids: Sequence[str]) -> list[StoredIntake]:
        """`stored` inside the caller's read (on SQLite through the DB-API)."""
        if not ids:
            return []
        if self.db.fast:
            rows: Iterable[Any] = fastpath.select_in(
                conn, "SELECT id, payload, classification, verdict, trace, received_at, stream_seq "
                "FROM proposals", "id", list(ids),
            )  # fmt: skip
            received: Callable[[Any], datetime] = _from_sqlite
        else:
            rows = conn.execute(_STORED, {"ids": list(ids)})
            received = _same
        return stored_intakes(rows, received)

    async def owners(self, proposal_ids: Iterable[str]) -> dict[str, str]:
        """The agent that proposed each of these ids (the ids not stored are left out)."""
        query = select(PROPOSALS.c.id, PROPOSALS.c.agent).where(
            PROPOSALS.c.id.in_(list(proposal_ids))
        )
        rows = await self.db.read(lambda conn: list(conn.execute(query)))
        return {row.id: row.agent for row in rows}

    async def parts(self, proposal_id: str) -> tuple[str, str, str, dict[str, str]] | None:
        """The stored proposal, classification and verdict JSON, and its trace context."""
        found = await self.stored([proposal_id])
        if not found:
            return None
        row = found[0]
        return row.payload, row.classification, row.verdict, row.trace or {}

    async def seen_definitions(self, limit: int = 10_000) -> list[str]:
        """Payloads of recent proposals that carried a tool definition, oldest first."""
        async with self.db.engine.connect() as conn:
            rows = await conn.execute(
                select(PROPOSALS.c.payload)
                .where(PROPOSALS.c.payload.contains('"tool_definition"'))
                .order_by(PROPOSALS.c.received_at.desc())
                .limit(limit)
            )
            return [r.payload for r in rows][::-1]

    async def history(self, ident: str) -> dict[str, Any] | None:
        """Everything stored about one proposal (by request id, else by proposal id).

        A request id is looked up first and on its own: the two kinds of id never match in one
        query, so a proposal whose id equals another's request id (refused at intake since
        proposal ids may not start with `rq_`, possible in a database from before) cannot be
        taken for that request."""
        async with self.db.engine.connect() as conn:
            req = (
                await conn.execute(select(REQUESTS).where(REQUESTS.c.request_id == ident))
            ).first()
            if req is None:
                req = (
                    await conn.execute(select(REQUESTS).where(REQUESTS.c.proposal_id == ident))
                ).first()
            pid = req.proposal_id if req is not None else ident
            prop = (await conn.execute(select(PROPOSALS).where(PROPOSALS.c.id == pid))).first()
            if prop is None:
                return None
            decisions = (
                (
                    await conn.execute(
                        select(DECISIONS)
                        .where(DECISIONS.c.request_id == req.request_id)
                        .order_by(DECISIONS.c.received_at)
                    )
                ).all()
                if req is not None
                else []
            )
            # In time order: on PostgreSQL a proposal's records may be on several chains.
            audit = (
                await conn.execute(
                    select(AUDIT)
                    .where(AUDIT.c.proposal_id == pid)
                    .order_by(AUDIT.c.at, AUDIT.c.seq)
                )
            ).all()
            outcome = (
                await conn.execute(select(OUTCOMES).where(OUTCOMES.c.proposal_id == pid))
            ).first()
        return {
            "proposal": prop,
            "request": req,
            "decisions": decisions,
            "audit": audit,
            "outcome": outcome,
        }


def _same(value: Any) -> Any:
    return value


def _from_sqlite(value: str) -> datetime:
    at = fastpath.from_sqlite_datetime(value)
    assert at is not None, "received_at is NOT NULL"
    return at
