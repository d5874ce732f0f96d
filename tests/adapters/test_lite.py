"""The hook's light path (`workflow.adapters.lite`) against the real service and nats-server:
the same messages as the SDK path, only the service's signed word taken, bounded time."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest
from nats.aio.msg import Msg

from tests.adapters.test_hook_gate import AGENT, READ, WRITE, hook, pid_of
from tests.service.helpers import Harness, running_service, unique_prefix
from workflow.adapters import claude_code, gate, lite
from workflow.adapters.calls import Action, Answer, HookCall, Phase
from workflow.adapters.options import GateOptions
from workflow.client.connection import Role, credentials_file
from workflow.messages import Executed, Proposal
from workflow.service.embedded import EmbeddedNats
from workflow.service.embedded_access import accounts_config, prepare_access
from workflow.service.lifecycle import Service
from workflow.service.settings import Settings
from workflow.signing import ServiceKey
from workflow.subjects import Subjects

NO_DATA = Path("/nonexistent-headgate-data")


class Capture:
    """Every message on some subjects, with its headers."""

    def __init__(self) -> None:
        self.msgs: list[Msg] = []

    async def on(self, msg: Msg) -> None:
        self.msgs.append(msg)

    def bodies(self) -> list[tuple[bytes, dict[str, str]]]:
        return [(m.data, dict(m.headers or {})) for m in self.msgs]


def options(h: Harness, url: str, **over: Any) -> GateOptions:
    base = GateOptions(agent=AGENT, prefix=h.subjects.prefix, nats_url=url, data_dir=NO_DATA,
                       wait=5.0, connect_timeout=2.0)  # fmt: skip
    return replace(base, **over)


async def light(call: HookCall, opts: GateOptions, budget: float = 30.0) -> Answer:
    """The light path in a thread: the service runs in this test's event loop."""
    return await asyncio.to_thread(lite.decide, call, opts, budget)


async def api_ready(url: str, subjects: Subjects, **auth: Any) -> None:
    """Wait until the service answers on the agent's status subject (its API subscribed)."""
    nc = await nats.connect(url, **auth)
    try:
        for _ in range(200):
            try:
                await nc.request(subjects.api_status(AGENT), b'{"id": "x"}', timeout=2)
                return
            except nats.errors.NoRespondersError:
                await asyncio.sleep(0.05)
    finally:
        await nc.close()


def mcp_call(session: str) -> HookCall:
    """An MCP call (held: an unknown tool) with arguments of every JSON kind."""
    return HookCall(
        "claude-code", "PreToolUse", Phase.BEFORE, tool="mcp__notes__read_note",
        arguments={"name": "café ☕ \u2028 notes", "depth": [1, 2.5, None, True], "n": 10**20},
        cwd="/w/proj", session_id=session, server="notes.local", intent="read the notes",
    )  # fmt: skip


def read_call(session: str, phase: Phase = Phase.BEFORE) -> HookCall:
    """A read the default policy allows, before and after it ran."""
    return HookCall(
        "claude-code", "PreToolUse" if phase is Phase.BEFORE else "PostToolUse", phase,
        tool="Read", arguments={"file_path": "/w/proj/naïve.txt", "limit": 20}, cwd="/w/proj",
        session_id=session, summary="ok" if phase is Phase.AFTER else "",
    )  # fmt: skip


def without(body: dict[str, Any], *paths: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(body))
    for path in paths:
        *parents, last = path.split(".")
        node = out
        for p in parents:
            node = node[p]
        node.pop(last)
    return out


async def test_the_light_path_proposes_and_reports_exactly_what_the_sdk_does(
    nats_url: str, tmp_path: Path
) -> None:
    async with running_service(nats_url, tmp_path) as h:
        seen = Capture()
        await h.nc.subscribe(h.subjects.proposals(AGENT), cb=seen.on)
        reports = Capture()
        await h.nc.subscribe(h.subjects.executed(AGENT), cb=reports.on)
        await api_ready(nats_url, h.subjects)
        opts = options(h, nats_url, wait=0.3)
        sdk = await gate.decide(mcp_call("sdk-session"), opts)
        ours = await light(mcp_call("lite-session"), opts)
        assert sdk.action == ours.action == Action.DENY  # held: nobody decided in time
        for session, decide in (("sdk-read", gate.decide), ("lite-read", None)):
            for phase in (Phase.BEFORE, Phase.AFTER):
                call = read_call(session, phase)
                answer = await (decide(call, opts) if decide else light(call, opts))
                assert answer.action == (Action.ALLOW if phase is Phase.BEFORE else Action.NEUTRAL)
        await h.observer.wait_for("executed", count=2)

        pairs = [seen.bodies()[:2], seen.bodies()[2:]]
        for (sdk_data, sdk_headers), (lite_data, lite_headers) in pairs:
            # Valid for the wire model, and byte for byte what the model writes.
            proposal = Proposal.model_validate_json(lite_data)
            assert proposal.model_dump_json().encode() == lite_data
            assert Proposal.model_validate_json(sdk_data).model_dump_json().encode() == sdk_data
            sdk_body, lite_body = json.loads(sdk_data), json.loads(lite_data)
            assert list(sdk_body) == list(lite_body)
            assert lite_headers == {"Nats-Msg-Id": f"{AGENT}:{lite_body['id']}"}
            assert sdk_headers == {"Nats-Msg-Id": f"{AGENT}:{sdk_body['id']}"}
            varying = ("id", "created_at", "context.session_id")
            assert without(sdk_body, *varying) == without(lite_body, *varying)
        assert json.loads(seen.bodies()[1][0])["source"] == "notes_local"

        (sdk_report, sdk_rh), (lite_report, lite_rh) = reports.bodies()
        assert Executed.model_validate_json(lite_report).model_dump_json().encode() == lite_report
        sdk_ex, lite_ex = json.loads(sdk_report), json.loads(lite_report)
        assert list(sdk_ex) == list(lite_ex)
        assert lite_rh == {"Nats-Msg-Id": f"executed:{AGENT}:{lite_ex['release_id']}"}
        assert sdk_rh == {"Nats-Msg-Id": f"executed:{AGENT}:{sdk_ex['release_id']}"}
        varying = ("release_id", "proposal_id", "finished_at")
        assert without(sdk_ex, *varying) == without(lite_ex, *varying)
        assert lite_ex["proposal_id"] == json.loads(seen.bodies()[3][0])["id"]


async def test_a_forged_release_on_the_agents_results_subject_is_not_taken(
    nats_url: str, tmp_path: Path
) -> None:
    async with running_service(nats_url, tmp_path) as h:
        pid = pid_of(WRITE)
        waiting = asyncio.create_task(hook("claude-code", WRITE, h, url=nats_url, wait=3))
        (item,) = await h.observer.wait_for("inbox", pid)
        call = claude_code.parse(WRITE)
        forged = {
            "release_id": "rl_forged", "proposal_id": pid, "request_id": item["request_id"],
            "agent": AGENT, "workspace": "default", "tool": call.tool,
            "arguments": call.arguments, "classification": item["classification"],
            "verdict": item["verdict"], "approvals": [],
            "proposal_digest": item["proposal_digest"],
            "released_at": datetime.now(UTC).isoformat(),
        }  # fmt: skip
        subject = h.subjects.released(AGENT)
        data = json.dumps(forged).encode()
        impostor = ServiceKey.generate()
        await h.nc.publish(subject, data)  # unsigned
        await h.nc.publish(subject, data, headers=impostor.headers(subject, data))
        assert h.service.ctx is not None  # the service's signature, but for another subject:
        moved = h.service.ctx.signer.headers(h.subjects.released("another-agent"), data)
        await h.nc.publish(subject, data, headers=moved)
        run = await waiting
        assert run.code == 2, run
        assert "holding this call for a human approval" in run.stderr
        assert item["request_id"] in run.stderr


async def test_an_api_answer_not_signed_by_the_pinned_service_key_is_refused(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = unique_prefix()
    subjects = Subjects(prefix)
    real, impostor = ServiceKey.generate(), ServiceKey.generate()
    nc = await nats.connect(nats_url)

    async def answer(msg: Msg) -> None:  # a released history, signed by the wrong key
        body = json.dumps({"status": "released", "proposal": {}, "events": []}).encode()
        await nc.publish(msg.reply, body, headers=impostor.headers(msg.reply, body))

    await nc.subscribe(subjects.api_status(AGENT), cb=answer)
    await nc.flush()
    monkeypatch.setenv("HEADGATE_SERVICE_KEY", real.public_key)
    call = claude_code.parse(READ)
    opts = GateOptions(agent=AGENT, prefix=prefix, nats_url=nats_url, data_dir=NO_DATA, wait=1)
    try:
        with pytest.raises(Exception, match="not the Headgate service's"):
            await light(call, opts)
    finally:
        await nc.close()


async def test_no_service_and_no_nats_block_within_the_time_budget(
    nats_url: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    run = await hook("claude-code", READ, None, url=nats_url, wait=0.5,
                     extra=("--prefix", "nobody-serves-this-either"))  # fmt: skip
    assert run.code == 2
    assert "no Headgate service answers" in run.stderr
    assert time.monotonic() - started < 2 + 0.5 + 4 + 1  # connect + wait + margin, and a second
    started = time.monotonic()
    down = await hook("codex", READ, None, url="nats://127.0.0.1:1",
                      extra=("--connect-timeout", "1"))  # fmt: skip
    assert down.code == 2
    assert "cannot reach NATS at nats://127.0.0.1:1 within 1s" in down.stderr
    assert time.monotonic() - started < 1 + 5 + 4 + 1


async def test_the_embedded_servers_agent_credentials_and_service_key_from_the_data_dir(
    embedded: Service,
) -> None:
    data = embedded.settings.data_dir
    await api_ready(embedded.url, embedded.subjects, inbox_prefix="_INBOX.agent",
                    nkeys_seed=str(credentials_file(data, Role.AGENT)))  # fmt: skip
    opts = GateOptions(agent=AGENT, prefix=embedded.subjects.prefix, data_dir=data, wait=2)
    read = claude_code.parse(READ)
    answer = await light(read, opts)
    assert answer.action == Action.ALLOW, answer.reason
    after = claude_code.parse({**READ, "hook_event_name": "PostToolUse", "tool_response": {}})
    assert (await light(after, opts)).action == Action.NEUTRAL
    write = claude_code.parse(WRITE)
    held = await light(write, replace(opts, wait=0.3))
    assert held.action == Action.DENY
    assert "holding this call" in held.reason


async def test_where_results_may_not_be_subscribed_a_results_consumer_is_used(
    tmp_path: Path,
) -> None:
    """A server whose agent user may read its results only through a JetStream consumer (its
    subscriptions limited to its private inbox): the light path falls back to one."""
    data, prefix = tmp_path / ".headgate", unique_prefix()
    subjects = Subjects(prefix)
    access = prepare_access(data, tmp_path / "store", subjects)
    config = access.config.read_text()
    results = (f'"{subjects.held("*")}", "{subjects.released("*")}", '
               f'"{subjects.blocked("*")}"')  # fmt: skip
    assert results in config
    access.config.write_text(config.replace(", " + results, ""))
    server = EmbeddedNats(store_dir=tmp_path / "nats", config=access.config)
    server.start()
    service = Service(Settings(data_dir=data, nats_url=server.url, prefix=prefix,
                               nats_nkey=str(credentials_file(data, Role.SERVICE))))  # fmt: skip
    await service.start()
    try:
        await api_ready(server.url, subjects, inbox_prefix="_INBOX.agent",
                        nkeys_seed=str(credentials_file(data, Role.AGENT)))  # fmt: skip
        opts = GateOptions(agent=AGENT, prefix=prefix, nats_url=server.url, data_dir=data,
                           wait=10)  # fmt: skip
        assert (await light(claude_code.parse(READ), opts)).action == Action.ALLOW
        # Held, then rejected while waiting: the outcome arrives through the consumer ...
        write = claude_code.parse(WRITE)
        first = asyncio.create_task(light(write, opts))
        assert service.ctx is not None
        pid = pid_of(WRITE)
        while (await service.ctx.store.proposals.history(pid)) is None:
            await asyncio.sleep(0.05)
        await _reject(service, data, pid)
        answer = await first
        assert answer.action == Action.DENY
        assert "not today" in answer.reason
        # ... and a retry finds it in the stream (it ended before the retry listened).
        again = await light(write, replace(opts, wait=1))
        assert "not today" in again.reason
    finally:
        await service.stop()
        server.stop()


async def _reject(service: Service, data: Path, pid: str) -> None:
    from tests.service.helpers import decision, send_decision
    from workflow.datadir import local_approver

    assert service.ctx is not None
    found = await service.ctx.store.proposals.history(pid)
    assert found is not None
    assert found["request"] is not None
    key, _, _ = local_approver(data)
    nc = await nats.connect(service.url, nkeys_seed=str(credentials_file(data, Role.APPROVER)),
                            inbox_prefix="_INBOX.approver")  # fmt: skip
    try:
        request = found["request"]
        await send_decision(
            nc, service.subjects,
            decision(key, request.request_id, found["proposal"].digest, "reject",
                     reason="not today"),
        )  # fmt: skip
    finally:
        await nc.close()


def test_accounts_config_is_what_the_fallback_test_edits() -> None:
    text = accounts_config({r: "U" + "A" * 55 for r in Role}, Subjects("hg"))
    assert '"hg.held.*", "hg.released.*", "hg.blocked.*"' in text


def test_an_agent_name_that_is_no_subject_token_blocks_before_anything_is_sent() -> None:
    opts = GateOptions(agent="a b", nats_url="nats://127.0.0.1:1", data_dir=NO_DATA)
    with pytest.raises(ValueError, match="agent name 'a b' is not a valid subject token"):
        lite.decide(claude_code.parse(READ), opts, 5)
