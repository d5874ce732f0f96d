"""The approver SDK over a real nats-server: a durable inbox, signed decisions, their verdicts."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.client.support import KEYS, guarded_service
from tests.service.helpers import Harness, decision, propose, send_decision
from workflow.client import Approver, PendingRequest
from workflow.signing import ApproverKey


async def first_items(
    approver: Approver, count: int, workspaces: list[str] | None = None
) -> list[PendingRequest]:
    items: list[PendingRequest] = []

    async def collect() -> None:
        async for item in approver.inbox(workspaces):
            items.append(item)
            if len(items) == count:
                return

    await asyncio.wait_for(collect(), 10)
    return items


async def held(h: Harness, path: str, workspace: str = "acme") -> str:
    pid = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": path},
                        workspace=workspace, intent=f"save {path}")  # fmt: skip
    await h.observer.wait_for("inbox", pid)
    return pid


async def test_an_approver_started_after_requests_were_published_still_sees_them(
    nats_url: str, tmp_path: Path
) -> None:
    async with guarded_service(nats_url, tmp_path) as h:
        first, gone, last = [await held(h, f"{name}.txt") for name in ("first", "gone", "last")]
        # Rejected by bob before alice ever connected: no longer pending, so never offered.
        (item,) = h.observer.of("inbox", gone)
        await send_decision(
            h.nc, h.subjects,
            decision(KEYS["bob"], item["request_id"], item["proposal_digest"], "reject",
                     approver="bob", reason="no"),
        )  # fmt: skip
        await h.observer.wait_for("blocked", gone)

        async with Approver.connect(
            nats_url, name="alice", key=KEYS["alice"], prefix=h.subjects.prefix
        ) as alice:
            items = await first_items(alice, 2, workspaces=["acme"])
            assert [i.proposal_id for i in items] == [first, last]
            one = items[0]
            assert one.tool == "write_file"
            assert one.arguments == {"path": "first.txt"}
            assert one.risk_class == "write_local"
            assert one.reasons
            assert one.requirement.approvals_needed == 1
            assert one.expires_at > one.created_at
            assert one.proposal.intent == "save first.txt"
            assert one.approvals == []
            for it in items:
                result = await it.approve(reason="ok")
                assert result.accepted is True, result.message
                assert result.status == "released"
        for pid in (first, last):
            (released,) = await h.observer.wait_for("released", pid)
            assert released["approvals"][0]["approver"] == "alice"


async def test_an_undecided_item_is_offered_again_in_the_next_session(
    nats_url: str, tmp_path: Path
) -> None:
    async with guarded_service(nats_url, tmp_path) as h:
        pid = await held(h, "later.txt")
        prefix = h.subjects.prefix
        async with Approver.connect(nats_url, name="alice", key=KEYS["alice"], prefix=prefix) as a:
            (seen,) = await first_items(a, 1)
            assert seen.proposal_id == pid
        async with Approver.connect(nats_url, name="alice", key=KEYS["alice"], prefix=prefix) as a:
            (again,) = await first_items(a, 1)
            assert again.proposal_id == pid
            result = await again.reject(reason="not today")
            assert result.accepted is True
        (blocked,) = await h.observer.wait_for("blocked", pid)
        assert blocked["outcome"] == "rejected"


async def test_items_of_other_workspaces_are_not_offered(nats_url: str, tmp_path: Path) -> None:
    async with guarded_service(nats_url, tmp_path) as h:
        await held(h, "elsewhere.txt", workspace="other")
        mine = await held(h, "mine.txt", workspace="acme")
        async with Approver.connect(
            nats_url, name="alice", key=KEYS["alice"], prefix=h.subjects.prefix
        ) as alice:
            (item,) = await first_items(alice, 1, workspaces=["acme"])
            assert item.proposal_id == mine


async def test_a_decision_signed_by_an_unregistered_key_is_reported_refused(
    nats_url: str, tmp_path: Path
) -> None:
    async with guarded_service(nats_url, tmp_path) as h:
        pid = await held(h, "x.txt")
        async with Approver.connect(
            nats_url, name="mallory", key=ApproverKey.generate(), prefix=h.subjects.prefix
        ) as mallory:
            (item,) = await first_items(mallory, 1)
            result = await item.approve(reason="trust me")
        assert result.accepted is False
        assert "not a registered approver" in result.message
        assert result.status == "pending"
        assert h.observer.of("released", pid) == []
