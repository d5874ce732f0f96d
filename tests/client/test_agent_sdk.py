"""The agent SDK over a real nats-server: tickets, gated tools, cancellation, late attachment."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.client.support import KEYS, guarded_service
from tests.service.helpers import decision, running_service, send_decision, wait_until
from workflow.client import Approver, Headgate, NoLedger, ResultTimeout, ToolBlocked
from workflow.errors import NotFoundError
from workflow.messages import Blocked, Proposal, Released


async def test_gated_tool_runs_once_with_the_released_arguments_after_an_approval(
    nats_url: str, tmp_path: Path
) -> None:
    async with (
        guarded_service(nats_url, tmp_path) as h,
        Headgate.connect(
            nats_url, agent="builder-7", workspace="acme", prefix=h.subjects.prefix
        ) as hg,
        Approver.connect(
            nats_url, name="alice", key=KEYS["alice"], prefix=h.subjects.prefix
        ) as approver,
    ):
        calls: list[dict[str, Any]] = []

        @hg.gated("write_file")
        async def write_file(path: str, content: str = "") -> str:
            """Write a file."""
            calls.append({"path": path, "content": content})
            return f"wrote {len(content)} bytes to {path}"

        async def approve_first() -> str:
            async for item in approver.inbox(workspaces=["acme"]):
                assert item.tool == "write_file"
                assert item.arguments == {"path": "notes.txt", "content": "hello"}
                result = await item.approve(reason="fine")
                assert result.accepted, result.message
                return item.proposal_id
            raise AssertionError("the inbox ended")

        approving = asyncio.create_task(approve_first())
        value = await asyncio.wait_for(write_file(path="notes.txt", content="hello"), 15)
        pid = await approving

        assert value == "wrote 5 bytes to notes.txt"
        assert calls == [{"path": "notes.txt", "content": "hello"}]
        assert write_file.__name__ == "write_file"
        assert write_file.__doc__ == "Write a file."
        (executed,) = await h.observer.wait_for("executed", pid)
        assert executed["success"] is True
        assert executed["summary"] == "wrote 5 bytes to notes.txt"
        kinds = await wait_until(h.audit_kinds, lambda k: "executed" in k)
        assert "executed.unreleased" not in kinds


async def test_a_read_is_released_at_once_and_the_ticket_carries_the_classification(
    nats_url: str, tmp_path: Path
) -> None:
    async with (
        running_service(nats_url, tmp_path) as h,
        Headgate.connect(nats_url, agent="reader", prefix=h.subjects.prefix) as hg,
    ):
        ticket = await hg.propose("read_file", {"path": "README.md"})
        assert ticket.classification.risk_class == "read"
        assert ticket.verdict.decision == "allow"
        assert not ticket.held
        outcome = await ticket.result(timeout=5)
        assert isinstance(outcome, Released)
        assert outcome.arguments == {"path": "README.md"}


async def test_a_held_ticket_names_its_request_and_expiry(nats_url: str, tmp_path: Path) -> None:
    async with (
        running_service(nats_url, tmp_path) as h,
        Headgate.connect(nats_url, agent="writer", prefix=h.subjects.prefix) as hg,
    ):
        ticket = await hg.propose("write_file", {"path": "a.txt"}, intent="save notes")
        assert ticket.held
        assert ticket.classification.risk_class == "write_local"
        assert ticket.request_id is not None
        assert ticket.expires_at is not None
        with pytest.raises(ResultTimeout) as raised:
            await ticket.result(timeout=0.2)
        assert raised.value.status == "pending"


async def test_a_denied_gated_call_raises_tool_blocked_and_never_runs(
    nats_url: str, tmp_path: Path
) -> None:
    async with (
        running_service(nats_url, tmp_path) as h,
        Headgate.connect(nats_url, agent="cleaner", prefix=h.subjects.prefix) as hg,
    ):
        ran: list[str] = []

        @hg.gated("delete_file")
        async def delete_file(path: str) -> None:
            ran.append(path)

        with pytest.raises(ToolBlocked) as raised:
            await delete_file(path="important.txt")
        assert raised.value.outcome == "denied"
        assert "destructive" in raised.value.reason
        assert ran == []


async def test_a_rejection_reaches_the_ticket_with_the_approvers_reason(
    nats_url: str, tmp_path: Path
) -> None:
    async with (
        running_service(nats_url, tmp_path) as h,
        Headgate.connect(nats_url, agent="writer", prefix=h.subjects.prefix) as hg,
    ):
        ticket = await hg.propose("write_file", {"path": "a.txt"})
        assert ticket.request_id is not None
        await send_decision(
            h.nc, h.subjects,
            decision(h.key, ticket.request_id, ticket_digest(ticket), "reject",
                     reason="not that file"),
        )  # fmt: skip
        outcome = await ticket.result(timeout=10)
        assert isinstance(outcome, Blocked)
        assert outcome.outcome == "rejected"
        assert "not that file" in outcome.reason


async def test_cancel_blocks_a_pending_ticket_as_cancelled(nats_url: str, tmp_path: Path) -> None:
    async with (
        running_service(nats_url, tmp_path) as h,
        Headgate.connect(nats_url, agent="writer", prefix=h.subjects.prefix) as hg,
    ):
        ticket = await hg.propose("write_file", {"path": "a.txt"})
        await ticket.cancel("plans changed")
        outcome = await ticket.result(timeout=10)
        assert isinstance(outcome, Blocked)
        assert outcome.outcome == "cancelled"


async def test_a_ticket_for_an_earlier_proposal_finds_an_outcome_that_already_happened(
    nats_url: str, tmp_path: Path
) -> None:
    async with running_service(nats_url, tmp_path) as h:
        async with Headgate.connect(nats_url, agent="writer", prefix=h.subjects.prefix) as first:
            ticket = await first.propose("write_file", {"path": "a.txt"})
            assert ticket.request_id is not None
        # Approved while no client of this agent listens.
        await send_decision(
            h.nc, h.subjects, decision(h.key, ticket.request_id, ticket_digest(ticket))
        )
        await h.observer.wait_for("released", ticket.proposal_id)
        async with Headgate.connect(nats_url, agent="writer", prefix=h.subjects.prefix) as later:
            again = await later.ticket(ticket.proposal_id)
            assert again.status == "released"
            outcome = await again.result(timeout=5)
        assert isinstance(outcome, Released)
        assert outcome.proposal_id == ticket.proposal_id


def ticket_digest(ticket: Any) -> str:
    return str(ticket.proposal.digest())


async def test_unattended_mode_without_a_state_dir_says_what_is_missing(
    nats_url: str, tmp_path: Path
) -> None:
    async with (
        running_service(nats_url, tmp_path) as h,
        Headgate.connect(nats_url, agent="writer", prefix=h.subjects.prefix) as hg,
    ):
        with pytest.raises(NoLedger, match="state_dir"):
            await hg.enqueue("write_file", {"path": "a.txt"})
        with pytest.raises(NotFoundError):
            await hg.ticket("no-such-proposal")


async def test_gated_refuses_a_function_whose_arguments_cannot_be_passed_by_keyword(
    nats_url: str, tmp_path: Path
) -> None:
    async with (
        running_service(nats_url, tmp_path) as h,
        Headgate.connect(nats_url, agent="writer", prefix=h.subjects.prefix) as hg,
    ):

        async def tool(path: str, /) -> None:
            return None

        with pytest.raises(TypeError, match="passable by keyword"):
            hg.gated("write_file")(tool)


async def test_a_proposal_the_service_cannot_read_raises_its_reason_at_once(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client older than the service's rules publishes what the service refuses: the agent
    is answered (`invalid`) and `propose` raises with the reason, instead of waiting for a
    classification that will never come."""
    async with (
        running_service(nats_url, tmp_path) as h,
        Headgate.connect(nats_url, agent="old-client", prefix=h.subjects.prefix) as hg,
    ):
        build = hg._proposal

        def unchecked(*args: Any, **kwargs: Any) -> Proposal:
            made = build(*args, **kwargs)
            return Proposal.model_construct(**{**dict(made), "id": "rq_not_a_proposal_id"})

        monkeypatch.setattr(hg, "_proposal", unchecked)
        with pytest.raises(ToolBlocked) as raised:
            await hg.propose("read_file", {"path": "a"}, timeout=30)
        assert raised.value.outcome == "invalid"
        assert "may not start with 'rq_'" in raised.value.reason
        assert len(hg.router.watches) == 0
