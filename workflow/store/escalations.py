"""How far each held request climbed its escalation ladder, moved with the step's effects.

Taking a step is one transaction: the progress moves from `taken` to `taken + 1` only if it
still is `taken` (so two replicas never take the same step twice), together with what the step
does to the request (a raised requirement, an expiry) and its event and audit record.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import Connection, select, update

from workflow.effects import StepWrite
from workflow.store.engine import Database
from workflow.store.requests import ConcurrentUpdate, Requests
from workflow.store.tables import ESCALATIONS


class Escalations:
    def __init__(self, db: Database, requests: Requests):
        self.db = db
        self.requests = requests

    async def taken(self, request_ids: Iterable[str]) -> dict[str, int]:
        ids = sorted(set(request_ids))
        if not ids:
            return {}
        query = select(ESCALATIONS.c.request_id, ESCALATIONS.c.taken).where(
            ESCALATIONS.c.request_id.in_(ids)
        )
        return await self.db.read(lambda conn: {str(r[0]): int(r[1]) for r in conn.execute(query)})

    async def take(self, write: StepWrite, *, before: int, after: int, now: datetime) -> None:
        """Record steps `before`..`after - 1` as taken, with their effects; ConcurrentUpdate
        when another replica took them first or the request changed meanwhile."""

        def body(conn: Connection) -> None:
            if before == 0:
                exists = conn.execute(
                    select(ESCALATIONS.c.taken).where(ESCALATIONS.c.request_id == write.request_id)
                ).first()
                if exists is not None:
                    raise ConcurrentUpdate(write.request_id)
                conn.execute(
                    ESCALATIONS.insert().values(
                        request_id=write.request_id, taken=after, updated_at=now
                    )
                )
            else:
                moved = conn.execute(
                    update(ESCALATIONS)
                    .where(
                        ESCALATIONS.c.request_id == write.request_id,
                        ESCALATIONS.c.taken == before,
                    )
                    .values(taken=after, updated_at=now)
                )
                if moved.rowcount != 1:
                    raise ConcurrentUpdate(write.request_id)
            self.requests.commit_step_in(conn, write, now)

        await self.db.transact(body)
