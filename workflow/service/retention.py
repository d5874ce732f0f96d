"""The pruner: what `[retention]` no longer keeps leaves the database, in the background.

Each pass deletes decided proposals older than `retention.proposals`, published outbox rows
older than the streams' duplicate window, and (when `retention.audit` is set) the oldest audit
records, written first to `retention.audit_archive` as JSON Lines. It works in short
transactions of a bounded number of rows at the writer's background priority (off the event loop
on SQLite), so approvals and the intake's batches go first and on meanwhile; the service's clock
decides what is old (a test moves it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from workflow.policy.retention import RetentionSpec
from workflow.service import allocator
from workflow.service.context import ServiceContext
from workflow.service.streams import DUPLICATE_WINDOW
from workflow.store.archive import archive_file
from workflow.store.chain import ChainedRecord
from workflow.store.requests import ConcurrentUpdate

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
    if spec.audit and spec.audit_archive:
        directory = Path(spec.audit_archive)
        if not directory.is_absolute():
            directory = data_dir / directory

        async def archive(rows: Sequence[ChainedRecord]) -> str:
            return (await asyncio.to_thread(archive_file, directory, rows)).name

        try:
            audit = await _repeat(
                lambda: store.prune_audit(
                    now - timedelta(seconds=spec.audit), archive, now, AUDIT_CHUNK
                ),
                AUDIT_CHUNK,
            )
        except ConcurrentUpdate:
            pass  # another replica pruned the same records first; its archive has them
    if proposals or outbox or audit:
        log.info(
            "retention: pruned %d decided proposals, %d outbox rows, %d audit records",
            proposals, outbox, audit,
        )  # fmt: skip
    return Pruned(proposals, outbox, audit)


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
    logged and retried at the next."""
    while not stopping.is_set():
        try:
            pruned = await prune_once(ctx, data_dir)
            if pruned != Pruned():
                # What a pass read and freed (the audit prefix, the archive's text) leaves
                # free pages in the allocator's heaps: give them back (off the loop: it walks
                # the heaps under their locks).
                await asyncio.to_thread(allocator.trim)
        except Exception as exc:
            log.warning("retention: pruning failed (%s); will retry", exc)
        try:
            await asyncio.wait_for(stopping.wait(), float(ctx.policy.retention.interval))
        except TimeoutError:
            pass
