"""Execution reports: what happened when an agent ran a released call (one per release)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, select

from workflow.effects import AuditEntry, ExecutionRecord
from workflow.store.audit import AuditLog
from workflow.store.engine import Database
from workflow.store.tables import EXECUTIONS, OUTCOMES


class Executions:
    def __init__(self, db: Database, audit: AuditLog):
        self.db = db
        self.audit = audit
        self._insert = (
            db.insert(EXECUTIONS)
            .on_conflict_do_nothing(index_elements=["release_id"])
            .returning(EXECUTIONS.c.release_id)
        )

    async def release_exists(self, proposal_id: str, release_id: str) -> bool:
        """Whether `proposal_id` was released as `release_id`."""
        query = select(OUTCOMES.c.proposal_id).where(
            OUTCOMES.c.proposal_id == proposal_id, OUTCOMES.c.release_id == release_id
        )
        async with self.db.engine.connect() as conn:
            return (await conn.execute(query)).first() is not None

    async def record(self, row: ExecutionRecord, audit: AuditEntry, now: datetime) -> bool:
        """Store the first report of a release with its audit record; False for a repeat."""

        def body(conn: Connection) -> bool:
            if conn.execute(self._insert, row._asdict()).first() is None:
                return False
            self.audit.append_in(conn, [audit], now)
            return True

        return await self.db.transact(body)
