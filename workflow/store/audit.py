"""The audit log: append-only, hash-chained records (the chain itself is `store.chain`).

SQLite (one writer at a time) keeps one chain. PostgreSQL keeps `PG_CHAINS` of them, one head
row each in `audit_head` (the registry of chains, created by the migrations): a transaction
appends to the first chain whose head no other transaction holds, so concurrent writers never
wait for each other's commit on the head (with one chain every intake batch, collector batch
and sweep of every process and replica ran one at a time, each holding the head until its
COMMIT had flushed the WAL). Each chain is verified as a single chain is — every record's hash,
its head, its anchor — and a chain whose head row is gone is reported."""

from __future__ import annotations

import heapq
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection, bindparam, func, select, text, update

from workflow.effects import AuditEntry
from workflow.messages import canonical_json
from workflow.store import fastpath, schema
from workflow.store.chain import (
    CHAIN_SPAN,
    GENESIS,
    PG_CHAINS,
    PRUNED_KIND,
    RECORD_FIELDS,
    ChainCheck,
    chain_base,
    chain_hash,
    chain_of,
    pruned_anchor,
    seq_label,
    verify_chain,
)
from workflow.store.engine import Database
from workflow.store.pgpath import HEAD_FREE, Head, Insert
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


_HEAD_FREE = text(HEAD_FREE)
_HEAD_FOR_UPDATE = (
    select(AUDIT_HEAD.c.id, AUDIT_HEAD.c.seq, AUDIT_HEAD.c.hash)
    .where(AUDIT_HEAD.c.id == bindparam("chain"))
    .with_for_update()
)
_MOVE_HEAD = update(AUDIT_HEAD).where(AUDIT_HEAD.c.id == bindparam("chain"))
_RECORDS = (
    select(*(AUDIT.c[name] for name in RECORD_FIELDS))
    .where(AUDIT.c.seq > bindparam("after"), AUDIT.c.seq <= bindparam("upto"))
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
        chain: int | None = None,
    ) -> None:
        """Append `entries` inside the caller's transaction, chained after a head; insert
        the rows of `also` with them (on PostgreSQL all in one statement with the head's
        move: one round trip). `head`: the head as the caller's transaction already locked
        it (PostgreSQL, `pgpath.PgStatements`); `chain`: append to that chain (the pruner's
        record confirming its anchor), else to the first chain no other transaction holds."""
        pg = self.db.pg_inserts
        if not entries:
            if pg is not None:
                pg.run(conn, also)
            else:
                for insert in also:
                    self.db.insert_rows(conn, insert.table, insert.rows, ignore=insert.ignore)
            return
        if head is None or (chain is not None and head.chain != chain):
            head = self._lock_head(conn, chain)
        rows, moved = self.chained(entries, now, head)
        if pg is not None:
            pg.run(conn, [*also, Insert(AUDIT, rows)], head=moved)
            self.db.appended(moved)
            return
        for insert in also:
            self.db.insert_rows(conn, insert.table, insert.rows, ignore=insert.ignore)
        self.db.insert_rows(conn, AUDIT, rows)
        if self.db.fast:
            fastpath.move_audit_head(conn, moved.seq, moved.hash)
        else:
            conn.execute(_MOVE_HEAD, {"chain": moved.chain, "seq": moved.seq, "hash": moved.hash})

    @staticmethod
    def chained(
        entries: Sequence[AuditEntry], now: datetime, head: Head
    ) -> tuple[list[AuditRecord], Head]:
        """`entries` as the records that follow `head` on its chain, and the head after them."""
        _, seq, prev = head
        at = now.isoformat()
        rows = []
        for entry in entries:
            seq += 1
            # The column's length (PostgreSQL refuses longer; the wire bounds keep within it).
            if len(entry.actor) > ACTOR_LENGTH:
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
        return rows, Head(head.chain, seq, prev)

    def _lock_head(self, conn: Connection, chain: int | None) -> Head:
        """Lock a chain's head in the caller's transaction: `chain`'s, else the first one no
        other transaction holds, else (all held) wait for one."""
        if self.db.fast:  # SQLite: one chain; the write lock already serialises appends
            seq, prev = fastpath.audit_head(conn)
            return Head(1, seq, prev)
        if chain is None:
            free = conn.execute(_HEAD_FREE, {"head_prefer": self.db.pg_prefer}).first()
            if free is not None:
                return Head(int(free[0]), int(free[1]), str(free[2]))
            chain = 1
        locked = conn.execute(_HEAD_FOR_UPDATE, {"chain": chain}).one()
        return Head(int(locked[0]), int(locked[1]), str(locked[2]))

    async def append(self, entries: Sequence[AuditEntry], now: datetime) -> None:
        await self.db.transact(lambda conn: self.append_in(conn, entries, now))

    async def rows(
        self, *, after_seq: int = 0, limit: int | None = None, through_seq: int | None = None
    ) -> list[schema.AuditRow]:
        query = select(AUDIT).where(AUDIT.c.seq > after_seq).order_by(AUDIT.c.seq)
        if through_seq is not None:
            query = query.where(AUDIT.c.seq <= through_seq)
        if limit is not None:
            query = query.limit(limit)
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        # As stored, not validated again: a reader must never fail on what the writer wrote
        # (SQLite keeps a string longer than its column's declared length).
        return [schema.AuditRow.model_construct(**r._mapping) for r in rows]

    async def records(self, *, after_seq: int, limit: int) -> list[AuditRecord]:
        """Up to `limit` records of `after_seq`'s chain after it, in order, as plain tuples
        (the pruner reads thousands a second: a row model each cost it more than verifying
        the chain)."""
        upto = chain_base(chain_of(after_seq + 1)) + CHAIN_SPAN

        def body(conn: Connection) -> list[AuditRecord]:
            found = conn.execute(_RECORDS, {"after": after_seq, "upto": upto, "n": limit})
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
            rows = await self.rows(after_seq=after, limit=limit, through_seq=through_seq)
            if not rows:
                return
            yield rows
            after = rows[-1].seq

    async def last(self, count: int) -> list[schema.AuditRow]:
        """The newest `count` records, oldest first (each chain read backwards along the key:
        the newest rows alone, however long the chains are; merged by time)."""
        chains: list[list[schema.AuditRow]] = []
        async with self.db.engine.connect() as conn:
            for chain in await self._chain_ids(conn):
                base = chain_base(chain)
                query = (
                    select(AUDIT)
                    .where(AUDIT.c.seq > base, AUDIT.c.seq <= base + CHAIN_SPAN)
                    .order_by(AUDIT.c.seq.desc())
                    .limit(count)
                )
                rows = (await conn.execute(query)).all()
                chains.append(
                    [schema.AuditRow.model_construct(**r._mapping) for r in reversed(rows)]
                )
        # Each chain in its own order, the chains interleaved by time.
        return list(heapq.merge(*chains, key=lambda r: r.at))[-count:]

    async def heads(self) -> dict[int, int]:
        """Every chain's last sequence number, by chain."""
        async with self.db.engine.connect() as conn:
            found = await conn.execute(select(AUDIT_HEAD.c.id, AUDIT_HEAD.c.seq))
            return {int(row[0]): int(row[1]) for row in found}

    async def _head_row(self, chain: int) -> Head:
        async with self.db.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(AUDIT_HEAD.c.id, AUDIT_HEAD.c.seq, AUDIT_HEAD.c.hash).where(
                        AUDIT_HEAD.c.id == chain
                    )
                )
            ).one()
        return Head(int(row[0]), int(row[1]), str(row[2]))

    async def chains(self) -> list[int]:
        """The chains in the registry (their head rows), in order."""
        async with self.db.engine.connect() as conn:
            return await self._chain_ids(conn)

    @staticmethod
    async def _chain_ids(conn: Any) -> list[int]:
        found = await conn.execute(select(AUDIT_HEAD.c.id).order_by(AUDIT_HEAD.c.id))
        return [int(row[0]) for row in found]

    def expected_chains(self) -> int:
        """How many chains the registry must hold: one on SQLite, `PG_CHAINS` on PostgreSQL."""
        return PG_CHAINS if self.db.dialect == "postgresql" else 1

    async def anchor(self, chain: int = 1) -> tuple[int, str]:
        """Where chain `chain` starts: its last pruned record's sequence number and hash (the
        chain's base and the genesis hash when nothing was pruned)."""
        async with self.db.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(AUDIT_ANCHOR.c.seq, AUDIT_ANCHOR.c.hash).where(
                        AUDIT_ANCHOR.c.id == chain
                    )
                )
            ).first()
        return (int(row.seq), str(row.hash)) if row is not None else (chain_base(chain), GENESIS)

    async def anchors(self) -> dict[int, tuple[int, str]]:
        """Every chain's anchor (`anchor`), by chain."""
        return {chain: await self.anchor(chain) for chain in await self.chains()}

    async def verify(self, batch: int = 1000) -> ChainCheck:
        """Check every chain in the registry, each as `verify_one` does, and that none of the
        chains the store keeps is missing from it (a chain deleted with its head row)."""
        chains = await self.chains()
        missing = sorted(set(range(1, self.expected_chains() + 1)) - set(chains))
        if missing:
            return ChainCheck(
                False,
                0,
                chain_base(missing[0]) + 1,
                f"audit chain {missing[0]} is missing (its head row was removed).",
            )
        checked, first_anchor = 0, 0
        for chain in chains:
            result = await self.verify_one(chain, batch)
            checked += result.checked
            if chain == 1:
                first_anchor = result.anchor_seq
            if not result.ok:
                return ChainCheck(
                    False, checked, result.first_bad_seq, result.problem, result.anchor_seq
                )
        return ChainCheck(True, checked, anchor_seq=first_anchor)

    async def verify_one(self, chain: int = 1, batch: int = 1000) -> ChainCheck:
        """Check one chain in batches, from its anchor: that the head row matches its end
        and, once records were pruned, that an `audit.pruned` record in the chain confirms
        the anchor (records removed from the start are detected, not mistaken for a
        pruning)."""
        base = chain_base(chain)
        # The head first: the records up to it were committed before it was read (a record
        # and the head's move are one transaction), so records appended meanwhile, past it,
        # are not mistaken for records missing from the end.
        head = await self._head_row(chain)
        anchor_seq, anchor_hash = await self.anchor(chain)
        checked, prev, after = 0, anchor_hash, anchor_seq
        confirmed = anchor_seq == base and anchor_hash == GENESIS

        def fail(result: ChainCheck) -> ChainCheck:
            return ChainCheck(
                False, result.checked, result.first_bad_seq, result.problem, anchor_seq
            )

        async for rows in self.batches(
            after_seq=anchor_seq, through_seq=max(head.seq, anchor_seq), batch=batch
        ):
            if rows[0].seq != after + 1:
                return fail(
                    ChainCheck(
                        False, checked, after + 1, f"record {seq_label(after + 1)} is missing."
                    )
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
        if head.seq != after or head.hash != prev:
            return fail(
                ChainCheck(
                    False,
                    checked,
                    after + 1,
                    f"the chain ends at record {seq_label(after)} but the head says "
                    f"{seq_label(head.seq)}: records were removed from the end.",
                )
            )
        # Records past the head: the last one read before the head is read again (a record
        # committed before the first read has its head's move committed before the second).
        async with self.db.engine.connect() as conn:
            last = (
                await conn.execute(
                    select(func.max(AUDIT.c.seq)).where(
                        AUDIT.c.seq > base, AUDIT.c.seq <= base + CHAIN_SPAN
                    )
                )
            ).scalar()
        now = await self._head_row(chain)
        if last is not None and int(last) > now.seq:
            return fail(
                ChainCheck(
                    False,
                    checked,
                    now.seq + 1,
                    f"records after the head ({seq_label(now.seq)}) up to "
                    f"{seq_label(int(last))}: the head was moved back.",
                )
            )
        if not confirmed:
            return fail(
                ChainCheck(
                    False,
                    checked,
                    anchor_seq + 1,
                    f"the chain starts after record {seq_label(anchor_seq)}, but no "
                    f"{PRUNED_KIND} record in it confirms that anchor: records were removed "
                    "from its start.",
                )
            )
        return ChainCheck(True, checked, anchor_seq=anchor_seq)
