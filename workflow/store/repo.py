"""The store: the service's database, by aggregate, over one `Database`.

| aggregate | module | holds |
|---|---|---|
| `proposals` | `store.proposals` | the intake's rows, and what rebuilds its events |
| `requests` | `store.requests` | approval requests and decisions; approval steps |
| `outbox` | `store.outbox` | events awaiting publication |
| `audit` | `store.audit` | the hash-chained audit log |
| `executions` | `store.executions` | agents' execution reports |
| `passkeys` | `store.passkeys` | approvers' passkeys and the invitations that register them |
| `escalations` | `store.escalations` | how far each request climbed its escalation ladder |
| `retention` | `store.retention` | pruning what the retention policy no longer keeps |
| `grants` | `store.grants` | approvers' grants, their uses, and the freezes in force |
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from sqlalchemy import Connection

from workflow.approvals import HeldRequest
from workflow.effects import RecordedNonce, StoredIntake
from workflow.policy.freeze import FreezeTerms
from workflow.store.audit import AuditLog
from workflow.store.engine import Database
from workflow.store.escalations import Escalations
from workflow.store.executions import Executions
from workflow.store.grants import Grants, freezes_of
from workflow.store.outbox import Outbox
from workflow.store.passkeys import Passkeys
from workflow.store.pgpath import Positional
from workflow.store.proposals import Proposals, stored_intakes
from workflow.store.requests import (
    REQUEST_COLUMNS,
    RequestColumns,
    Requests,
    approvals_of,
    held_requests,
)
from workflow.store.retention import Retention

#: `Store.decision_reads` on PostgreSQL, one statement (`$1` the request ids, `$2` the
#: nonces): an array of rows for each of the reads, in the columns of the SQLAlchemy reads.
DECISION_READS = (
    f"SELECT ARRAY(SELECT ROW({', '.join(REQUEST_COLUMNS)}) FROM requests "
    "WHERE request_id = ANY(CAST($1 AS VARCHAR[]))), "
    'ARRAY(SELECT ROW(request_id, "record") FROM decisions '
    "WHERE request_id = ANY(CAST($1 AS VARCHAR[])) AND accepted AND verdict = 'approve' "
    "ORDER BY received_at), "
    "ARRAY(SELECT ROW(nonce, signature, stream_seq) FROM decisions "
    "WHERE nonce = ANY(CAST($2 AS VARCHAR[]))), "
    "ARRAY(SELECT ROW(p.id, p.payload, p.classification, p.verdict, p.trace, p.received_at, "
    "p.stream_seq) FROM proposals p JOIN requests r ON p.id = r.proposal_id "
    "WHERE r.request_id = ANY(CAST($1 AS VARCHAR[]))), "
    'ARRAY(SELECT ROW(freeze_id, agent, workspace, all_calls, reason, "by", "at") '
    'FROM freezes WHERE lifted_at IS NULL ORDER BY "at")'
)


class DecisionReads(NamedTuple):
    """What a batch of decisions reads before it is planned (`Store.decision_reads`)."""

    #: request id -> (the request with its approvals, its version), those that exist
    requests: dict[str, tuple[HeldRequest, int]]
    #: the nonces already recorded -> the signature each carried and its message
    nonces: dict[str, RecordedNonce]
    #: the stored proposals of those requests
    parts: list[StoredIntake]
    #: the freezes in force
    freezes: list[FreezeTerms]


class Store:
    def __init__(self, db: Database):
        self.db = db
        self.audit = AuditLog(db)
        self.outbox = Outbox(db)
        self.proposals = Proposals(db, self.audit)
        self.requests = Requests(db, self.outbox, self.audit)
        self.executions = Executions(db, self.audit)
        self.passkeys = Passkeys(db, self.audit)
        self.escalations = Escalations(db, self.requests)
        self.retention = Retention(db, self.audit)
        self.grants = Grants(db, self.audit, self.outbox)

    @classmethod
    async def open(cls, url: str, *, pool_size: int = 5, create: bool = True) -> Store:
        """Open the database at `url` and bring its schema to the newest version; on
        PostgreSQL with up to 2 × `pool_size` pooled connections. `create=False`: `NoSchema`
        when the database holds no Headgate schema (see `migrate`)."""
        return cls(await Database.open(url, pool_size=pool_size, create=create))

    async def decision_reads(
        self, request_ids: Sequence[str], nonces: Sequence[str]
    ) -> DecisionReads:
        """The requests, recorded nonces, stored proposals and freezes a batch of decisions
        needs, in one read (a decision's fixed cost is mostly its statements): on PostgreSQL
        one statement on the collector's connection without SQLAlchemy (`PgDirect`,
        `DECISION_READS`), on SQLite through the DB-API."""
        reader = self.db.pg_collector
        if reader is not None:
            row = await reader.fetch(Positional(DECISION_READS, (list(request_ids), list(nonces))))
            requests, approvals, found, parts, freezes = row
            return DecisionReads(
                requests=held_requests(
                    [RequestColumns(*r) for r in requests], approvals_of(approvals)
                ),
                nonces={nonce: RecordedNonce(signature, seq) for nonce, signature, seq in found},
                parts=stored_intakes(parts, received=lambda at: at),
                freezes=freezes_of(freezes),
            )

        def body(conn: Connection) -> DecisionReads:
            requests = self.requests.load_many_in(conn, request_ids)
            return DecisionReads(
                requests=requests,
                nonces=self.requests.recorded_nonces_in(conn, nonces),
                parts=self.proposals.stored_in(
                    conn, [held.proposal_id for held, _ in requests.values()]
                ),
                freezes=self.grants.freezes_in(conn),
            )

        return await self.db.read(body)

    @property
    def dialect(self) -> str:
        return self.db.dialect

    async def ping(self) -> None:
        await self.db.ping()

    async def close(self) -> None:
        await self.db.close()
