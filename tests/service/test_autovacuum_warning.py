"""Retention on PostgreSQL needs autovacuum: without it the space of pruned rows is never
reused. `serve` (with `[retention]`) and `headgate db vacuum` say so when autovacuum is off on
the server or disabled on Headgate's tables, and what to do. Against the local server as it is
configured (the server's setting is read, never changed) and a table setting of the test's own
database."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from tests.conftest import _pg_dsn
from tests.service.helpers import running_service
from workflow.store.maintenance import PRUNED_TABLES, autovacuum
from workflow.store.repo import Store


async def _sql(url: str, *statements: str) -> list[str]:
    conn = await asyncpg.connect(_pg_dsn(url), timeout=5)
    try:
        return [str(await conn.fetchval(sql)) for sql in statements]
    finally:
        await conn.close()


async def _server_autovacuum(url: str) -> bool:
    autovac, counts = await _sql(url, "SHOW autovacuum", "SHOW track_counts")
    return autovac == "on" and counts == "on"


async def test_autovacuum_off_on_the_server_or_a_table_is_found(postgres_url: str) -> None:
    store = await Store.open(postgres_url)
    try:
        server_on = await _server_autovacuum(postgres_url)
        found = await autovacuum(store.db)
        assert found is not None
        assert found.disabled_tables == ()
        assert (found.server_on and found.track_counts) == server_on
        problem = found.problem()
        assert (problem is None) == server_on
        if not server_on:  # this machine's server: autovacuum = off
            assert problem is not None
            assert "autovacuum is off on the server" in problem
            assert "ALTER SYSTEM SET autovacuum = on" in problem

        await _sql(
            postgres_url,
            "ALTER TABLE audit SET (autovacuum_enabled = false)",
            "ALTER TABLE outbox SET (autovacuum_enabled = off, fillfactor = 90)",
            "ALTER TABLE grants SET (autovacuum_enabled = false)",  # never pruned: not named
            "ALTER TABLE proposals SET (autovacuum_enabled = true)",
        )
        found = await autovacuum(store.db)
        assert found is not None
        assert found.disabled_tables == ("audit", "outbox")
        problem = found.problem()
        assert problem is not None
        assert "autovacuum is disabled on audit, outbox" in problem
        assert "ALTER TABLE audit RESET (autovacuum_enabled)" in problem
        assert "never reused" in problem
        assert all(f"--table={t}" in problem for t in PRUNED_TABLES)
    finally:
        await store.close()


async def test_sqlite_needs_no_autovacuum(tmp_path: Path) -> None:
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'headgate.db'}")
    try:
        assert await autovacuum(store.db) is None
    finally:
        await store.close()


def _policy(tmp_path: Path, retention: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(f"[retention]\n{retention}\n")
    return path


async def _disable_on_audit(postgres_url: str) -> None:
    store = await Store.open(postgres_url)  # creates the tables
    await store.close()
    await _sql(postgres_url, "ALTER TABLE audit SET (autovacuum_enabled = false)")


async def test_serve_warns_at_start_with_retention(
    nats_url: str, tmp_path: Path, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    await _disable_on_audit(postgres_url)
    server_on = await _server_autovacuum(postgres_url)
    caplog.set_level(logging.WARNING, logger="headgate")
    policy = _policy(tmp_path, 'proposals = "7d"')
    async with running_service(nats_url, tmp_path, database_url=postgres_url, policy_path=policy):
        pass
    warned = [r.getMessage() for r in caplog.records if "retention on PostgreSQL" in r.getMessage()]
    assert len(warned) == 1
    assert "autovacuum is disabled on audit" in warned[0]
    assert ("autovacuum is off on the server" in warned[0]) == (not server_on)


async def test_serve_says_nothing_without_retention(
    nats_url: str, tmp_path: Path, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    await _disable_on_audit(postgres_url)
    caplog.set_level(logging.WARNING, logger="headgate")
    policy = _policy(tmp_path, "proposals = 0\naudit = 0")
    async with running_service(nats_url, tmp_path, database_url=postgres_url, policy_path=policy):
        pass
    assert not [r for r in caplog.records if "autovacuum" in r.getMessage()]


@pytest.mark.slow
async def test_db_vacuum_reports_autovacuum_on_postgresql(
    tmp_path: Path, postgres_url: str
) -> None:
    await _disable_on_audit(postgres_url)
    server_on = await _server_autovacuum(postgres_url)
    cli = [sys.executable, "-m", "workflow", "db", "vacuum", "--database-url", postgres_url]
    where = ["--data-dir", str(tmp_path)]
    done = subprocess.run([*cli, "--dry-run", "--json", *where], capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["autovacuum"] == {
        "ok": False, "server": server_on, "track_counts": True, "disabled_tables": ["audit"],
    }  # fmt: skip
    assert "ALTER TABLE audit RESET (autovacuum_enabled)" in report["message"]
    shown = subprocess.run([*cli, *where], capture_output=True, text=True, check=False)
    assert shown.returncode == 0, shown.stderr
    assert "warning" in shown.stdout
    assert "never reused" in shown.stdout
