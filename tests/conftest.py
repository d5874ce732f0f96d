"""Shared fixtures. Integration tests talk to a real nats-server started here."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from workflow.service.embedded import EmbeddedNats

if TYPE_CHECKING:
    from workflow.service.lifecycle import Service

# The properties assert what holds, never how fast: on a machine shared with other work,
# hypothesis's timing checks (a slow example, a slow data generation) fail tests whose
# properties hold. No deadline and no too-slow health check; every other check stays.
settings.register_profile("headgate", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("headgate")


#: The suite's own settings, read from the environment of whoever runs it; every other
#: `HEADGATE_*` variable is the user's configuration of Headgate, which no test may pick up.
SUITE_SETTINGS = frozenset({"HEADGATE_TEST_POSTGRES_URL", "HEADGATE_AGENT_CLIS"})


@pytest.fixture(autouse=True)
def _isolated_from_the_user_s_headgate(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Each test starts without the configuration of whoever runs the suite: no `HEADGATE_*`
    variable but the suite's own, and a data dir of its own, empty, in place of the `.headgate/`
    of the current directory (where a `headgate serve` may have left its URL, credentials and
    service key, which the clients under test would otherwise find and trust). Subprocesses
    inherit the same environment. A test of the default data dir changes directory and unsets
    HEADGATE_DATA_DIR itself."""
    for name in list(os.environ):
        if name.startswith("HEADGATE_") and name not in SUITE_SETTINGS:
            monkeypatch.delenv(name)
    monkeypatch.setenv("HEADGATE_DATA_DIR", str(tmp_path_factory.mktemp("headgate-data")))


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    """One nats-server with JetStream for the test session, on free loopback ports."""
    server = EmbeddedNats(store_dir=tmp_path_factory.mktemp("nats"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def nats_url(nats_server: EmbeddedNats) -> str:
    return nats_server.url


@pytest.fixture
async def embedded(tmp_path: Path) -> AsyncIterator[Service]:
    """The service with its embedded server and credentials (`<tmp>/.headgate`), as
    `headgate serve` runs it, on a subject prefix of its own."""
    from tests.service.helpers import unique_prefix
    from workflow.service.lifecycle import Service
    from workflow.service.settings import Settings

    service = Service(Settings(data_dir=tmp_path / ".headgate", prefix=unique_prefix()))
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


@pytest.fixture
def fresh_nats(tmp_path: Path) -> Iterator[EmbeddedNats]:
    """A nats-server of this test's own, for tests that kill or restart it."""
    server = EmbeddedNats(store_dir=tmp_path / "nats")
    server.start()
    yield server
    server.stop()


PG_URL = os.environ.get(
    "HEADGATE_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)


def _pg_dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def _pg_admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(_pg_dsn(PG_URL), timeout=3)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def postgres_available() -> str | None:
    """None when PostgreSQL answers, else why not."""
    try:
        asyncio.run(_pg_admin("SELECT 1"))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _fresh_postgres(postgres_available: str | None) -> Iterator[str]:
    if postgres_available is not None:
        message = (
            f"PostgreSQL is not reachable at {PG_URL} ({postgres_available}); set "
            "HEADGATE_TEST_POSTGRES_URL to run the PostgreSQL variants"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    name = f"hg_test_{uuid.uuid4().hex[:12]}"
    asyncio.run(_pg_admin(f'CREATE DATABASE "{name}"'))
    base, _, _ = PG_URL.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_available: str | None
) -> Iterator[str]:
    """Each store/flow test runs on SQLite and on a fresh PostgreSQL database of its own."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'headgate.db'}"
        return
    yield from _fresh_postgres(postgres_available)


@pytest.fixture
def postgres_url(postgres_available: str | None) -> Iterator[str]:
    """A fresh PostgreSQL database of this test's own."""
    yield from _fresh_postgres(postgres_available)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that needs PostgreSQL (`-m "not postgres"` skips them all)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        fixtures = getattr(item, "fixturenames", ())
        on_postgres = callspec is not None and callspec.params.get("database_url") == "postgres"
        if on_postgres or "postgres_url" in fixtures:
            item.add_marker(pytest.mark.postgres)
