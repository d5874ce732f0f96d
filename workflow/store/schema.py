"""The database tables (sqlmodel), shared by SQLite and PostgreSQL.

Uniqueness carries the exactly-once guarantees: one proposal row per proposal id, one request per
proposal, one terminal outcome per proposal (and so one release: its id is derived from the
proposal id), one decision per nonce, one execution report per release. Every event of an
approval step, expiry or cancellation is first written to `outbox` in the same transaction as the
state change it reports, then published with its `msg_id` as `Nats-Msg-Id`; the intake's events
are rebuilt from the proposal's row instead (see `workflow.effects.IntakeRecord`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, DateTime, Index, Integer, text
from sqlalchemy.types import TypeDecorator
from sqlmodel import Column, Field, SQLModel


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores them naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _ts(*, index: bool = False, nullable: bool = False) -> Any:
    return Field(sa_column=Column(UTCDateTime(), index=index, nullable=nullable))


class ProposalRow(SQLModel, table=True):
    __tablename__ = "proposals"

    id: str = Field(primary_key=True, max_length=200)
    agent: str = Field(max_length=128)
    workspace: str = Field(max_length=128)
    tool: str = Field(max_length=200)
    digest: str = Field(max_length=64)
    risk_class: str = Field(max_length=32)
    severity: str = Field(max_length=16)
    decision: str = Field(max_length=32)
    status: str = Field(max_length=16)
    payload: str
    classification: str
    verdict: str
    trace: str | None = Field(default=None, description="W3C trace context (JSON) it came with.")
    received_at: datetime = _ts()
    stream_seq: int | None = Field(
        default=None,
        sa_column=Column(BigInteger(), nullable=True),
        description="The proposals stream's sequence of the message it was recorded from.",
    )


class RequestRow(SQLModel, table=True):
    __tablename__ = "requests"
    __table_args__ = (Index("ix_requests_state_expires", "state", "expires_at"),)

    request_id: str = Field(primary_key=True, max_length=128)
    proposal_id: str = Field(unique=True, max_length=200)
    agent: str = Field(max_length=128)
    workspace: str = Field(index=True, max_length=128)
    digest: str = Field(max_length=64)
    requirement: str
    state: str = Field(max_length=16)
    version: int = 0
    created_at: datetime = _ts()
    expires_at: datetime = _ts()
    closed_at: datetime | None = _ts(nullable=True)


#: The unique index of accepted approvals: one per approver and request.
ACCEPTED_APPROVER_INDEX = "ux_decisions_accepted_approver"


class DecisionRow(SQLModel, table=True):
    """Every decision received, accepted or refused; the nonce can never be used again."""

    __tablename__ = "decisions"
    __table_args__ = (
        Index(
            ACCEPTED_APPROVER_INDEX,
            "request_id",
            "approver",
            unique=True,
            sqlite_where=text("accepted = 1 AND verdict = 'approve'"),
            postgresql_where=text("accepted AND verdict = 'approve'"),
        ),
    )

    nonce: str = Field(primary_key=True, max_length=100)
    request_id: str = Field(index=True, max_length=128)
    approver: str = Field(max_length=200)
    key: str | None = Field(default=None, max_length=64)
    signature: str | None = Field(default=None, max_length=200)
    verdict: str = Field(max_length=16)
    accepted: bool
    refusal: str | None = Field(default=None, max_length=32)
    message: str
    record: str | None = None
    received_at: datetime = _ts()
    stream_seq: int | None = Field(
        default=None,
        sa_column=Column(BigInteger(), nullable=True),
        description="The decisions stream's sequence of the message it was recorded from.",
    )


class OutcomeRow(SQLModel, table=True):
    """The one terminal outcome of a proposal.

    `release_id` is derived from the proposal id (`workflow.routing.release_id_for`), so the
    primary key makes it unique; it has no index of its own (a random key costs every intake
    commit a page), releases are looked up by proposal id."""

    __tablename__ = "outcomes"

    proposal_id: str = Field(primary_key=True, max_length=200)
    outcome: str = Field(max_length=16)
    release_id: str | None = Field(default=None, max_length=200)
    reason: str
    at: datetime = _ts(index=True)  # the pruner finds decided proposals by it (migration 5)


class ExecutionRow(SQLModel, table=True):
    __tablename__ = "executions"

    release_id: str = Field(primary_key=True, max_length=200)
    proposal_id: str = Field(index=True, max_length=200)
    agent: str = Field(max_length=128)
    success: bool
    summary: str
    finished_at: datetime = _ts()


class OutboxRow(SQLModel, table=True):
    __tablename__ = "outbox"
    __table_args__ = (Index("ix_outbox_unpublished", "published", "created_at"),)

    msg_id: str = Field(primary_key=True, max_length=250)
    proposal_id: str | None = Field(default=None, index=True, max_length=200)
    subject: str = Field(max_length=300)
    payload: str
    headers: str | None = None
    published: bool = False
    created_at: datetime = _ts()


#: An audit sequence number: 64 bits on PostgreSQL (each chain numbers its records from its own
#: base, `chain.chain_base`); SQLite's INTEGER (64 bits already) keeps the key the row id.
SEQ_TYPE = BigInteger().with_variant(Integer(), "sqlite")


class AuditRow(SQLModel, table=True):
    """Append-only, hash-chained: each row's hash covers its content and the previous hash."""

    __tablename__ = "audit"

    seq: int = Field(primary_key=True, sa_type=SEQ_TYPE)
    at: str = Field(max_length=40)
    kind: str = Field(max_length=40)
    proposal_id: str | None = Field(default=None, index=True, max_length=200)
    request_id: str | None = Field(default=None, max_length=128)
    actor: str = Field(max_length=200)
    data: str
    prev_hash: str = Field(max_length=64)
    hash: str = Field(max_length=64)


class AuditHeadRow(SQLModel, table=True):
    """One row per chain (`id`: the chain; the registry of chains): its last sequence number
    and hash. Locked to append."""

    __tablename__ = "audit_head"

    id: int = Field(default=1, primary_key=True)
    seq: int = Field(default=0, sa_type=SEQ_TYPE)
    hash: str = Field(default="0" * 64, max_length=64)


class AuditAnchorRow(SQLModel, table=True):
    """One row per chain (`id`): where the stored chain starts after pruning. `seq` and `hash`
    are those of the last pruned record (the chain's base and the genesis hash while nothing
    was pruned); the `audit.pruned` record appended by each pruning confirms them from within
    the chain."""

    __tablename__ = "audit_anchor"

    id: int = Field(default=1, primary_key=True)
    seq: int = Field(default=0, sa_type=SEQ_TYPE)
    hash: str = Field(default="0" * 64, max_length=64)
    pruned_at: datetime | None = _ts(nullable=True)


class PasskeyRow(SQLModel, table=True):
    """An approver's passkey (WebAuthn credential): only its public key is ever stored."""

    __tablename__ = "passkeys"

    credential_id: str = Field(primary_key=True, max_length=1400)
    approver: str = Field(index=True, max_length=200)
    public_key: str
    rp_id: str = Field(max_length=253)
    sign_count: int = 0
    label: str = Field(default="", max_length=200)
    created_at: datetime = _ts()
    last_used_at: datetime | None = _ts(nullable=True)


class InviteRow(SQLModel, table=True):
    """A one-time link to register a passkey; the token itself is not stored, its hash is."""

    __tablename__ = "web_invites"

    token_hash: str = Field(primary_key=True, max_length=64)
    nonce: str = Field(unique=True, max_length=100, description="Of the signed request.")
    approver: str = Field(max_length=200)
    created_by: str = Field(max_length=200)
    created_at: datetime = _ts()
    expires_at: datetime = _ts()
    used_at: datetime | None = _ts(nullable=True)
    credential_id: str | None = Field(default=None, max_length=1400)


class EscalationRow(SQLModel, table=True):
    """How many steps of the escalation ladder a request has climbed."""

    __tablename__ = "escalations"

    request_id: str = Field(primary_key=True, max_length=128)
    taken: int = 0
    updated_at: datetime = _ts()


class GrantRow(SQLModel, table=True):
    """An approver's signed grant; `uses` moves only by the conditional update that claims a
    use (see `store.grants`), so no two replicas can overspend it."""

    __tablename__ = "grants"
    __table_args__ = (Index("ix_grants_live", "revoked_at", "expires_at"),)

    grant_id: str = Field(primary_key=True, max_length=200)
    nonce: str = Field(unique=True, max_length=100)
    request_id: str = Field(max_length=128)
    approver: str = Field(max_length=200)
    key: str = Field(max_length=64)
    tool: str = Field(max_length=200)
    workspace: str = Field(max_length=128)
    agent: str | None = Field(default=None, max_length=128)
    session_id: str | None = Field(default=None, max_length=200)
    scope: str = Field(max_length=32)
    command_prefix: str | None = Field(default=None, description="JSON list of words.")
    path_glob: str | None = Field(default=None, max_length=1000)
    max_uses: int | None = None
    uses: int = 0
    signed: str
    signature: str = Field(max_length=200)
    issued_at: datetime = _ts()
    expires_at: datetime = _ts()
    revoked_at: datetime | None = _ts(nullable=True)
    revoked_by: str | None = Field(default=None, max_length=200)


class GrantUseRow(SQLModel, table=True):
    """The grant that released a proposal: one per proposal (a redelivery reuses it)."""

    __tablename__ = "grant_uses"

    proposal_id: str = Field(primary_key=True, max_length=200)
    grant_id: str = Field(index=True, max_length=200)
    at: datetime = _ts()


class FreezeRow(SQLModel, table=True):
    """A freeze in force (`lifted_at` null) or lifted, over an agent and/or a workspace."""

    __tablename__ = "freezes"

    freeze_id: str = Field(primary_key=True, max_length=100)
    agent: str | None = Field(default=None, max_length=128)
    workspace: str | None = Field(default=None, max_length=128)
    all_calls: bool = False
    reason: str = ""
    by: str = Field(max_length=200)
    at: datetime = _ts()
    lifted_at: datetime | None = _ts(nullable=True, index=True)
    lifted_by: str | None = Field(default=None, max_length=200)


class SchemaVersionRow(SQLModel, table=True):
    __tablename__ = "schema_version"

    version: int = Field(primary_key=True)
    applied_at: datetime = _ts()
