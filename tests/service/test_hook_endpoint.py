"""`serve --hook-listen`: Claude Code's HTTP hooks answered by the service, through a real HTTP
client, nats-server and service.

Every request naming a client with HTTP hooks gets a 200 whose body the client honours: Claude
Code takes any other status as "no hook ran" and lets the call go ahead.
"""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest

from tests.service.helpers import Harness, decision, running_service, send_decision
from workflow import datadir
from workflow.adapters import claude_code, http_hook
from workflow.adapters.calls import proposal_base, proposal_id
from workflow.service.hook_endpoint import HookEndpoint

DATA = Path(__file__).parent.parent / "data" / "hooks"
AGENT = "http-agent"


def captured(**over: Any) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((DATA / "claude-hook-stdin.json").read_text())
    event.update(over)
    return event


READ = captured(tool_name="Read", tool_input={"file_path": "/tmp/cli-lab/work/a.txt"})
WRITE = captured()  # Bash: echo hello > /tmp/cli-lab/out.txt (a local write, held)
DESTROY = captured(tool_input={"command": "rm -rf /home/agent/proj"})


def pid_of(event: dict[str, Any], generation: int = 0) -> str:
    return proposal_id(proposal_base(claude_code.parse(event), AGENT, "default"), generation)


async def post(
    h: Harness, event: dict[str, Any] | bytes, *, token: str | None = None,
    client: str = "claude-code", **query: str,
) -> httpx.Response:  # fmt: skip
    assert h.service.hooks is not None
    token = datadir.hook_token(h.data_dir)[0] if token is None else token
    body = event if isinstance(event, bytes) else json.dumps(event).encode()
    params = {"agent": AGENT, "wait": "5", **query}
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(
            f"{h.service.hooks.url}/hooks/{client}", content=body, params=params,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )  # fmt: skip


def decision_of(response: httpx.Response) -> str | None:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    if body.get("decision") == "block":
        return "block"
    out = body.get("hookSpecificOutput") or {}
    return out.get("permissionDecision")


def reason_of(response: httpx.Response) -> str:
    body = response.json()
    return str(body.get("reason") or body["hookSpecificOutput"]["permissionDecisionReason"])


@pytest.fixture
async def h(nats_url: str, tmp_path: Path) -> Any:
    async with running_service(nats_url, tmp_path / "data", hook_listen="127.0.0.1:0") as h:
        yield h


async def test_a_read_is_allowed_and_its_after_event_reports_it_executed(h: Harness) -> None:
    allowed = await post(h, READ)
    assert decision_of(allowed) == "allow"
    after = await post(h, {**READ, "hook_event_name": "PostToolUse", "tool_response": {}})
    assert (after.status_code, after.json()) == (200, {})
    (executed,) = await h.observer.wait_for("executed", pid_of(READ))
    assert executed["success"] is True


async def test_a_denied_call_is_blocked_with_the_reason_in_both_shapes_claude_code_reads(
    h: Harness,
) -> None:
    denied = await post(h, DESTROY)
    assert decision_of(denied) == "block"
    body = denied.json()
    assert "policy denies" in body["reason"]
    assert body["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert body["hookSpecificOutput"]["permissionDecisionReason"] == body["reason"]


async def test_a_held_call_is_denied_or_deferred_naming_the_request_then_released(
    h: Harness,
) -> None:
    pending = await post(h, WRITE, wait="0.3")
    assert decision_of(pending) == "block"
    request_id = (await h.service_history(pid_of(WRITE)))["request_id"]
    assert request_id in reason_of(pending)
    deferred = await post(h, WRITE, wait="0.3", on_pending="defer")
    assert decision_of(deferred) == "defer"
    assert request_id in reason_of(deferred)
    (item,) = await h.observer.wait_for("inbox", pid_of(WRITE))
    await send_decision(
        h.nc, h.subjects, decision(h.key, item["request_id"], item["proposal_digest"], "approve")
    )
    released = await post(h, WRITE)
    assert decision_of(released) == "allow"
    assert request_id in reason_of(released)
    assert len(h.observer.of("inbox")) == 1


async def test_a_wrong_or_missing_token_is_a_deny_that_proposes_nothing(h: Harness) -> None:
    for token in ("wrong", datadir.hook_token(h.data_dir)[0][:-1]):
        refused = await post(h, READ, token=token)
        assert decision_of(refused) == "block"
        assert "bearer token" in refused.json()["reason"]
    async with httpx.AsyncClient() as http:
        assert h.service.hooks is not None
        bare = await http.post(f"{h.service.hooks.url}/hooks/claude-code?agent=a", json=READ)
    assert decision_of(bare) == "block"
    await post(h, READ)  # the same call authorised: the first proposal there is
    assert (await h.service_history(pid_of(READ)))["status"] == "released"
    assert len(h.observer.of("released")) == 1


@pytest.mark.parametrize(
    ("body", "query", "says"),
    [
        (b"{not json", {}, "not JSON"),
        (b"[1, 2]", {}, "not a JSON object"),
        (json.dumps({"hook_event_name": "PreToolUse"}).encode(), {}, "tool_name"),
        (json.dumps(READ).encode(), {"agent": "a.b>"}, "no valid agent"),
        (json.dumps(READ).encode(), {"wait": "soon"}, "not a number"),
        (json.dumps(READ).encode(), {"on_pending": "later"}, "not deny or defer"),
    ],
)
async def test_a_malformed_request_is_answered_with_a_deny_not_an_error_status(
    h: Harness, body: bytes, query: dict[str, str], says: str
) -> None:
    answered = await post(h, body, **query)
    assert decision_of(answered) == "block"
    assert says in answered.json()["reason"]
    assert "could not check this call" in answered.json()["reason"]


async def test_only_clients_with_http_hooks_have_a_route(h: Harness) -> None:
    assert (await post(h, READ, client="codex")).status_code == 404
    async with httpx.AsyncClient() as http:
        assert h.service.hooks is not None
        got = await http.get(f"{h.service.hooks.url}/hooks/claude-code")
    assert got.status_code == 405


async def test_the_token_is_private_and_the_url_is_recorded_while_serving(
    nats_url: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    async with running_service(nats_url, data, hook_listen="127.0.0.1:0") as h:
        assert h.service.hooks is not None
        token, path = datadir.hook_token(data)
        assert len(token) == 64
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert (data / datadir.HOOK_URL_FILE).read_text().strip() == h.service.hooks.url
    assert not (data / datadir.HOOK_URL_FILE).exists()
    # The same token next time: the agents' settings keep working across restarts.
    assert datadir.hook_token(data)[0] == token


async def test_a_call_waiting_when_serve_stops_is_answered_blocked_not_cut_off(
    h: Harness,
) -> None:
    assert h.service.hooks is not None
    waiting = asyncio.create_task(post(h, WRITE, wait="60"))
    await h.observer.wait_for("inbox", pid_of(WRITE))
    started = asyncio.get_running_loop().time()
    await h.service.hooks.stop()
    answered = await asyncio.wait_for(waiting, 10)
    assert asyncio.get_running_loop().time() - started < 10
    assert decision_of(answered) == "block"
    assert "shutting down" in answered.json()["reason"]


async def test_an_agent_with_a_call_waiting_is_not_closed_to_make_room_for_another(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_hook, "MAX_AGENTS", 1)
    waiting = asyncio.create_task(post(h, WRITE, wait="30"))
    (item,) = await h.observer.wait_for("inbox", pid_of(WRITE))
    other = await post(h, READ, agent="other-agent")  # over the limit, while the first waits
    assert decision_of(other) == "allow"
    await send_decision(
        h.nc, h.subjects, decision(h.key, item["request_id"], item["proposal_digest"], "approve")
    )
    assert decision_of(await asyncio.wait_for(waiting, 20)) == "allow"
    # Idle now: the next request closes it.
    await post(h, {**READ, "session_id": "s2"}, agent="other-agent")
    assert h.service.hooks is not None
    assert h.service.hooks.gateway is not None
    assert list(h.service.hooks.gateway._agents) == [("other-agent", "default")]


async def test_a_hook_arriving_while_serve_starts_waits_for_its_answer(
    nats_url: str, tmp_path: Path
) -> None:
    endpoint = HookEndpoint("127.0.0.1:0", tmp_path)
    host, port = endpoint.url.removeprefix("http://").rsplit(":", 1)
    token, _ = datadir.hook_token(tmp_path)
    # Connected before the server runs: queued, not refused (a refusal is a go-ahead).
    reader, writer = await asyncio.open_connection(host, int(port))
    body = b"{not json"
    writer.write(
        f"POST /hooks/claude-code?agent=a HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    nc = await nats.connect(nats_url)
    try:
        await endpoint.start(nc, prefix="nobody", service_key="N" + "A" * 55)
        response = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
        await endpoint.stop()
    head, _, payload = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert json.loads(payload)["decision"] == "block"


async def test_every_answer_is_counted_by_client_and_kind(h: Harness) -> None:
    await post(h, READ)
    await post(h, DESTROY)
    await post(h, WRITE, wait="0", on_pending="defer")
    await post(h, {**READ, "hook_event_name": "PostToolUse", "tool_response": {}})
    await post(h, READ, token="wrong")
    assert h.service.ctx is not None
    registry = h.service.ctx.metrics.registry

    def answered(kind: str) -> float | None:
        labels = {"client": "claude-code", "answer": kind}
        return registry.get_sample_value("headgate_http_hook_answers_total", labels)

    assert [answered(k) for k in ("allow", "deny", "defer", "none", "refused")] == [1] * 5
