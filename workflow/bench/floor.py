"""The commit floor: what one durable commit costs on the database server under test, measured
in the same run as Headgate, so PostgreSQL figures can be judged on any disk.

One row inserted and committed (BEGIN, INSERT, COMMIT through asyncpg, a prepared statement,
`synchronous_commit` as the server has it) in a loop on a connection of its own, in a table
made for it and dropped after. An intake batch on PostgreSQL is one such transaction at least
(its COMMIT waits for the WAL flush as this one's does): Headgate's read p50 cannot be below
the relay's p50 plus this floor, whatever the code does.
"""

from __future__ import annotations

import time
from typing import Any

from workflow.bench.stats import summarize

_TABLE = "headgate_bench_commit_floor"


async def commit_floor(url: str, count: int = 300, seconds: float = 2.0) -> dict[str, Any] | None:
    """The latency summary (ms) of `count` one-row commits (fewer if `seconds` run out); None
    when the server cannot be reached (the figure is then left out, not guessed)."""
    import asyncpg

    try:
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql", 1))
    except Exception:
        return None
    samples: list[float] = []
    try:
        await conn.execute(f"CREATE TABLE IF NOT EXISTS {_TABLE} (id BIGINT, at TIMESTAMPTZ)")
        insert = await conn.prepare(f"INSERT INTO {_TABLE} VALUES ($1, now())")
        deadline = time.monotonic() + seconds
        for n in range(count):
            start = time.perf_counter()
            async with conn.transaction():
                await insert.fetch(n)
            samples.append(time.perf_counter() - start)
            if time.monotonic() > deadline:
                break
    finally:
        try:
            await conn.execute(f"DROP TABLE IF EXISTS {_TABLE}")
        finally:
            await conn.close()
    return summarize(samples)
