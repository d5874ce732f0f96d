"""The repository on SQLite and PostgreSQL: migrations, idempotent writes, the audit chain."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError
from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from workflow.classify.engine import classify
from workflow.effects import AuditEntry, IntakeRecord, StepWrite
from workflow.messages import REQUEST_ID_PREFIX, ApprovalRequirement, Proposal
from workflow.outcomes import RequestState
from workflow.policy.engine import evaluate
from workflow.policy.freeze import FreezeTerms
from workflow.policy.model import default_policy
from workflow.routing import intake_events, release_id_for, request_id_for, route
from workflow.store.engine import Database, create_engine
from workflow.store.migrations import MIGRATIONS, migrate
from workflow.store.proposals import FreezesChanged
from workflow.store.repo import Store
from workflow.store.requests import ConcurrentUpdate
from workflow.store.schema import SchemaVersionRow
from workflow.store.tables import AUDIT, AUDIT_HEAD
from workflow.subjects import Subjects

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SUBJECTS = Subjects("headgate")


def record(pid: str, tool: str = "write_file", path: str = "a.txt") -> IntakeRecord:
    proposal = Proposal(id=pid, agent="agent-1", tool=tool, arguments={"path": path})
    policy = default_policy()
    c = classify(proposal, policy.classifier_tables())
    return route(
        SUBJECTS, proposal, proposal.model_dump_json(), c, evaluate(proposal, c, policy), NOW
    )


async def test_migration_2_drops_the_indexes_no_query_reads(database_url: str) -> None:
    # A database at version 1 as it was created before: with the three write-only indexes.
    engine = create_engine(database_url)
    unused = {"ix_proposals_agent", "ix_proposals_status", "ix_audit_kind"}
    async with engine.begin() as conn:
        await conn.run_sync(lambda c: SchemaVersionRow.__table__.create(c))  # type: ignore[attr-defined]
        await conn.run_sync(MIGRATIONS[0])
        await conn.execute(
            text("INSERT INTO schema_version (version, applied_at) VALUES (1, :at)"), {"at": NOW}
        )
        await conn.execute(text("CREATE INDEX ix_proposals_agent ON proposals (agent)"))
        await conn.execute(text("CREATE INDEX ix_proposals_status ON proposals (status)"))
        await conn.execute(text("CREATE INDEX ix_audit_kind ON audit (kind)"))
    assert unused <= await _indexes(engine)
    assert await migrate(engine) == len(MIGRATIONS)
    left = await _indexes(engine)
    assert not unused & left
    assert {"ix_audit_proposal_id", "ix_outbox_unpublished"} <= left  # the ones queries use
    await engine.dispose()


async def test_migration_3_drops_the_unique_release_id_and_keeps_the_outcomes(
    database_url: str,
) -> None:
    # A database at version 2 as it was created before: outcomes.release_id UNIQUE.
    engine = create_engine(database_url)
    timestamp = "DATETIME" if engine.dialect.name == "sqlite" else "TIMESTAMP WITH TIME ZONE"
    async with engine.begin() as conn:
        await conn.run_sync(lambda c: SchemaVersionRow.__table__.create(c))  # type: ignore[attr-defined]
        await conn.run_sync(MIGRATIONS[0])
        await conn.run_sync(MIGRATIONS[1])
        for version in (1, 2):
            await conn.execute(
                text("INSERT INTO schema_version (version, applied_at) VALUES (:v, :at)"),
                {"v": version, "at": NOW},
            )
        await conn.execute(text("DROP TABLE outcomes"))
        await conn.execute(
            text(
                "CREATE TABLE outcomes (proposal_id VARCHAR(200) NOT NULL, "
                "outcome VARCHAR(16) NOT NULL, release_id VARCHAR(200), reason VARCHAR NOT NULL, "
                f"at {timestamp} NOT NULL, PRIMARY KEY (proposal_id), UNIQUE (release_id))"
            )
        )
    store = Store(Database(engine))
    await store.proposals.record(
        [record("p1", tool="read_file"), record("p2", tool="delete_file", path="build/out.o")], NOW
    )
    async with engine.connect() as conn:
        before = (await conn.execute(text("SELECT * FROM outcomes ORDER BY proposal_id"))).all()
    assert [row.proposal_id for row in before] == ["p1", "p2"]

    assert await migrate(engine) == len(MIGRATIONS)
    assert await migrate(engine) == len(MIGRATIONS)  # a second run changes nothing
    async with engine.connect() as conn:
        after = (await conn.execute(text("SELECT * FROM outcomes ORDER BY proposal_id"))).all()
    assert after == before
    released = ("p1", release_id_for("p1"))
    assert await store.executions.owners([released]) == {released: "agent-1"}
    # denied: no release
    assert await store.executions.owners([("p2", release_id_for("p2"))]) == {}
    # another's release
    assert await store.executions.owners([("p2", release_id_for("p1"))]) == {}
    # No unique index on release_id is left: a second row with the same release id is accepted
    # by the database (the id is derived from the primary key, which keeps it unique).
    await _insert_released(engine, "p3", release_id_for("p1"))
    await engine.dispose()


async def test_migration_9_keeps_the_stream_sequence_a_proposal_was_recorded_from(
    database_url: str,
) -> None:
    # A database at version 8: proposals without `stream_seq`, one proposal stored.
    engine = create_engine(database_url)
    async with engine.begin() as conn:
        await conn.run_sync(lambda c: SchemaVersionRow.__table__.create(c))  # type: ignore[attr-defined]
        for version, migration in enumerate(MIGRATIONS[:8], start=1):
            await conn.run_sync(migration)
            await conn.execute(
                text("INSERT INTO schema_version (version, applied_at) VALUES (:v, :at)"),
                {"v": version, "at": NOW},
            )
    store = Store(Database(engine))
    await store.proposals.record([record("before", tool="read_file")], NOW)
    async with engine.begin() as conn:
        await conn.execute(text("ALTER TABLE proposals DROP COLUMN stream_seq"))
    assert await migrate(engine) == len(MIGRATIONS)
    (old,) = await store.proposals.stored(["before"])
    assert old.stream_seq is None  # judged by its times (`recorded_from`)
    assert old.received_at == NOW
    assert await migrate(engine) == len(MIGRATIONS)  # a second run changes nothing
    proposal = Proposal(id="after", agent="agent-1", tool="read_file", arguments={"path": "b"})
    policy = default_policy()
    c = classify(proposal, policy.classifier_tables())
    verdict = evaluate(proposal, c, policy)
    recorded = route(
        SUBJECTS, proposal, proposal.model_dump_json(), c, verdict, NOW, stream_seq=2**40
    )
    await store.proposals.record([recorded], NOW)
    (new,) = await store.proposals.stored(["after"])
    assert new.stream_seq == 2**40
    await store.close()


async def test_a_new_database_has_no_unique_release_id(store: Store) -> None:
    await store.proposals.record([record("p1", tool="read_file")], NOW)
    await _insert_released(store.db.engine, "p2", release_id_for("p1"))
    released = ("p1", release_id_for("p1"))
    assert await store.executions.owners([released]) == {released: "agent-1"}


async def _insert_released(engine: AsyncEngine, proposal_id: str, release_id: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO outcomes (proposal_id, outcome, release_id, reason, at) "
                "VALUES (:pid, 'released', :rid, '', :at)"
            ),
            {"pid": proposal_id, "rid": release_id, "at": NOW},
        )


async def _indexes(engine: AsyncEngine) -> set[str]:
    query = (
        "SELECT name FROM sqlite_master WHERE type = 'index'"
        if engine.dialect.name == "sqlite"
        else "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
    )
    async with engine.connect() as conn:
        return set((await conn.execute(text(query))).scalars())


async def test_migrations_run_once_and_are_recorded(store: Store) -> None:
    assert await migrate(store.db.engine) == len(MIGRATIONS)
    async with store.db.engine.connect() as conn:
        versions = (await conn.execute(text("SELECT version FROM schema_version"))).scalars()
        assert list(versions) == list(range(1, len(MIGRATIONS) + 1))


async def test_recording_the_same_proposal_twice_keeps_one_and_reports_the_digest(
    store: Store,
) -> None:
    first = await store.proposals.record([record("p1")], NOW)
    assert first.new == {"p1"}
    again = await store.proposals.record([record("p1"), record("p2")], NOW)
    assert again.new == {"p2"}
    assert again.existing_digests == {"p1": record("p1").proposal.digest}


async def test_a_batch_decided_on_other_freezes_than_those_in_force_writes_nothing(
    store: Store,
) -> None:
    """The intake decides a batch on the freezes it last read; its commit checks them. On
    PostgreSQL both ways of writing a batch check them: the one statement once the process
    knows its audit head, the transaction before."""
    first = FreezeTerms("fz_1", None, "default", False, "incident", "alice", NOW)
    for n, (in_force, decided_on) in enumerate([((), ["fz_1"]), ((first,), [])]):
        for terms in in_force:
            await store.grants.freeze(terms, [], NOW)
        # A batch before (a first, a later statement): the head is known or not on PostgreSQL.
        for k in range(2):
            with pytest.raises(FreezesChanged):
                await store.proposals.record([record(f"p{n}-{k}")], NOW, decided_on)
            assert await store.proposals.stored([f"p{n}-{k}"]) == []
            ok = await store.proposals.record(
                [record(f"p{n}-{k}")], NOW, [f.freeze_id for f in await store.grants.freezes()]
            )
            assert ok.new == {f"p{n}-{k}"}
    # Lifted: no freeze in force any more.
    await store.grants.thaw(None, "default", "alice", [], NOW)
    with pytest.raises(FreezesChanged):
        await store.proposals.record([record("after")], NOW, ["fz_1"])
    assert (await store.proposals.record([record("after")], NOW, [])).new == {"after"}
    assert (await store.audit.verify()).ok


@pytest.mark.parametrize(
    ("tool", "kinds"),
    [("read_file", ["released"]), ("delete_file", ["blocked"]), ("write_file", ["inbox", "held"])],
)
async def test_the_intake_events_are_rebuilt_byte_for_byte_from_the_stored_row(
    store: Store, tool: str, kinds: list[str]
) -> None:
    """A redelivered proposal re-sends exactly what its first delivery sent, and the intake
    keeps no outbox rows for it."""
    proposal = Proposal(id="p1", agent="agent-1", tool=tool, arguments={"path": "/etc/x"})
    payload = '{"id": "p1", "agent": "agent-1", "tool": "%s", "arguments": {"path": "/etc/x"}}'
    policy = default_policy()
    c = classify(proposal, policy.classifier_tables())
    trace = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    now = datetime(2026, 11, 30, 12, 0, 1, 123456, tzinfo=UTC)
    rec = route(SUBJECTS, proposal, payload % tool, c, evaluate(proposal, c, policy), now, trace)
    await store.proposals.record([rec], now)
    (stored,) = await store.proposals.stored(["p1", "missing"])
    assert [e.msg_id.split(":")[0] for e in rec.events] == kinds
    assert intake_events(SUBJECTS, stored) == rec.events
    assert await store.outbox.events_for(["p1"]) == []


async def test_a_stale_version_cannot_change_a_request(store: Store) -> None:
    rec = record("p1")
    await store.proposals.record([rec], NOW)
    loaded = await store.requests.load_for_proposal("p1")
    assert loaded is not None
    held, version = loaded
    write = StepWrite(
        request_id=held.request_id, expected_version=version, new_state=RequestState.REJECTED
    )
    assert await store.requests.commit_step(write, NOW)
    with pytest.raises(ConcurrentUpdate):
        await store.requests.commit_step(
            StepWrite(
                request_id=held.request_id,
                expected_version=version,
                new_state=RequestState.APPROVED,
            ),
            NOW,
        )
    again = await store.requests.load(held.request_id)
    assert again is not None
    assert again[0].state == "rejected"


async def test_due_requests_are_those_past_their_expiry(store: Store) -> None:
    await store.proposals.record([record("p1")], NOW)
    assert await store.requests.due(NOW) == []
    due = await store.requests.due(NOW + timedelta(hours=2))
    assert [h.proposal_id for h, _ in due] == ["p1"]


async def test_unpublished_events_are_found_until_marked(store: Store) -> None:
    await store.outbox.save(record("p1", tool="read_file").events, NOW)
    pending = await store.outbox.unpublished(NOW + timedelta(seconds=1))
    assert [e.msg_id for e in pending] == ["released:p1"]
    await store.outbox.mark_published(["released:p1"])
    assert await store.outbox.unpublished(NOW + timedelta(seconds=1)) == []


async def test_the_audit_chain_verifies_and_detects_an_altered_record(store: Store) -> None:
    await store.proposals.record([record(f"p{i}") for i in range(5)], NOW)
    await store.audit.append([AuditEntry("note", "tester", {"n": 1})], NOW)
    ok = await store.audit.verify(batch=3)
    assert ok.ok
    assert ok.checked == 11
    async with store.db.engine.begin() as conn:
        await conn.execute(update(AUDIT).where(AUDIT.c.seq == 4).values(actor="someone-else"))
    broken = await store.audit.verify()
    assert not broken.ok
    assert broken.first_bad_seq == 4
    assert "altered" in broken.problem


async def test_the_audit_chain_detects_a_removed_record(store: Store) -> None:
    await store.proposals.record([record(f"p{i}") for i in range(3)], NOW)
    async with store.db.engine.begin() as conn:
        await conn.execute(AUDIT.delete().where(AUDIT.c.seq == 2))
    broken = await store.audit.verify()
    assert not broken.ok
    assert broken.first_bad_seq == 3


async def test_the_audit_chain_detects_records_cut_from_the_end(store: Store) -> None:
    await store.proposals.record([record(f"p{i}") for i in range(3)], NOW)
    async with store.db.engine.begin() as conn:
        last = (await conn.execute(select(AUDIT.c.seq).order_by(AUDIT.c.seq.desc()))).first()
        assert last is not None
        await conn.execute(AUDIT.delete().where(AUDIT.c.seq == last.seq))
    broken = await store.audit.verify()
    assert not broken.ok
    assert "removed from the end" in broken.problem


async def test_the_audit_chain_detects_a_head_moved_back(store: Store) -> None:
    await store.proposals.record([record(f"p{i}") for i in range(3)], NOW)
    async with store.db.engine.begin() as conn:
        before = (
            await conn.execute(select(AUDIT.c.seq, AUDIT.c.hash).order_by(AUDIT.c.seq.desc()))
        ).all()[1]
        await conn.execute(
            update(AUDIT_HEAD).where(AUDIT_HEAD.c.id == 1).values(seq=before.seq, hash=before.hash)
        )
    broken = await store.audit.verify()
    assert not broken.ok
    assert "the head was moved back" in broken.problem


@pytest.mark.slow
async def test_audit_verify_command_reports_tampering(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'headgate.db'}"
    s = await Store.open(url)
    await s.proposals.record([record("p1"), record("p2")], NOW)
    run = [sys.executable, "-m", "workflow", "audit", "verify", "--data-dir", str(tmp_path)]
    good = subprocess.run(run, capture_output=True, text=True, check=False)
    assert good.returncode == 0, good.stderr
    assert "intact" in good.stdout
    async with s.db.engine.begin() as conn:
        await conn.execute(update(AUDIT).where(AUDIT.c.seq == 2).values(data='{"forged":true}'))
    await s.close()
    bad = subprocess.run(run, capture_output=True, text=True, check=False)
    assert bad.returncode == 1
    assert "broken at record 2" in bad.stdout


def legacy_record(pid: str) -> IntakeRecord:
    """A held write whose proposal id is not checked (stored before ids had namespaces)."""
    proposal = Proposal.model_construct(
        id=pid, agent="attacker", workspace="default", source=None, tool="write_file",
        arguments={"path": "/home/victim/.bashrc"}, tool_definition=None, capability=None,
        context=None, intent=None, created_at=None,
    )  # fmt: skip
    policy = default_policy()
    c = classify(proposal, policy.classifier_tables())
    return route(
        SUBJECTS, proposal, proposal.model_dump_json(), c, evaluate(proposal, c, policy), NOW
    )


async def test_a_proposal_id_equal_to_a_request_id_is_never_taken_for_that_request(
    store: Store,
) -> None:
    """Lookups by request id match request ids only. The attacker's row is written first and
    the victim's request is updated after (PostgreSQL then returns it after the attacker's):
    whatever the row order, the victim's request id finds the victim's request."""
    victim = record("victim-1")
    victim_rid = request_id_for("victim-1")
    attacker = legacy_record(victim_rid)
    await store.proposals.record([attacker], NOW)
    await store.proposals.record([victim], NOW)
    raised = ApprovalRequirement(quorum=2).model_dump_json()
    await store.requests.commit_step(
        StepWrite(request_id=victim_rid, expected_version=0, requirement=raised), NOW
    )
    loaded = await store.requests.load(victim_rid)
    assert loaded is not None
    assert (loaded[0].proposal_id, loaded[1]) == ("victim-1", 1)
    history = await store.proposals.history(victim_rid)
    assert history is not None
    assert history["proposal"].id == "victim-1"
    assert history["request"].request_id == victim_rid
    own = await store.requests.load_for_proposal(victim_rid)
    assert own is not None
    assert own[0].request_id == request_id_for(victim_rid)  # the attacker's own request


def test_request_ids_are_in_a_namespace_no_proposal_id_may_enter() -> None:
    assert request_id_for("anything").startswith(REQUEST_ID_PREFIX)
    with pytest.raises(ValidationError, match="may not start with 'rq_'"):
        Proposal(id=request_id_for("victim-1"), agent="attacker", tool="write_file")
