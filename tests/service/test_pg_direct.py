"""The intake's own PostgreSQL connection (`PgDirect`) ended by the server under a running
service, idle or in the middle of a batch's statement: no proposal is lost or released twice,
and the batches after it run on a new connection."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from tests.service.helpers import Harness, propose, running_service, wait_until
from tests.store.test_pgpath import end_direct


async def _released_once(h: Harness, pids: list[str]) -> None:
    for pid in pids:
        await h.observer.wait_for("released", pid)
    for pid in pids:
        assert len(h.observer.of("released", pid)) == 1, pid
    ctx = h.service.ctx
    assert ctx is not None
    assert set(await ctx.store.proposals.owners(pids)) == set(pids)
    assert (await ctx.store.audit.verify()).ok


async def _reads(h: Harness, name: str, count: int) -> list[str]:
    return [
        await propose(h.nc, h.subjects, tool="read_file", arguments={"path": f"{name}{n}"})
        for n in range(count)
    ]


async def test_the_intakes_connection_ended_by_the_server_loses_no_proposal(
    nats_url: str, tmp_path: Path, postgres_url: str
) -> None:
    async with running_service(
        nats_url, tmp_path / "svc", database_url=postgres_url, retry_base_delay=0.05
    ) as h:
        ctx = h.service.ctx
        assert ctx is not None
        before = []
        for pid in await _reads(h, "a", 2):  # the second is on the intake's own connection
            await h.observer.wait_for("released", pid)
            before.append(pid)
        # Ended while idle.
        async with ctx.store.db.engine.connect() as conn:
            assert await end_direct(conn) == 1
        idle = await _reads(h, "b", 5)
        await _released_once(h, before + idle)
        # Ended in the middle of a statement: it waits for the audit heads, locked here.
        async with ctx.store.db.engine.connect() as admin:
            async with ctx.store.db.engine.begin() as locker:
                await locker.execute(text("SELECT id FROM audit_head FOR UPDATE"))
                (stuck,) = await _reads(h, "c", 1)
                assert await wait_until(lambda: end_direct(admin, waiting=True), bool) == 1
        # The batch failed without a word from the server: retried, stored once, released once.
        after = await _reads(h, "d", 3)
        await _released_once(h, [*before, *idle, stuck, *after])
