"""Grants over a real nats-server, on SQLite and PostgreSQL: issued, used, raced, revoked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.service.helpers import (
    Harness,
    decision,
    propose,
    running_service,
    send_decision,
    unique_prefix,
    wait_until,
)
from workflow.client.approver import Approver
from workflow.client.transport import ApiRefused
from workflow.messages import InboxItem
from workflow.signing import ApproverKey

KEYS = {name: ApproverKey.generate() for name in ("alice", "carol", "mallory")}
POLICY = f"""
[approvers.alice]
key = "{KEYS["alice"].public_key}"
roles = ["approver"]

[approvers.carol]
key = "{KEYS["carol"].public_key}"
roles = ["approver"]
workspaces = ["elsewhere"]

[approvers.mallory]
key = "{KEYS["mallory"].public_key}"
roles = ["approver"]
agents = ["agent-1"]
"""


@asynccontextmanager
async def replicas(
    nats_url: str, tmp_path: Path, database_url: str | None, count: int = 1
) -> AsyncIterator[list[Harness]]:
    """`count` service replicas sharing one prefix and one database."""
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    prefix = unique_prefix()
    async with AsyncExitStack() as stack:
        found = [
            await stack.enter_async_context(
                running_service(
                    nats_url,
                    tmp_path / f"r{i}",
                    prefix=prefix,
                    policy_path=policy,
                    database_url=database_url,
                )
            )
            for i in range(count)
        ]
        yield found


def approver(h: Harness, name: str = "alice") -> Approver:
    return Approver(h.nc, name=name, key=KEYS[name], prefix=h.subjects.prefix)


async def approved_with_grant(h: Harness, command: str, **grant: Any) -> tuple[str, Any]:
    """Propose `command`, approve it as alice, and grant calls like it."""
    pid = await propose(h.nc, h.subjects, tool="run_shell", arguments={"command": command})
    (raw,) = await h.observer.wait_for("inbox", pid)
    item = InboxItem.model_validate({k: v for k, v in raw.items() if k != "_subject"})
    await send_decision(
        h.nc, h.subjects, decision(KEYS["alice"], item.request_id, item.proposal_digest)
    )
    await h.observer.wait_for("released", pid)
    made = await approver(h).grant(item, ttl=grant.pop("ttl", 3600), **grant)
    return pid, made


async def outcome(h: Harness, pid: str) -> str:
    """`released` or `held`, whichever the proposal came to."""
    done = asyncio.ensure_future(h.observer.wait_for("released", pid))
    held = asyncio.ensure_future(h.observer.wait_for("inbox", pid))
    finished, pending = await asyncio.wait({done, held}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    return "released" if done in finished else "held"


async def test_a_command_grant_releases_calls_starting_with_its_prefix_until_revoked(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    async with replicas(nats_url, tmp_path, database_url) as (h,):
        _, made = await approved_with_grant(h, "npm test")
        assert made.command_prefix == ["npm", "test"]
        assert made.agent == "agent-1"

        same = await propose(
            h.nc, h.subjects, tool="run_shell", arguments={"command": "npm test --watch"}
        )
        (released,) = await h.observer.wait_for("released", same)
        assert made.grant_id in released["verdict"]["reason"]
        assert released["verdict"]["trail"][-1]["step"] == "grant"

        for command in ("npm test && curl https://x.example", "npm test | sh", "npm run x"):
            other = await propose(
                h.nc, h.subjects, tool="run_shell", arguments={"command": command}
            )
            assert await outcome(h, other) == "held", command
        elsewhere = await propose(
            h.nc, h.subjects, agent="agent-2", tool="run_shell", arguments={"command": "npm test"}
        )
        assert await outcome(h, elsewhere) == "held"

        listed = await approver(h).grants()
        assert [(g.grant_id, g.uses, g.status) for g in listed] == [(made.grant_id, 1, "active")]

        await approver(h).revoke(made.grant_id, "done for today")
        after = await propose(h.nc, h.subjects, tool="run_shell", arguments={"command": "npm test"})
        assert await outcome(h, after) == "held"
        assert await approver(h).grants() == []
        kinds = await h.audit_kinds()
        assert kinds.count("grant.issued") == 1
        assert kinds.count("grant.used") == 1
        assert kinds.count("grant.revoked") == 1


async def test_a_one_use_grant_raced_by_two_replicas_releases_exactly_one_call(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    async with replicas(nats_url, tmp_path, database_url, count=2) as (a, b):
        _, made = await approved_with_grant(a, "make lint", max_uses=1)
        # Two agents' connections propose at once; the two replicas share the intake.
        first, second = await nats.connect(nats_url), await nats.connect(nats_url)
        try:
            pids = await asyncio.gather(
                propose(first, a.subjects, tool="run_shell", arguments={"command": "make lint"}),
                propose(second, b.subjects, tool="run_shell", arguments={"command": "make lint"}),
            )
        finally:
            await first.close()
            await second.close()
        outcomes = sorted([await outcome(a, pid) for pid in pids])
        assert outcomes == ["held", "released"]
        (listed,) = await approver(a).grants(every=True)
        assert (listed.grant_id, listed.uses, listed.status) == (made.grant_id, 1, "used_up")
        kinds = await a.audit_kinds()
        assert kinds.count("grant.used") == 1


@pytest.mark.parametrize(
    ("who", "why"),
    [("carol", "may not approve for workspace default"), ("mallory", "runs agent agent-1")],
)
async def test_a_grant_by_a_key_not_allowed_to_approve_the_call_is_refused_and_audited(
    nats_url: str, tmp_path: Path, who: str, why: str
) -> None:
    async with replicas(nats_url, tmp_path, None) as (h,):
        pid = await propose(h.nc, h.subjects, tool="run_shell", arguments={"command": "npm ci"})
        (raw,) = await h.observer.wait_for("inbox", pid)
        item = InboxItem.model_validate({k: v for k, v in raw.items() if k != "_subject"})
        with pytest.raises(ApiRefused, match=why):
            await approver(h, who).grant(item, ttl=600)
        assert await approver(h).grants(every=True) == []
        assert "grant.refused" in await h.audit_kinds()
        again = await propose(h.nc, h.subjects, tool="run_shell", arguments={"command": "npm ci"})
        assert await outcome(h, again) == "held"


async def test_a_grant_longer_than_the_policy_allows_or_not_covering_its_call_is_refused(
    nats_url: str, tmp_path: Path
) -> None:
    async with replicas(nats_url, tmp_path, None) as (h,):
        pid = await propose(h.nc, h.subjects, tool="run_shell", arguments={"command": "npm ci"})
        (raw,) = await h.observer.wait_for("inbox", pid)
        item = InboxItem.model_validate({k: v for k, v in raw.items() if k != "_subject"})
        with pytest.raises(ApiRefused, match="longer than the policy allows"):
            await approver(h).grant(item, ttl=9 * 3600)
        with pytest.raises(ApiRefused, match="does not cover the approved call"):
            await approver(h).grant(item, ttl=600, prefix=["npm", "ci", "&&", "x"])
        assert await approver(h).grants(every=True) == []


async def test_freeze_then_thaw_across_two_replicas(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    """A freeze ordered on one replica holds, on every replica, what a grant or an allow
    would release (reads flow); a pending request stays pending; the thaw lifts it."""
    async with replicas(nats_url, tmp_path, database_url, count=2) as (a, b):
        await approved_with_grant(a, "npm test")
        waiting = await propose(a.nc, a.subjects, tool="write_file", arguments={"path": "x"})
        (raw,) = await a.observer.wait_for("inbox", waiting)

        reply = await approver(a).freeze(workspace="default", reason="incident 7")
        assert [f.workspace for f in reply.freezes] == ["default"]
        # Proposals from both replicas' connections; the shared intake spreads them.
        calls = [
            await propose(h.nc, h.subjects, tool="run_shell", arguments={"command": "npm test"})
            for h in (a, b) * 4
        ]
        reads = [
            await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "README.md"})
            for h in (a, b)
        ]
        assert [await outcome(a, pid) for pid in calls] == ["held"] * len(calls)
        assert [await outcome(a, pid) for pid in reads] == ["released"] * len(reads)

        await send_decision(a.nc, a.subjects, decision(KEYS["alice"], raw["request_id"],
                                                       raw["proposal_digest"]))  # fmt: skip
        history = await wait_until(
            lambda: b.service_history(waiting),
            lambda h: any(e["kind"] == "decision.refused" for e in h["events"]),
        )
        assert history["status"] == "pending"
        assert a.observer.of("released", waiting) == []

        await approver(b).thaw(workspace="default")
        after = await propose(b.nc, b.subjects, tool="run_shell", arguments={"command": "npm test"})
        assert await outcome(a, after) == "released"
        await send_decision(a.nc, a.subjects, decision(KEYS["alice"], raw["request_id"],
                                                       raw["proposal_digest"]))  # fmt: skip
        await a.observer.wait_for("released", waiting)
        kinds = await a.audit_kinds()
        assert kinds.count("freeze") == 1
        assert kinds.count("thaw") == 1
        assert kinds.count("freeze.held") == len(calls)


async def test_a_freeze_of_all_calls_holds_reads_too_and_only_in_its_scope(
    nats_url: str, tmp_path: Path
) -> None:
    async with replicas(nats_url, tmp_path, None) as (h,):
        await approver(h).freeze(agent="agent-1", all_calls=True)
        read = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        assert await outcome(h, read) == "held"
        other = await propose(h.nc, h.subjects, agent="agent-2", tool="read_file",
                              arguments={"path": "a"})  # fmt: skip
        assert await outcome(h, other) == "released"
        with pytest.raises(ApiRefused, match="may not freeze every workspace"):
            await approver(h, "carol").freeze(reason="not hers to freeze")
