"""Stored proposals, streamed in pages for a backtest (`workflow.policy.backtest`).

Pages follow the primary key (keyset pagination: each page is an index range scan, whatever
the history's size), so the history is never loaded whole and no cursor stays open between
pages.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime

from sqlalchemy import Connection, String, select, type_coerce

from workflow.policy.backtest import PastCall
from workflow.store.engine import Database
from workflow.store.tables import PROPOSALS

PAGE = 10_000

_COLUMNS = (
    PROPOSALS.c.id,
    PROPOSALS.c.agent,
    PROPOSALS.c.tool,
    PROPOSALS.c.decision,
    PROPOSALS.c.payload,
    # As the stored text (SQLite) or timestamp (PostgreSQL), without the UTC column's
    # per-row conversion: the backtest needs its day and, for examples, its text.
    type_coerce(PROPOSALS.c.received_at, String()),
)


async def past_calls(
    db: Database, *, since: datetime | None = None, page: int = PAGE
) -> AsyncIterator[list[PastCall]]:
    """Every stored proposal received at or after `since`, a page at a time."""
    after = ""
    while True:
        query = select(*_COLUMNS).where(PROPOSALS.c.id > after).order_by(PROPOSALS.c.id)
        if since is not None:
            query = query.where(PROPOSALS.c.received_at >= since)
        query = query.limit(page)

        def body(conn: Connection, query: object = query) -> list[PastCall]:
            return [
                PastCall(i, agent, tool, decision, payload, at if isinstance(at, str) else str(at))
                for i, agent, tool, decision, payload, at in conn.execute(query)  # type: ignore[call-overload]
            ]

        rows = await db.read(body)
        if not rows:
            return
        yield rows
        after = rows[-1].proposal_id
