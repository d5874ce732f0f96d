"""Claude Code's command hooks (`~/.claude/settings.json` or `.claude/settings.json`).

Measured with the real CLI (see the README): a `PreToolUse` answer
`hookSpecificOutput.permissionDecision = "allow"` runs the call without Claude Code's own
prompt; exit 2 with the reason on stderr blocks it and the reason reaches the model as the
tool's error. Claude Code ignores `{"decision": "deny"}`, and a hook that crashes or times out
falls through to its own permission check, so every failure here must end in exit 2.

A call still held can be deferred instead (`--on-pending defer`): `permissionDecision:
"defer"` ends a `claude -p` run with `stop_reason: "tool_deferred"` (the call has not run),
and `claude -p --resume <session>` asks this hook again for the same call, which binds to the
same request. Measured with 2.1.197: a resumed run whose call is still held defers again
without asking the model; approved, the call runs once; rejected, the reason reaches the model.
With two deferred calls in one turn only the last is resumed; the other never runs.
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

NAME = "claude-code"

#: Every hook event Claude Code sends, by what Headgate does with it.
EVENTS: dict[str, Phase] = {
    "PreToolUse": Phase.BEFORE,
    # Fires only where Claude Code would ask the user; answered like PreToolUse.
    "PermissionRequest": Phase.BEFORE,
    "PostToolUse": Phase.AFTER,
    "PostToolUseFailure": Phase.AFTER,
    "UserPromptSubmit": Phase.OTHER,
    "Notification": Phase.OTHER,
    "Stop": Phase.OTHER,
    "SubagentStart": Phase.OTHER,
    "SubagentStop": Phase.OTHER,
    "PreCompact": Phase.OTHER,
    "SessionStart": Phase.OTHER,
    "SessionEnd": Phase.OTHER,
}


def parse(event: Mapping[str, Any]) -> HookCall:
    call = event_call(event, NAME, "Claude Code", EVENTS)
    name, phase = call.event, call.phase
    if phase is Phase.OTHER:
        return call
    tool = required_tool(event)
    arguments = tool_input(event)
    description = arguments.get("description")
    call = replace(
        call, tool=tool, arguments=arguments, server=mcp_server(NAME, tool),
        intent=description if isinstance(description, str) else None,
    )  # fmt: skip
    if phase is Phase.AFTER:
        ok, summary = result_summary(event.get("tool_response", event.get("error")))
        failed = name == "PostToolUseFailure"
        return replace(call, succeeded=ok and not failed, summary=summary)
    return call


def render(call: HookCall, answer: Answer) -> Reply:
    if answer.action is Action.DEFER and call.event == "PreToolUse":
        return Reply(stdout=as_json({"hookSpecificOutput": {
            "hookEventName": "PreToolUse", "permissionDecision": "defer",
            "permissionDecisionReason": answer.reason}}))  # fmt: skip
    if answer.action in (Action.DENY, Action.DEFER):  # only PreToolUse can defer
        return block(answer.reason)
    if answer.action is Action.NEUTRAL or call.phase is not Phase.BEFORE:
        return Reply()
    if call.event == "PermissionRequest":
        decision: dict[str, Any] = {"behavior": "allow"}
        if answer.arguments is not None:
            decision["updatedInput"] = answer.arguments
        return Reply(stdout=as_json({"hookSpecificOutput": {
            "hookEventName": "PermissionRequest", "decision": decision}}))  # fmt: skip
    out: dict[str, Any] = {
        "hookEventName": "PreToolUse",
        "permissionDecision": "allow",
        "permissionDecisionReason": answer.reason,
    }
    if answer.arguments is not None:
        out["updatedInput"] = answer.arguments
    return Reply(stdout=as_json({"hookSpecificOutput": out}))


def render_http(call: HookCall, answer: Answer) -> dict[str, Any]:
    """The answer to an HTTP hook: the body of a 200 (any other status, a timeout or a
    connection failure, and Claude Code goes on as if no hook ran: it fails open)."""
    defers = answer.action is Action.DEFER and call.event == "PreToolUse"
    if answer.action in (Action.DENY, Action.DEFER) and not defers:
        reason = answer.reason
        if call.event == "PermissionRequest":
            decision = {"behavior": "deny", "message": reason}
            return {"hookSpecificOutput": {"hookEventName": call.event, "decision": decision}}
        # Measured: either shape denies; `decision: block` also where the event is unknown.
        body: dict[str, Any] = {"decision": "block", "reason": reason}
        if call.event in ("PreToolUse", ""):
            body["hookSpecificOutput"] = {
                "hookEventName": "PreToolUse", "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            }  # fmt: skip
        return body
    reply = render(call, answer)  # an allow, a deferral or nothing: the command hook's JSON
    body = json.loads(reply.stdout) if reply.stdout else {}
    return body


def _settings(hook: list[dict[str, Any]]) -> str:
    """The hook before and after every tool, as `~/.claude/settings.json` holds them."""
    return json.dumps(
        {"hooks": {
            "PreToolUse": [{"matcher": "*", "hooks": hook}],
            "PostToolUse": [{"matcher": "*", "hooks": hook}],
        }},
        indent=2,
    )  # fmt: skip


def config(command: str, timeout: int) -> str:
    """For `~/.claude/settings.json` (timeout in seconds)."""
    return _settings([{"type": "command", "command": command, "timeout": timeout}])


def http_config(url: str, timeout: int, token_env: str) -> str:
    """An HTTP hook for `~/.claude/settings.json`: Claude Code fills `$VAR` in a header only
    from the variables `allowedEnvVars` lists (any other becomes an empty string)."""
    hook = [{
        "type": "http", "url": url, "timeout": timeout,
        "headers": {"Authorization": f"Bearer ${token_env}"}, "allowedEnvVars": [token_env],
    }]  # fmt: skip
    return _settings(hook)


CLIENT = Client(
    NAME, parse, render, config, "~/.claude/settings.json", defers=True,
    http_render=render_http, http_config=http_config,
)  # fmt: skip
