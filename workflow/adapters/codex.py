"""Codex's hooks (`$CODEX_HOME/config.toml`, `[[hooks.PreToolUse]]`).

Measured with the real CLI: Codex cannot grant — `permissionDecision: "allow"` makes the hook
"Failed" and the call runs — so "allow" is exit 0 with nothing on stdout. Exit 2 with the
reason on stderr blocks the call, and the reason reaches the model ("Command blocked by
PreToolUse hook: …"). Codex reports its shell tool (`exec_command`) as `Bash` with
`{"command"}`. Without `--dangerously-bypass-hook-trust` (or a trusted project) Codex skips
hooks silently.
"""

from __future__ import annotations

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
    block,
    event_call,
    mcp_server,
    required_tool,
    result_summary,
    tool_input,
)

NAME = "codex"

EVENTS: dict[str, Phase] = {
    "PreToolUse": Phase.BEFORE,
    "PostToolUse": Phase.AFTER,
    "SessionStart": Phase.OTHER,
    "UserPromptSubmit": Phase.OTHER,
    "Stop": Phase.OTHER,
}


def parse(event: Mapping[str, Any]) -> HookCall:
    call = event_call(event, NAME, "Codex", EVENTS)
    phase = call.phase
    if phase is Phase.OTHER:
        return call
    tool = required_tool(event)
    call = replace(call, tool=tool, arguments=tool_input(event), server=mcp_server(NAME, tool))
    if phase is Phase.AFTER:
        ok, summary = result_summary(event.get("tool_response"))
        return replace(call, succeeded=ok, summary=summary)
    return call


def render(call: HookCall, answer: Answer) -> Reply:
    if answer.action in (Action.DENY, Action.DEFER):  # it cannot defer
        return block(answer.reason)
    if answer.action is Action.ALLOW and answer.arguments is not None:
        # Codex cannot run a call with other arguments than it proposed: never run the
        # original instead of what was approved.
        return block(
            "Headgate released this call with changed arguments, which Codex cannot apply; "
            f"make the call again with these arguments: {answer.arguments}"
        )
    return Reply()  # Codex's only "allow": say nothing


def config(command: str, timeout: int) -> str:
    """For `$CODEX_HOME/config.toml` (default `~/.codex`; timeout in seconds)."""
    blocks = []
    for event in ("PreToolUse", "PostToolUse"):
        blocks.append(
            f'[[hooks.{event}]]\nmatcher = ".*"\n[[hooks.{event}.hooks]]\ntype = "command"\n'
            f"command = {_toml_string(command)}\ntimeout = {timeout}\n"
        )
    return "\n".join(blocks).rstrip("\n")


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


CLIENT = Client(NAME, parse, render, config, "~/.codex/config.toml")
