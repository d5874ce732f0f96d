"""The audit log read as it grows, on SQLite and PostgreSQL: an export streamed a batch at a
time (memory that of a batch, whatever the chain's length) that verifies against the anchor
after pruning at any cut, and the newest records read without the rest of the table."""

from __future__ import annotations

import asyncio
import itertools
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from workflow.effects import AuditEntry
from workflow.store.archive import archive_file, export_jsonl, iter_jsonl, read_jsonl
from workflow.store.chain import ChainedRecord, verify_archive
from workflow.store.repo import Store
from workflow.store.schema import AuditRow

T0 = datetime(2026, 11, 1, tzinfo=UTC)


async def _append(store: Store, at: datetime, n: int, size: int = 10) -> None:
    await store.audit.append(
        [AuditEntry("test", "tester", {"i": i, "pad": "x" * size}) for i in range(n)], at
    )


async def test_batches_read_the_chain_in_order_a_batch_at_a_time(store: Store) -> None:
    await _append(store, T0, 23)
    every = await store.audit.rows()
    for batch in (1, 5, 23, 100):
        got = [b async for b in store.audit.batches(batch=batch)]
        assert all(len(b) <= batch for b in got)
        assert [r for b in got for r in b] == every
    partial = [
        r async for b in store.audit.batches(after_seq=4, through_seq=17, batch=5) for r in b
    ]
    assert [r.seq for r in partial] == list(range(5, 18))
    assert [b async for b in store.audit.batches(after_seq=10, through_seq=10)] == []


async def test_the_newest_records_are_read_alone_oldest_first(store: Store) -> None:
    assert await store.audit.last(5) == []
    await _append(store, T0, 12)
    every = await store.audit.rows()
    assert await store.audit.last(5) == every[-5:]
    assert await store.audit.last(50) == every


async def test_an_export_streams_in_the_memory_of_one_batch(store: Store, tmp_path: Path) -> None:
    """Peak memory while exporting 2,000 records of 2 KB: a batch of 100 at a time against
    the whole chain loaded at once, as the export did before."""
    for n in range(4):
        await _append(store, T0 + timedelta(minutes=n), 500, size=2000)

    async def peak(work: Callable[[], Awaitable[Any]]) -> int:
        tracemalloc.start()
        try:
            await work()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    out = tmp_path / "export.jsonl"
    streamed = await peak(lambda: export_jsonl(out, store.audit.batches(batch=100)))
    loaded = await peak(store.audit.rows)
    assert len(read_jsonl(out)) == 2000
    assert streamed < loaded / 4, (streamed, loaded)


def test_an_export_after_pruning_at_any_cut_verifies_with_the_archives(
    database_url: str, tmp_path: Path
) -> None:
    """Whatever was appended and wherever the pruner cut (nothing, a part, everything, again
    and again), the archives and an export from the anchor are the whole chain and verify
    against the anchor; the export alone holds exactly the stored records."""
    day = itertools.count()
    archives: list[Path] = []
    exports = itertools.count()

    async def example(groups: Sequence[int], cut: int, batch: int) -> None:
        store = await Store.open(database_url)
        try:
            base = T0 + timedelta(days=next(day))
            for hour, n in enumerate(groups):
                await _append(store, base + timedelta(hours=hour), n)

            async def archive(rows: Sequence[ChainedRecord]) -> str:
                path = await asyncio.to_thread(archive_file, tmp_path / "archive", rows)
                archives.append(path)
                return path.name

            now = base + timedelta(hours=20)
            await store.retention.prune_audit(base + timedelta(hours=cut), archive, now)
            assert (await store.audit.verify()).ok
            anchor = await store.audit.anchor()
            out = tmp_path / f"export-{next(exports)}.jsonl"
            written = await export_jsonl(out, store.audit.batches(after_seq=anchor[0], batch=batch))
            stored = await store.audit.rows(after_seq=anchor[0])
            assert written == len(stored)
            assert list(iter_jsonl(out)) == stored
            whole = itertools.chain(*(iter_jsonl(p) for p in [*archives, out]))
            check = verify_archive(whole, anchor)
            assert check.ok, check.problem
            assert check.checked == stored[-1].seq
        finally:
            await store.close()

    @settings(max_examples=12)
    @given(
        groups=st.lists(st.integers(1, 8), min_size=1, max_size=4),
        cut=st.integers(0, 5),
        batch=st.integers(1, 6),
    )
    def check(groups: list[int], cut: int, batch: int) -> None:
        asyncio.run(example(groups, cut, batch))

    check()


def test_a_stream_of_archives_fails_where_a_list_would(tmp_path: Path) -> None:
    """`verify_archive` over a generator finds what it finds over a list."""

    async def build() -> list[AuditRow]:
        store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'h.db'}")
        try:
            await _append(store, T0, 6)
            return await store.audit.rows()
        finally:
            await store.close()

    rows = asyncio.run(build())
    anchor = (4, rows[3].hash)
    forged = [r.model_copy(update={"data": "{}"}) if r.seq == 3 else r for r in rows]
    for records in (
        rows,
        forged,
        rows[:2],
        [r.model_copy(update={"hash": "0" * 64}) for r in rows],
    ):
        assert verify_archive(iter(records), anchor) == verify_archive(list(records), anchor)
    assert verify_archive(iter(rows), anchor).ok
    assert not verify_archive(iter(rows[:2]), anchor).ok
