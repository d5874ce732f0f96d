"""Grants and freezes: the approvers' controls the intake consults for every batch.

A grant's use is claimed by one conditional update (`uses < max_uses`, not revoked, not
expired) together with the row that names the proposal it released, in one transaction: on
PostgreSQL the row lock makes a second replica re-check the condition after the first commits,
on SQLite the write lock serialises the claims, so a 1-use grant releases one call, whatever
races it. A proposal that is delivered again finds its use and reuses it (it is not counted
twice).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, and_, bindparam, delete, or_, select, update

from workflow.controls import FreezeInfo, GrantInfo, GrantScope
from workflow.effects import AuditEntry, OutboxEvent
from workflow.messages import Decision
from workflow.policy.freeze import FreezeTerms
from workflow.policy.grants import GrantTerms
from workflow.store import fastpath
from workflow.store.audit import AuditLog
from workflow.store.engine import Database
from workflow.store.outbox import Outbox
from workflow.store.tables import FREEZES, GRANT_USES, GRANTS, PROPOSALS

_FREEZES_SQL = (
    "SELECT freeze_id, agent, workspace, all_calls, reason, by, at FROM freezes "
    "WHERE lifted_at IS NULL ORDER BY at"
)


def freezes_of(rows: Any) -> list[FreezeTerms]:
    """Freeze rows read as `_FREEZES_SQL`'s columns (on SQLite through the DB-API, its time
    text read as UTC)."""
    return [
        FreezeTerms(i, agent, ws, bool(every), reason, by, _utc(at))
        for i, agent, ws, every, reason, by, at in rows
    ]


def _utc(value: Any) -> datetime:
    found = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return found.replace(tzinfo=UTC) if found.tzinfo is None else found


def _terms(row: Any) -> GrantTerms:
    return GrantTerms(
        grant_id=row.grant_id,
        approver=row.approver,
        key=row.key,
        tool=row.tool,
        workspace=row.workspace,
        agent=row.agent,
        scope=GrantScope(row.scope),
        command_prefix=tuple(json.loads(row.command_prefix)) if row.command_prefix else None,
        path_glob=row.path_glob,
        expires_at=row.expires_at,
        max_uses=row.max_uses,
        uses=int(row.uses),
        revoked=row.revoked_at is not None,
        session_id=row.session_id,
    )


def _status(row: Any, now: datetime) -> str:
    if row.revoked_at is not None:
        return "revoked"
    if now >= row.expires_at:
        return "expired"
    if row.max_uses is not None and row.uses >= row.max_uses:
        return "used_up"
    return "active"


def _live(now: Any) -> Any:
    return and_(
        GRANTS.c.revoked_at.is_(None),
        GRANTS.c.expires_at > now,
        or_(GRANTS.c.max_uses.is_(None), GRANTS.c.uses < GRANTS.c.max_uses),
    )


# The reads of every intake batch, built once (building a statement costs more than running it).
_LIVE = select(GRANTS).where(_live(bindparam("now", type_=GRANTS.c.expires_at.type)))
_FREEZES = (
    select(
        FREEZES.c.freeze_id, FREEZES.c.agent, FREEZES.c.workspace, FREEZES.c.all_calls,
        FREEZES.c.reason, FREEZES.c.by, FREEZES.c.at,
    )
    .where(FREEZES.c.lifted_at.is_(None))
    .order_by(FREEZES.c.at)
)  # fmt: skip


#: The events of a thaw, given how many freezes it lifted (none when it lifted none).
ThawNews = Callable[[int], Sequence[OutboxEvent]]
#: The news of a grant issued or revoked, made from the grant as stored (outbox events).
GrantNews = Callable[[GrantInfo], Sequence[OutboxEvent]]


class Grants:
    def __init__(self, db: Database, audit: AuditLog, outbox: Outbox):
        self.db = db
        self.audit = audit
        self.outbox = outbox

    async def issue(
        self, values: dict[str, Any], audit: Sequence[AuditEntry], now: datetime,
        news: GrantNews = lambda grant: (),
    ) -> GrantInfo | None:  # fmt: skip
        """Store a verified grant with its audit record and its news (`news`, kept in the
        outbox in the same transaction); the grant as stored, or None when its id or nonce
        was used."""

        def body(conn: Connection) -> GrantInfo | None:
            taken = conn.execute(
                select(GRANTS.c.grant_id).where(
                    (GRANTS.c.grant_id == values["grant_id"]) | (GRANTS.c.nonce == values["nonce"])
                )
            ).first()
            if taken is not None:
                return None
            conn.execute(GRANTS.insert().values(**values))
            self.audit.append_in(conn, audit, now)
            return self._told(conn, values["grant_id"], now, news)

        return await self.db.transact(body)

    def _told(self, conn: Connection, grant_id: str, now: datetime, news: GrantNews) -> GrantInfo:
        """The grant as it now stands, its news put in the outbox (in `conn`'s transaction)."""
        row = conn.execute(select(GRANTS).where(GRANTS.c.grant_id == grant_id)).first()
        assert row is not None
        grant = _info(row, now)
        self.outbox.insert_in(conn, news(grant), now)
        return grant

    async def live(self, now: datetime) -> list[GrantTerms]:
        """The grants that may still release something (few: they expire within hours)."""
        return await self.db.read(
            lambda conn: [_terms(r) for r in conn.execute(_LIVE, {"now": now})]
        )

    async def claim(self, grant_id: str, proposal_id: str, now: datetime) -> bool:
        """Count one use of the grant for the proposal; False when it can release nothing
        more (revoked, expired, used up since it was read) or released another grant's."""

        def body(conn: Connection) -> bool:
            used = conn.execute(
                select(GRANT_USES.c.grant_id).where(GRANT_USES.c.proposal_id == proposal_id)
            ).first()
            if used is not None:
                return bool(used.grant_id == grant_id)
            decided = conn.execute(
                select(PROPOSALS.c.id).where(PROPOSALS.c.id == proposal_id)
            ).first()
            if decided is not None:
                return False  # stored without a grant: a redelivery changes nothing, uses none
            moved = conn.execute(
                update(GRANTS)
                .where(GRANTS.c.grant_id == grant_id, _live(now))
                .values(uses=GRANTS.c.uses + 1)
            )
            if moved.rowcount != 1:
                return False
            conn.execute(
                GRANT_USES.insert().values(proposal_id=proposal_id, grant_id=grant_id, at=now)
            )
            return True

        return await self.db.transact(body)

    async def give_back(self, proposal_ids: Sequence[str]) -> int:
        """Undo the use claimed (`claim`) for each of these proposals that is stored as a call
        no grant released (held or denied: a freeze held it), whichever grant it was claimed
        from (a proposal has one use at most); how many were given back. A proposal not stored,
        or released, keeps its use (it may be what released it)."""
        if not proposal_ids:
            return 0

        def body(conn: Connection) -> int:
            given = 0
            for proposal_id in proposal_ids:
                stored = conn.execute(
                    select(PROPOSALS.c.decision).where(PROPOSALS.c.id == proposal_id)
                ).first()
                if stored is None or stored.decision == Decision.ALLOW.value:
                    continue
                use = conn.execute(
                    select(GRANT_USES.c.grant_id).where(GRANT_USES.c.proposal_id == proposal_id)
                ).first()
                if use is None:
                    continue
                conn.execute(delete(GRANT_USES).where(GRANT_USES.c.proposal_id == proposal_id))
                conn.execute(
                    update(GRANTS)
                    .where(GRANTS.c.grant_id == use.grant_id, GRANTS.c.uses > 0)
                    .values(uses=GRANTS.c.uses - 1)
                )
                given += 1
            return given

        return await self.db.transact(body)

    async def get(self, grant_id: str, now: datetime) -> GrantInfo | None:
        query = select(GRANTS).where(GRANTS.c.grant_id == grant_id)
        row = await self.db.read(lambda conn: conn.execute(query).first())
        return _info(row, now) if row is not None else None

    async def terms(self, grant_id: str) -> GrantTerms | None:
        query = select(GRANTS).where(GRANTS.c.grant_id == grant_id)
        row = await self.db.read(lambda conn: conn.execute(query).first())
        return _terms(row) if row is not None else None

    async def listed(
        self, now: datetime, *, every: bool = False, workspace: str | None = None, limit: int = 200
    ) -> list[GrantInfo]:
        query = select(GRANTS).order_by(GRANTS.c.issued_at.desc()).limit(limit)
        if not every:
            query = query.where(_live(now))
        if workspace is not None:
            query = query.where(GRANTS.c.workspace == workspace)
        rows = await self.db.read(lambda conn: list(conn.execute(query)))
        return [_info(r, now) for r in rows]

    async def revoke(
        self, grant_id: str, by: str, audit: Sequence[AuditEntry], now: datetime,
        news: GrantNews = lambda grant: (),
    ) -> GrantInfo | None:  # fmt: skip
        """Revoke the grant, with its audit record and its news (`news`, in the outbox in the
        same transaction); the grant as stored, or None when it was revoked already."""

        def body(conn: Connection) -> GrantInfo | None:
            moved = conn.execute(
                update(GRANTS)
                .where(GRANTS.c.grant_id == grant_id, GRANTS.c.revoked_at.is_(None))
                .values(revoked_at=now, revoked_by=by)
            )
            if moved.rowcount != 1:
                return None
            self.audit.append_in(conn, audit, now)
            return self._told(conn, grant_id, now, news)

        return await self.db.transact(body)

    # ------------------------------------------------------------------ freezes

    async def freezes(self) -> list[FreezeTerms]:
        """The freezes in force (a handful at most)."""
        return await self.db.read(self.freezes_in)

    def freezes_in(self, conn: Connection) -> list[FreezeTerms]:
        """`freezes` inside the caller's read."""
        if self.db.fast:
            # SQLite: straight through the DB-API (every batch reads this; usually nothing).
            return freezes_of(fastpath.dbapi(conn).execute(_FREEZES_SQL).fetchall())
        return freezes_of(conn.execute(_FREEZES))

    async def freeze(
        self, terms: FreezeTerms, audit: Sequence[AuditEntry], now: datetime,
        events: Sequence[OutboxEvent] = (),
    ) -> None:  # fmt: skip
        """Put a freeze in force, with its audit record and its news (`events`, kept in the
        outbox in the same transaction)."""

        def body(conn: Connection) -> None:
            conn.execute(
                FREEZES.insert().values(
                    freeze_id=terms.freeze_id,
                    agent=terms.agent,
                    workspace=terms.workspace,
                    all_calls=terms.all_calls,
                    reason=terms.reason,
                    by=terms.by,
                    at=terms.at,
                )
            )
            self.audit.append_in(conn, audit, now)
            self.outbox.insert_in(conn, events, now)

        await self.db.transact(body)

    async def thaw(
        self, agent: str | None, workspace: str | None, by: str, audit: Sequence[AuditEntry],
        now: datetime, news: ThawNews = lambda lifted: (),
    ) -> int:  # fmt: skip
        """Lift the freezes of exactly this scope, with the audit record and the news of the
        lift (`news`, kept in the outbox in the same transaction) when it lifted any; returns
        how many were lifted."""

        def body(conn: Connection) -> int:
            moved = conn.execute(
                update(FREEZES)
                .where(
                    FREEZES.c.lifted_at.is_(None),
                    FREEZES.c.agent.is_(None) if agent is None else FREEZES.c.agent == agent,
                    FREEZES.c.workspace.is_(None)
                    if workspace is None
                    else FREEZES.c.workspace == workspace,
                )
                .values(lifted_at=now, lifted_by=by)
            )
            if moved.rowcount:
                self.audit.append_in(conn, audit, now)
                self.outbox.insert_in(conn, news(int(moved.rowcount)), now)
            return int(moved.rowcount)

        return await self.db.transact(body)


def freeze_info(terms: FreezeTerms) -> FreezeInfo:
    return FreezeInfo(
        freeze_id=terms.freeze_id,
        agent=terms.agent,
        workspace=terms.workspace,
        all_calls=terms.all_calls,
        reason=terms.reason,
        by=terms.by,
        at=terms.at,
    )


def _info(row: Any, now: datetime) -> GrantInfo:
    return GrantInfo(
        grant_id=row.grant_id,
        request_id=row.request_id,
        approver=row.approver,
        tool=row.tool,
        workspace=row.workspace,
        agent=row.agent,
        session_id=row.session_id,
        scope=GrantScope(row.scope),
        command_prefix=json.loads(row.command_prefix) if row.command_prefix else None,
        path_glob=row.path_glob,
        issued_at=row.issued_at,
        expires_at=row.expires_at,
        max_uses=row.max_uses,
        uses=int(row.uses),
        revoked_at=row.revoked_at,
        revoked_by=row.revoked_by,
        status=_status(row, now),
    )
