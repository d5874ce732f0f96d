"""The pruner in the service: `[retention]` from the policy, the service's clock deciding what
is old, pruned audit records archived as JSON Lines that `headgate audit verify --archive`
checks against the chain's anchor, and `headgate audit export`."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.service.helpers import FakeClock, decision, propose, running_service, send_decision
from workflow.datadir import local_approver
from workflow.effects import AuditEntry
from workflow.service.retention import prune_once
from workflow.store.archive import read_jsonl
from workflow.store.chain import verify_archive
from workflow.store.repo import Store
from workflow.store.retention import Retention

DAY = 86400


def _policy(tmp_path: Path) -> Path:
    key, _, _ = local_approver(tmp_path)
    path = tmp_path / "policy.toml"
    path.write_text(
        f"""
default_ttl = "90d"

[retention]
proposals = "7d"
audit = "30d"
audit_archive = "audit-archive"

[approvers.tester]
key = "{key.public_key}"
roles = ["approver"]
"""
    )
    return path


async def test_the_pruner_follows_the_policy_and_the_service_clock(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    clock = FakeClock()
    async with running_service(
        nats_url, tmp_path, database_url=database_url, policy_path=_policy(tmp_path), clock=clock
    ) as h:
        ctx = h.service.ctx
        assert ctx is not None
        read = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        await h.observer.wait_for("released", read)
        held = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "b"})
        (item,) = await h.observer.wait_for("inbox", held)
        approved = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "c"})
        (other,) = await h.observer.wait_for("inbox", approved)
        await send_decision(
            h.nc, h.subjects, decision(h.key, other["request_id"], other["proposal_digest"])
        )
        await h.observer.wait_for("released", approved)

        clock.advance(6 * DAY)
        assert (await prune_once(ctx, tmp_path)).proposals == 0  # not old enough yet
        clock.advance(2 * DAY)
        pruned = await prune_once(ctx, tmp_path)
        assert pruned.proposals == 2
        assert pruned.audit == 0  # the audit is kept 30 days
        assert (await h.service_history(read)).get("error")
        assert (await h.service_history(approved)).get("error")
        # Still held: it stays, and it can still be approved.
        assert (await h.service_history(held))["status"] == "pending"
        late = decision(h.key, item["request_id"], item["proposal_digest"], issued_at=clock())
        await send_decision(h.nc, h.subjects, late)
        await h.observer.wait_for("released", held)

        clock.advance(31 * DAY)
        pruned = await prune_once(ctx, tmp_path)
        assert pruned.audit > 0
        check = await ctx.store.audit.verify()
        assert check.ok, check.problem
        anchor = await ctx.store.audit.anchor()
        archives = sorted((tmp_path / "audit-archive").glob("audit-*.jsonl"))
        assert archives
        assert verify_archive([r for a in archives for r in read_jsonl(a)], anchor).ok


@pytest.mark.slow
async def test_audit_export_and_verify_archive_commands(tmp_path: Path) -> None:
    """`audit export` writes what `audit verify --archive` checks; a forged line fails."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'headgate.db'}"
    store = await Store.open(url)
    old = datetime(2026, 1, 1, tzinfo=UTC)
    await store.audit.append([AuditEntry("old", "t", {"i": i}) for i in range(4)], old)
    await store.audit.append([AuditEntry("new", "t", {})], old + timedelta(days=40))
    exported = tmp_path / "export.jsonl"
    cli = [sys.executable, "-m", "workflow", "audit"]
    where = ["--data-dir", str(tmp_path)]
    done = subprocess.run(
        [*cli, "export", "--out", str(exported), "--through", "4", *where],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [r.seq for r in read_jsonl(exported)] == [1, 2, 3, 4]

    async def archive(rows: object) -> str:
        return "export.jsonl"  # already written by `audit export`

    retention: Retention = store.retention
    assert await retention.prune_audit(old + timedelta(days=1), archive, old) == 4
    await store.close()
    verify = [*cli, "verify", "--archive", str(exported), *where]
    good = subprocess.run(verify, capture_output=True, text=True, check=False)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "from the anchor after record 4" in good.stdout
    assert "archive intact" in good.stdout
    lines = exported.read_text().splitlines()
    forged = {**json.loads(lines[0]), "data": '{"i":7}'}
    exported.write_text("\n".join([json.dumps(forged), *lines[1:]]) + "\n")
    bad = subprocess.run(verify, capture_output=True, text=True, check=False)
    assert bad.returncode == 1
    assert "archive broken at record 1" in bad.stdout
