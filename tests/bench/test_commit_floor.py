"""The commit floor `headgate bench` prints beside the relay on PostgreSQL: one-row durable
commits timed on the server under test, the table made for them dropped after."""

from __future__ import annotations

import asyncpg

from workflow.bench.floor import commit_floor


async def test_the_commit_floor_is_measured_and_leaves_nothing(postgres_url: str) -> None:
    got = await commit_floor(postgres_url, count=20, seconds=60.0)
    assert got is not None
    assert got["count"] == 20
    assert 0 < got["p50"] <= got["max"]
    conn = await asyncpg.connect(postgres_url.replace("postgresql+asyncpg", "postgresql", 1))
    try:
        left = await conn.fetchval("SELECT to_regclass('headgate_bench_commit_floor')")
    finally:
        await conn.close()
    assert left is None


async def test_no_figure_without_a_server() -> None:
    assert await commit_floor("postgresql+asyncpg://nobody@127.0.0.1:1/none", count=5) is None
