"""Approval requests and the decisions received for them.

A request changes through `commit_step` (or `commit_steps`, a batch of them in one transaction)
only: one transaction writes the decision (its nonce is unique: a replay loses), moves the
request with an optimistic version check, and adds the outcome, the proposal's status, the
outbox events and the audit records the step produced.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection, bindparam, func, select, update
from sqlalchemy.exc import IntegrityError

from workflow.approvals import HeldRequest
from workflow.effects import DecisionRecord, RecordedNonce, StepWrite
from workflow.messages import ApprovalRecord, ApprovalRequirement
from workflow.outcomes import RequestState
from workflow.store import fastpath
from workflow.store.audit import AuditLog
from workflow.store.engine import Database
from workflow.store.outbox import IGNORE, Outbox, records
from workflow.store.pgpath import Head, Insert, Positional, StepRow
from workflow.store.schema import ACCEPTED_APPROVER_INDEX
from workflow.store.tables import AUDIT, DECISIONS, OUTBOX, OUTCOMES, PROPOSALS, REQUESTS


class ConcurrentUpdate(Exception):
    """Another writer changed the request first; reload and apply again."""


@contextlib.contextmanager
def _approver_raced() -> Iterator[None]:
    """A decision insert that met another transaction's accepted approval by the same approver
    on the same request is another writer moving the request first: `ConcurrentUpdate`.

    On PostgreSQL, replicas insert the same decision at once (a redelivery) or two of one
    approver's (two nonces). `ON CONFLICT (nonce)` settles the first only when the other row
    is seen in the nonce index before this one is written; otherwise this insert waits in the
    approvers' index and fails there when the other commits. Planned again, the message finds
    its nonce taken, or the approver's approval recorded. (Not `ON CONFLICT DO NOTHING` on
    both indexes: a second approval by one approver must never be dropped without a word.)"""
    try:
        yield
    except IntegrityError as exc:
        if ACCEPTED_APPROVER_INDEX in str(exc.orig):
            raise ConcurrentUpdate(f"an approval by the same approver ({exc.orig})") from exc
        raise


# The reads of every decision, built once (building a statement costs more than running it).
# A request by its own id, or by its proposal's id: never one query matching either (an
# attacker's proposal id could equal a victim's request id, and which row came first would
# decide which call a decision approves).
_BY_REQUEST_ID = select(REQUESTS).where(REQUESTS.c.request_id == bindparam("ident"))
_BY_PROPOSAL_ID = select(REQUESTS).where(REQUESTS.c.proposal_id == bindparam("ident"))
_BY_IDS = select(REQUESTS).where(REQUESTS.c.request_id.in_(bindparam("ids", expanding=True)))
_NONCE = select(DECISIONS.c.signature, DECISIONS.c.stream_seq).where(
    DECISIONS.c.nonce == bindparam("nonce")
)
_NONCES = select(DECISIONS.c.nonce, DECISIONS.c.signature, DECISIONS.c.stream_seq).where(
    DECISIONS.c.nonce.in_(bindparam("nonces", expanding=True))
)
_APPROVALS = (
    select(DECISIONS.c.request_id, DECISIONS.c.record)
    .where(
        DECISIONS.c.request_id.in_(bindparam("ids", expanding=True)),
        DECISIONS.c.accepted.is_(True),
        DECISIONS.c.verdict == "approve",
    )
    .order_by(DECISIONS.c.received_at)
)
# The same on SQLite through the DB-API (`load_many_in`), and on PostgreSQL in the collector's
# one read (`Store.decision_reads`): the columns in table order, the three timestamps last,
# read back as SQLAlchemy would (aware, UTC).
REQUEST_COLUMNS = (
    "request_id", "proposal_id", "agent", "workspace", "digest", "requirement", "state",
    "version", "created_at", "expires_at", "closed_at",
)  # fmt: skip
_REQUEST_SELECT = f"SELECT {', '.join(REQUEST_COLUMNS)} FROM requests"


class RequestColumns(NamedTuple):
    """A request's row read as `REQUEST_COLUMNS`."""

    request_id: str
    proposal_id: str
    agent: str
    workspace: str
    digest: str
    requirement: str
    state: str
    version: int
    created_at: datetime | None
    expires_at: datetime | None
    closed_at: datetime | None


# An approval step's statements: the SET clause comes from the parameters (a handful of
# shapes, each compiled once), the WHERE values from `b_*` parameters.
_STEP = update(REQUESTS).where(
    REQUESTS.c.request_id == bindparam("b_request_id"),
    REQUESTS.c.version == bindparam("b_version"),
)
_PROPOSAL_STATUS = update(PROPOSALS).where(PROPOSALS.c.id == bindparam("b_id"))


class Requests:
    def __init__(self, db: Database, outbox: Outbox, audit: AuditLog):
        self.db = db
        self.outbox = outbox
        self.audit = audit
        self._insert_decision = (
            db.insert(DECISIONS)
            .on_conflict_do_nothing(index_elements=["nonce"])
            .returning(DECISIONS.c.nonce)
        )

    async def load(self, request_id: str) -> tuple[HeldRequest, int] | None:
        """A request by its request id, with its approvals and version."""
        return await self._load(_BY_REQUEST_ID, request_id)

    async def load_for_proposal(self, proposal_id: str) -> tuple[HeldRequest, int] | None:
        """The request holding a proposal, by the proposal's id."""
        return await self._load(_BY_PROPOSAL_ID, proposal_id)

    async def _load(self, query: Any, ident: str) -> tuple[HeldRequest, int] | None:
        def body(conn: Connection) -> tuple[HeldRequest, int] | None:
            row = conn.execute(query, {"ident": ident}).first()
            if row is None:
                return None
            approvals = self._approvals(conn, [row.request_id])
            return _held(row, approvals.get(row.request_id, ())), int(row.version)

        return await self.db.read(body)

    def load_many_in(
        self, conn: Connection, request_ids: Sequence[str]
    ) -> dict[str, tuple[HeldRequest, int]]:
        """Several requests by request id, with their approvals and versions, inside the
        caller's read: those that exist (on SQLite through the DB-API: a decision's fixed
        cost is mostly statements, see `fastpath`)."""
        if not request_ids:
            return {}
        if self.db.fast:
            rows: Sequence[Any] = [
                RequestColumns(*r[:-3], *map(fastpath.from_sqlite_datetime, r[-3:]))
                for r in fastpath.select_in(conn, _REQUEST_SELECT, "request_id", list(request_ids))
            ]
        else:
            rows = conn.execute(_BY_IDS, {"ids": list(request_ids)}).all()
        approvals = self._approvals(conn, [r.request_id for r in rows]) if rows else {}
        return held_requests(rows, approvals)

    def recorded_nonces_in(
        self, conn: Connection, nonces: Sequence[str]
    ) -> dict[str, RecordedNonce]:
        """Which of these nonces were recorded, each with the signature it carried and the
        stream sequence of its message, inside the caller's read."""
        if not nonces:
            return {}
        if self.db.fast:
            found = fastpath.select_in(
                conn, "SELECT nonce, signature, stream_seq FROM decisions", "nonce", list(nonces)
            )
            return {nonce: RecordedNonce(signature, seq) for nonce, signature, seq in found}
        return {
            r.nonce: RecordedNonce(r.signature, r.stream_seq)
            for r in conn.execute(_NONCES, {"nonces": list(nonces)})
        }

    async def recorded_nonce(self, nonce: str) -> RecordedNonce | None:
        """The decision recorded with this nonce (its signature and message), if any."""
        found = await self.db.read(lambda conn: conn.execute(_NONCE, {"nonce": nonce}).first())
        return None if found is None else RecordedNonce(found.signature, found.stream_seq)

    async def decision(self, nonce: str) -> Any | None:
        """The stored decision with this nonce (accepted or refused, and why)."""
        async with self.db.engine.connect() as conn:
            return (await conn.execute(select(DECISIONS).where(DECISIONS.c.nonce == nonce))).first()

    async def waiting(self, now: datetime, limit: int = 1000) -> list[tuple[HeldRequest, int]]:
        """Pending requests not yet expired, oldest first (what escalation ladders climb)."""
        query = (
            select(REQUESTS)
            .where(REQUESTS.c.state == RequestState.PENDING, REQUESTS.c.expires_at > now)
            .order_by(REQUESTS.c.created_at)
            .limit(limit)
        )

        def body(conn: Connection) -> list[tuple[HeldRequest, int]]:
            rows = conn.execute(query).all()
            approvals = self._approvals(conn, [r.request_id for r in rows]) if rows else {}
            return [(_held(r, approvals.get(r.request_id, ())), int(r.version)) for r in rows]

        return await self.db.read(body)

    async def due(self, now: datetime, limit: int = 200) -> list[tuple[HeldRequest, int]]:
        """Pending requests whose expiry has passed, oldest expiry first."""
        query = (
            select(REQUESTS)
            .where(REQUESTS.c.state == RequestState.PENDING, REQUESTS.c.expires_at <= now)
            .order_by(REQUESTS.c.expires_at)
            .limit(limit)
        )

        def body(conn: Connection) -> list[tuple[HeldRequest, int]]:
            rows = conn.execute(query).all()
            approvals = self._approvals(conn, [r.request_id for r in rows]) if rows else {}
            return [(_held(r, approvals.get(r.request_id, ())), int(r.version)) for r in rows]

        return await self.db.read(body)

    async def commit_step(self, write: StepWrite, now: datetime) -> bool:
        """Apply one step atomically. False when the nonce was already used (a replay race).

        Raises ConcurrentUpdate when another writer moved the request first. An approval
        step goes before the intake's batches waiting for the writer (`urgent`).
        """
        return await self.db.transact(
            lambda conn: self.commit_step_in(conn, write, now), urgent=True
        )

    async def commit_steps(self, steps: Sequence[tuple[StepWrite, datetime]]) -> list[bool]:
        """Apply several steps (of distinct requests and nonces) in one transaction, as
        `commit_step` would apply each: for each, False when its nonce was already used.

        Raises ConcurrentUpdate, and commits none of them, when another writer moved one of
        the requests first.

        PostgreSQL, once this process knows where its last commit left its audit chain's head:
        first one statement committed on its own, each step taken as counting
        (`Database.transact_at_head`); when one does not (its nonce taken, its request at
        another version) or the head moved, it writes nothing, and the transaction below
        sorts the steps out."""
        if not steps:
            return []
        if self.db.pg_inserts is not None and (
            await self.db.transact_at_head(
                lambda head: self._steps_at(head, steps), urgent=True, on=self.db.pg_collector
            )
        ):
            return [True] * len(steps)
        return await self.db.transact(lambda conn: self.commit_steps_in(conn, steps), urgent=True)

    def _steps_at(
        self, head: Head, steps: Sequence[tuple[StepWrite, datetime]]
    ) -> tuple[Positional, Head]:
        """PostgreSQL, one statement: every step applied, as `_commit_steps_pg` applies those
        that count, its records chained after `head`, and the head it leaves."""
        pg = self.db.pg_inserts
        assert pg is not None
        latest = max(now for _, now in steps)
        audit, moved = self.audit.chained([a for w, _ in steps for a in w.audit], latest, head)
        inserts = [*_kept_rows(steps, latest), Insert(AUDIT, audit)]
        decisions = [w.decision for w, _ in steps if w.decision is not None]
        rows = [_step_row(write, now) for write, now in steps]
        return pg.steps_at(decisions, rows, inserts, head, moved), moved

    def commit_steps_in(
        self, conn: Connection, steps: Sequence[tuple[StepWrite, datetime]]
    ) -> list[bool]:
        """`commit_steps` inside the caller's transaction, a statement per table rather than
        per step: the nonces first (a step whose nonce is taken writes nothing), then the
        version-checked request updates, then the outcomes, statuses, events and audit
        records of the steps that count. The outbox rows and audit records share the
        batch's latest moment. On PostgreSQL the nonces, request updates and statuses are one
        statement, the rest another (`pgpath`)."""
        if self.db.pg_statements is not None:
            with _approver_raced():
                return self._commit_steps_pg(conn, steps)
        with _approver_raced():
            ok = self._insert_decisions(conn, [w.decision for w, _ in steps])
        kept = [(w, now) for (w, now), good in zip(steps, ok, strict=True) if good]
        if not kept:
            return ok
        self._move_requests(conn, kept)
        statuses = [w.proposal_status for w, _ in kept if w.proposal_status is not None]
        if statuses:
            if self.db.fast:
                fastpath.dbapi(conn).executemany(
                    "UPDATE proposals SET status = ? WHERE id = ?",
                    [(str(status), pid) for pid, status in statuses],
                )
            else:
                conn.execute(
                    _PROPOSAL_STATUS, [{"b_id": pid, "status": status} for pid, status in statuses]
                )
        self._append_kept(conn, kept)
        return ok

    def _append_kept(
        self, conn: Connection, kept: Sequence[tuple[StepWrite, datetime]], head: Head | None = None
    ) -> None:
        """The outcomes, events and audit records of the steps that count."""
        latest = max(now for _, now in kept)
        self.audit.append_in(
            conn, [a for w, _ in kept for a in w.audit], latest, also=_kept_rows(kept, latest),
            head=head,
        )  # fmt: skip

    def _commit_steps_pg(
        self, conn: Connection, steps: Sequence[tuple[StepWrite, datetime]]
    ) -> list[bool]:
        """`commit_steps_in` on PostgreSQL: two statements whatever the batch's size."""
        pg = self.db.pg_statements
        assert pg is not None
        rows = [_step_row(write, now) for write, now in steps]
        applied = pg.apply_steps(
            conn,
            [w.decision for w, _ in steps if w.decision is not None],
            rows,
            self.db.pg_prefer,
        )
        ok = [w.decision is None or w.decision.nonce in applied.new_nonces for w, _ in steps]
        kept = [(w, now) for (w, now), good in zip(steps, ok, strict=True) if good]
        expected = {w.request_id for w, _ in kept if w.expected_version is not None}
        if applied.moved_requests != expected:
            stale = len(expected - applied.moved_requests)
            raise ConcurrentUpdate(f"{stale} of {len(expected)} requests")
        if kept:
            self._append_kept(conn, kept, applied.head)
        return ok

    def _insert_decisions(
        self, conn: Connection, decisions: Sequence[DecisionRecord | None]
    ) -> list[bool]:
        """Record the decisions whose nonce is new (None: a step without one); per step,
        whether it may go on. The caller never has one nonce twice in a batch."""
        records = [d for d in decisions if d is not None]
        if not records:
            return [True] * len(decisions)
        nonces = [d.nonce for d in records]
        if self.db.fast:  # under the write lock nothing else inserts: look up, then insert
            taken = fastpath.existing_keys(conn, "decisions", "nonce", nonces)
            self.db.insert_rows(conn, DECISIONS, [d for d in records if d.nonce not in taken])
        else:  # replicas insert concurrently: the insert says which nonces were new
            new = {
                row[0]
                for row in conn.execute(self._insert_decision, [d._asdict() for d in records])
            }
            taken = set(nonces) - new
        return [d is None or d.nonce not in taken for d in decisions]

    def _move_requests(self, conn: Connection, steps: Sequence[tuple[StepWrite, datetime]]) -> None:
        """The version-checked request updates; ConcurrentUpdate when one found another
        version (the whole transaction is then rolled back)."""
        shapes: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for write, now in steps:
            if write.expected_version is None:
                continue
            values: dict[str, Any] = {"version": write.expected_version + 1}
            if write.requirement is not None:
                values["requirement"] = write.requirement
            if write.expires_at is not None:
                values["expires_at"] = write.expires_at
            if write.new_state is not None:
                values["state"] = write.new_state
                if write.new_state is not RequestState.PENDING:
                    values["closed_at"] = now
            values["b_request_id"] = write.request_id
            values["b_version"] = write.expected_version
            shapes.setdefault(tuple(values), []).append(values)
        for columns, rows in shapes.items():
            if self.db.fast:
                changed = fastpath.update_requests(conn, columns, rows)
                if changed != len(rows):
                    raise ConcurrentUpdate(f"{len(rows) - changed} of {len(rows)} requests")
                continue
            for values in rows:  # rowcount per statement: asyncpg's executemany has none
                if conn.execute(_STEP, values).rowcount != 1:
                    raise ConcurrentUpdate(str(values["b_request_id"]))

    def commit_step_in(self, conn: Connection, write: StepWrite, now: datetime) -> bool:
        """`commit_step` inside the caller's transaction."""
        if write.decision is not None:
            with _approver_raced():
                got = conn.execute(self._insert_decision, write.decision._asdict())
            if got.first() is None:
                return False
        if write.expected_version is not None:
            values: dict[str, Any] = {
                "b_request_id": write.request_id,
                "b_version": write.expected_version,
                "version": write.expected_version + 1,
            }
            if write.requirement is not None:
                values["requirement"] = write.requirement
            if write.expires_at is not None:
                values["expires_at"] = write.expires_at
            if write.new_state is not None:
                values["state"] = write.new_state
                if write.new_state is not RequestState.PENDING:
                    values["closed_at"] = now
            changed = conn.execute(_STEP, values)
            if changed.rowcount != 1:
                raise ConcurrentUpdate(write.request_id)
        if write.outcome is not None:
            self.db.insert_rows(conn, OUTCOMES, [write.outcome])
        if write.proposal_status is not None:
            pid, status = write.proposal_status
            conn.execute(_PROPOSAL_STATUS, {"b_id": pid, "status": status})
        self.outbox.insert_in(conn, write.events, now)
        self.audit.append_in(conn, write.audit, now)
        return True

    def _approvals(
        self, conn: Connection, request_ids: Sequence[str]
    ) -> dict[str, tuple[ApprovalRecord, ...]]:
        """The accepted approvals of each request, in the order they arrived."""
        if self.db.fast:
            return approvals_of(
                fastpath.select_in(
                    conn, "SELECT request_id, record FROM decisions", "request_id",
                    list(request_ids),
                    "AND accepted = 1 AND verdict = 'approve' ORDER BY received_at",
                )
            )  # fmt: skip
        return approvals_of(
            (r.request_id, r.record) for r in conn.execute(_APPROVALS, {"ids": list(request_ids)})
        )

    async def pending(
        self, *, workspace: str | None, agent: str | None, limit: int
    ) -> list[tuple[Any, tuple[ApprovalRecord, ...]]]:
        """Pending requests with their proposal rows, oldest first."""
        query = (
            select(REQUESTS, PROPOSALS.c.payload, PROPOSALS.c.classification)
            .join(PROPOSALS, PROPOSALS.c.id == REQUESTS.c.proposal_id)
            .where(REQUESTS.c.state == RequestState.PENDING)
            .order_by(REQUESTS.c.created_at)
            .limit(limit)
        )
        if workspace:
            query = query.where(REQUESTS.c.workspace == workspace)
        if agent:
            query = query.where(REQUESTS.c.agent == agent)

        def body(conn: Connection) -> list[tuple[Any, tuple[ApprovalRecord, ...]]]:
            rows = conn.execute(query).all()
            approvals = self._approvals(conn, [r.request_id for r in rows]) if rows else {}
            return [(r, approvals.get(r.request_id, ())) for r in rows]

        return await self.db.read(body)

    async def pending_count(self) -> int:
        async with self.db.engine.connect() as conn:
            got = await conn.execute(
                select(func.count())
                .select_from(REQUESTS)
                .where(REQUESTS.c.state == RequestState.PENDING)
            )
            return int(got.scalar_one())


def _kept_rows(kept: Sequence[tuple[StepWrite, datetime]], latest: datetime) -> list[Insert]:
    """The outcomes and outbox events of the steps that count (the events at the batch's
    latest moment)."""
    return [
        Insert(OUTCOMES, [w.outcome for w, _ in kept if w.outcome is not None]),
        Insert(OUTBOX, records([e for w, _ in kept for e in w.events], latest), IGNORE),
    ]


def _step_row(write: StepWrite, now: datetime) -> StepRow:
    """A step as `PgStatements.apply_steps` applies it (what `_move_requests` sets)."""
    closing = write.new_state is not None and write.new_state is not RequestState.PENDING
    status = write.proposal_status
    return StepRow(
        request_id=write.request_id,
        nonce=write.decision.nonce if write.decision is not None else None,
        b_version=write.expected_version,
        requirement=write.requirement,
        expires_at=write.expires_at,
        state=write.new_state,
        closed_at=now if closing else None,
        proposal_id=status[0] if status is not None else None,
        status=status[1] if status is not None else None,
    )


def held_requests(
    rows: Sequence[Any], approvals: dict[str, tuple[ApprovalRecord, ...]]
) -> dict[str, tuple[HeldRequest, int]]:
    """Request rows (with attributes named as the columns) as held requests with their
    versions, each with its approvals (`approvals_of`)."""
    return {r.request_id: (_held(r, approvals.get(r.request_id, ())), int(r.version)) for r in rows}


def approvals_of(rows: Any) -> dict[str, tuple[ApprovalRecord, ...]]:
    """(request id, approval record JSON) pairs, in arrival order, by request."""
    out: dict[str, list[ApprovalRecord]] = {}
    for request_id, record in rows:
        out.setdefault(request_id, []).append(ApprovalRecord.model_validate_json(record))
    return {k: tuple(v) for k, v in out.items()}


def _held(row: Any, approvals: tuple[ApprovalRecord, ...]) -> HeldRequest:
    return HeldRequest(
        request_id=row.request_id,
        proposal_id=row.proposal_id,
        agent=row.agent,
        workspace=row.workspace,
        proposal_digest=row.digest,
        requirement=ApprovalRequirement.model_validate_json(row.requirement),
        expires_at=row.expires_at,
        state=RequestState(row.state),
        approvals=approvals,
    )
