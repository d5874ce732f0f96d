"""The pruner: what `[retention]` no longer keeps leaves the database, in the background.

Each pass deletes decided proposals older than `retention.proposals`, published outbox rows
older than the streams' duplicate window, and (when `retention.audit` is set) the oldest audit
records, written first to `retention.audit_archive` as JSON Lines, one file per pass. It works
in short transactions of a bounded number of rows at the writer's background priority (off the
event loop on SQLite), so approvals and the intake's batches go first and on meanwhile; the
service's clock decides what is old (a test moves it).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from workflow.policy.retention import RetentionSpec
from workflow.service import allocator
from workflow.service.context import ServiceContext
from workflow.service.streams import DUPLICATE_WINDOW
from workflow.store.archive import (
    STALE_PARTIAL,
    ArchiveWriter,
    PassUnderWay,
    end_pass,
    last_record,
    pass_under_way,
    remove_stale_partials,
)
from workflow.store.audit import AuditRecord
from workflow.store.chain import seq_label
from workflow.store.requests import ConcurrentUpdate
from workflow.store.retention import AuditChainBroken, AuditCut, Retention, check_continues

log = logging.getLogger("headgate.retention")

#: Proposals (or outbox rows) per transaction, audit records per transaction, and transactions
#: per kind in one pass (the rest waits for the next). A chunk of decided proposals touches
#: eight tables: at 1,000 a transaction held the writer for about a second on a database of
#: millions of rows, and every stage's write waited behind it.
CHUNK = 250
AUDIT_CHUNK = 1000
MAX_CHUNKS = 200


@dataclass(frozen=True, slots=True)
class Pruned:
    proposals: int = 0
    outbox: int = 0
    audit: int = 0


async def prune_once(ctx: ServiceContext, data_dir: Path) -> Pruned:
    """One pass of the pruner with the current policy's `[retention]`."""
    spec: RetentionSpec = ctx.policy.retention
    now = ctx.now()
    store = ctx.store.retention
    proposals = outbox = audit = 0
    if spec.proposals:
        proposals = await _repeat(
            lambda: store.prune_decided(now - timedelta(seconds=spec.proposals), CHUNK)
        )
    outbox = await _repeat(
        lambda: store.prune_outbox(now - timedelta(seconds=DUPLICATE_WINDOW), CHUNK)
    )
    directory = archive_directory(spec, data_dir)
    if directory is not None:
        try:
            audit = await prune_audit(store, directory, now - timedelta(seconds=spec.audit), now)
        except ConcurrentUpdate:
            pass  # another replica pruned the same records first; its archive has them
    if proposals or outbox or audit:
        log.info(
            "retention: pruned %d decided proposals, %d outbox rows, %d audit records",
            proposals, outbox, audit,
        )  # fmt: skip
    return Pruned(proposals, outbox, audit)


def archive_directory(spec: RetentionSpec, data_dir: Path) -> Path | None:
    """Where pruned audit records are archived; None when the audit is not pruned."""
    if not (spec.audit and spec.audit_archive):
        return None
    directory = Path(spec.audit_archive)
    return directory if directory.is_absolute() else data_dir / directory


async def sweep_partials(spec: RetentionSpec, data_dir: Path) -> list[Path]:
    """Remove the partial files interrupted writers left in the archive directory (the
    pruner's, at its start and then hourly: a pass itself never lists the directory)."""
    directory = archive_directory(spec, data_dir)
    if directory is None:
        return []
    removed = await asyncio.to_thread(remove_stale_partials, directory)
    for stale in removed:
        log.warning("retention: removed %s, left by a writer that was interrupted", stale)
    return removed


async def prune_audit(
    store: Retention, directory: Path, older_than: datetime, now: datetime, *,
    chunk: int = AUDIT_CHUNK, most: int = AUDIT_CHUNK * MAX_CHUNKS,
) -> int:  # fmt: skip
    """Prune the audit records written before `older_than` — at most `most`, a pass's worth
    — chain after chain (one on SQLite), into ONE archive per chain in `directory`, deleted
    `chunk` at a time; returns how many.

    The records are read a chunk at a time, each checked to continue the chain and written to
    the archive as it comes (memory: one chunk); the archive is synced and renamed into place,
    and only then are the records deleted, a chunk per transaction, each moving the chain's
    anchor and appending an `audit.pruned` record that names the archive. Each chain's pass is
    recorded in the directory (`pass_file`) from just before its archive gets its name until
    its last deletion: a pass that stopped in between (a crash, a failed transaction) is
    finished by the next, under the same archive (an archive never overlaps another; the
    chains' sequence numbers are disjoint), without listing the directory. One replica prunes
    the audit at a time (`Retention.pruning_audit`); another finds it busy and prunes nothing."""
    pruned = 0
    async with store.pruning_audit() as mine:
        if not mine:
            return 0  # another replica prunes the audit now; the next pass looks again
        for chain in await store.audit.chains():
            if pruned >= most:
                break
            pruned += await _prune_chain(
                store, chain, directory, older_than, now, chunk=chunk, most=most - pruned
            )
    return pruned


async def _prune_chain(
    store: Retention, chain: int, directory: Path, older_than: datetime, now: datetime, *,
    chunk: int, most: int,
) -> int:  # fmt: skip
    anchor = await store.audit.anchor(chain)
    under_way = await asyncio.to_thread(pass_under_way, directory, chain)
    if under_way is not None and not await _resumable(under_way, anchor):
        await asyncio.to_thread(end_pass, directory, chain)
        under_way = None
    if under_way is not None:
        path, through = under_way.archive, under_way.last
        cuts = await _read_cuts(store, anchor, None, through - anchor[0], chunk, None)
        last = await asyncio.to_thread(last_record, path)
        if not cuts or last is None or (cuts[-1].seq, cuts[-1].hash) != (last.seq, last.hash):
            raise AuditChainBroken(
                f"the archive {path} does not hold the stored records "
                f"{seq_label(anchor[0] + 1)}–{seq_label(through)}"
            )
    else:
        writer = ArchiveWriter(directory, chain)
        try:
            cuts = await _read_cuts(store, anchor, older_than, most, chunk, writer)
            if not cuts:
                return 0
            path = await asyncio.to_thread(writer.close)
        finally:
            writer.discard()  # nothing once closed
    pruned = 0
    for cut in cuts:
        await store.drop_audit(anchor, cut, path.name, now, chain)
        anchor = (cut.seq, cut.hash)
        pruned += cut.records
    await asyncio.to_thread(end_pass, directory, chain)
    return pruned


async def _resumable(under_way: PassUnderWay, anchor: tuple[int, str]) -> bool:
    """Whether the pass under way still has records to delete: its archive is there and the
    anchor inside it. A pass whose records are all deleted (it stopped before ending) or
    whose archive never got its name (it stopped before: nothing was deleted) is over."""
    if anchor[0] >= under_way.last:
        return False
    exists = await asyncio.to_thread(under_way.archive.exists)
    if under_way.first <= anchor[0] + 1 and exists:
        return True
    if not exists and anchor[0] + 1 == under_way.first:
        return False
    raise AuditChainBroken(
        f"a pruning pass of records {seq_label(under_way.first)}–{seq_label(under_way.last)} "
        f"into {under_way.archive} stopped, and the chain's anchor is at {seq_label(anchor[0])}"
        + ("" if exists else ", but that archive is gone")
    )


async def _read_cuts(
    store: Retention, anchor: tuple[int, str], older_than: datetime | None, most: int,
    chunk: int, writer: ArchiveWriter | None,
) -> list[AuditCut]:  # fmt: skip
    """Read up to `most` records after `anchor` (those before `older_than`) a chunk at a
    time, check that each chunk continues the chain and hand it to `writer`; returns where
    each chunk ends."""
    cuts: list[AuditCut] = []
    read = 0
    while read < most:
        wanted = min(chunk, most - read)
        rows = await store.prunable_audit(anchor[0], older_than, wanted)
        if not rows:
            break

        def check_and_write(
            rows: list[AuditRecord] = rows, after: tuple[int, str] = anchor
        ) -> None:
            check_continues(rows, after)  # hashing a thousand records: off the event loop
            if writer is not None:
                writer.add(rows)

        await asyncio.to_thread(check_and_write)
        last = rows[-1]
        cuts.append(AuditCut(last.seq, last.hash, len(rows)))
        anchor, read = (last.seq, last.hash), read + len(rows)
        if len(rows) < wanted:
            break
    return cuts


async def _repeat(step: object, chunk: int = CHUNK) -> int:
    """Run a pruning step until it prunes less than a chunk, at most MAX_CHUNKS times."""
    assert callable(step)
    total = 0
    for _ in range(MAX_CHUNKS):
        n = int(await step())
        total += n
        if n < chunk:
            break
    return total


async def pruner(ctx: ServiceContext, data_dir: Path, stopping: asyncio.Event) -> None:
    """Prune every `retention.interval` seconds until `stopping` is set; a failed pass is
    logged and retried at the next. Partial files left by interrupted writers are swept at
    the start and then every `STALE_PARTIAL` seconds."""
    swept = -math.inf
    while not stopping.is_set():
        try:
            if time.monotonic() - swept >= STALE_PARTIAL:
                swept = time.monotonic()
                await sweep_partials(ctx.policy.retention, data_dir)
            pruned = await prune_once(ctx, data_dir)
            if pruned != Pruned():
                # The pages the pass read stay in the background connection's cache, dropped
                # unread by its next transaction (the writer commits meanwhile): free them.
                await ctx.store.db.release_memory()
                # What a pass read and freed (the audit prefix, the archive's text, those
                # pages) leaves free pages in the allocator's heaps: give them back (off the
                # loop: it walks the heaps under their locks).
                await asyncio.to_thread(allocator.trim)
        except Exception as exc:
            log.warning("retention: pruning failed (%s); will retry", exc)
        try:
            await asyncio.wait_for(stopping.wait(), float(ctx.policy.retention.interval))
        except TimeoutError:
            pass
