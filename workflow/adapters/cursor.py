"""Cursor's agent hooks (`~/.cursor/hooks.json` or `<project>/.cursor/hooks.json`).

From Cursor's documentation (Cursor does not run on this kind of machine, so this is not
measured): `beforeShellExecution` `{command, cwd}`, `beforeMCPExecution` `{tool_name,
tool_input (a JSON string), url | command}` and `beforeReadFile` `{file_path, content}` are
answered with `{"permission": "allow" | "deny" | "ask", "user_message", "agent_message"}`;
exit 2 also blocks. A deny here gives both: the JSON answer and exit 2 with the reason.
Every event carries `conversation_id` (the session) and `workspace_roots`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from workflow.adapters.calls import (
    BLOCK,
    Action,
    Answer,
    Client,
    HookCall,
    HookInputError,
    Phase,
    Reply,
    as_json,
    required_tool,
    result_summary,
    text,
    tool_input,
)

NAME = "cursor"

EVENTS: dict[str, Phase] = {
    "beforeShellExecution": Phase.BEFORE,
    "beforeMCPExecution": Phase.BEFORE,
    "beforeReadFile": Phase.BEFORE,
    "preToolUse": Phase.BEFORE,
    "afterShellExecution": Phase.AFTER,
    "afterMCPExecution": Phase.AFTER,
    "postToolUse": Phase.AFTER,
    "postToolUseFailure": Phase.AFTER,
    # Edits have no "before" event in Cursor: they cannot be gated, only seen afterwards.
    "afterFileEdit": Phase.OTHER,
    "beforeSubmitPrompt": Phase.OTHER,
    "afterAgentResponse": Phase.OTHER,
    "afterAgentThought": Phase.OTHER,
    "sessionStart": Phase.OTHER,
    "sessionEnd": Phase.OTHER,
    "stop": Phase.OTHER,
}

#: Events that name no tool: the tool Headgate proposes them as (in the built-in table).
_TOOL_OF = {
    "beforeShellExecution": "cursor_shell",
    "afterShellExecution": "cursor_shell",
    "beforeReadFile": "cursor_read_file",
}


def _cwd(event: Mapping[str, Any]) -> str | None:
    cwd = text(event, "cwd")
    roots = event.get("workspace_roots")
    if cwd is None and isinstance(roots, list) and roots and isinstance(roots[0], str):
        cwd = roots[0]
    return cwd


def _arguments(name: str, event: Mapping[str, Any]) -> dict[str, Any]:
    if name in ("beforeShellExecution", "afterShellExecution"):
        command = text(event, "command")
        if command is None:
            raise HookInputError(f"Cursor's {name} carries no `command`")
        return {"command": command}
    if name == "beforeReadFile":
        path = text(event, "file_path")
        if path is None:
            raise HookInputError("Cursor's beforeReadFile carries no `file_path`")
        return {"file_path": path}  # not the file's content: the approver needs the path
    return tool_input(event)


def parse(event: Mapping[str, Any]) -> HookCall:
    name = text(event, "hook_event_name")
    if name is None or name not in EVENTS:
        raise HookInputError(f"unknown Cursor hook event {name!r}")
    phase = EVENTS[name]
    call = HookCall(
        NAME,
        name,
        phase,
        cwd=_cwd(event),
        session_id=text(event, "conversation_id") or text(event, "session_id"),
    )
    if phase is Phase.OTHER:
        return call
    tool = _TOOL_OF.get(name) or required_tool(event)
    call = replace(call, tool=tool, arguments=_arguments(name, event))
    if phase is Phase.AFTER:
        response = event.get("output", event.get("result_json", event.get("tool_output")))
        if isinstance(response, str) and response.lstrip().startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):  # `result_json` is a JSON string
                response = json.loads(response)
        ok, summary = result_summary(response)
        failed = name == "postToolUseFailure"
        return replace(call, succeeded=ok and not failed, summary=summary)
    return call


def render(call: HookCall, answer: Answer) -> Reply:
    if answer.action is Action.ALLOW and answer.arguments is not None:
        answer = Answer(
            Action.DENY,
            "Headgate released this call with changed arguments, which Cursor cannot apply; "
            f"make the call again with these arguments: {answer.arguments}",
        )
    if answer.action in (Action.DENY, Action.DEFER):  # it cannot defer
        body = {"permission": "deny", "user_message": answer.reason,
                "agent_message": answer.reason}  # fmt: skip
        return Reply(stdout=as_json(body), stderr=answer.reason + "\n", code=BLOCK)
    if answer.action is Action.NEUTRAL or call.phase is not Phase.BEFORE:
        return Reply()
    return Reply(stdout=as_json({"permission": "allow"}))


def config(command: str, timeout: int) -> str:
    """For `~/.cursor/hooks.json` (timeout in seconds)."""
    hook = [{"command": command, "timeout": timeout}]
    events = ("beforeShellExecution", "beforeMCPExecution", "beforeReadFile",
              "afterShellExecution", "afterMCPExecution")  # fmt: skip
    return json.dumps({"version": 1, "hooks": {e: hook for e in events}}, indent=2)


CLIENT = Client(NAME, parse, render, config, "~/.cursor/hooks.json")
