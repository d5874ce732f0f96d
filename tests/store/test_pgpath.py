"""The PostgreSQL fast path: an intake batch is one statement once the process knows its audit
head (two in a transaction before, or when another writer moved it), a batch of approval steps
two statements (BEGIN, two round trips, COMMIT), whatever their size, and store what they
stored before; replicas inserting the same ids, or applying the same decisions, at once (in
different orders) each learn which were theirs, without a deadlock."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import event, func, make_url, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from tests.store.test_repo import record
from tests.store.test_steps import KINDS, NOW, step
from workflow.effects import StepWrite
from workflow.outcomes import RequestState
from workflow.store.pgpath import HEAD_MOVED_SENTENCE, DirectFailed, PgDirect, Positional
from workflow.store.repo import Store
from workflow.store.requests import ConcurrentUpdate
from workflow.store.tables import AUDIT, PROPOSALS, REQUESTS


@contextmanager
def statements(store: Store) -> Iterator[list[str]]:
    """The statements sent to the server meanwhile (BEGIN and COMMIT are not among them)."""
    sent: list[str] = []

    def seen(*args: Any) -> None:
        sent.append(str(args[2]))

    def direct(sql: str, _error: BaseException | None) -> None:
        sent.append(sql)

    with observed(store, "before_cursor_execute", seen, direct):
        yield sent


@contextmanager
def server_errors(store: Store) -> Iterator[list[str]]:
    """The errors the server answered statements with meanwhile (as its log shows them)."""
    seen: list[str] = []

    def failed(context: Any) -> None:
        seen.append(str(context.original_exception))

    def direct(_sql: str, error: BaseException | None) -> None:
        if error is not None:
            seen.append(str(error))

    with observed(store, "handle_error", failed, direct):
        yield seen


@contextmanager
def observed(
    store: Store,
    name: str,
    listener: Callable[..., None],
    direct: Callable[[str, BaseException | None], None],
) -> Iterator[None]:
    """`listener` on the engine's event `name`, and `direct` on the statements run outside
    SQLAlchemy (`PgDirect`: the intake's and the collector's), meanwhile."""
    engine = store.db.engine.sync_engine
    assert store.db.pg_direct is not None
    assert store.db.pg_collector is not None
    lists = [store.db.pg_direct.observers, store.db.pg_collector.observers]
    event.listen(engine, name, listener)
    for observers in lists:
        observers.append(direct)
    try:
        yield
    finally:
        for observers in lists:
            observers.remove(direct)
        event.remove(engine, name, listener)


#: The intake's one statement as pg_stat_activity shows it.
_DIRECT = "query LIKE 'WITH t0 AS (INSERT INTO proposals %'"


async def end_direct(conn: AsyncConnection, waiting: bool = False) -> int:
    """End the backend of the intake's own connection (`PgDirect`), as an administrator, a
    failover or a restart would (`waiting`: only while its statement waits for a lock); how
    many were ended."""
    condition = f"{_DIRECT} AND wait_event_type = 'Lock'" if waiting else _DIRECT
    ended = await conn.execute(
        text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            f"AND {condition}"
        )
    )
    return int(ended.scalar_one())


async def test_an_intake_batch_is_one_statement_once_the_process_knows_its_head(
    pg_store: Store,
) -> None:
    # The process's first batch locks a free head: two statements in a transaction.
    first = [record("first")]
    with statements(pg_store) as sent:
        result = await pg_store.proposals.record(first, NOW)
    assert len(sent) == 2, sent
    assert result.new == {"first"}
    # Then the head its last commit left: one statement, committed on its own.
    for size in (1, 64):
        tools = ("write_file", "read_file")
        batch = [record(f"p{size}-{n}", tools[n % 2]) for n in range(size)]
        with statements(pg_store) as sent:
            result = await pg_store.proposals.record(batch, NOW)
        assert len(sent) == 1, sent
        assert result.new == {r.id for r in batch}
        assert result.existing_digests == {}
    # A redelivery: the one statement writes nothing (a proposal is stored); the transaction
    # that follows reports the stored digests and appends only the fresh proposal's records.
    audit_before = len(await pg_store.audit.rows())
    again = [record("p1-0"), record("fresh")]
    with statements(pg_store) as sent:
        result = await pg_store.proposals.record(again, NOW)
    assert len(sent) == 3, sent
    assert result.new == {"fresh"}
    assert result.existing_digests == {"p1-0": again[0].proposal.digest}
    fresh_records = [a for r in again[1:] for a in r.audit]
    assert len(await pg_store.audit.rows()) == audit_before + len(fresh_records)
    assert (await pg_store.audit.verify()).ok
    # And the next batch is one statement again.
    with statements(pg_store) as sent:
        await pg_store.proposals.record([record("after")], NOW)
    assert len(sent) == 1, sent
    assert (await pg_store.audit.verify()).ok


async def test_a_head_moved_by_another_process_writes_nothing_and_the_batch_is_stored_once(
    postgres_url: str,
) -> None:
    stores = [await Store.open(postgres_url) for _ in range(2)]
    try:
        one, other = stores
        await one.proposals.record([record("one-0")], NOW)
        assert one.db.pg_head is not None
        assert one.db.pg_head.chain == 1
        # Another process appends to the same chain (its lone transaction takes chain 1).
        await other.proposals.record([record("other-0")], NOW)
        assert other.db.pg_head is not None
        assert other.db.pg_head.chain == 1
        with statements(one) as sent, server_errors(one) as errors:
            result = await one.proposals.record([record("one-1"), record("one-2")], NOW)
        assert result.new == {"one-1", "one-2"}
        # The one statement failed, then a transaction on another chain than the one that moved.
        assert len(sent) == 3, sent
        # The server's error (the line its log shows) says what happened, in its own words.
        assert len(errors) == 1, errors
        assert HEAD_MOVED_SENTENCE in errors[0], errors
        assert "invalid input syntax for type integer" in errors[0], errors
        assert one.db.pg_head is not None
        assert one.db.pg_head.chain == 2
        # From then on each keeps to its own chain, one statement per batch.
        for n in range(3, 6):
            for store, name in ((one, "one"), (other, "other")):
                with statements(store) as sent:
                    await store.proposals.record([record(f"{name}-{n}")], NOW)
                assert len(sent) == 1, sent
        async with one.db.engine.connect() as conn:
            count = (await conn.execute(select(func.count()).select_from(PROPOSALS))).scalar()
            audited = (
                await conn.execute(
                    select(func.count(AUDIT.c.proposal_id.distinct())).where(
                        AUDIT.c.kind == "proposal"
                    )
                )
            ).scalar()
            proposal_records = (
                await conn.execute(
                    select(func.count()).select_from(AUDIT).where(AUDIT.c.kind == "proposal")
                )
            ).scalar()
        assert count == audited == proposal_records == 2 + 2 + 3 * 2
        assert (await one.audit.verify()).ok
    finally:
        for s in stores:
            await s.close()


async def test_a_direct_connection_the_server_closed_fails_one_batch_and_the_next_reconnects(
    pg_store: Store,
) -> None:
    await pg_store.proposals.record([record("first")], NOW)
    await pg_store.proposals.record([record("direct")], NOW)  # one statement on PgDirect
    # The server ends that connection (an administrator, a failover, a restart).
    async with pg_store.db.engine.connect() as conn:
        assert await end_direct(conn) == 1
    # Where asyncpg has already read the server's goodbye, the next batch opens another
    # connection; where not, that batch fails as a lost pooled connection's did (the intake
    # retries it, and a redelivery rebuilds the events): nothing stored, no head known.
    lost = [record("lost")]
    try:
        stored = await pg_store.proposals.record(lost, NOW)
    except DirectFailed:
        assert await pg_store.proposals.owners(["lost"]) == {}
        assert pg_store.db.pg_head is None
        stored = await pg_store.proposals.record(lost, NOW)  # in a transaction
    assert stored.new == {"lost"}
    with statements(pg_store) as sent:
        assert (await pg_store.proposals.record([record("after")], NOW)).new == {"after"}
    assert len(sent) == 1, sent
    owners = await pg_store.proposals.owners(["first", "direct", "lost", "after"])
    assert set(owners) == {"first", "direct", "lost", "after"}
    assert (await pg_store.audit.verify()).ok


async def test_a_batch_of_steps_is_one_statement_once_the_process_knows_its_head(
    pg_store: Store, postgres_url: str
) -> None:
    pids = [f"{kind}-{n}" for n in range(10) for kind in KINDS]
    await pg_store.proposals.record([record(p) for p in pids], NOW)
    steps = []
    for n, pid in enumerate(pids):
        loaded = await pg_store.requests.load_for_proposal(pid)
        assert loaded is not None
        held, version = loaded
        steps.append((step(pid.split("-")[0], held.request_id, pid, version, n), NOW))
    half = len(steps) // 2
    # This process knows where its last commit left its head: one statement, committed on its
    # own, whatever the batch's size.
    with statements(pg_store) as sent:
        assert await pg_store.requests.commit_steps(steps[:half]) == [True] * half
    assert len(sent) == 1, sent
    # Another process, which has not appended yet: two statements in a transaction.
    other = await Store.open(postgres_url)
    try:
        with statements(other) as sent:
            assert await other.requests.commit_steps(steps[half:]) == [True] * (len(steps) - half)
        assert len(sent) == 2, sent
        # Replayed where the head is known: every nonce is taken, so the one statement writes
        # nothing (its own refusal), and the transaction that follows, its first statement
        # finding every nonce taken, writes nothing either, not even the audit.
        with_nonce = [(w, at) for w, at in steps if w.decision is not None]
        before = await other.audit.rows()
        with statements(other) as sent, server_errors(other) as errors:
            assert await other.requests.commit_steps(with_nonce) == [False] * len(with_nonce)
        assert len(sent) == 2, sent
        assert len(errors) == 1, errors
        assert HEAD_MOVED_SENTENCE in errors[0], errors
        assert await other.audit.rows() == before
        assert (await other.audit.verify()).ok
    finally:
        await other.close()
    # Each request moved once from the version its step expected (a refusal moves none).
    async with pg_store.db.engine.connect() as conn:
        versions = dict(
            (await conn.execute(select(REQUESTS.c.request_id, REQUESTS.c.version))).all()
        )
    assert versions == {
        w.request_id: (w.expected_version + 1 if w.expected_version is not None else 0)
        for w, _ in steps
    }


async def test_a_batch_of_decisions_reads_in_one_statement(pg_store: Store) -> None:
    """What a batch of decisions reads (`Store.decision_reads`: the requests with their
    approvals, the nonces, the stored proposals, the freezes) is one statement, whatever the
    batch's size (what it reads is `test_steps`' on both stores)."""
    recs = [record(f"read-{n}") for n in range(20)]
    await pg_store.proposals.record(recs, NOW)
    ids = [r.request.request_id for r in recs if r.request is not None]
    for size in (1, len(ids)):
        with statements(pg_store) as sent:
            reads = await pg_store.decision_reads(ids[:size], [f"nonce-{n}" for n in range(size)])
        assert len(sent) == 1, sent
        assert sorted(reads.requests) == sorted(ids[:size])
        assert len(reads.parts) == size
        assert reads.nonces == {}
    # The server ends the collector's connection: the next read fails (the collector retries
    # its batch) or opens another at once; the one after reads on a connection of its own again.
    async with pg_store.db.engine.connect() as conn:
        ended = await conn.execute(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND query LIKE 'SELECT ARRAY(SELECT ROW(request_id, %'"
            )
        )
        assert ended.scalar_one() == 1
    with contextlib.suppress(DirectFailed):
        await pg_store.decision_reads(ids[:1], [])
    with statements(pg_store) as sent:
        again = await pg_store.decision_reads(ids[:1], [])
    assert set(again.requests) == {ids[0]}
    assert len(sent) == 1, sent


async def test_replicas_recording_the_same_ids_at_once_each_store_them_once(
    postgres_url: str,
) -> None:
    stores = [await Store.open(postgres_url) for _ in range(3)]
    try:
        ids = [f"shared-{n}" for n in range(40)]
        batches = [[record(i) for i in ids[k::2] + ids[: 10 + 5 * k]] for k in range(3)]
        results = await asyncio.gather(
            *(s.proposals.record(b, NOW) for s, b in zip(stores, batches, strict=True))
        )
        news = [r.new for r in results]
        assert set().union(*news) == set(ids)
        assert sum(len(n) for n in news) == len(ids)  # each id new for exactly one replica
        for result, batch in zip(results, batches, strict=True):
            assert result.new | set(result.existing_digests) == {r.id for r in batch}
        async with stores[0].db.engine.connect() as conn:
            count = (await conn.execute(select(func.count()).select_from(PROPOSALS))).scalar()
            proposals_audited = (
                await conn.execute(
                    select(func.count(AUDIT.c.proposal_id.distinct())).where(
                        AUDIT.c.kind == "proposal"
                    )
                )
            ).scalar()
        assert count == proposals_audited == len(ids)
        assert (await stores[0].audit.verify()).ok
    finally:
        for s in stores:
            await s.close()


async def test_replicas_knowing_their_heads_recording_the_same_ids_at_once_store_them_once(
    postgres_url: str,
) -> None:
    stores = [await Store.open(postgres_url) for _ in range(3)]
    try:
        # Each knows a head (its own chain, or one another moves meanwhile).
        await asyncio.gather(
            *(s.proposals.record([record(f"warm-{k}")], NOW) for k, s in enumerate(stores))
        )
        ids = [f"shared-{n}" for n in range(40)]
        for round_ in range(3):
            batches = [
                [record(f"{i}-{round_}") for i in ids[k::2] + ids[: 10 + 5 * k]] for k in range(3)
            ]
            results = await asyncio.gather(
                *(s.proposals.record(b, NOW) for s, b in zip(stores, batches, strict=True))
            )
            news = [r.new for r in results]
            assert set().union(*news) == {f"{i}-{round_}" for i in ids}
            assert sum(len(n) for n in news) == len(ids)  # each id new for exactly one replica
            for result, batch in zip(results, batches, strict=True):
                assert result.new | set(result.existing_digests) == {r.id for r in batch}
        async with stores[0].db.engine.connect() as conn:
            count = (await conn.execute(select(func.count()).select_from(PROPOSALS))).scalar()
            proposal_records = (
                await conn.execute(
                    select(func.count()).select_from(AUDIT).where(AUDIT.c.kind == "proposal")
                )
            ).scalar()
        assert count == proposal_records == 3 + 3 * len(ids)
        assert (await stores[0].audit.verify()).ok
    finally:
        for s in stores:
            await s.close()


async def test_replicas_applying_the_same_decisions_at_once_apply_each_once(
    postgres_url: str,
) -> None:
    stores = [await Store.open(postgres_url) for _ in range(3)]
    try:
        pids = [f"held-{n}" for n in range(40)]
        await stores[0].proposals.record([record(p) for p in pids], NOW)
        for s in stores:  # connected: the three batches start together
            await s.requests.load_for_proposal(pids[0])
        steps = []
        moved = []
        for n, pid in enumerate(pids):
            loaded = await stores[0].requests.load_for_proposal(pid)
            assert loaded is not None
            held, version = loaded
            steps.append((step("approved", held.request_id, pid, version, n), NOW))
            moved.append((RequestState.APPROVED, version + 1))
        # The same decisions, redelivered to three replicas, in three orders. A replica whose
        # batch met another's first (ConcurrentUpdate, nothing committed) applies it again, as
        # the collector plans its messages again.
        orders = [steps, steps[::-1], steps[1::2] + steps[::2]]

        async def apply(store: Store, order: list[tuple[StepWrite, datetime]]) -> list[bool]:
            for _ in range(5):
                try:
                    return await store.requests.commit_steps(order)
                except ConcurrentUpdate:
                    continue
            raise AssertionError("the batch raced five times")

        results = await asyncio.gather(*(apply(s, o) for s, o in zip(stores, orders, strict=True)))
        applied: dict[str, int] = {}
        for order, result in zip(orders, results, strict=True):
            for (write, _), counted in zip(order, result, strict=True):
                applied[write.request_id] = applied.get(write.request_id, 0) + counted
        assert applied == {w.request_id: 1 for w, _ in steps}  # each by exactly one replica
        async with stores[0].db.engine.connect() as conn:
            states = (await conn.execute(select(REQUESTS.c.state, REQUESTS.c.version))).all()
        assert sorted(states) == sorted(moved)  # each moved once, from the version expected
        assert (await stores[0].audit.verify()).ok
    finally:
        for s in stores:
            await s.close()


async def test_an_approval_meeting_another_replicas_by_the_same_approver_is_a_concurrent_update(
    postgres_url: str,
) -> None:
    """One replica has written ann's approval of a request, not yet committed; another writes
    an approval by ann of the same request (a second nonce: the nonce index cannot see the
    first). Its insert waits in the index of accepted approvers and fails there when the
    first commits: that is the request moved by another writer (`ConcurrentUpdate`, planned
    again by the collector), on the batch path and the single-step path, with nothing written."""
    stores = [await Store.open(postgres_url) for _ in range(2)]
    try:
        await stores[0].proposals.record([record("raced-0")], NOW)
        loaded = await stores[0].requests.load_for_proposal("raced-0")
        assert loaded is not None
        held, version = loaded
        first = step("approved", held.request_id, "raced-0", version, 0)
        assert first.decision is not None
        second = replace(first, decision=first.decision._replace(nonce="another-nonce"))
        for attempt in (
            lambda: stores[1].requests.commit_steps([(second, NOW)]),
            lambda: stores[1].requests.commit_step(second, NOW),
        ):
            async with stores[0].db.engine.connect() as conn:
                await conn.run_sync(lambda c: stores[0].requests.commit_steps_in(c, [(first, NOW)]))
                racing = asyncio.ensure_future(attempt())
                await until_waiting(stores[1].db.engine, 1)
                await conn.commit()
            with pytest.raises(ConcurrentUpdate, match="same approver"):
                await racing
            async with stores[0].db.engine.connect() as conn:
                stored = (await conn.execute(text("SELECT nonce FROM decisions"))).scalars()
                assert list(stored) == [first.decision.nonce]  # the racing one wrote nothing
            # Undo the first, for the second path to race the same way.
            async with stores[0].db.engine.begin() as conn:
                await conn.execute(text("DELETE FROM outcomes"))
                await conn.execute(text("DELETE FROM decisions"))
                await conn.execute(
                    text("UPDATE requests SET state = 'pending', version = :v, closed_at = NULL"),
                    {"v": version},
                )
    finally:
        for s in stores:
            await s.close()


async def test_replicas_deciding_the_same_requests_in_opposite_orders_do_not_deadlock(
    postgres_url: str,
) -> None:
    """Two approvers' decisions on the same three requests reach two replicas in opposite
    orders while a third transaction holds the middle request: in batch order, each replica
    would lock its first request and then wait for the other's (a deadlock, one batch
    aborted after `deadlock_timeout`); in request id order one waits behind the other, which
    commits, and the late one finds its versions stale."""
    stores = [await Store.open(postgres_url) for _ in range(2)]
    try:
        pids = [f"held-{n}" for n in range(3)]
        await stores[0].proposals.record([record(p) for p in pids], NOW)
        base = []
        for n, pid in enumerate(pids):
            loaded = await stores[0].requests.load_for_proposal(pid)
            assert loaded is not None
            held, version = loaded
            base.append(step("approved", held.request_id, pid, version, n))
        base.sort(key=lambda w: w.request_id)

        def by(approver: str) -> list[tuple[StepWrite, datetime]]:
            out = []
            for w in base:
                assert w.decision is not None
                mine = w.decision._replace(
                    nonce=f"{approver}-{w.decision.nonce}", approver=approver
                )
                out.append((replace(w, decision=mine), NOW))
            return out

        middle = base[1].request_id
        async with stores[0].db.engine.connect() as blocker:
            # The lock an update takes (a decision's foreign key check still passes).
            await blocker.execute(
                text("SELECT 1 FROM requests WHERE request_id = :r FOR NO KEY UPDATE"),
                {"r": middle},
            )
            batches = asyncio.gather(
                stores[0].requests.commit_steps(by("ann")),
                stores[1].requests.commit_steps(by("bob")[::-1]),
                return_exceptions=True,
            )
            await until_waiting(stores[1].db.engine, 2)  # both batches wait for the middle request
            await blocker.rollback()
            results = await batches
        assert sorted(type(r).__name__ for r in results) == ["ConcurrentUpdate", "list"], results
        assert [r for r in results if isinstance(r, list)] == [[True, True, True]]
        assert (await stores[0].audit.verify()).ok
    finally:
        for s in stores:
            await s.close()


async def until_waiting(engine: AsyncEngine, n: int) -> None:
    """Until `n` sessions wait for a lock (asked in a new transaction each time: a
    transaction sees one snapshot of `pg_stat_activity`)."""
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock'"
    )
    deadline = time.monotonic() + 60
    while True:
        async with engine.connect() as conn:
            if (await conn.execute(query)).scalar() == n:
                return
        assert time.monotonic() < deadline, f"{n} sessions never waited for a lock"
        await asyncio.sleep(0.01)


async def test_the_direct_connection_takes_the_urls_options(postgres_url: str) -> None:
    # As SQLAlchemy's pool does: behind a pooler in transaction mode prepared statements must
    # not be cached, and the URL says so.
    store = await Store.open(f"{postgres_url}?prepared_statement_cache_size=0")
    try:
        for n in range(3):
            with statements(store) as sent:
                result = await store.proposals.record([record(f"uncached-{n}")], NOW)
            assert result.new == {f"uncached-{n}"}
            assert len(sent) == (2 if n == 0 else 1), sent
        assert (await store.audit.verify()).ok
    finally:
        await store.close()


@pytest.mark.parametrize("cached", [True, False])
async def test_the_collectors_statements_are_planned_for_their_arguments(
    postgres_url: str, cached: bool
) -> None:
    """The collector's connection plans each statement anew (a generic plan made while the
    tables were nearly empty was kept as they grew); the intake's keeps PostgreSQL's choice.
    Behind a pooler in transaction mode (no statement cached) nothing is set: every statement
    is planned anew there anyway, and a session setting would outlive the transaction."""
    url = postgres_url if cached else f"{postgres_url}?prepared_statement_cache_size=0"
    store = await Store.open(url)
    try:
        show = Positional("SHOW plan_cache_mode", ())
        assert store.db.pg_collector is not None
        assert store.db.pg_direct is not None
        collector = (await store.db.pg_collector.fetch(show))[0]
        assert collector == ("force_custom_plan" if cached else "auto")
        assert (await store.db.pg_direct.fetch(show))[0] == "auto"
    finally:
        await store.close()


async def test_a_server_refusing_the_plan_setting_leaves_the_plans_to_postgresql(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A server without `plan_cache_mode` (before PostgreSQL 12) refuses the session setting:
    the collector reads and applies its steps all the same, its plans PostgreSQL's choice."""
    monkeypatch.setattr(PgDirect, "PLAN_EACH_RUN", "SET plan_cache_mode = no_such_mode")
    store = await Store.open(postgres_url)
    try:
        await store.proposals.record([record("refused-0")], NOW)
        loaded = await store.requests.load_for_proposal("refused-0")
        assert loaded is not None
        held, version = loaded
        write = step("approved", held.request_id, "refused-0", version, 0)
        assert write.decision is not None
        reads = await store.decision_reads([held.request_id], [write.decision.nonce])
        assert set(reads.requests) == {held.request_id}
        with statements(store) as sent:
            assert await store.requests.commit_steps([(write, NOW)]) == [True]
        assert len(sent) == 1, sent
        assert store.db.pg_collector is not None
        show = Positional("SHOW plan_cache_mode", ())
        assert (await store.db.pg_collector.fetch(show))[0] == "auto"
        assert "PostgreSQL refused" in caplog.text
        assert (await store.audit.verify()).ok
    finally:
        await store.close()


class Partition:
    """A TCP relay to PostgreSQL whose link can be cut silently: while it is cut, bytes either
    way are held back and nothing is closed, as when a network partition or a server host gone
    in a failover strands an open connection."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.links: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        server, to_server = await asyncio.open_connection(self.host, self.port)
        self.links += [to_client, to_server]
        await asyncio.gather(
            self._pump(client, to_server), self._pump(server, to_client), return_exceptions=True
        )
        for writer in (to_client, to_server):
            writer.close()

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        while data := await source.read(65536):
            await self.flowing.wait()
            sink.write(data)
            await sink.drain()

    async def close(self) -> None:
        self.flowing.set()
        for writer in self.links:
            writer.close()
        self.server.close()
        await self.server.wait_closed()


async def test_a_statement_on_a_connection_that_stopped_answering_fails_in_its_timeout(
    postgres_url: str,
) -> None:
    url = make_url(postgres_url)
    link = Partition(url.host or "127.0.0.1", url.port or 5432)
    engine = create_async_engine(url.set(port=await link.start()))
    direct = PgDirect(engine, timeout=1.0)
    one = Positional("SELECT 1", ())
    try:
        assert (await direct.fetch(one))[0] == 1
        link.flowing.clear()
        # Without a timeout the statement would wait until the kernel gave up on the socket.
        with pytest.raises(DirectFailed, match="TimeoutError"):
            await asyncio.wait_for(direct.fetch(one), 20)
        # Opening a connection while the link is cut fails the same way.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(direct.fetch(one), 20)
        link.flowing.set()
        assert (await direct.fetch(one))[0] == 1  # on a connection opened anew
    finally:
        await direct.aclose()
        await engine.dispose()
        await link.close()
