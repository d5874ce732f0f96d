"""Execution reports: what happened when an agent ran a released call (one per release)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, select

from workflow.effects import AuditEntry, ExecutionRecord
from workflow.store.audit import AuditLog
from workflow.store.engine import Database
from workflow.store.tables import EXECUTIONS, OUTCOMES, PROPOSALS


class Executions:
    def __init__(self, db: Database, audit: AuditLog):
        self.db = db
        self.audit = audit
        self._insert = (
            db.insert(EXECUTIONS)
            .on_conflict_do_nothing(index_elements=["release_id"])
            .returning(EXECUTIONS.c.release_id)
        )

    async def released_to(self, proposal_id: str, release_id: str) -> str | None:
        """The agent whose proposal `proposal_id` was released as `release_id`; None when it
        was not released so."""
        query = (
            select(PROPOSALS.c.agent)
            .join(OUTCOMES, OUTCOMES.c.proposal_id == PROPOSALS.c.id)
            .where(OUTCOMES.c.proposal_id == proposal_id, OUTCOMES.c.release_id == release_id)
        )
        async with self.db.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else str(row.agent)

    async def record(
        self, row: ExecutionRecord, audit: AuditEntry, repeat: AuditEntry, now: datetime
    ) -> bool:
        """Store the first report of a release with its audit record; False for a repeat,
        which is audited as `repeat` (a report is never dropped without a record)."""

        def body(conn: Connection) -> bool:
            if conn.execute(self._insert, row._asdict()).first() is None:
                self.audit.append_in(conn, [repeat], now)
                return False
            self.audit.append_in(conn, [audit], now)
            return True

        return await self.db.transact(body)
