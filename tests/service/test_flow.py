"""The whole path over a real nats-server: propose → classify → route → approve → release."""

from __future__ import annotations

from pathlib import Path

from tests.service.helpers import decision, propose, running_service, send_decision


async def test_read_is_released_at_once(nats_url: str, tmp_path: Path) -> None:
    async with running_service(nats_url, tmp_path) as h:
        pid = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "README.md"})
        (released,) = await h.observer.wait_for("released", pid, timeout=2)
        assert released["tool"] == "read_file"
        assert released["classification"]["risk_class"] == "read"
        assert released["verdict"]["decision"] == "allow"


async def test_write_file_is_held_then_released_once_after_approval(
    nats_url: str, tmp_path: Path
) -> None:
    async with running_service(nats_url, tmp_path) as h:
        pid = await propose(h.nc, h.subjects, tool="write_file", arguments={"path": "a.txt"})
        (item,) = await h.observer.wait_for("inbox", pid)
        assert h.observer.of("released", pid) == []
        await send_decision(
            h.nc, h.subjects, decision(h.key, item["request_id"], item["proposal_digest"])
        )
        (released,) = await h.observer.wait_for("released", pid)
        assert len(released["approvals"]) == 1
        assert released["request_id"] == item["request_id"]
