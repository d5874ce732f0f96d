"""Security cases over a real nats-server: each invalid decision releases nothing and is audited."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.service.helpers import (
    FakeClock,
    Harness,
    decision,
    propose,
    running_service,
    send_decision,
    wait_until,
)
from workflow.messages import ApprovalDecision
from workflow.signing import ApproverKey

KEYS = {name: ApproverKey.generate() for name in ("alice", "bob", "dave", "carol", "mallory")}


def policy_text(quorum: int = 1) -> str:
    return f"""
[approval]
quorum = {quorum}

[classes.write_local]
decision = "require_approval"
approval = {{ roles = ["approver"] }}

[approvers.alice]
key = "{KEYS["alice"].public_key}"
roles = ["approver"]

[approvers.bob]
key = "{KEYS["bob"].public_key}"
roles = ["approver"]

[approvers.dave]
key = "{KEYS["dave"].public_key}"
roles = ["auditor"]

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
async def guarded(
    nats_url: str, tmp_path: Path, quorum: int = 1, **kw: Any
) -> AsyncIterator[Harness]:
    path = tmp_path / "policy.toml"
    path.write_text(policy_text(quorum))
    async with running_service(nats_url, tmp_path, policy_path=path, **kw) as h:
        yield h


async def held_write(h: Harness) -> tuple[str, dict[str, Any]]:
    pid = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "a.txt"})
    (item,) = await h.observer.wait_for("inbox", pid)
    return pid, item


async def refused(h: Harness, nonce: str) -> str:
    """Wait for the refusal of the decision with this nonce; return its audit message."""

    async def rows() -> list[Any]:
        assert h.service.ctx is not None
        return [r for r in await h.service.ctx.store.audit.rows() if nonce in r.data]

    found = await wait_until(rows, lambda rs: any(r.kind == "decision.refused" for r in rs))
    return str(json.loads(found[-1].data)["message"])


async def assert_not_released(h: Harness, pid: str) -> None:
    assert h.observer.of("released", pid) == []
    assert (await h.service_history(pid))["status"] == "pending"


def forged(item: dict[str, Any]) -> ApprovalDecision:
    good = decision(KEYS["alice"], item["request_id"], item["proposal_digest"])
    return good.model_copy(update={"reason": "edited after signing"})


@pytest.mark.parametrize(
    ("make", "expect"),
    [
        (forged, "signature does not verify"),
        (
            lambda i: decision(ApproverKey.generate(), i["request_id"], i["proposal_digest"]),
            "not a registered approver",
        ),
        (
            lambda i: decision(KEYS["dave"], i["request_id"], i["proposal_digest"]),
            "none of the required roles",
        ),
        (
            lambda i: decision(KEYS["carol"], i["request_id"], i["proposal_digest"]),
            "may not approve for workspace",
        ),
        (
            lambda i: decision(KEYS["mallory"], i["request_id"], i["proposal_digest"]),
            "cannot decide on its own proposal",
        ),
        (
            lambda i: decision(KEYS["alice"], i["request_id"], "0" * 64),
            "different version of the proposal",
        ),
        (
            lambda i: decision(
                KEYS["alice"],
                i["request_id"],
                i["proposal_digest"],
                issued_at=datetime.now(UTC) - timedelta(hours=1),
            ),
            "outside the allowed clock skew",
        ),
    ],
    ids=[
        "forged",
        "unknown-key",
        "no-role",
        "other-workspace",
        "self-approval",
        "edited-proposal",
        "stale",
    ],
)
async def test_an_invalid_decision_releases_nothing_and_is_audited(
    nats_url: str, tmp_path: Path, make: Any, expect: str
) -> None:
    async with guarded(nats_url, tmp_path) as h:
        pid, item = await held_write(h)
        bad = make(item)
        await send_decision(h.nc, h.subjects, bad)
        assert expect in await refused(h, bad.nonce)
        await assert_not_released(h, pid)


async def test_a_replayed_decision_does_not_count_twice(nats_url: str, tmp_path: Path) -> None:
    async with guarded(nats_url, tmp_path, quorum=2) as h:
        pid, item = await held_write(h)
        first = decision(KEYS["alice"], item["request_id"], item["proposal_digest"])
        await send_decision(h.nc, h.subjects, first)
        await wait_until(lambda: h.service_history(pid), lambda hi: len(hi["approvals"]) == 1)
        # The very same signed bytes again, under another message id: no second approval.
        await h.nc.jetstream().publish(
            h.subjects.decisions(item["request_id"]),
            first.model_dump_json().encode(),
            headers={"Nats-Msg-Id": "replay-1"},
        )
        # The same nonce with a fresh signature over other content: refused as a replay.
        again = decision(
            KEYS["alice"],
            item["request_id"],
            item["proposal_digest"],
            nonce=first.nonce,
            reason="second try",
        )
        await send_decision(h.nc, h.subjects, again.model_copy())
        await h.nc.jetstream().publish(
            h.subjects.decisions(item["request_id"]),
            again.model_dump_json().encode(),
            headers={"Nats-Msg-Id": "replay-2"},
        )
        assert "already used" in await refused(h, first.nonce)
        await assert_not_released(h, pid)
        assert len((await h.service_history(pid))["approvals"]) == 1


async def test_the_same_approver_twice_does_not_make_a_quorum_of_two(
    nats_url: str, tmp_path: Path
) -> None:
    async with guarded(nats_url, tmp_path, quorum=2) as h:
        pid, item = await held_write(h)
        await send_decision(
            h.nc, h.subjects, decision(KEYS["alice"], item["request_id"], item["proposal_digest"])
        )
        second = decision(KEYS["alice"], item["request_id"], item["proposal_digest"])
        await send_decision(h.nc, h.subjects, second)
        assert "already approved" in await refused(h, second.nonce)
        await assert_not_released(h, pid)
        third = decision(KEYS["bob"], item["request_id"], item["proposal_digest"])
        await send_decision(h.nc, h.subjects, third)
        (released,) = await h.observer.wait_for("released", pid)
        assert sorted(a["approver"] for a in released["approvals"]) == ["alice", "bob"]


async def test_a_decision_after_expiry_releases_nothing(nats_url: str, tmp_path: Path) -> None:
    # A long sweep interval: the decision, not the sweeper, meets the expired request first.
    clock = FakeClock()
    async with guarded(nats_url, tmp_path, sweep_interval=60, clock=clock) as h:
        path = tmp_path / "policy.toml"
        path.write_text('default_ttl = "1s"\n' + policy_text())
        assert await h.service.reload_policy("test")
        pid, item = await held_write(h)
        clock.advance(2)  # past the 1 s TTL, well within the decisions' 5-minute clock skew
        late = decision(KEYS["alice"], item["request_id"], item["proposal_digest"])
        await send_decision(h.nc, h.subjects, late)
        (blocked,) = await h.observer.wait_for("blocked", pid)
        assert blocked["outcome"] == "expired"
        assert h.observer.of("released", pid) == []


async def test_two_approvals_racing_from_two_connections_release_exactly_once(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    async with guarded(nats_url, tmp_path, quorum=1, database_url=database_url) as h:
        pid, item = await held_write(h)
        a = decision(KEYS["alice"], item["request_id"], item["proposal_digest"])
        b = decision(KEYS["bob"], item["request_id"], item["proposal_digest"])
        nc2 = await nats.connect(h.service.url)
        try:
            await asyncio.gather(
                send_decision(h.nc, h.subjects, a), send_decision(nc2, h.subjects, b)
            )
        finally:
            await nc2.drain()
        await h.observer.wait_for("released", pid)
        await wait_until(
            h.audit_kinds,
            lambda kinds: (
                kinds.count("decision.refused") >= 1 or kinds.count("decision.accepted") >= 2
            ),
        )
        released = await h.stream_events(h.subjects.released("agent-1"), pid)
        assert len(released) == 1
        assert len(released[0]["approvals"]) == 1


async def test_a_held_call_is_blocked_at_release_when_the_new_policy_denies_it(
    nats_url: str, tmp_path: Path
) -> None:
    async with guarded(nats_url, tmp_path) as h:
        pid, item = await held_write(h)
        path = tmp_path / "policy.toml"
        path.write_text(
            policy_text().replace(
                '[classes.write_local]\ndecision = "require_approval"\n'
                'approval = { roles = ["approver"] }',
                '[classes.write_local]\ndecision = "deny"',
            )
        )
        assert await h.service.reload_policy("test")
        await send_decision(
            h.nc, h.subjects, decision(KEYS["alice"], item["request_id"], item["proposal_digest"])
        )
        (blocked,) = await h.observer.wait_for("blocked", pid)
        assert blocked["outcome"] == "denied"
        assert blocked["reason"].startswith("Denied at release: the policy changed")
        assert h.observer.of("released", pid) == []
        assert "policy.reload" in await h.audit_kinds()


async def test_a_raised_requirement_applies_to_a_call_already_held(
    nats_url: str, tmp_path: Path
) -> None:
    async with guarded(nats_url, tmp_path, quorum=1) as h:
        pid, item = await held_write(h)
        (tmp_path / "policy.toml").write_text(policy_text(quorum=2))
        assert await h.service.reload_policy("test")
        await send_decision(
            h.nc, h.subjects, decision(KEYS["alice"], item["request_id"], item["proposal_digest"])
        )
        await wait_until(h.audit_kinds, lambda kinds: "requirement.raised" in kinds)
        await assert_not_released(h, pid)
        await send_decision(
            h.nc, h.subjects, decision(KEYS["bob"], item["request_id"], item["proposal_digest"])
        )
        (released,) = await h.observer.wait_for("released", pid)
        assert sorted(a["approver"] for a in released["approvals"]) == ["alice", "bob"]


async def test_a_raised_requirement_with_a_shorter_ttl_brings_the_expiry_forward(
    nats_url: str, tmp_path: Path
) -> None:
    clock = FakeClock()
    async with guarded(nats_url, tmp_path, quorum=1, clock=clock, sweep_interval=0.2) as h:
        pid, item = await held_write(h)
        held_until = datetime.fromisoformat(item["expires_at"])
        raised = policy_text(quorum=2).replace("quorum = 2", 'quorum = 2\nttl = "2m"')
        (tmp_path / "policy.toml").write_text(raised)
        assert await h.service.reload_policy("test")
        await send_decision(
            h.nc, h.subjects, decision(KEYS["alice"], item["request_id"], item["proposal_digest"])
        )
        await wait_until(h.audit_kinds, lambda kinds: "requirement.raised" in kinds)
        reply = await h.nc.request(h.subjects.api("pending"), b"{}", timeout=5)
        (entry,) = [e for e in json.loads(reply.data)["items"] if e["proposal_id"] == pid]
        created = datetime.fromisoformat(entry["created_at"])
        assert entry["requirement"]["ttl_seconds"] == 120
        assert datetime.fromisoformat(entry["expires_at"]) == created + timedelta(minutes=2)
        assert datetime.fromisoformat(entry["expires_at"]) < held_until
        clock.advance(121)
        (blocked,) = await h.observer.wait_for("blocked", pid)
        assert blocked["outcome"] == "expired"


async def test_the_agent_status_subject_answers_only_about_that_agents_proposals(
    nats_url: str, tmp_path: Path
) -> None:
    async with running_service(nats_url, tmp_path) as h:
        pid = await propose(h.nc, h.subjects, agent="agent-1", tool="read_file")
        await h.observer.wait_for("released", pid)
        ask = json.dumps({"id": pid}).encode()
        own = await h.nc.request(h.subjects.api_status("agent-1"), ask, timeout=5)
        assert json.loads(own.data)["status"] == "released"
        other = await h.nc.request(h.subjects.api_status("agent-2"), ask, timeout=5)
        assert json.loads(other.data) == {
            "error": f"No proposal or request with id {pid!r} for agent agent-2."
        }


async def test_the_agent_offered_subject_answers_only_for_that_agent(
    nats_url: str, tmp_path: Path
) -> None:
    catalog = {"tools": [{"name": "read_file", "inputSchema": {"type": "object"}}]}
    async with running_service(nats_url, tmp_path) as h:
        ask = {"agent": "agent-1", "tools": catalog}
        own = await h.nc.request(h.subjects.api_offered("agent-1"), json.dumps(ask).encode(), 5)
        assert [t["name"] for t in json.loads(own.data)["allowed"]] == ["read_file"]
        other = await h.nc.request(h.subjects.api_offered("agent-2"), json.dumps(ask).encode(), 5)
        assert json.loads(other.data) == {
            "error": "This subject answers only for agent agent-2, not agent-1."
        }


@pytest.mark.parametrize(
    "change",
    [
        '[approvers.alice]\nkey = "{key}"\nroles = ["approver"]\nagents = ["agent-1"]',
        '[approvers.alice]\nkey = "{key}"\nroles = ["approver"]\nworkspaces = ["elsewhere"]',
    ],
    ids=["now-runs-the-agent", "workspace-withdrawn"],
)
async def test_an_approval_that_no_longer_qualifies_does_not_count_at_release(
    nats_url: str, tmp_path: Path, change: str
) -> None:
    """At release the approvals are counted again under the current policy: one whose approver
    now runs the proposing agent, or may no longer approve for its workspace, does not count."""
    async with guarded(nats_url, tmp_path, quorum=2) as h:
        pid, item = await held_write(h)
        await send_decision(
            h.nc, h.subjects, decision(KEYS["alice"], item["request_id"], item["proposal_digest"])
        )
        await wait_until(h.audit_kinds, lambda kinds: "decision.accepted" in kinds)
        alice = f'[approvers.alice]\nkey = "{KEYS["alice"].public_key}"\nroles = ["approver"]'
        text = policy_text(quorum=2)
        assert alice in text
        (tmp_path / "policy.toml").write_text(
            text.replace(alice, change.format(key=KEYS["alice"].public_key))
        )
        assert await h.service.reload_policy("test")
        await send_decision(
            h.nc, h.subjects, decision(KEYS["bob"], item["request_id"], item["proposal_digest"])
        )
        await wait_until(h.audit_kinds, lambda kinds: "requirement.raised" in kinds)
        await assert_not_released(h, pid)
