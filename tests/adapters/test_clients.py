"""Each client's hook events → Headgate's call, and Headgate's answers → what that client honours.

The inputs are real hook stdin captured from Claude Code 2.1.197, Codex 0.171.0 and Gemini CLI
0.61.0 (`tests/data/hooks/`); Cursor's come from its documentation (it does not run here).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from workflow.adapters import claude_code, codex, cursor, gemini
from workflow.adapters.calls import (
    Action,
    Answer,
    Client,
    HookCall,
    HookInputError,
    Phase,
    default_agent,
    mcp_server,
    pending_answer,
    proposal_base,
    proposal_id,
)
from workflow.adapters.hook import CLIENTS, options_for
from workflow.messages import Proposal

DATA = Path(__file__).parent.parent / "data" / "hooks"


def captured(name: str, **over: Any) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((DATA / f"{name}-hook-stdin.json").read_text())
    event.update(over)
    return event


CLAUDE = captured("claude")
CODEX = captured("codex")
GEMINI = captured("gemini")
CURSOR_SHELL = {
    "conversation_id": "c-1", "generation_id": "g-1", "hook_event_name": "beforeShellExecution",
    "command": "npm test", "cwd": "/home/me/proj", "workspace_roots": ["/home/me/proj"],
}  # fmt: skip
CURSOR_MCP = {
    "conversation_id": "c-1", "generation_id": "g-2", "hook_event_name": "beforeMCPExecution",
    "tool_name": "create_issue", "tool_input": '{"title": "x"}', "url": "https://mcp.example",
    "workspace_roots": ["/home/me/proj"],
}  # fmt: skip
CURSOR_READ = {
    "conversation_id": "c-1", "hook_event_name": "beforeReadFile",
    "file_path": "/home/me/proj/.env", "content": "SECRET=1", "workspace_roots": ["/home/me/proj"],
}  # fmt: skip

# (client, hook input, phase, tool, arguments, cwd, session)
MAPPING: list[tuple[Client, dict[str, Any], Phase, str, dict[str, Any], str | None, str]] = [
    (claude_code.CLIENT, CLAUDE, Phase.BEFORE, "Bash", CLAUDE["tool_input"], CLAUDE["cwd"],
     CLAUDE["session_id"]),
    (claude_code.CLIENT, captured("claude", hook_event_name="PostToolUse",
     tool_response={"stdout": "", "stderr": "", "interrupted": False}), Phase.AFTER, "Bash",
     CLAUDE["tool_input"], CLAUDE["cwd"], CLAUDE["session_id"]),
    (claude_code.CLIENT, captured("claude", tool_name="Read",
     tool_input={"file_path": "/tmp/cli-lab/work/a.txt"}), Phase.BEFORE, "Read",
     {"file_path": "/tmp/cli-lab/work/a.txt"}, CLAUDE["cwd"], CLAUDE["session_id"]),
    (claude_code.CLIENT, captured("claude", hook_event_name="PermissionRequest"), Phase.BEFORE,
     "Bash", CLAUDE["tool_input"], CLAUDE["cwd"], CLAUDE["session_id"]),
    (claude_code.CLIENT, {"hook_event_name": "Stop", "session_id": "s", "cwd": "/w"},
     Phase.OTHER, "", {}, "/w", "s"),
    (codex.CLIENT, CODEX, Phase.BEFORE, "Bash", CODEX["tool_input"], CODEX["cwd"],
     CODEX["session_id"]),
    (codex.CLIENT, captured("codex", hook_event_name="PostToolUse", tool_response="hello\n"),
     Phase.AFTER, "Bash", CODEX["tool_input"], CODEX["cwd"], CODEX["session_id"]),
    (codex.CLIENT, captured("codex", tool_name="apply_patch", tool_input={"input": "*** Begin"}),
     Phase.BEFORE, "apply_patch", {"input": "*** Begin"}, CODEX["cwd"], CODEX["session_id"]),
    (gemini.CLIENT, GEMINI, Phase.BEFORE, "run_shell_command", GEMINI["tool_input"],
     GEMINI["cwd"], GEMINI["session_id"]),
    (gemini.CLIENT, captured("gemini", hook_event_name="AfterTool",
     tool_response={"llmContent": "ok"}), Phase.AFTER, "run_shell_command",
     GEMINI["tool_input"], GEMINI["cwd"], GEMINI["session_id"]),
    (gemini.CLIENT, {"hook_event_name": "BeforeModel", "session_id": "s"}, Phase.OTHER, "", {},
     None, "s"),
    (cursor.CLIENT, CURSOR_SHELL, Phase.BEFORE, "cursor_shell", {"command": "npm test"},
     "/home/me/proj", "c-1"),
    (cursor.CLIENT, CURSOR_MCP, Phase.BEFORE, "create_issue", {"title": "x"}, "/home/me/proj",
     "c-1"),
    (cursor.CLIENT, CURSOR_READ, Phase.BEFORE, "cursor_read_file",
     {"file_path": "/home/me/proj/.env"}, "/home/me/proj", "c-1"),
    (cursor.CLIENT, {**CURSOR_SHELL, "hook_event_name": "afterShellExecution", "output": "ok"},
     Phase.AFTER, "cursor_shell", {"command": "npm test"}, "/home/me/proj", "c-1"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("client", "event", "phase", "tool", "arguments", "cwd", "session"),
    MAPPING,
    ids=[f"{m[0].name}-{m[1]['hook_event_name']}-{m[3] or 'none'}" for m in MAPPING],
)
def test_a_hook_event_becomes_the_call_it_reports(
    client: Client, event: dict[str, Any], phase: Phase, tool: str,
    arguments: dict[str, Any], cwd: str | None, session: str,
) -> None:  # fmt: skip
    call = client.parse(event)
    assert (call.client, call.phase, call.tool, call.arguments) == (
        client.name,
        phase,
        tool,
        arguments,
    )
    assert (call.cwd, call.session_id) == (cwd, session)
    if phase is not Phase.OTHER:  # it makes a valid proposal carrying the session
        pid = proposal_id(proposal_base(call, "agent-1", "default"), 0)
        Proposal.model_validate({
            "id": pid, "agent": "agent-1", "tool": call.tool, "arguments": call.arguments,
            "context": {"cwd": call.cwd, "client": call.client, "session_id": call.session_id},
        })  # fmt: skip


def test_the_agent_states_intent_but_the_file_content_of_a_cursor_read_is_not_proposed() -> None:
    assert claude_code.parse(CLAUDE).intent == "write a file"
    assert "content" not in cursor.parse(CURSOR_READ).arguments


def test_an_after_event_carries_whether_the_tool_failed() -> None:
    ok = claude_code.parse(captured("claude", hook_event_name="PostToolUse", tool_response={}))
    failed = claude_code.parse(
        captured("claude", hook_event_name="PostToolUse", tool_response={"is_error": True})
    )
    gemini_failed = gemini.parse(
        captured("gemini", hook_event_name="AfterTool", tool_response={"error": "boom"})
    )
    assert ok.succeeded
    assert not failed.succeeded
    assert not gemini_failed.succeeded


@pytest.mark.parametrize(
    ("client", "tool", "event", "server"),
    [
        ("claude-code", "mcp__github__create_issue", {}, "github"),
        ("claude-code", "mcp__my_server__do_it", {}, "my_server"),
        ("codex", "mcp__fs__read", {}, "fs"),
        ("gemini", "mcp_github_create_issue", {}, "github"),
        ("gemini", "mcp_x_y", {"mcp_context": {"server_name": "my_server"}}, "my_server"),
        ("claude-code", "Bash", {}, None),
        ("gemini", "run_shell_command", {}, None),
    ],
)
def test_the_mcp_server_is_read_from_the_tool_name(
    client: str, tool: str, event: dict[str, Any], server: str | None
) -> None:
    assert mcp_server(client, tool, event) == server


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize(
    "raw",
    [
        {"hook_event_name": "NoSuchEvent", "tool_name": "Bash"},
        {"tool_name": "Bash"},
        {"hook_event_name": 3},
    ],
)
def test_an_unknown_or_missing_event_is_an_input_error(client: str, raw: dict[str, Any]) -> None:
    with pytest.raises(HookInputError):
        CLIENTS[client].parse(raw)


@pytest.mark.parametrize(
    ("client", "event"),
    [
        (claude_code.CLIENT, {**CLAUDE, "tool_name": None}),
        (claude_code.CLIENT, {**CLAUDE, "tool_input": ["not", "an", "object"]}),
        (gemini.CLIENT, {**GEMINI, "tool_name": ""}),
        (cursor.CLIENT, {**CURSOR_SHELL, "command": None}),
    ],
)
def test_a_tool_event_without_its_tool_is_an_input_error(
    client: Client, event: dict[str, Any]
) -> None:
    with pytest.raises(HookInputError):
        client.parse(event)


# --------------------------------------------------------------------------- answers

ALLOW = Answer(Action.ALLOW, "allowed by Headgate's policy")
DENY = Answer(Action.DENY, "An approver rejected this call: no.")
CHANGED = Answer(Action.ALLOW, "approved", {"command": "echo changed"})


def before(client: Client, event: dict[str, Any]) -> HookCall:
    return client.parse(event)


def out(reply_stdout: str) -> Any:
    return json.loads(reply_stdout) if reply_stdout else None


@pytest.mark.parametrize(
    ("client", "event"),
    [(claude_code.CLIENT, CLAUDE), (codex.CLIENT, CODEX), (gemini.CLIENT, GEMINI)],
)
def test_a_deny_is_exit_2_with_the_reason_on_stderr_which_every_client_honours(
    client: Client, event: dict[str, Any]
) -> None:
    reply = client.render(before(client, event), DENY)
    assert (reply.code, reply.stderr, reply.stdout) == (2, DENY.reason + "\n", "")


def test_cursor_gets_its_permission_answer_and_exit_2_on_a_deny() -> None:
    reply = cursor.render(cursor.parse(CURSOR_SHELL), DENY)
    assert reply.code == 2
    assert out(reply.stdout) == {
        "permission": "deny", "user_message": DENY.reason, "agent_message": DENY.reason,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("client", "event", "expected"),
    [
        (claude_code.CLIENT, CLAUDE, {"hookSpecificOutput": {
            "hookEventName": "PreToolUse", "permissionDecision": "allow",
            "permissionDecisionReason": ALLOW.reason}}),
        (claude_code.CLIENT, {**CLAUDE, "hook_event_name": "PermissionRequest"},
         {"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                                 "decision": {"behavior": "allow"}}}),
        # Codex cannot grant: "allow" is saying nothing.
        (codex.CLIENT, CODEX, None),
        (gemini.CLIENT, GEMINI, {"decision": "allow", "reason": ALLOW.reason}),
        (cursor.CLIENT, CURSOR_SHELL, {"permission": "allow"}),
    ],
)  # fmt: skip
def test_an_allow_is_in_the_shape_the_client_honours(
    client: Client, event: dict[str, Any], expected: Any
) -> None:
    reply = client.render(before(client, event), ALLOW)
    assert reply.code == 0
    assert out(reply.stdout) == expected


def test_claude_code_runs_released_arguments_that_differ() -> None:
    reply = claude_code.render(claude_code.parse(CLAUDE), CHANGED)
    assert out(reply.stdout)["hookSpecificOutput"]["updatedInput"] == {"command": "echo changed"}


@pytest.mark.parametrize(
    ("client", "event"),
    [(codex.CLIENT, CODEX), (gemini.CLIENT, GEMINI), (cursor.CLIENT, CURSOR_SHELL)],
)
def test_a_client_that_cannot_change_arguments_blocks_a_changed_release(
    client: Client, event: dict[str, Any]
) -> None:
    reply = client.render(before(client, event), CHANGED)
    assert reply.code == 2
    assert "echo changed" in reply.stderr


DEFER = pending_answer("rq_1", "hk-1", 20, "defer")


def test_a_held_call_is_denied_naming_the_request_or_deferred_when_asked() -> None:
    deny = pending_answer("rq_1", "hk-1", 20)
    assert (deny.action, DEFER.action) == (Action.DENY, Action.DEFER)
    assert "request rq_1" in deny.reason
    assert deny.reason == DEFER.reason


def test_claude_code_defers_a_pre_tool_use_and_blocks_a_permission_request() -> None:
    reply = claude_code.render(claude_code.parse(CLAUDE), DEFER)
    assert reply.code == 0
    assert out(reply.stdout) == {"hookSpecificOutput": {
        "hookEventName": "PreToolUse", "permissionDecision": "defer",
        "permissionDecisionReason": DEFER.reason}}  # fmt: skip
    asked = claude_code.parse({**CLAUDE, "hook_event_name": "PermissionRequest"})
    blocked = claude_code.render(asked, DEFER)
    assert (blocked.code, blocked.stderr) == (2, DEFER.reason + "\n")


@pytest.mark.parametrize(
    ("client", "event"),
    [(codex.CLIENT, CODEX), (gemini.CLIENT, GEMINI), (cursor.CLIENT, CURSOR_SHELL)],
)
def test_a_client_that_cannot_defer_blocks_a_deferral(
    client: Client, event: dict[str, Any]
) -> None:
    reply = client.render(before(client, event), DEFER)
    assert reply.code == 2
    assert DEFER.reason in reply.stderr


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_on_pending_defer_is_refused_for_a_client_that_cannot_defer(client: str) -> None:
    def options(on_pending: str) -> Any:
        return options_for(
            client, agent="a", workspace="default", wait=1, connect_timeout=1, nats_url=None,
            data_dir=Path("/nonexistent"), prefix="headgate", on_pending=on_pending,
        )  # fmt: skip

    assert options("deny").on_pending == "deny"
    with pytest.raises(ValueError, match="deny or defer"):
        options("later")
    if client == "claude-code":
        assert options("defer").on_pending == "defer"
    else:
        with pytest.raises(ValueError, match=f"{client} cannot defer"):
            options("defer")


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_after_and_other_events_answer_nothing(client: str) -> None:
    c = CLIENTS[client]
    for phase in (Phase.AFTER, Phase.OTHER):
        reply = c.render(HookCall(client, "x", phase), Answer(Action.NEUTRAL))
        assert (reply.stdout, reply.stderr, reply.code) == ("", "", 0)


# --------------------------------------------------------------------------- identity


def test_the_same_call_in_the_same_session_has_the_same_id_and_any_change_another() -> None:
    call = claude_code.parse(CLAUDE)
    base = proposal_base(call, "a", "default")
    assert base == proposal_base(claude_code.parse(dict(CLAUDE)), "a", "default")
    # the tool_use_id differs on a retry by the model: it is not part of the id
    assert base == proposal_base(claude_code.parse({**CLAUDE, "tool_use_id": "t2"}), "a", "default")
    others = {
        proposal_base(claude_code.parse({**CLAUDE, "session_id": "other"}), "a", "default"),
        proposal_base(
            claude_code.parse({**CLAUDE, "tool_input": {"command": "ls"}}), "a", "default"
        ),
        proposal_base(claude_code.parse({**CLAUDE, "cwd": "/elsewhere"}), "a", "default"),
        proposal_base(call, "b", "default"),
        proposal_base(call, "a", "acme"),
        proposal_base(codex.parse({**CODEX, "session_id": CLAUDE["session_id"]}), "a", "default"),
    }
    assert base not in others
    assert len(others) == 6
    assert proposal_id(base, 0) == base
    assert proposal_id(base, 3) == f"{base}.3"


@pytest.mark.parametrize(
    ("user", "agent"),
    [
        ("alice", "claude-code-alice"),
        ("a.b@corp", "claude-code-a_b_corp"),
        (None, "claude-code-user"),
    ],
)
def test_the_default_agent_is_the_client_and_the_user_as_a_subject_token(
    user: str | None, agent: str
) -> None:
    assert default_agent("claude-code", user) == agent


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_print_config_names_the_command_and_a_timeout_in_the_clients_unit(client: str) -> None:
    text = CLIENTS[client].config("/usr/bin/headgate hook x", 30)
    assert "/usr/bin/headgate hook x" in text
    assert ("30000" in text) if client == "gemini" else ("30" in text and "30000" not in text)


# --------------------------------------------------------------------------- HTTP hooks

DENY_BOTH = {"decision": "block", "reason": DENY.reason, "hookSpecificOutput": {
    "hookEventName": "PreToolUse", "permissionDecision": "deny",
    "permissionDecisionReason": DENY.reason}}  # fmt: skip


@pytest.mark.parametrize(
    ("event", "answer", "body"),
    [
        (CLAUDE, DENY, DENY_BOTH),
        (CLAUDE, ALLOW, {"hookSpecificOutput": {"hookEventName": "PreToolUse",
         "permissionDecision": "allow", "permissionDecisionReason": ALLOW.reason}}),
        (CLAUDE, DEFER, {"hookSpecificOutput": {"hookEventName": "PreToolUse",
         "permissionDecision": "defer", "permissionDecisionReason": DEFER.reason}}),
        ({**CLAUDE, "hook_event_name": "PermissionRequest"}, DENY, {"hookSpecificOutput": {
         "hookEventName": "PermissionRequest",
         "decision": {"behavior": "deny", "message": DENY.reason}}}),
        ({**CLAUDE, "hook_event_name": "PermissionRequest"}, DEFER, {"hookSpecificOutput": {
         "hookEventName": "PermissionRequest",
         "decision": {"behavior": "deny", "message": DEFER.reason}}}),
        ({**CLAUDE, "hook_event_name": "PostToolUse", "tool_response": {}},
         Answer(Action.NEUTRAL), {}),
    ],
)  # fmt: skip
def test_claude_codes_http_hook_answer_is_the_json_body_it_honours(
    event: dict[str, Any], answer: Answer, body: dict[str, Any]
) -> None:
    assert claude_code.render_http(claude_code.parse(event), answer) == body


def test_an_unparsed_request_is_denied_in_the_pre_tool_use_shape_too() -> None:
    assert claude_code.render_http(HookCall("claude-code", "", Phase.BEFORE), DENY) == DENY_BOTH


def test_only_claude_code_has_http_hooks() -> None:
    with_http = {name for name, c in CLIENTS.items() if c.http_render and c.http_config}
    assert with_http == {"claude-code"}
    snippet = json.loads(claude_code.http_config("http://127.0.0.1:1/hooks/claude-code?agent=a",
                                                 30, "TOKEN_VAR"))  # fmt: skip
    (hook,) = snippet["hooks"]["PreToolUse"][0]["hooks"]
    assert hook == {
        "type": "http", "url": "http://127.0.0.1:1/hooks/claude-code?agent=a", "timeout": 30,
        "headers": {"Authorization": "Bearer $TOKEN_VAR"}, "allowedEnvVars": ["TOKEN_VAR"],
    }  # fmt: skip
    assert snippet["hooks"]["PostToolUse"] == snippet["hooks"]["PreToolUse"]


def test_print_config_http_points_at_the_url_serve_recorded_and_warns_it_fails_open(
    tmp_path: Path,
) -> None:
    from typer.testing import CliRunner

    from workflow.cli import app

    def print_config(*extra: str) -> Any:
        argv = ["hook", "claude-code", "--print-config", "--http", "--data-dir", str(tmp_path)]
        return CliRunner().invoke(app, [*argv, *extra])

    missing = print_config()
    assert missing.exit_code != 0
    assert "--hook-listen" in missing.output
    (tmp_path / "hook.url").write_text("http://127.0.0.1:8788\n")
    shown = print_config("--agent", "ci-bot", "--on-pending", "defer", "--wait", "30")
    assert shown.exit_code == 0, shown.output
    assert "fails open" in shown.output
    assert f"HEADGATE_HOOK_TOKEN=$(cat {tmp_path / 'hook.token'})" in shown.output
    snippet = json.loads(shown.output[shown.output.index("{") :])
    (hook,) = snippet["hooks"]["PreToolUse"][0]["hooks"]
    assert hook["url"] == (
        "http://127.0.0.1:8788/hooks/claude-code?agent=ci-bot&wait=30&on_pending=defer"
    )
    assert hook["timeout"] > 30
    refused = CliRunner().invoke(app, ["hook", "codex", "--print-config", "--http",
                                       "--hook-url", "http://127.0.0.1:1"])  # fmt: skip
    assert refused.exit_code != 0
    assert "no HTTP hooks" in refused.output
