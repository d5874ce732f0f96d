"""The store under test: `store` on each backend the `database_url` fixture provides,
`pg_store` on a fresh PostgreSQL database (`postgres_url`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from workflow.store.repo import Store


@asynccontextmanager
async def opened(url: str) -> AsyncIterator[Store]:
    s = await Store.open(url)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    async with opened(database_url) as s:
        yield s


@pytest.fixture
async def pg_store(postgres_url: str) -> AsyncIterator[Store]:
    async with opened(postgres_url) as s:
        yield s
