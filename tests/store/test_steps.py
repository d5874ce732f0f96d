"""Approval steps committed as a batch (one transaction, a statement per table) store exactly
what each would store committed alone, on SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from tests.store.test_repo import record
from workflow.effects import (
    AuditEntry,
    DecisionRecord,
    OutboxEvent,
    OutcomeRecord,
    RecordedNonce,
    StepWrite,
)
from workflow.messages import ApprovalRecord
from workflow.outcomes import Outcome, RequestState
from workflow.policy.freeze import FreezeTerms
from workflow.store.repo import Store
from workflow.store.requests import ConcurrentUpdate
from workflow.store.tables import AUDIT, DECISIONS, OUTBOX, OUTCOMES, PROPOSALS, REQUESTS

NOW = datetime(2026, 12, 1, 4, 0, tzinfo=UTC)

#: The kinds of step the collector commits.
KINDS = ("approved", "rejected", "refused", "raised", "cancelled", "counted")


def step(kind: str, request_id: str, pid: str, version: int, n: int) -> StepWrite:
    """A step of this kind; between them they set every field a `StepWrite` has."""

    def decision(accepted: bool, verdict: str = "approve") -> DecisionRecord:
        return DecisionRecord(
            nonce=f"nonce-{pid}", request_id=request_id, approver="ann", key=None,
            signature=None, verdict=verdict, accepted=accepted,
            refusal=None if accepted else "wrong_role", message=kind,
            record=None, received_at=NOW + timedelta(seconds=n),
        )  # fmt: skip

    audit = [AuditEntry(f"test.{kind}", "ann", {"n": n}, pid, request_id)]
    if kind in ("approved", "rejected", "cancelled"):
        outcome = {"approved": Outcome.RELEASED, "rejected": Outcome.REJECTED}.get(
            kind, Outcome.CANCELLED
        )
        return StepWrite(
            request_id=request_id,
            expected_version=version,
            new_state={"approved": RequestState.APPROVED, "rejected": RequestState.REJECTED}.get(
                kind, RequestState.CANCELLED
            ),
            decision=None
            if kind == "cancelled"
            else decision(True, "reject" if kind == "rejected" else "approve"),
            outcome=OutcomeRecord(pid, outcome, None, kind, NOW),
            proposal_status=(pid, outcome),
            events=[OutboxEvent(f"{kind}:{pid}", f"headgate.{kind}.agent-1", "{}", pid)],
            audit=audit,
        )
    if kind == "refused":
        return StepWrite(request_id, None, decision=decision(False), audit=audit)
    if kind == "raised":
        return StepWrite(
            request_id,
            version,
            requirement='{"quorum": 2}',
            expires_at=NOW + timedelta(minutes=30),
            audit=audit,
        )
    return StepWrite(request_id, version, decision=decision(True), audit=audit)  # counted


async def _held(store: Store, pid: str) -> tuple[str, int]:
    loaded = await store.requests.load_for_proposal(pid)
    assert loaded is not None
    return loaded[0].request_id, loaded[1]


async def _stored(store: Store, pid: str) -> dict[str, Any]:
    """What the database holds about one proposal, without its ids."""
    async with store.db.engine.connect() as conn:
        req = (await conn.execute(select(REQUESTS).where(REQUESTS.c.proposal_id == pid))).one()
        decisions = (
            await conn.execute(
                select(DECISIONS.c.accepted, DECISIONS.c.verdict, DECISIONS.c.refusal).where(
                    DECISIONS.c.request_id == req.request_id
                )
            )
        ).all()
        outcome = (
            await conn.execute(select(OUTCOMES.c.outcome).where(OUTCOMES.c.proposal_id == pid))
        ).all()
        status = (
            await conn.execute(select(PROPOSALS.c.status).where(PROPOSALS.c.id == pid))
        ).scalar_one()
        events = (
            await conn.execute(select(OUTBOX.c.subject).where(OUTBOX.c.proposal_id == pid))
        ).all()
        audit = (
            await conn.execute(
                select(AUDIT.c.kind).where(AUDIT.c.proposal_id == pid).order_by(AUDIT.c.seq)
            )
        ).all()
    return {
        "request": (
            req.state,
            req.version,
            req.closed_at is not None,
            req.requirement,
            req.expires_at,
        ),
        "decisions": [tuple(d) for d in decisions],
        "outcome": [o[0] for o in outcome],
        "status": status,
        "events": [e[0] for e in events],
        "audit": [a[0] for a in audit],
    }


async def test_steps_committed_together_store_what_each_would_store_alone(store: Store) -> None:
    alone = [f"alone-{k}" for k in KINDS]
    together = [f"together-{k}" for k in KINDS]
    await store.proposals.record([record(p) for p in alone + together], NOW)
    for n, (kind, pid) in enumerate(zip(KINDS, alone, strict=True)):
        request_id, version = await _held(store, pid)
        assert await store.requests.commit_step(step(kind, request_id, pid, version, n), NOW)
    steps = []
    for n, (kind, pid) in enumerate(zip(KINDS, together, strict=True)):
        request_id, version = await _held(store, pid)
        steps.append((step(kind, request_id, pid, version, n), NOW))
    assert await store.requests.commit_steps(steps) == [True] * len(KINDS)
    for a, b in zip(alone, together, strict=True):
        assert await _stored(store, a) == await _stored(store, b), a
    assert (await store.audit.verify()).ok


async def test_a_step_whose_nonce_is_taken_writes_nothing_and_the_others_commit(
    store: Store,
) -> None:
    await store.proposals.record([record("first"), record("replayed"), record("third")], NOW)
    steps = []
    for n, pid in enumerate(("first", "replayed", "third")):
        request_id, version = await _held(store, pid)
        steps.append((step("approved", request_id, pid, version, n), NOW))
    # The replayed step's nonce is used already (another replica recorded it meanwhile).
    taken = steps[1][0].decision
    assert taken is not None
    other = StepWrite(taken.request_id, None, decision=taken)
    assert await store.requests.commit_step(other, NOW)
    before = await _stored(store, "replayed")
    assert await store.requests.commit_steps(steps) == [True, False, True]
    assert await _stored(store, "replayed") == before
    assert (await _stored(store, "first"))["outcome"] == ["released"]
    assert (await _stored(store, "third"))["outcome"] == ["released"]


async def test_a_stale_version_in_a_batch_commits_none_of_it(store: Store) -> None:
    await store.proposals.record([record("fresh"), record("stale")], NOW)
    fresh_id, fresh_version = await _held(store, "fresh")
    stale_id, stale_version = await _held(store, "stale")
    # Another writer moves the second request first.
    moved = StepWrite(stale_id, stale_version, requirement='{"quorum": 3}')
    assert await store.requests.commit_step(moved, NOW)
    before = await _stored(store, "fresh")
    with pytest.raises(ConcurrentUpdate):
        await store.requests.commit_steps(
            [
                (step("approved", fresh_id, "fresh", fresh_version, 0), NOW),
                (step("rejected", stale_id, "stale", stale_version, 1), NOW),
            ]
        )
    assert await _stored(store, "fresh") == before
    assert (await store.audit.verify()).ok


def test_the_kinds_of_step_set_every_field_a_step_write_has() -> None:
    """A field added to `StepWrite` must be written by the batch as by `commit_step`: it is
    covered here once one of the kinds sets it."""
    steps = [step(k, "r", "p", 0, 0) for k in KINDS]
    unset = [
        f.name for f in fields(StepWrite) if all(getattr(s, f.name) in (None, []) for s in steps)
    ]
    assert unset == []


async def test_decision_reads_are_what_the_reads_one_by_one_give(store: Store) -> None:
    """The collector's one read per batch (`Store.decision_reads`; on SQLite through the
    DB-API) gives the requests with their approvals in arrival order, the recorded nonces
    with their signatures, the stored proposals and the freezes, as the Core reads do."""
    recs = [record(f"p{i}") for i in range(3)]
    await store.proposals.record(recs, NOW)
    ids = [rec.request.request_id for rec in recs if rec.request is not None]
    assert len(ids) == 3
    approvals = [
        ApprovalRecord(approver=name, nonce=f"nonce-{name}-{i:04d}", issued_at=NOW)
        for i, name in enumerate(("bea", "ann"))
    ]
    for n, approval in enumerate(approvals):
        loaded = await store.requests.load(ids[0])
        assert loaded is not None
        await store.requests.commit_step(
            StepWrite(
                request_id=ids[0], expected_version=loaded[1],
                decision=DecisionRecord(
                    nonce=approval.nonce, request_id=ids[0], approver=approval.approver,
                    key=None, signature=f"sig-{n}", verdict="approve", accepted=True,
                    refusal=None, message="counted", record=approval.model_dump_json(),
                    received_at=NOW + timedelta(seconds=n), stream_seq=100 + n,
                ),
            ),
            NOW,
        )  # fmt: skip
    for n, (agent, every) in enumerate((("agent-1", False), (None, True))):
        terms = FreezeTerms(f"fz-{n}", agent, None, every, f"reason {n}", "ann", NOW)
        await store.grants.freeze(terms, [], NOW + timedelta(seconds=n))
    reads = await store.decision_reads(
        [*ids, "rq_missing"], ["nonce-bea-0000", "nonce-ann-0001", "nonce-new"]
    )
    assert set(reads.requests) == set(ids)
    for request_id in ids:
        assert reads.requests[request_id] == await store.requests.load(request_id)
    held, version = reads.requests[ids[0]]
    assert [a.approver for a in held.approvals] == ["bea", "ann"]
    assert version == 2
    assert held.expires_at.tzinfo is not None
    assert reads.nonces == {
        "nonce-bea-0000": RecordedNonce("sig-0", 100),
        "nonce-ann-0001": RecordedNonce("sig-1", 101),
    }
    assert await store.requests.recorded_nonce("nonce-ann-0001") == RecordedNonce("sig-1", 101)
    assert await store.requests.recorded_nonce("nonce-new") is None
    assert sorted(p.id for p in reads.parts) == ["p0", "p1", "p2"]
    one_by_one = {p.id: p for p in await store.proposals.stored(["p0", "p1", "p2"])}
    assert {p.id: p for p in reads.parts} == one_by_one
    assert all(p.received_at.tzinfo is not None for p in reads.parts)
    assert [f.freeze_id for f in reads.freezes] == ["fz-0", "fz-1"]
    assert reads.freezes == await store.grants.freezes()
    assert all(f.at.tzinfo is not None for f in reads.freezes)
