"""Pruning what the retention policy no longer keeps: decided proposals with everything that
belongs to them, published outbox rows, and the oldest audit records (archived first, the chain
anchored).

Each call deletes at most `limit` items in one short transaction at background priority (every
other writer waiting goes first; on SQLite it runs off the event loop), so the pruner never
holds the database for long; the
service calls it again until there is nothing left to prune. Every deletion is idempotent, so
several replicas may prune at once; audit pruning moves the anchor with an optimistic check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

from sqlalchemy import Connection, delete, select, update

from workflow.effects import AuditEntry
from workflow.store import schema
from workflow.store.audit import AuditLog
from workflow.store.chain import PRUNED_KIND, verify_chain
from workflow.store.engine import Database
from workflow.store.fastpath import in_chunks
from workflow.store.requests import ConcurrentUpdate
from workflow.store.tables import (
    AUDIT,
    AUDIT_ANCHOR,
    DECISIONS,
    ESCALATIONS,
    EXECUTIONS,
    OUTBOX,
    OUTCOMES,
    PROPOSALS,
    REQUESTS,
)

#: Receives a prefix of the chain about to be pruned; returns where it was archived. It must
#: have made the records durable when it returns (the deletion follows).
Archive = Callable[[Sequence[schema.AuditRow]], Awaitable[str]]


class AuditChainBroken(Exception):
    """The records about to be pruned do not verify: they are kept as evidence."""


class Retention:
    def __init__(self, db: Database, audit: AuditLog):
        self.db = db
        self.audit = audit

    async def prune_decided(self, older_than: datetime, limit: int = 1000) -> int:
        """Delete up to `limit` proposals whose outcome is older than `older_than`, with their
        request, decisions, escalation, execution reports and outbox rows; returns how many.
        A proposal without an outcome (still held) is never pruned."""
        oldest = (
            select(OUTCOMES.c.proposal_id)
            .where(OUTCOMES.c.at < older_than)
            .order_by(OUTCOMES.c.at)
            .limit(limit)
        )

        def body(conn: Connection) -> int:
            ids = [row[0] for row in conn.execute(oldest)]
            for chunk, _ in in_chunks(ids):
                requests = [
                    row[0]
                    for row in conn.execute(
                        select(REQUESTS.c.request_id).where(REQUESTS.c.proposal_id.in_(chunk))
                    )
                ]
                if requests:
                    conn.execute(delete(DECISIONS).where(DECISIONS.c.request_id.in_(requests)))
                    conn.execute(delete(ESCALATIONS).where(ESCALATIONS.c.request_id.in_(requests)))
                    conn.execute(delete(REQUESTS).where(REQUESTS.c.request_id.in_(requests)))
                conn.execute(delete(EXECUTIONS).where(EXECUTIONS.c.proposal_id.in_(chunk)))
                conn.execute(delete(OUTBOX).where(OUTBOX.c.proposal_id.in_(chunk)))
                conn.execute(delete(OUTCOMES).where(OUTCOMES.c.proposal_id.in_(chunk)))
                conn.execute(delete(PROPOSALS).where(PROPOSALS.c.id.in_(chunk)))
            return len(ids)

        return await self.db.transact(body, background=True)

    async def prune_outbox(self, older_than: datetime, limit: int = 5000) -> int:
        """Delete up to `limit` published outbox rows created before `older_than` (the
        streams' duplicate window ago: a re-publish could no longer be deduplicated anyway)."""
        oldest = (
            select(OUTBOX.c.msg_id)
            .where(OUTBOX.c.published.is_(True), OUTBOX.c.created_at < older_than)
            .limit(limit)
        )

        def body(conn: Connection) -> int:
            ids = [row[0] for row in conn.execute(oldest)]
            for chunk, _ in in_chunks(ids):
                conn.execute(delete(OUTBOX).where(OUTBOX.c.msg_id.in_(chunk)))
            return len(ids)

        return await self.db.transact(body, background=True)

    async def prune_audit(
        self, older_than: datetime, archive: Archive, now: datetime, limit: int = 5000
    ) -> int:
        """Archive and delete the oldest audit records written before `older_than` (up to
        `limit`), move the anchor to the last of them and append an `audit.pruned` record
        confirming it; returns how many were pruned.

        The records are verified before they are archived (a broken chain is kept as
        evidence: `AuditChainBroken`), archived before they are deleted, and deleted only if
        the anchor is still where it was read (another replica pruning meanwhile:
        `ConcurrentUpdate`, nothing deleted)."""
        anchor_seq, anchor_hash = await self.audit.anchor()
        rows = await self.audit.rows(after_seq=anchor_seq, limit=limit)
        cutoff = older_than.isoformat()
        prefix: list[schema.AuditRow] = []
        for row in rows:
            if row.at >= cutoff:
                break
            prefix.append(row)
        if not prefix:
            return 0
        if prefix[0].seq != anchor_seq + 1:
            raise AuditChainBroken(f"record {anchor_seq + 1} is missing")
        checked = verify_chain(prefix, start_hash=anchor_hash)
        if not checked.ok:
            raise AuditChainBroken(checked.problem)
        where = await archive(prefix)
        last = prefix[-1]
        record = AuditEntry(
            PRUNED_KIND,
            "headgate",
            {
                "through_seq": last.seq,
                "through_hash": last.hash,
                "records": len(prefix),
                "archive": where,
            },
        )

        def body(conn: Connection) -> None:
            moved = conn.execute(
                update(AUDIT_ANCHOR)
                .where(AUDIT_ANCHOR.c.id == 1, AUDIT_ANCHOR.c.seq == anchor_seq)
                .values(seq=last.seq, hash=last.hash, pruned_at=now)
            )
            if moved.rowcount != 1:
                raise ConcurrentUpdate("audit anchor")
            conn.execute(delete(AUDIT).where(AUDIT.c.seq > anchor_seq, AUDIT.c.seq <= last.seq))
            self.audit.append_in(conn, [record], now)

        await self.db.transact(body, background=True)
        return len(prefix)
