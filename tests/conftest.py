"""Shared fixtures. Integration tests talk to a real nats-server started here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from workflow.service.embedded import EmbeddedNats


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
def fresh_nats(tmp_path: Path) -> Iterator[EmbeddedNats]:
    """A nats-server of this test's own, for tests that kill or restart it."""
    server = EmbeddedNats(store_dir=tmp_path / "nats")
    server.start()
    yield server
    server.stop()
