"""Execution reports: what happened when an agent ran a released call (one per release)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

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

    async def owners(self, releases: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """Of (proposal id, release id) pairs, those released so, each with the agent it was
        released to: one read for a batch of reports."""
        wanted = set(releases)
        if not wanted:
            return {}
        query = (
            select(PROPOSALS.c.agent, OUTCOMES.c.proposal_id, OUTCOMES.c.release_id)
            .join(OUTCOMES, OUTCOMES.c.proposal_id == PROPOSALS.c.id)
            .where(OUTCOMES.c.proposal_id.in_(sorted({pid for pid, _ in wanted})))
        )

        def body(conn: Connection) -> dict[tuple[str, str], str]:
            return {
                (row.proposal_id, row.release_id): str(row.agent)
                for row in conn.execute(query)
                if (row.proposal_id, row.release_id) in wanted
            }

        return await self.db.read(body)

    async def record_many(self, reports: Sequence[Report], now: datetime) -> list[bool]:
        """A batch of reports in one transaction, in order: the first report of a release is
        stored with its `audit` record, a later one (in this batch or before it) is audited as
        its `repeat`, and a report without a row (refused) has only its `audit` record.
        Returns, per report, whether it was stored."""

        def body(conn: Connection) -> list[bool]:
            firsts: dict[str, ExecutionRecord] = {}
            for report in reports:
                if report.row is not None:
                    firsts.setdefault(report.row.release_id, report.row)
            stored: set[str] = set()
            if firsts:
                inserted = conn.execute(
                    self._insert.values([row._asdict() for row in firsts.values()])
                )
                stored = {str(r.release_id) for r in inserted}
            entries: list[AuditEntry] = []
            kept: list[bool] = []
            for report in reports:
                row = report.row
                new = row is not None and firsts[row.release_id] is row and row.release_id in stored
                kept.append(new)
                if row is None or new:
                    entries.append(report.audit)
                else:
                    assert report.repeat is not None, "a report with a row has its repeat record"
                    entries.append(report.repeat)
            self.audit.append_in(conn, entries, now)
            return kept

        return await self.db.transact(body)


class Report(NamedTuple):
    """One execution report to record: its row (None: refused, only audited), the audit
    record of its first report and the one of a repeat."""

    row: ExecutionRecord | None
    audit: AuditEntry
    repeat: AuditEntry | None = None
