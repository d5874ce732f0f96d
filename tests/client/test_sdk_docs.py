"""The SDK documentation's examples run as written (found by their `# example: NAME` line).

They are looked up in README.md first and in docs/sdk.md otherwise, so the test keeps working
when the SDK section is merged into the README.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.client.support import KEYS, guarded_service
from tests.service.helpers import (
    Harness,
    decision,
    propose,
    running_service,
    send_decision,
    wait_until,
)
from workflow.client import Headgate
from workflow.client.ledger import Entry, Ledger
from workflow.messages import Cancel, Executed, Proposal
from workflow.service.embedded import EmbeddedNats

ROOT = Path(__file__).resolve().parents[2]


def example(name: str) -> str:
    marker = f"# example: {name}\n"
    for doc in (ROOT / "README.md", ROOT / "docs" / "sdk.md"):
        for block in re.findall(r"```(?:python|sh)\n(.*?)```", doc.read_text(), flags=re.S):
            if block.startswith(marker):
                return str(block)
    raise AssertionError(f"no example {name!r} in README.md or docs/sdk.md")


def load(name: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": f"example_{name}"}
    exec(compile(example(name), f"<example {name}>", "exec"), namespace)
    return namespace


async def approve_next(h: Harness, verdict: str = "approve", pid: str | None = None) -> str:
    """Decide the first held request (or the one of proposal `pid`) with the local key."""
    (item, *_) = await h.observer.wait_for("inbox", pid)
    await send_decision(
        h.nc, h.subjects,
        decision(h.key, item["request_id"], item["proposal_digest"], verdict, reason="docs"),
    )  # fmt: skip
    return str(item["proposal_id"])


async def test_agent_example_runs_a_read_and_a_gated_write(
    fresh_nats: EmbeddedNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    main = load("agent")["main"]
    async with running_service(fresh_nats.url, tmp_path / "svc", prefix="headgate") as h:
        running = asyncio.create_task(main(fresh_nats.url))
        await approve_next(h)
        await asyncio.wait_for(running, 15)
    assert (tmp_path / "notes.txt").read_text() == "hello"
    out = capsys.readouterr().out.splitlines()
    assert out == ["read allow", "Released", "wrote 5 characters to notes.txt"]


async def test_unattended_example_runs_approved_reports_and_reports_the_rejected_one(
    fresh_nats: EmbeddedNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    ns = load("unattended")
    async with running_service(fresh_nats.url, tmp_path / "svc", prefix="headgate") as h:
        ids = await ns["queue_reports"](fresh_nats.url)
        await approve_next(h, pid=ids[0])
        await approve_next(h, pid=ids[1])
        await approve_next(h, "reject", pid=ids[2])
        await h.observer.wait_for("blocked", ids[2])
        stop = asyncio.Event()
        worker = asyncio.create_task(ns["work"](fresh_nats.url, stop))
        ledger = Ledger(tmp_path / "agent-state")

        async def entries() -> list[Entry]:
            return ledger.entries()

        try:
            await wait_until(
                entries, lambda es: all(e.state in ("finished", "blocked") for e in es)
            )
        finally:
            ledger.close()
        stop.set()
        await asyncio.wait_for(worker, 10)
        await h.observer.wait_for("executed", count=2)
    assert (tmp_path / "report-0.txt").read_text() == "report 0"
    assert (tmp_path / "report-1.txt").read_text() == "report 1"
    assert not (tmp_path / "report-2.txt").exists()
    out = capsys.readouterr().out
    assert f"write_file {ids[2]} rejected" in out
    assert "executed=2" in out


async def test_framework_recipe_keeps_the_tool_schema_and_gates_the_call(
    fresh_nats: EmbeddedNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    ns = load("framework")
    async with (
        running_service(fresh_nats.url, tmp_path / "svc", prefix="headgate") as h,
        Headgate.connect(fresh_nats.url, agent="builder-7") as hg,
    ):
        (tool,) = ns["gate_tools"](hg, ns["TOOLS"])
        # What a framework reads to build the tool's schema is unchanged.
        assert tool.__name__ == "run_shell"
        assert tool.__doc__ == "Run a shell command and return its output."
        assert inspect.signature(tool) == inspect.signature(ns["run_shell"])
        # A stand-in framework: calls the tool with the model's JSON arguments.
        args = json.loads('{"command": "touch gated.txt && echo gated"}')
        call = asyncio.create_task(tool(**args))
        (held,) = await h.observer.wait_for("inbox")
        assert not (tmp_path / "gated.txt").exists()
        await approve_next(h)
        assert await asyncio.wait_for(call, 15) == "gated\n"
        assert held["proposal"]["arguments"] == args


def nats_cli_publishes() -> list[tuple[str, dict[str, str], str]]:
    """(subject, headers, payload) of each `nats pub` line of the CLI example."""
    found = []
    for line in example("nats-cli").splitlines():
        if not line.startswith("nats pub "):
            continue
        words = shlex.split(line)[2:]
        headers = {}
        while words[0] == "--header":
            key, _, value = words[1].partition(":")
            headers[key] = value
            words = words[2:]
        subject, payload = words
        found.append((subject, headers, payload))
    return found


async def test_nats_cli_example_proposes_and_reports_with_only_the_wire_contract(
    fresh_nats: EmbeddedNats, tmp_path: Path
) -> None:
    (prop, executed, cancel) = nats_cli_publishes()
    assert "nats sub 'headgate.*.demo'" in example("nats-cli")
    Proposal.model_validate_json(prop[2])
    Cancel.model_validate_json(cancel[2])
    async with running_service(fresh_nats.url, tmp_path / "svc", prefix="headgate") as h:
        js = h.nc.jetstream()
        await js.publish(prop[0], prop[2].encode(), headers=prop[1])  # as `nats pub` does
        (held,) = await h.observer.wait_for("held", "demo-1")
        assert held["_subject"] == "headgate.held.demo"
        await approve_next(h)
        (released,) = await h.observer.wait_for("released", "demo-1")
        release_id = released["release_id"]
        subject, headers, payload = (
            executed[0],
            {k: v.replace("RELEASE_ID", release_id) for k, v in executed[1].items()},
            executed[2].replace("RELEASE_ID", release_id),
        )
        Executed.model_validate_json(payload)
        await js.publish(subject, payload.encode(), headers=headers)
        kinds = await wait_until(h.audit_kinds, lambda k: "executed" in k)
        assert "executed.unreleased" not in kinds


async def test_approver_example_decides_what_arrives_in_its_inbox(
    fresh_nats: EmbeddedNats, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main = load("approver")["main"]
    seed = tmp_path / "alice.seed"
    KEYS["alice"].write(seed)
    async with guarded_service(fresh_nats.url, tmp_path / "svc", prefix="headgate") as h:
        pid = await propose(h.nc, h.subjects, agent="builder-7", tool="write_file",
                            workspace="acme", arguments={"path": "notes.txt"})  # fmt: skip
        reviewing = asyncio.create_task(main(fresh_nats.url, seed))
        printed: list[str] = []

        async def output() -> str:  # the example prints the verdict once it has it
            printed.append(capsys.readouterr().out)
            return "".join(printed)

        try:
            (released,) = await h.observer.wait_for("released", pid, timeout=15)
            out = await wait_until(output, lambda text: "accepted" in text)
        finally:
            reviewing.cancel()
    assert released["approvals"][0]["approver"] == "alice"
    assert out.startswith("builder-7 wants write_file `notes.txt` in acme")
