"""A malformed proposal still answers its agent: when its id can be read, the agent that sent
it (the subject's agent) gets a `blocked` event, outcome `invalid`, with the validation error
as the reason — and the input is dead-lettered as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.service.helpers import propose, running_service


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b'{"id": "x1", "agent": "agent-1", "arguments": {}}', "tool: Field required"),
        (
            b'{"id": "x2", "agent": "agent-1", "tool": "read_file", "colour": 1}',
            "colour: Extra inputs are not permitted",
        ),
        (
            b'{"id": "x3", "agent": "someone-else", "tool": "read_file"}',
            "an agent may only propose as itself",
        ),
        (b'{"id": "x4", "tool": "write_file", "workspace": "acme"}', "agent: Field required"),
        (
            b'{"id": "x5", "agent": "agent-1", "tool": "read_file", "arguments": [1]}',
            "arguments: Input should be an object",
        ),
    ],
)
async def test_a_malformed_proposal_with_a_readable_id_is_answered_as_invalid(
    nats_url: str, tmp_path: Path, payload: bytes, error: str
) -> None:
    pid = json.loads(payload)["id"]
    async with running_service(nats_url, tmp_path) as h:
        await h.nc.jetstream().publish(h.subjects.proposals("agent-1"), payload)
        (blocked,) = await h.observer.wait_for("blocked", pid)
        assert blocked["_subject"] == h.subjects.blocked("agent-1")
        assert blocked["outcome"] == "invalid"
        assert blocked["agent"] == "agent-1"
        assert error in blocked["reason"]
        assert blocked["reason"][0].isupper()
        (dead,) = await h.observer.wait_for("dead")
        assert error in dead["error"]
        assert h.observer.of("released", pid) == []
        stored = await h.stream_events(h.subjects.blocked("agent-1"), pid)
        assert [e["outcome"] for e in stored] == ["invalid"]


@pytest.mark.parametrize(
    "payload",
    [
        b"{not json",
        b"[1, 2]",
        b'{"agent": "agent-1", "tool": "read_file"}',
        b'{"id": "has spaces", "agent": "agent-1"}',
        b'{"id": 7, "agent": "agent-1", "tool": "read_file"}',
        b"\xff\xfe binary",
    ],
)
async def test_a_proposal_whose_id_cannot_be_read_is_only_dead_lettered(
    nats_url: str, tmp_path: Path, payload: bytes
) -> None:
    async with running_service(nats_url, tmp_path) as h:
        await h.nc.jetstream().publish(h.subjects.proposals("agent-1"), payload)
        await h.observer.wait_for("dead")
        marker = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        await h.observer.wait_for("released", marker)
        assert h.observer.of("blocked") == []


async def test_an_invalid_answer_does_not_take_the_outcome_of_a_later_proposal_with_that_id(
    nats_url: str, tmp_path: Path
) -> None:
    """The answer is deduplicated per input message, not per proposal id: the id's real
    outcome, decided later, is still stored and delivered."""
    async with running_service(nats_url, tmp_path) as h:
        js = h.nc.jetstream()
        bad = b'{"id": "same-id", "agent": "agent-1", "tool": "delete_file", "arguments": 3}'
        await js.publish(h.subjects.proposals("agent-1"), bad)
        await h.observer.wait_for("blocked", "same-id")
        await propose(h.nc, h.subjects, tool="delete_file", arguments={"path": "a"}, pid="same-id")
        events = await h.observer.wait_for("blocked", "same-id", count=2)
        assert [e["outcome"] for e in events] == ["invalid", "denied"]
        stored = await h.stream_events(h.subjects.blocked("agent-1"), "same-id")
        assert [e["outcome"] for e in stored] == ["invalid", "denied"]


async def test_the_answer_to_a_huge_malformed_proposal_stays_small(
    nats_url: str, tmp_path: Path
) -> None:
    """A field name as long as the payload is quoted by the validation error: the answer cuts
    it, so it can always be published, and the intake goes on."""
    huge = {"id": "huge-1", "agent": "agent-1", "tool": "read_file", "k" * 900_000: 1}
    async with running_service(nats_url, tmp_path) as h:
        await h.nc.jetstream().publish(h.subjects.proposals("agent-1"), json.dumps(huge).encode())
        (blocked,) = await h.observer.wait_for("blocked", "huge-1")
        assert blocked["outcome"] == "invalid"
        assert blocked["reason"].startswith("Invalid proposal: kkk")
        assert blocked["reason"].endswith("…")
        assert len(blocked["reason"]) <= 2000
        (dead,) = await h.observer.wait_for("dead")
        assert dead["deliveries"] == 1
        pid = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        await h.observer.wait_for("released", pid)
