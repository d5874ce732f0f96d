"""What pruning a decided proposal costs the database writer, against what taking one in costs.

Run `python bench/bench_prune.py [--database-url URL] [--size N] [--rounds R]`. The store is
filled with N proposals of the bench's mix (80 % reads, 15 % writes held then approved with a
decision, an outcome, a release event in the outbox and two audit records, 5 % denied), through
the same store calls the service makes. Then, R times, on the same database: one intake batch
of 256 new proposals (and the approvals of its writes), then the pruner's three steps as the
service runs them (`prune_decided` of 250, `prune_outbox` of 250, `prune_audit` of 1,000 with
the archive written), the cutoff moving so that the database keeps its size. Each step's wall
time is the time it holds the writer (SQLite: the write lock). The figures are microseconds per
proposal: the intake's per proposal taken in, the pruner's per proposal pruned (its outbox and
audit steps counted per proposal too, by the rows each proposal leaves).

With no URL the database is a temporary SQLite file. A PostgreSQL URL must name an empty
database of your own (`createdb … prune_bench`): the script creates the tables.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workflow.classify.engine import classify
from workflow.effects import (
    AuditEntry,
    DecisionRecord,
    IntakeRecord,
    OutboxEvent,
    OutcomeRecord,
    StepWrite,
)
from workflow.messages import Proposal
from workflow.outcomes import Outcome, RequestState
from workflow.policy.engine import evaluate
from workflow.policy.model import default_policy
from workflow.routing import release_id_for, request_id_for, route
from workflow.store.archive import archive_file
from workflow.store.repo import Store
from workflow.store.schema import AuditRow
from workflow.subjects import Subjects

SUBJECTS = Subjects("headgate")
T0 = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
BATCH = 256
POLICY = default_policy()
TABLES = POLICY.classifier_tables()


def make(n: int, start: int, now: datetime) -> list[IntakeRecord]:
    records = []
    for i in range(start, start + n):
        kind = i % 20
        tool = "delete_file" if kind == 0 else "write_file" if kind <= 3 else "read_file"
        p = Proposal(
            id=f"p{i:09d}-{(i * 2654435761) % 4294967296:08x}",
            agent=f"agent-{i % 16}",
            tool=tool,
            arguments={"path": f"src/file{i % 97}.py"},
        )
        c = classify(p, TABLES)
        records.append(route(SUBJECTS, p, p.model_dump_json(), c, evaluate(p, c, POLICY), now))
    return records


def approvals(records: Sequence[IntakeRecord], now: datetime) -> list[tuple[StepWrite, datetime]]:
    steps = []
    for r in records:
        if r.request is None:
            continue
        pid, rid = r.id, request_id_for(r.id)
        write = StepWrite(
            request_id=rid,
            expected_version=0,
            new_state=RequestState.APPROVED,
            decision=DecisionRecord(
                nonce=f"n-{pid}",
                request_id=rid,
                approver="bench",
                key=None,
                signature=None,
                verdict="approve",
                accepted=True,
                refusal=None,
                message="approved",
                record=None,
                received_at=now,
            ),
            outcome=OutcomeRecord(pid, Outcome.RELEASED, release_id_for(pid), "approved", now),
            proposal_status=(pid, Outcome.RELEASED),
            events=[OutboxEvent(f"released:{pid}", "headgate.released.agent-1", "{}", pid)],
            audit=[
                AuditEntry("decision.accepted", "bench", {"verdict": "approve"}, pid, rid),
                AuditEntry("proposal.released", "headgate", {}, pid, rid),
            ],
        )
        steps.append((write, now))
    return steps


async def take_in(store: Store, records: Sequence[IntakeRecord], now: datetime) -> int:
    await store.proposals.record(records, now)
    steps = approvals(records, now)
    for i in range(0, len(steps), 64):
        await store.requests.commit_steps(steps[i : i + 64])
    await store.outbox.mark_published([f"released:{r.id}" for r in records if r.request])
    return len(records)


async def run(url: str | None, size: int, rounds: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="headgate-prune-bench-"))
    store = await Store.open(url or f"sqlite+aiosqlite:///{tmp / 'bench.db'}")
    try:
        step = timedelta(milliseconds=1)
        made = 0
        clock = T0
        start = time.perf_counter()
        while made < size:
            batch = make(BATCH, made, clock)
            await take_in(store, batch, clock)
            made += BATCH
            clock += step * BATCH
        print(f"filled {made} proposals in {time.perf_counter() - start:.0f} s")

        async def archive(rows: Sequence[AuditRow]) -> str:
            return (await asyncio.to_thread(archive_file, tmp / "archive", rows)).name

        cutoff = T0
        kinds = ("intake", "decided", "outbox", "audit")
        wall: dict[str, list[float]] = {k: [] for k in kinds}
        cpu: dict[str, list[float]] = {k: [] for k in kinds}
        counts: dict[str, int] = dict.fromkeys(kinds, 0)

        async def timed(kind: str, step: Awaitable[int]) -> None:
            t, c = time.perf_counter(), time.process_time()
            counts[kind] += await step
            wall[kind].append(time.perf_counter() - t)
            cpu[kind].append(time.process_time() - c)

        for _ in range(rounds):
            batch = make(BATCH, made, clock)
            await timed("intake", take_in(store, batch, clock))
            made += BATCH
            clock += step * BATCH
            cutoff += step * BATCH
            await timed("decided", store.retention.prune_decided(cutoff, 250))
            await timed("outbox", store.retention.prune_outbox(cutoff, 250))
            await timed("audit", store.retention.prune_audit(cutoff, archive, clock, 1000))
        pruned = max(1, counts["decided"])
        print(f"{rounds} rounds on {size} proposals ({store.dialect}); µs wall / CPU")
        intake = [1e6 * sum(d["intake"]) / counts["intake"] for d in (wall, cpu)]
        print(f"  intake: {intake[0]:.0f} / {intake[1]:.0f} per proposal taken in")
        total = [0.0, 0.0]
        for kind in kinds[1:]:
            us = [1e6 * sum(d[kind]) / pruned for d in (wall, cpu)]
            total = [total[0] + us[0], total[1] + us[1]]
            med = 1e3 * statistics.median(wall[kind])
            print(
                f"  prune {kind}: {us[0]:.0f} / {us[1]:.0f} per proposal pruned "
                f"({counts[kind]} rows, median {med:.1f} ms a call)"
            )
        print(
            f"  pruning / intake: wall {total[0] / intake[0]:.2f}, CPU {total[1] / intake[1]:.2f}"
        )
    finally:
        await store.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url")
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    asyncio.run(run(args.database_url, args.size, args.rounds))


if __name__ == "__main__":
    main()
