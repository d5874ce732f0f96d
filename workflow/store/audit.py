"""The audit log: append-only, hash-chained records (the chain itself is `store.chain`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import Connection, bindparam, select, update

from workflow.effects import AuditEntry
from workflow.messages import canonical_json
from workflow.store import fastpath, schema
from workflow.store.chain import (
    GENESIS,
    PRUNED_KIND,
    RECORD_FIELDS,
    ChainCheck,
    chain_hash,
    pruned_anchor,
    verify_chain,
)
from workflow.store.engine import Database
from workflow.store.pgpath import Head, Insert
from workflow.store.tables import AUDIT, AUDIT_ANCHOR, AUDIT_HEAD

#: The length of the `actor` column.
ACTOR_LENGTH = 200


class AuditRecord(NamedTuple):
    """One row of the chain as stored."""

    seq: int
    at: str
    kind: str
    proposal_id: str | None
    request_id: str | None
    actor: str
    data: str
    prev_hash: str
    hash: str


_HEAD_FOR_UPDATE = (
    select(AUDIT_HEAD.c.seq, AUDIT_HEAD.c.hash).where(AUDIT_HEAD.c.id == 1).with_for_update()
)
_MOVE_HEAD = update(AUDIT_HEAD).where(AUDIT_HEAD.c.id == 1)
_RECORDS = (
    select(*(AUDIT.c[name] for name in RECORD_FIELDS))
    .where(AUDIT.c.seq > bindparam("after"))
    .order_by(AUDIT.c.seq)
    .limit(bindparam("n"))
)


class AuditLog:
    def __init__(self, db: Database):
        self.db = db

    def append_in(
        self,
        conn: Connection,
        entries: Sequence[AuditEntry],
        now: datetime,
        also: Sequence[Insert] = (),
        head: Head | None = None,
    ) -> None:
        """Append `entries` inside the caller's transaction, chained after the head; insert
        the rows of `also` with them (on PostgreSQL all in one statement with the head's
        move: one round trip). `head`: the head as the caller's transaction already locked
        it (PostgreSQL, `pgpath.PgStatements`)."""
        pg = self.db.pg_inserts
        if not entries:
            if pg is not None:
                pg.run(conn, also)
            else:
                for insert in also:
                    self.db.insert_rows(conn, insert.table, insert.rows, ignore=insert.ignore)
            return
        if head is not None:
            seq, prev = head
        elif self.db.fast:  # the write lock already serialises appends
            seq, prev = fastpath.audit_head(conn)
        else:  # replicas append concurrently: lock the head row
            locked = conn.execute(_HEAD_FOR_UPDATE).one()
            seq, prev = int(locked[0]), str(locked[1])
        at = now.isoformat()
        rows = []
        for entry in entries:
            seq += 1
            # The column's length (PostgreSQL refuses longer; the wire bounds keep within it).
            entry = replace(entry, actor=entry.actor[:ACTOR_LENGTH])
            data = entry.data if isinstance(entry.data, str) else canonical_json(entry.data)
            digest = chain_hash(
                prev, seq, at, entry.kind, entry.proposal_id, entry.request_id, entry.actor, data
            )
            rows.append(
                AuditRecord(
                    seq,
                    at,
                    entry.kind,
                    entry.proposal_id,
                    entry.request_id,
                    entry.actor,
                    data,
                    prev,
                    digest,
                )
            )
            prev = digest
        if pg is not None:
            pg.run(conn, [*also, Insert(AUDIT, rows)], head=(seq, prev))
            return
        for insert in also:
            self.db.insert_rows(conn, insert.table, insert.rows, ignore=insert.ignore)
        self.db.insert_rows(conn, AUDIT, rows)
        if self.db.fast:
            fastpath.move_audit_head(conn, seq, prev)
        else:
            conn.execute(_MOVE_HEAD, {"seq": seq, "hash": prev})

    async def append(self, entries: Sequence[AuditEntry], now: datetime) -> None:
        await self.db.transact(lambda conn: self.append_in(conn, entries, now))

    async def rows(self, *, after_seq: int = 0, limit: int | None = None) -> list[schema.AuditRow]:
        query = select(AUDIT).where(AUDIT.c.seq > after_seq).order_by(AUDIT.c.seq)
        if limit is not None:
            query = query.limit(limit)
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        # As stored, not validated again: a reader must never fail on what the writer wrote
        # (SQLite keeps a string longer than its column's declared length).
        return [schema.AuditRow.model_construct(**r._mapping) for r in rows]

    async def records(self, *, after_seq: int, limit: int) -> list[AuditRecord]:
        """Up to `limit` records after `after_seq` in order, as plain tuples (the pruner
        reads thousands a second: a row model each cost it more than verifying the chain)."""

        def body(conn: Connection) -> list[AuditRecord]:
            found = conn.execute(_RECORDS, {"after": after_seq, "n": limit})
            return [AuditRecord(*row) for row in found]

        return await self.db.read(body, background=True)

    async def batches(
        self, *, after_seq: int = 0, through_seq: int | None = None, batch: int = 500
    ) -> AsyncIterator[list[schema.AuditRow]]:
        """The records after `after_seq` (up to `through_seq`) in order, `batch` at a time:
        one indexed range read per batch, so memory stays that of one batch however long
        the chain is."""
        after = after_seq
        while through_seq is None or after < through_seq:
            limit = batch if through_seq is None else min(batch, through_seq - after)
            rows = await self.rows(after_seq=after, limit=limit)
            if not rows:
                return
            yield rows
            after = rows[-1].seq

    async def last(self, count: int) -> list[schema.AuditRow]:
        """The newest `count` records, oldest first (read backwards along the key: the
        newest rows alone, however long the chain is)."""
        query = select(AUDIT).order_by(AUDIT.c.seq.desc()).limit(count)
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [schema.AuditRow.model_construct(**r._mapping) for r in reversed(rows)]

    async def anchor(self) -> tuple[int, str]:
        """Where the stored chain starts: the last pruned record's sequence number and hash
        (0 and the genesis hash when nothing was pruned)."""
        async with self.db.engine.connect() as conn:
            row = (await conn.execute(select(AUDIT_ANCHOR.c.seq, AUDIT_ANCHOR.c.hash))).first()
        return (int(row.seq), str(row.hash)) if row is not None else (0, GENESIS)

    async def verify(self, batch: int = 1000) -> ChainCheck:
        """Check the whole stored chain in batches, from its anchor: that the head row matches
        its end and, once records were pruned, that an `audit.pruned` record in the chain
        confirms the anchor (records removed from the start are detected, not mistaken for a
        pruning)."""
        anchor_seq, anchor_hash = await self.anchor()
        checked, prev, after = 0, anchor_hash, anchor_seq
        confirmed = anchor_seq == 0 and anchor_hash == GENESIS

        def fail(result: ChainCheck) -> ChainCheck:
            return ChainCheck(
                False, result.checked, result.first_bad_seq, result.problem, anchor_seq
            )

        async for rows in self.batches(after_seq=anchor_seq, batch=batch):
            if rows[0].seq != after + 1:
                return fail(
                    ChainCheck(False, checked, after + 1, f"record {after + 1} is missing.")
                )
            result = verify_chain(rows, start_hash=prev)
            if not result.ok:
                return fail(
                    ChainCheck(
                        False, checked + result.checked, result.first_bad_seq, result.problem
                    )
                )
            confirmed = confirmed or any(
                r.kind == PRUNED_KIND and pruned_anchor(r.data) == (anchor_seq, anchor_hash)
                for r in rows
            )
            checked += result.checked
            prev, after = rows[-1].hash, rows[-1].seq
        async with self.db.engine.connect() as conn:
            head = (await conn.execute(select(AUDIT_HEAD).where(AUDIT_HEAD.c.id == 1))).one()
        if int(head.seq) != after or head.hash != prev:
            return fail(
                ChainCheck(
                    False,
                    checked,
                    after + 1,
                    f"the chain ends at record {after} but the head says {head.seq}: records "
                    "were removed from the end.",
                )
            )
        if not confirmed:
            return fail(
                ChainCheck(
                    False,
                    checked,
                    anchor_seq + 1,
                    f"the chain starts after record {anchor_seq}, but no {PRUNED_KIND} record "
                    "in it confirms that anchor: records were removed from its start.",
                )
            )
        return ChainCheck(True, checked, anchor_seq=anchor_seq)
