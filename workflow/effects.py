"""The effects of a decision, as plain values: events to publish, rows to write, audit entries.

The pure core (the router, the approval state machine) computes these; a stage of the service
commits the rows and audit entries in one transaction and publishes the events. Nothing here
knows a database or a connection: the store maps each row record onto its table, whose columns
have the records' field names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from workflow.outcomes import Outcome, RequestState


@dataclass(frozen=True, slots=True)
class OutboxEvent:
    """One event to publish on `subject`, deduplicated by JetStream on `msg_id`."""

    msg_id: str
    subject: str
    payload: str
    proposal_id: str | None = None
    headers: dict[str, str] | None = None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One thing that happened, before it is given a place in the audit chain.

    `data` is a JSON object: a dict (stored as canonical JSON) or, on hot paths that hold the
    parts already serialised, the text of one (stored as given). The chain hashes the stored
    text, so verifying never re-serialises anything.
    """

    kind: str
    actor: str
    data: dict[str, Any] | str = field(default_factory=dict)
    proposal_id: str | None = None
    request_id: str | None = None


# --------------------------------------------------------------------------- rows to write
# Field names are column names: the store inserts a record's fields as they are.


class ProposalRecord(NamedTuple):
    """A new proposal: its identity, what was decided and the JSON it was decided on."""

    id: str
    agent: str
    workspace: str
    tool: str
    digest: str
    risk_class: str
    severity: str
    decision: str
    status: str
    """`pending` or the proposal's `Outcome`."""
    payload: str
    classification: str
    verdict: str
    trace: str | None
    received_at: datetime
    stream_seq: int | None = None
    """The proposals stream's sequence of the message it was recorded from (None when it
    did not come through the stream)."""


class RequestRecord(NamedTuple):
    """A new approval request for a held proposal."""

    request_id: str
    proposal_id: str
    agent: str
    workspace: str
    digest: str
    requirement: str
    state: RequestState
    version: int
    created_at: datetime
    expires_at: datetime
    closed_at: datetime | None


class OutcomeRecord(NamedTuple):
    """The one terminal outcome of a proposal."""

    proposal_id: str
    outcome: Outcome
    release_id: str | None
    reason: str
    at: datetime


class DecisionRecord(NamedTuple):
    """A decision received, accepted or refused (its nonce is never accepted again)."""

    nonce: str
    request_id: str
    approver: str
    key: str | None
    signature: str | None
    verdict: str
    accepted: bool
    refusal: str | None
    message: str
    record: str | None
    """The accepted `ApprovalRecord` as JSON."""
    received_at: datetime
    stream_seq: int | None = None
    """The decisions stream's sequence of the message it was recorded from."""


class RecordedNonce(NamedTuple):
    """A decision's nonce already recorded: the signature it carried and the stream sequence
    of the message it was recorded from (None for decisions recorded before that was kept)."""

    signature: str | None
    stream_seq: int | None


class ExecutionRecord(NamedTuple):
    """An agent's report of what happened when it ran a released call."""

    release_id: str
    proposal_id: str
    agent: str
    success: bool
    summary: str
    finished_at: datetime


# --------------------------------------------------------------------------- what a step writes


@dataclass(slots=True)
class IntakeRecord:
    """Everything one new proposal writes, computed by the router.

    `events` are published, not stored: the intake acks a proposal only once JetStream has
    confirmed them, so until then the proposal's own JetStream message is their outbox (a
    redelivery rebuilds them from the stored row, see `StoredIntake`). They reach the outbox
    table only when publishing them fails.
    """

    proposal: ProposalRecord
    request: RequestRecord | None = None
    outcome: OutcomeRecord | None = None
    events: list[OutboxEvent] = field(default_factory=list)
    audit: list[AuditEntry] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.proposal.id


@dataclass(frozen=True, slots=True)
class StoredIntake:
    """What the intake stored for one proposal: enough to rebuild the events it published."""

    id: str
    payload: str
    classification: str
    verdict: str
    trace: dict[str, str] | None
    received_at: datetime
    stream_seq: int | None = None
    """The proposals stream's sequence of the message it was recorded from."""


@dataclass(slots=True)
class StepWrite:
    """The effects of one approval-state-machine step, committed in one transaction.

    `expected_version` set: the request row is updated only if its version is still this one
    (optimistic concurrency); `new_state`/`requirement` are what changes on it.
    """

    request_id: str
    expected_version: int | None
    new_state: RequestState | None = None
    requirement: str | None = None
    expires_at: datetime | None = None
    """The request's new expiry (a raised requirement with a shorter TTL)."""
    decision: DecisionRecord | None = None
    outcome: OutcomeRecord | None = None
    proposal_status: tuple[str, Outcome] | None = None
    events: list[OutboxEvent] = field(default_factory=list)
    audit: list[AuditEntry] = field(default_factory=list)
