"""The outbox: events written with the state change they report, published after the commit.

A row is `published` once JetStream confirmed it (marked in the background, see the service's
`PublishedMarker`); the republisher sends what a crash left unpublished. The intake's own events
are not kept here unless publishing them failed: they are rebuilt from the proposal's row.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection, and_, select, update

from workflow.effects import OutboxEvent
from workflow.store import fastpath
from workflow.store.engine import Database
from workflow.store.tables import OUTBOX


class OutboxRecord(NamedTuple):
    msg_id: str
    subject: str
    payload: str
    headers: str | None
    proposal_id: str | None
    published: bool
    created_at: datetime


class Outbox:
    def __init__(self, db: Database):
        self.db = db

    def insert_in(self, conn: Connection, events: Sequence[OutboxEvent], now: datetime) -> None:
        """Keep `events` (unpublished) inside the caller's transaction; a msg id already held
        is left as it is."""
        rows = [
            OutboxRecord(
                e.msg_id,
                e.subject,
                e.payload,
                json.dumps(e.headers) if e.headers else None,
                e.proposal_id,
                False,
                now,
            )
            for e in events
        ]
        self.db.insert_rows(conn, OUTBOX, rows, ignore=("msg_id",))

    async def save(self, events: Sequence[OutboxEvent], now: datetime) -> None:
        """Keep events in the outbox for the republisher (their publish failed)."""
        if events:
            await self.db.transact(lambda conn: self.insert_in(conn, events, now))

    async def mark_published(self, msg_ids: Iterable[str]) -> None:
        ids = list(msg_ids)

        def body(conn: Connection) -> None:
            if self.db.fast:
                fastpath.mark_published(conn, ids)
                return
            for chunk, _ in fastpath.in_chunks(ids):
                conn.execute(update(OUTBOX).where(OUTBOX.c.msg_id.in_(chunk)), {"published": True})

        if ids:
            await self.db.transact(body)

    async def events_for(self, proposal_ids: Iterable[str]) -> list[OutboxEvent]:
        """The outbox events of these proposals (those of approval steps and of failed
        publishes; the intake's own are rebuilt instead, see `Proposals.stored`)."""
        ids = list(proposal_ids)
        if not ids:
            return []
        query = select(OUTBOX).where(OUTBOX.c.proposal_id.in_(ids)).order_by(OUTBOX.c.created_at)
        return await self.db.read(lambda conn: [_event(r) for r in conn.execute(query)])

    async def unconfirmed_for(
        self, proposal_ids: Iterable[str]
    ) -> list[tuple[OutboxEvent, datetime]]:
        """The outbox events of these proposals that JetStream has not confirmed yet (not
        marked published), with when they were written: what a redelivered message may still
        have to send."""
        ids = list(proposal_ids)
        if not ids:
            return []
        query = (
            select(OUTBOX)
            .where(OUTBOX.c.proposal_id.in_(ids), OUTBOX.c.published.is_(False))
            .order_by(OUTBOX.c.created_at)
        )
        return await self.db.read(
            lambda conn: [(_event(r), r.created_at) for r in conn.execute(query)]
        )

    async def unpublished(self, older_than: datetime, limit: int = 500) -> list[OutboxEvent]:
        return [event for event, _ in await self.unpublished_rows(older_than, limit)]

    async def unpublished_rows(
        self, older_than: datetime, limit: int = 500
    ) -> list[tuple[OutboxEvent, datetime]]:
        """Events not marked published, written before `older_than`, with when they were."""
        async with self.db.engine.connect() as conn:
            rows = await conn.execute(
                select(OUTBOX)
                .where(and_(OUTBOX.c.published.is_(False), OUTBOX.c.created_at <= older_than))
                .order_by(OUTBOX.c.created_at)
                .limit(limit)
            )
            return [(_event(r), r.created_at) for r in rows]


def _event(row: Any) -> OutboxEvent:
    headers = json.loads(row.headers) if row.headers else None
    return OutboxEvent(row.msg_id, row.subject, row.payload, row.proposal_id, headers)
