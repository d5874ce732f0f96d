"""Pruning what the retention policy no longer keeps: decided proposals with everything that
belongs to them, published outbox rows, and the oldest audit records (archived first, the chain
anchored).

Each call deletes at most `limit` items in one short transaction at background priority (every
other writer waiting goes first; on SQLite it runs off the event loop), so the pruner never
holds the database for long; the service calls it again until there is nothing left to prune.
Every deletion is idempotent, so several replicas may prune at once; audit pruning moves the
anchor with an optimistic check.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, Integer, bindparam, delete, select, text, update

from workflow.effects import AuditEntry
from workflow.store import fastpath
from workflow.store.audit import AuditLog, AuditRecord
from workflow.store.chain import PRUNED_KIND, ChainedRecord, seq_label, verify_chain
from workflow.store.engine import Database
from workflow.store.requests import ConcurrentUpdate
from workflow.store.schema import UTCDateTime
from workflow.store.tables import (
    AUDIT,
    AUDIT_ANCHOR,
    OUTBOX,
)

#: Receives a prefix of the chain about to be pruned; returns where it was archived. It must
#: have made the records durable when it returns (the deletion follows).
Archive = Callable[[Sequence[ChainedRecord]], Awaitable[str]]


#: SQLite: the oldest decided proposals, then what belongs to them, table by table (their
#: request's decisions and escalation before the request, the outcome and the proposal last).
_SQLITE_OLDEST = "SELECT proposal_id FROM outcomes WHERE at < ? ORDER BY at LIMIT ?"
_REQUESTS_OF = "SELECT request_id FROM requests WHERE proposal_id IN ({ids})"
_SQLITE_PRUNE_DECIDED = (
    f"DELETE FROM decisions WHERE request_id IN ({_REQUESTS_OF})",
    f"DELETE FROM escalations WHERE request_id IN ({_REQUESTS_OF})",
    "DELETE FROM requests WHERE proposal_id IN ({ids})",
    "DELETE FROM executions WHERE proposal_id IN ({ids})",
    "DELETE FROM outbox WHERE proposal_id IN ({ids})",
    "DELETE FROM outcomes WHERE proposal_id IN ({ids})",
    "DELETE FROM proposals WHERE id IN ({ids})",
)

#: PostgreSQL: the same in one statement. `FOR UPDATE SKIP LOCKED`: replicas pruning at once
#: take disjoint sets. The steps of a `WITH` run on one snapshot, so each deletes exactly the
#: rows of the proposals `oldest` took (a table's rows of a proposal are never written again
#: once it is decided).
_PG_PRUNE_DECIDED = text(
    """
WITH oldest AS (
    SELECT proposal_id FROM outcomes WHERE at < :cutoff ORDER BY at LIMIT :n
    FOR UPDATE SKIP LOCKED
), rq AS (
    DELETE FROM requests WHERE proposal_id IN (SELECT proposal_id FROM oldest)
    RETURNING request_id
), dc AS (
    DELETE FROM decisions WHERE request_id IN (SELECT request_id FROM rq)
), es AS (
    DELETE FROM escalations WHERE request_id IN (SELECT request_id FROM rq)
), ex AS (
    DELETE FROM executions WHERE proposal_id IN (SELECT proposal_id FROM oldest)
), ob AS (
    DELETE FROM outbox WHERE proposal_id IN (SELECT proposal_id FROM oldest)
), oc AS (
    DELETE FROM outcomes WHERE proposal_id IN (SELECT proposal_id FROM oldest)
), pr AS (
    DELETE FROM proposals WHERE id IN (SELECT proposal_id FROM oldest)
)
SELECT count(*) FROM oldest
"""
).bindparams(bindparam("cutoff", type_=UTCDateTime()), bindparam("n", type_=Integer()))


class AuditChainBroken(Exception):
    """The records about to be pruned do not verify: they are kept as evidence."""


#: The PostgreSQL advisory lock one replica holds while it prunes the audit (any constant
#: bigint, the same in every replica: "hgaudit" in ASCII).
AUDIT_PRUNING_LOCK = 0x6867_6175_6469_74


class Retention:
    def __init__(self, db: Database, audit: AuditLog):
        self.db = db
        self.audit = audit

    @asynccontextmanager
    async def pruning_audit(self) -> AsyncIterator[bool]:
        """Whether this process may prune the audit now, for the length of the block.

        On PostgreSQL, one replica at a time: a session advisory lock (`pg_try_advisory_lock`,
        never waited for) held on a connection of its own for the pass, and released with the
        session if the process dies. Without it two replicas could read the same prefix and
        archive overlapping ranges under different names (each pass takes what is old when it
        starts). SQLite has one writing process."""
        if self.db.dialect != "postgresql":
            yield True
            return
        key = {"key": AUDIT_PRUNING_LOCK}
        async with self.db.engine.connect() as conn:
            got = bool(
                (await conn.execute(text("SELECT pg_try_advisory_lock(:key)"), key)).scalar_one()
            )
            await conn.commit()  # ends the statement's transaction; a session lock stays
            try:
                yield got
            finally:
                if got:
                    await conn.execute(text("SELECT pg_advisory_unlock(:key)"), key)
                    await conn.commit()

    async def prune_decided(self, older_than: datetime, limit: int = 1000) -> int:
        """Delete up to `limit` proposals whose outcome is older than `older_than`, with their
        request, decisions, escalation, execution reports and outbox rows; returns how many.
        A proposal without an outcome (still held) is never pruned.

        Set-based: on PostgreSQL one statement (one round trip) whose first step locks the
        oldest outcomes it takes, skipping those another replica is pruning; on SQLite (one
        writer at a time) the ids once, then one `DELETE … IN (…)` per table through the
        DB-API, the requests' ids found by a subquery."""
        if self.db.dialect == "postgresql":
            return await self.db.transact(
                lambda conn: int(
                    conn.execute(_PG_PRUNE_DECIDED, {"cutoff": older_than, "n": limit}).scalar_one()
                ),
                background=True,
            )
        cutoff = fastpath.sqlite_datetime(older_than)

        def body(conn: Connection) -> int:
            db = fastpath.dbapi(conn)
            ids = [row[0] for row in db.execute(_SQLITE_OLDEST, (cutoff, limit))]
            for chunk, marks in fastpath.in_chunks(ids):
                for sql in _SQLITE_PRUNE_DECIDED:
                    db.execute(sql.format(ids=marks), chunk)
            return len(ids)

        return await self.db.transact(body, background=True)

    async def prune_outbox(self, older_than: datetime, limit: int = 5000) -> int:
        """Delete up to `limit` published outbox rows created before `older_than` (the
        streams' duplicate window ago: a re-publish could no longer be deduplicated anyway),
        in one statement."""
        oldest = (
            select(OUTBOX.c.msg_id)
            .where(OUTBOX.c.published.is_(True), OUTBOX.c.created_at < older_than)
            .limit(limit)
        )
        return await self.db.transact(
            lambda conn: int(
                conn.execute(delete(OUTBOX).where(OUTBOX.c.msg_id.in_(oldest))).rowcount
            ),
            background=True,
        )

    async def prunable_audit(
        self, after_seq: int, older_than: datetime | None, limit: int
    ) -> list[AuditRecord]:
        """The records after `after_seq` of its chain (up to `limit`, in order) up to the first
        written at or after `older_than` (None: all of them)."""
        rows = await self.audit.records(after_seq=after_seq, limit=limit)
        if older_than is None:
            return rows
        cutoff = older_than.isoformat()
        for n, row in enumerate(rows):
            if row.at >= cutoff:
                return rows[:n]
        return rows

    async def drop_audit(
        self,
        anchor: tuple[int, str],
        through: AuditCut,
        archive: str,
        now: datetime,
        chain: int = 1,
    ) -> None:
        """Delete the records of `chain` after `anchor` through `through` (archived in
        `archive`), move the chain's anchor to `through` and append to that chain the
        `audit.pruned` record confirming it, in one transaction at background priority;
        `ConcurrentUpdate` (nothing deleted) when the anchor is no longer at `anchor` (another
        replica pruned meanwhile)."""
        anchor_seq = anchor[0]
        record = AuditEntry(
            PRUNED_KIND,
            "headgate",
            {
                "through_seq": through.seq,
                "through_hash": through.hash,
                "records": through.records,
                "archive": archive,
            },
        )

        def body(conn: Connection) -> None:
            moved = conn.execute(
                update(AUDIT_ANCHOR)
                .where(AUDIT_ANCHOR.c.id == chain, AUDIT_ANCHOR.c.seq == anchor_seq)
                .values(seq=through.seq, hash=through.hash, pruned_at=now)
            )
            if moved.rowcount != 1:
                raise ConcurrentUpdate("audit anchor")
            conn.execute(delete(AUDIT).where(AUDIT.c.seq > anchor_seq, AUDIT.c.seq <= through.seq))
            self.audit.append_in(conn, [record], now, chain=chain)

        await self.db.transact(body, background=True)

    async def prune_audit(
        self, older_than: datetime, archive: Archive, now: datetime, limit: int = 5000
    ) -> int:
        """Archive and delete the oldest audit records written before `older_than` (up to
        `limit`, chain after chain), move each chain's anchor to the last of its pruned
        records and append to that chain an `audit.pruned` record confirming it; returns how
        many were pruned. (The service's pruner archives a whole pass of a chain in one file:
        `workflow.service.retention`.)

        The records are verified before they are archived (a broken chain is kept as
        evidence: `AuditChainBroken`), archived before they are deleted, and deleted only if
        the anchor is still where it was read (another replica pruning meanwhile:
        `ConcurrentUpdate`, nothing deleted)."""
        pruned = 0
        for chain in await self.audit.chains():
            if pruned >= limit:
                break
            anchor = await self.audit.anchor(chain)
            prefix = await self.prunable_audit(anchor[0], older_than, limit - pruned)
            if not prefix:
                continue
            # Hashing thousands of records: off the event loop.
            await asyncio.to_thread(check_continues, prefix, anchor)
            where = await archive(prefix)
            last = prefix[-1]
            cut = AuditCut(last.seq, last.hash, len(prefix))
            await self.drop_audit(anchor, cut, where, now, chain)
            pruned += len(prefix)
        return pruned


@dataclass(frozen=True, slots=True)
class AuditCut:
    """Where one deletion of a pruning pass ends: through record `seq` (its `hash`), so many
    `records` after the anchor before it."""

    seq: int
    hash: str
    records: int


def check_continues(rows: Sequence[ChainedRecord], anchor: tuple[int, str]) -> None:
    """`rows` continue the chain from `anchor` (the records right after it, unaltered), else
    `AuditChainBroken`."""
    if rows[0].seq != anchor[0] + 1:
        raise AuditChainBroken(f"record {seq_label(anchor[0] + 1)} is missing")
    checked = verify_chain(rows, anchor[1])
    if not checked.ok:
        raise AuditChainBroken(checked.problem)
