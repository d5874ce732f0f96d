"""Cursor's hook events → Headgate's call, and Headgate's answers → what Cursor reads.

Cursor does not run here (no official CLI installs from npm), so the inputs are the shapes its
documentation gives: every event carries `hook_event_name`, `conversation_id`,
`generation_id` and `workspace_roots`; shell events `command` and `cwd` (`output` and
`duration` after), MCP events `tool_name`, `tool_input` (a JSON string), and `url` or
`command` (`result_json` after), `beforeReadFile` `file_path` and `content`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from workflow.adapters import cursor
from workflow.adapters.calls import Action, Answer, HookCall, HookInputError, Phase

ROOT = "/home/me/proj"
BASE = {"conversation_id": "c-1", "generation_id": "g-1", "workspace_roots": [ROOT],
        "cursor_version": "2.0.77"}  # fmt: skip


def event(name: str, **fields: Any) -> dict[str, Any]:
    return {**BASE, "hook_event_name": name, **fields}


# (hook input, phase, tool, arguments, cwd, succeeded, summary contains)
MAPPING: list[tuple[dict[str, Any], Phase, str, dict[str, Any], str | None, bool, str]] = [
    (event("beforeShellExecution", command="npm test", cwd=f"{ROOT}/web"), Phase.BEFORE,
     "cursor_shell", {"command": "npm test"}, f"{ROOT}/web", True, ""),
    # No cwd: the first workspace root.
    (event("beforeShellExecution", command="ls"), Phase.BEFORE, "cursor_shell",
     {"command": "ls"}, ROOT, True, ""),
    (event("beforeMCPExecution", tool_name="create_issue", tool_input='{"title": "x"}',
           url="https://mcp.example/mcp"), Phase.BEFORE, "create_issue", {"title": "x"}, ROOT,
     True, ""),
    (event("beforeMCPExecution", tool_name="query", tool_input={"sql": "select 1"},
           command="npx db-mcp"), Phase.BEFORE, "query", {"sql": "select 1"}, ROOT, True, ""),
    # Not JSON: proposed as it came, for the approver to read.
    (event("beforeMCPExecution", tool_name="echo", tool_input="hello there"), Phase.BEFORE,
     "echo", {"input": "hello there"}, ROOT, True, ""),
    (event("beforeMCPExecution", tool_name="ping", tool_input=""), Phase.BEFORE, "ping", {},
     ROOT, True, ""),
    # The path, never the content Cursor sends along.
    (event("beforeReadFile", file_path=f"{ROOT}/.env", content="SECRET=1",
           attachments=[{"type": "file", "filePath": f"{ROOT}/.cursorrules"}]), Phase.BEFORE,
     "cursor_read_file", {"file_path": f"{ROOT}/.env"}, ROOT, True, ""),
    (event("preToolUse", tool_name="Write", tool_input={"file_path": f"{ROOT}/a.txt"}),
     Phase.BEFORE, "Write", {"file_path": f"{ROOT}/a.txt"}, ROOT, True, ""),
    (event("afterShellExecution", command="npm test", cwd=ROOT, output="12 passed",
           duration=150), Phase.AFTER, "cursor_shell", {"command": "npm test"}, ROOT, True,
     "12 passed"),
    (event("afterMCPExecution", tool_name="create_issue", tool_input='{"title": "x"}',
           result_json='{"content": [{"type": "text", "text": "#12"}]}', duration=250),
     Phase.AFTER, "create_issue", {"title": "x"}, ROOT, True, "#12"),
    (event("afterMCPExecution", tool_name="create_issue", tool_input='{"title": "x"}',
           result_json='{"isError": true, "content": []}'), Phase.AFTER, "create_issue",
     {"title": "x"}, ROOT, False, "isError"),
    (event("postToolUse", tool_name="Write", tool_input={"file_path": f"{ROOT}/a.txt"},
           tool_output="ok"), Phase.AFTER, "Write", {"file_path": f"{ROOT}/a.txt"}, ROOT, True,
     "ok"),
    (event("postToolUseFailure", tool_name="Write", tool_input={"file_path": f"{ROOT}/a.txt"},
           tool_output="denied"), Phase.AFTER, "Write", {"file_path": f"{ROOT}/a.txt"}, ROOT,
     False, "denied"),
    # Edits have no "before" event: seen, never gated.
    (event("afterFileEdit", file_path=f"{ROOT}/main.ts",
           edits=[{"old_string": "a", "new_string": "b"}]), Phase.OTHER, "", {}, ROOT, True, ""),
    (event("beforeSubmitPrompt", prompt="fix it"), Phase.OTHER, "", {}, ROOT, True, ""),
    (event("stop", status="completed", loop_count=0), Phase.OTHER, "", {}, ROOT, True, ""),
]  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "phase", "tool", "arguments", "cwd", "succeeded", "summary"),
    MAPPING,
    ids=[f"{m[0]['hook_event_name']}-{i}" for i, m in enumerate(MAPPING)],
)
def test_a_cursor_event_becomes_the_call_it_reports(
    raw: dict[str, Any], phase: Phase, tool: str, arguments: dict[str, Any], cwd: str | None,
    succeeded: bool, summary: str,
) -> None:  # fmt: skip
    call = cursor.parse(raw)
    assert (call.client, call.event, call.phase) == ("cursor", raw["hook_event_name"], phase)
    assert (call.tool, call.arguments, call.cwd, call.session_id) == (tool, arguments, cwd, "c-1")
    assert call.succeeded is succeeded
    assert summary in call.summary


def test_the_session_is_the_conversation_or_else_a_session_id() -> None:
    without = {k: v for k, v in BASE.items() if k != "conversation_id"}
    raw = {**without, "hook_event_name": "beforeShellExecution", "command": "ls",
           "session_id": "s-9"}  # fmt: skip
    assert cursor.parse(raw).session_id == "s-9"


@pytest.mark.parametrize(
    "raw",
    [
        event("beforeShellExecution"),  # no command
        event("beforeShellExecution", command=""),
        event("afterShellExecution", command=None),
        event("beforeReadFile"),  # no file_path
        event("beforeMCPExecution", tool_input="{}"),  # no tool_name
        event("beforeMCPExecution", tool_name="x", tool_input="[1, 2]"),  # not an object
        event("beforeTabFileRead", file_path="/x"),  # not an event Headgate is configured for
        {**BASE, "command": "ls"},  # no event name
    ],
)
def test_a_cursor_event_missing_what_it_must_carry_is_an_input_error(raw: dict[str, Any]) -> None:
    with pytest.raises(HookInputError):
        cursor.parse(raw)


# --------------------------------------------------------------------------- answers

REASON = "An approver rejected this call: no."
BEFORE_EVENTS = [
    event("beforeShellExecution", command="npm test"),
    event("beforeMCPExecution", tool_name="create_issue", tool_input='{"title": "x"}'),
    event("beforeReadFile", file_path=f"{ROOT}/.env"),
    event("preToolUse", tool_name="Write", tool_input={"file_path": f"{ROOT}/a.txt"}),
]
DENY_BODY = {"permission": "deny", "user_message": REASON, "agent_message": REASON}


# (answer, stdout JSON, exit code, stderr contains)
ANSWERS: list[tuple[Answer, dict[str, Any], int, str]] = [
    (Answer(Action.ALLOW, "allowed by Headgate's policy"), {"permission": "allow"}, 0, ""),
    (Answer(Action.DENY, REASON), DENY_BODY, 2, REASON),
    # Cursor cannot defer: a deferral is a deny with the same words.
    (Answer(Action.DEFER, REASON), DENY_BODY, 2, REASON),
]


@pytest.mark.parametrize("raw", BEFORE_EVENTS, ids=[e["hook_event_name"] for e in BEFORE_EVENTS])
@pytest.mark.parametrize(("answer", "body", "code", "stderr"), ANSWERS,
                         ids=[a[0].action.value for a in ANSWERS])  # fmt: skip
def test_a_before_event_is_answered_with_cursors_permission_and_exit_code(
    raw: dict[str, Any], answer: Answer, body: dict[str, Any], code: int, stderr: str
) -> None:
    reply = cursor.render(cursor.parse(raw), answer)
    assert json.loads(reply.stdout) == body
    assert reply.code == code
    assert stderr in reply.stderr


def test_changed_arguments_cursor_cannot_apply_are_a_deny_naming_them() -> None:
    call = cursor.parse(BEFORE_EVENTS[0])
    reply = cursor.render(call, Answer(Action.ALLOW, "approved", {"command": "npm test -x"}))
    assert reply.code == 2
    assert json.loads(reply.stdout)["permission"] == "deny"
    assert "npm test -x" in reply.stderr


@pytest.mark.parametrize("phase", [Phase.AFTER, Phase.OTHER])
@pytest.mark.parametrize("action", [Action.ALLOW, Action.NEUTRAL])
def test_after_and_other_events_get_no_answer(phase: Phase, action: Action) -> None:
    reply = cursor.render(HookCall("cursor", "afterShellExecution", phase), Answer(action))
    assert (reply.stdout, reply.stderr, reply.code) == ("", "", 0)


def test_the_snippet_registers_the_gated_and_the_reporting_events_only() -> None:
    config = json.loads(cursor.config("/usr/bin/headgate hook cursor", 32))
    assert config["version"] == 1
    assert set(config["hooks"]) == {
        "beforeShellExecution", "beforeMCPExecution", "beforeReadFile", "afterShellExecution",
        "afterMCPExecution",
    }  # fmt: skip
    for hooks in config["hooks"].values():
        assert hooks == [{"command": "/usr/bin/headgate hook cursor", "timeout": 32}]
