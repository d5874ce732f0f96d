"""The store under test, on each backend the `database_url` fixture provides."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from workflow.store.repo import Store


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    s = await Store.open(database_url)
    try:
        yield s
    finally:
        await s.close()
