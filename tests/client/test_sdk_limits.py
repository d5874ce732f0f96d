"""What the SDKs keep per call, and what an approver does after a refusal, over a real server."""

from __future__ import annotations

import asyncio
import gc
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.client.support import KEYS, guarded_service
from tests.service.helpers import Harness, propose
from workflow.client import Approver, Headgate, PendingRequest, Ticket
from workflow.client.results import Watch
from workflow.messages import Released
from workflow.signing import ApproverKey

CALLS = 10_000


def live(kind: type) -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if type(obj) is kind)


@pytest.mark.slow
async def test_ten_thousand_reads_leave_no_watch_behind(nats_url: str, tmp_path: Path) -> None:
    async with (
        guarded_service(nats_url, tmp_path) as h,
        Headgate.connect(nats_url, agent="reader", prefix=h.subjects.prefix) as hg,
    ):
        tickets: list[Ticket] = []
        for start in range(0, CALLS, 250):
            tickets += await asyncio.gather(
                *(hg.propose("read_file", {"path": f"f{n}.txt"}) for n in range(start, start + 250))
            )
        assert len(tickets) == CALLS
        outcomes = [await t.result(timeout=1) for t in tickets]
        assert all(isinstance(o, Released) for o in outcomes)
        # Every read was decided with its first event: nothing is kept for it, although the
        # tickets are still held by the caller.
        assert len(hg.router.watches) == 0
        assert live(Watch) == 0


async def test_a_dropped_ticket_of_a_held_call_takes_its_watch_with_it(
    nats_url: str, tmp_path: Path
) -> None:
    async with (
        guarded_service(nats_url, tmp_path) as h,
        Headgate.connect(nats_url, agent="writer", prefix=h.subjects.prefix) as hg,
    ):
        held = [await hg.propose("write_file", {"path": f"w{n}.txt"}) for n in range(20)]
        assert all(t.held for t in held)
        assert len(hg.router.watches) == 20  # each is awaited by its ticket
        kept = held[0]
        del held
        assert live(Watch) == 1
        assert list(hg.router.watches) == [kept.proposal_id]


async def publish_held(h: Harness, count: int) -> None:
    """`count` held writes in workspace acme, published 500 at a time."""
    js = h.nc.jetstream()
    for start in range(0, count, 500):
        acks = []
        for n in range(start, min(start + 500, count)):
            pid = f"bulk-{n}-{uuid.uuid4().hex[:6]}"
            body = {"id": pid, "agent": "bulk", "workspace": "acme", "tool": "write_file",
                    "arguments": {"path": f"b{n}.txt"}}  # fmt: skip
            acks.append(
                await js.publish_async(
                    h.subjects.proposals("bulk"),
                    json.dumps(body).encode(),
                    headers={"Nats-Msg-Id": pid},
                )
            )
        await asyncio.gather(*acks)


@pytest.mark.slow
async def test_ten_thousand_offered_items_leave_nothing_behind(
    nats_url: str, tmp_path: Path
) -> None:
    async with guarded_service(nats_url, tmp_path) as h:
        await publish_held(h, CALLS)
        async with Approver.connect(
            nats_url, name="alice", key=KEYS["alice"], prefix=h.subjects.prefix
        ) as alice:
            seen: set[str] = set()
            most = 0
            inbox = alice.inbox(workspaces=["acme"], batch=64)
            async for item in inbox:
                most = max(most, len(alice._offered))
                seen.add(item.request_id)
                await item.approve(wait=False)
                if len(seen) == CALLS:
                    break
            await inbox.aclose()
            del item
            assert len(seen) == CALLS
            assert most == 1  # the one in hand
            assert alice._offered == {}
            assert live(PendingRequest) == 0


async def held_request(h: Harness, path: str) -> str:
    pid = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": path},
                        workspace="acme")  # fmt: skip
    (item,) = await h.observer.wait_for("inbox", pid)
    return str(item["request_id"])


async def next_item(it: object) -> PendingRequest:
    return await asyncio.wait_for(it.__anext__(), 10)  # type: ignore[attr-defined]


async def test_an_item_whose_decision_was_refused_is_offered_again(
    nats_url: str, tmp_path: Path
) -> None:
    async with guarded_service(nats_url, tmp_path) as h:
        rid = await held_request(h, "again.txt")
        skew = timedelta(0)
        async with Approver.connect(
            nats_url, name="alice", key=KEYS["alice"], prefix=h.subjects.prefix
        ) as alice:
            alice.clock = lambda: datetime.now(UTC) - skew
            alice.reoffer_delay = 0.05
            inbox = alice.inbox(workspaces=["acme"])
            first = await next_item(inbox)
            assert first.request_id == rid
            skew = timedelta(hours=1)  # a clock an hour behind: the decision is stale
            refused = await first.approve(reason="looks fine")
            assert refused.accepted is False
            assert refused.refusal == "stale"
            assert refused.status == "pending"
            assert "offered again" in refused.message
            again = await next_item(inbox)
            assert again.request_id == rid
            skew = timedelta(0)
            accepted = await again.approve(reason="clock fixed")
            assert accepted.accepted is True, accepted.message
            assert accepted.status == "released"
            await inbox.aclose()


async def test_an_item_this_approver_can_never_decide_is_not_offered_again_and_says_why(
    nats_url: str, tmp_path: Path
) -> None:
    async with guarded_service(nats_url, tmp_path) as h:
        rid = await held_request(h, "never.txt")
        async with Approver.connect(
            nats_url, name="mallory", key=ApproverKey.generate(), prefix=h.subjects.prefix
        ) as mallory:
            inbox = mallory.inbox(workspaces=["acme"])
            item = await next_item(inbox)
            assert item.request_id == rid
            result = await item.approve()
            assert result.accepted is False
            assert result.refusal == "unknown_key"
            assert "Not offered to mallory again: its key is not a registered approver" in (
                result.message
            )
            await inbox.aclose()
            info = await h.nc.jetstream().consumer_info(
                h.subjects.stream("inbox"), mallory.consumer
            )
            assert info.num_ack_pending == 0
            assert info.num_pending == 0
