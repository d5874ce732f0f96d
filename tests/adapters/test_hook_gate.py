"""`headgate hook <client>` as the clients run it — a process per event — against the service.

Every hook run here is a real `headgate hook` process fed a client's captured hook input, talking
to a real nats-server and the service.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.service.helpers import Harness, decision, running_service, send_decision, wait_until
from workflow.adapters import claude_code
from workflow.adapters.calls import proposal_base, proposal_id

DATA = Path(__file__).parent.parent / "data" / "hooks"
AGENT = "coder-1"


def captured(name: str, **over: Any) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((DATA / f"{name}-hook-stdin.json").read_text())
    event.update(over)
    return event


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)


async def hook(
    client: str, event: dict[str, Any], h: Harness | None, *, url: str, wait: float = 5.0,
    extra: tuple[str, ...] = (),
) -> Run:  # fmt: skip
    prefix = h.subjects.prefix if h is not None else "headgate"
    argv = [
        sys.executable, "-m", "workflow", "hook", client, "--nats-url", url, "--prefix", prefix,
        "--agent", AGENT, "--wait", str(wait), "--connect-timeout", "2",
        "--data-dir", "/nonexistent-headgate-data", *extra,
    ]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate(json.dumps(event).encode())
    assert proc.returncode is not None
    return Run(proc.returncode, out.decode(), err.decode())


def pid_of(event: dict[str, Any], generation: int = 0) -> str:
    call = claude_code.parse(event)
    return proposal_id(proposal_base(call, AGENT, "default"), generation)


def post(event: dict[str, Any], **response: Any) -> dict[str, Any]:
    return {**event, "hook_event_name": "PostToolUse", "tool_response": response}


READ = captured("claude", tool_name="Read", tool_input={"file_path": "/tmp/cli-lab/work/a.txt"})
WRITE = captured("claude")  # Bash: echo hello > /tmp/cli-lab/out.txt (a local write)


async def approve(h: Harness, pid: str, verdict: str = "approve", reason: str = "") -> None:
    (item,) = await h.observer.wait_for("inbox", pid)
    await send_decision(
        h.nc, h.subjects,
        decision(h.key, item["request_id"], item["proposal_digest"], verdict, reason=reason),
    )  # fmt: skip


async def test_a_read_is_allowed_at_once_and_reported_as_executed_afterwards(
    nats_url: str, tmp_path: Path
) -> None:
    async with running_service(nats_url, tmp_path) as h:
        run = await hook("claude-code", READ, h, url=nats_url)
        assert run.code == 0, run.stderr
        answer = run.json["hookSpecificOutput"]
        assert answer["permissionDecision"] == "allow"
        pid = pid_of(READ)
        history = await h.service_history(pid)
        assert history["status"] == "released"
        assert history["proposal"]["context"] | {"shell": None} == {"shell": None,
            "cwd": READ["cwd"], "client": "claude-code", "session_id": READ["session_id"],
        }  # fmt: skip

        after = await hook("claude-code", post(READ, type="text"), h, url=nats_url)
        assert (after.code, after.stdout) == (0, "")
        (executed,) = await h.observer.wait_for("executed", pid)
        assert executed["success"] is True
        # The same read again is a new proposal: the first one ran.
        await wait_until(h.audit_kinds, lambda k: "executed" in k)
        again = await hook("claude-code", READ, h, url=nats_url)
        assert again.code == 0
        assert (await h.service_history(pid_of(READ, 1)))["status"] == "released"


async def test_a_held_write_runs_once_approved_and_its_retry_binds_to_the_same_request(
    nats_url: str, tmp_path: Path
) -> None:
    async with running_service(nats_url, tmp_path) as h:
        pid = pid_of(WRITE)
        first = await hook("claude-code", WRITE, h, url=nats_url, wait=0.5)
        assert first.code == 2
        request_id = (await h.service_history(pid))["request_id"]
        assert request_id in first.stderr
        assert "Ask again later" in first.stderr
        # The model retries the very same call (a new tool_use_id): same request, no second.
        retry = await hook(
            "claude-code", {**WRITE, "tool_use_id": "toolu_2"}, h, url=nats_url, wait=0.5
        )
        assert retry.code == 2
        assert request_id in retry.stderr
        assert len(h.observer.of("inbox")) == 1

        approving = asyncio.create_task(approve(h, pid))
        approved = await hook("claude-code", WRITE, h, url=nats_url, wait=10)
        await approving
        assert approved.code == 0, approved.stderr
        assert approved.json["hookSpecificOutput"]["permissionDecision"] == "allow"
        assert request_id in approved.json["hookSpecificOutput"]["permissionDecisionReason"]

        await hook("claude-code", post(WRITE, stdout=""), h, url=nats_url)
        (executed,) = await h.observer.wait_for("executed", pid)
        assert executed["release_id"] == h.observer.of("released", pid)[0]["release_id"]
        await wait_until(h.audit_kinds, lambda k: "executed" in k)
        # It ran: doing it again is a new request, held like the first.
        again = await hook("claude-code", WRITE, h, url=nats_url, wait=0.3)
        assert again.code == 2
        second = (await h.service_history(pid_of(WRITE, 1)))["request_id"]
        assert second != request_id
        assert second in again.stderr
        assert len(h.observer.of("released", pid)) == 1


async def test_a_rejection_reaches_the_model_and_a_retry_gets_the_same_answer(
    nats_url: str, tmp_path: Path
) -> None:
    async with running_service(nats_url, tmp_path) as h:
        rejecting = asyncio.create_task(approve(h, pid_of(WRITE), "reject", "not in /tmp"))
        run = await hook("claude-code", WRITE, h, url=nats_url, wait=10)
        await rejecting
        assert run.code == 2
        assert "rejected" in run.stderr
        assert "not in /tmp" in run.stderr
        retry = await hook("claude-code", WRITE, h, url=nats_url, wait=0.5)
        assert retry.code == 2
        assert "not in /tmp" in retry.stderr
        assert len(h.observer.of("inbox")) == 1


async def test_a_destructive_command_is_denied_by_policy_for_every_client(
    nats_url: str, tmp_path: Path
) -> None:
    events = {
        "claude-code": captured("claude", tool_input={"command": "rm -rf /home/agent/proj"}),
        "codex": captured("codex", tool_input={"command": "rm -rf /home/agent/proj"}),
        "gemini": captured("gemini", tool_input={"command": "rm -rf /home/agent/proj"}),
        "cursor": {"hook_event_name": "beforeShellExecution", "conversation_id": "c1",
                   "command": "rm -rf /home/agent/proj", "cwd": "/home/agent/proj"},
    }  # fmt: skip
    async with running_service(nats_url, tmp_path) as h:
        for client, event in events.items():
            run = await hook(client, event, h, url=nats_url)
            assert run.code == 2, (client, run)
            assert "policy denies" in run.stderr, (client, run.stderr)
        assert len(h.observer.of("blocked")) == 4


async def test_codex_and_gemini_are_allowed_in_their_own_shape(
    nats_url: str, tmp_path: Path
) -> None:
    async with running_service(nats_url, tmp_path) as h:
        codex = await hook("codex", captured("codex", tool_input={"command": "ls"}), h,
                           url=nats_url)  # fmt: skip
        gemini = await hook("gemini", captured("gemini", tool_input={"command": "ls"}), h,
                            url=nats_url)  # fmt: skip
        assert (codex.code, codex.stdout) == (0, "")
        assert gemini.code == 0
        assert gemini.json["decision"] == "allow"


async def test_no_service_behind_nats_blocks_within_the_time_budget(
    nats_url: str, tmp_path: Path
) -> None:
    run = await hook("claude-code", READ, None, url=nats_url, wait=0.5,
                     extra=("--prefix", "nobody-serves-this"))  # fmt: skip
    assert run.code == 2
    assert "could not check this call" in run.stderr


async def test_unreachable_nats_and_malformed_input_block_the_call(tmp_path: Path) -> None:
    down = await hook("gemini", captured("gemini"), None, url="nats://127.0.0.1:1")
    assert down.code == 2
    assert "cannot reach NATS" in down.stderr
    garbage = await hook("codex", {"hook_event_name": "PreToolUse"}, None, url="nats://x:1")
    assert garbage.code == 2
    assert "tool_name" in garbage.stderr


async def test_a_session_event_needs_no_gateway() -> None:
    run = await hook("claude-code", {"hook_event_name": "Stop", "session_id": "s"}, None,
                     url="nats://127.0.0.1:1")  # fmt: skip
    assert (run.code, run.stdout, run.stderr) == (0, "", "")


async def test_with_on_pending_defer_a_held_call_is_deferred_and_the_next_ask_binds_to_it(
    nats_url: str, tmp_path: Path
) -> None:
    defer = ("--on-pending", "defer")
    async with running_service(nats_url, tmp_path) as h:
        pid = pid_of(WRITE)
        first = await hook("claude-code", WRITE, h, url=nats_url, wait=0.5, extra=defer)
        assert first.code == 0, first.stderr
        out = first.json["hookSpecificOutput"]
        assert out["permissionDecision"] == "defer"
        request_id = (await h.service_history(pid))["request_id"]
        assert request_id in out["permissionDecisionReason"]
        # `claude -p --resume` asks again for the same call: the same request, now approved.
        await approve(h, pid)
        resumed = await hook("claude-code", WRITE, h, url=nats_url, wait=5, extra=defer)
        assert resumed.json["hookSpecificOutput"]["permissionDecision"] == "allow"
        assert len(h.observer.of("inbox")) == 1
        # A failure is still a block, never a deferral.
        down = await hook("claude-code", WRITE, None, url="nats://127.0.0.1:1", extra=defer)
        assert (down.code, down.stdout) == (2, "")
