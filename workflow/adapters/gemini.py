"""Gemini CLI's hooks (`~/.gemini/settings.json`, `hooks.BeforeTool`).

Measured with the real CLI: Gemini CLI ignores the Claude-shaped `permissionDecision` deny (the
tool runs); `{"decision": "allow"}` allows; exit 2 with the reason on stderr blocks, and the
reason reaches the model as `{"error": "Tool execution blocked: …"}`. Its hook timeout is in
milliseconds. Headless runs offer the shell tool only with `--yolo`, which is exactly when the
hook is the only gate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from workflow.adapters.calls import (
    Action,
    Answer,
    Client,
    HookCall,
    Phase,
    Reply,
    as_json,
    block,
    event_call,
    mcp_server,
    required_tool,
    result_summary,
    tool_input,
)

NAME = "gemini"

EVENTS: dict[str, Phase] = {
    "BeforeTool": Phase.BEFORE,
    "AfterTool": Phase.AFTER,
    "BeforeAgent": Phase.OTHER,
    "AfterAgent": Phase.OTHER,
    "BeforeModel": Phase.OTHER,
    "AfterModel": Phase.OTHER,
    "BeforeToolSelection": Phase.OTHER,
    "SessionStart": Phase.OTHER,
    "SessionEnd": Phase.OTHER,
    "PreCompress": Phase.OTHER,
    "Notification": Phase.OTHER,
}


def parse(event: Mapping[str, Any]) -> HookCall:
    call = event_call(event, NAME, "Gemini CLI", EVENTS)
    phase = call.phase
    if phase is Phase.OTHER:
        return call
    tool = required_tool(event)
    arguments = tool_input(event)
    description = arguments.get("description")
    call = replace(
        call, tool=tool, arguments=arguments, server=mcp_server(NAME, tool, event),
        intent=description if isinstance(description, str) else None,
    )  # fmt: skip
    if phase is Phase.AFTER:
        ok, summary = result_summary(event.get("tool_response"))
        return replace(call, succeeded=ok, summary=summary)
    return call


def render(call: HookCall, answer: Answer) -> Reply:
    if answer.action in (Action.DENY, Action.DEFER):  # it cannot defer
        return block(answer.reason)
    if answer.action is Action.NEUTRAL or call.phase is not Phase.BEFORE:
        return Reply()
    if answer.arguments is not None:
        return block(
            "Headgate released this call with changed arguments, which Gemini CLI cannot "
            f"apply; make the call again with these arguments: {answer.arguments}"
        )
    return Reply(stdout=as_json({"decision": "allow", "reason": answer.reason}))


def config(command: str, timeout: int) -> str:
    """For `~/.gemini/settings.json` (Gemini CLI's timeout is in milliseconds)."""
    hook = [{"type": "command", "name": "headgate", "command": command, "timeout": timeout * 1000}]
    return json.dumps(
        {"hooks": {
            "BeforeTool": [{"matcher": ".*", "hooks": hook}],
            "AfterTool": [{"matcher": ".*", "hooks": hook}],
        }},
        indent=2,
    )  # fmt: skip


CLIENT = Client(NAME, parse, render, config, "~/.gemini/settings.json")
