"""What every client hook has in common: the call it reports, the answer Headgate gives.

Pure: plain data and functions, no I/O. A client module turns its hook JSON into a `HookCall`
(`parse`) and an `Answer` into a `Reply` (`render`), the exact stdout, stderr and exit code
that client honours.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

#: The exit code every supported client reads as "block this call" (with stderr as the reason).
BLOCK = 2


class Phase(StrEnum):
    """Where in a tool call's life a hook event fires."""

    BEFORE = "before"  # the call may still be stopped: gate it
    AFTER = "after"  # the call ran: report it as executed
    OTHER = "other"  # session, prompt, model and notification events: no decision to make


class Action(StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    NEUTRAL = "neutral"  # no opinion: the client goes on as if no hook ran
    #: Still held for a human: the client ends its run now and asks again when resumed
    #: (Claude Code under `claude -p`); the call has not run. A client that cannot defer
    #: treats it as a deny.
    DEFER = "defer"


class OnPending(StrEnum):
    """What a hook answers for a call still held when its `--wait` is over."""

    DENY = "deny"  # blocked for now, naming the request: the same call retried binds to it
    DEFER = "defer"  # Claude Code under `claude -p`: the run ends, `--resume` asks again


class HookInputError(ValueError):
    """The hook's stdin is not what the client sends; the call is blocked."""


@dataclass(frozen=True)
class HookCall:
    """One hook event of a client, in Headgate's terms."""

    client: str
    event: str
    phase: Phase
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    cwd: str | None = None
    session_id: str | None = None
    #: The MCP server of an MCP tool (`mcp__github__create_issue` → `github`).
    server: str | None = None
    #: What the agent says the call is for (Claude Code's `description`): shown, never trusted.
    intent: str | None = None
    #: After the call: whether it succeeded, and a short summary of its result.
    succeeded: bool = True
    summary: str = ""


@dataclass(frozen=True)
class Answer:
    action: Action
    reason: str = ""
    #: Released arguments that differ from the ones the client proposed (None: unchanged).
    arguments: dict[str, Any] | None = None


NEUTRAL = Answer(Action.NEUTRAL)


@dataclass(frozen=True)
class Reply:
    """What the hook process writes and how it exits."""

    stdout: str = ""
    stderr: str = ""
    code: int = 0


def block(reason: str) -> Reply:
    """The one deny every supported client honours: exit 2 with the reason on stderr."""
    return Reply(stderr=reason.rstrip("\n") + "\n", code=BLOCK)


def as_json(value: Mapping[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":")) + "\n"


@dataclass(frozen=True)
class Client:
    """A supported client: how to read its events and how to answer them."""

    name: str
    parse: Callable[[Mapping[str, Any]], HookCall]
    render: Callable[[HookCall, Answer], Reply]
    #: The settings snippet to paste, given the hook command and its timeout in seconds.
    config: Callable[[str, int], str]
    #: Where that snippet goes.
    config_file: str
    #: Whether the client can defer a held call (`Action.DEFER`, `--on-pending defer`).
    defers: bool = False
    #: Clients with HTTP hooks: the JSON body that answers an event (`serve --hook-listen`).
    http_render: Callable[[HookCall, Answer], dict[str, Any]] | None = None
    #: And the settings snippet for an HTTP hook, given its URL, timeout in seconds and the
    #: environment variable holding the bearer token.
    http_config: Callable[[str, int, str], str] | None = None


# --------------------------------------------------------------------------- reading input


def text(event: Mapping[str, Any], key: str) -> str | None:
    value = event.get(key)
    return value if isinstance(value, str) and value else None


def tool_input(event: Mapping[str, Any], key: str = "tool_input") -> dict[str, Any]:
    """The call's arguments: an object, or a JSON string of one (Cursor's MCP events)."""
    value = event.get(key)
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            return {"input": value}
    if not isinstance(value, dict):
        raise HookInputError(f"`{key}` is not a JSON object")
    return value


def event_call(
    event: Mapping[str, Any], client: str, label: str, events: Mapping[str, Phase]
) -> HookCall:
    """The call a hook event begins: its event and phase, the working directory and session
    (the tool comes after, by each client's own names). `HookInputError` for an event the
    client does not send."""
    name = text(event, "hook_event_name")
    if name is None or name not in events:
        raise HookInputError(f"unknown {label} hook event {name!r}")
    return HookCall(
        client, name, events[name], cwd=text(event, "cwd"), session_id=text(event, "session_id")
    )


def required_tool(event: Mapping[str, Any]) -> str:
    name = text(event, "tool_name")
    if name is None:
        raise HookInputError("the hook input names no `tool_name`")
    return name


def mcp_server(client: str, tool: str, event: Mapping[str, Any] | None = None) -> str | None:
    """The MCP server of an MCP tool: `mcp__github__create_issue` → `github` (Claude Code,
    Codex); Gemini CLI names it in `mcp_context`, else `mcp_<server>_<tool>`."""
    if client in ("claude-code", "codex"):
        parts = tool.split("__", 2)
        return parts[1] if len(parts) == 3 and parts[0] == "mcp" and parts[1] else None
    if client == "gemini":
        context = (event or {}).get("mcp_context")
        if isinstance(context, Mapping):
            name = context.get("server_name") or context.get("serverName")
            if isinstance(name, str) and name:
                return name
        parts = tool.split("_", 2)
        return parts[1] if len(parts) == 3 and parts[0] == "mcp" and parts[1] else None
    return None


def result_summary(response: Any, limit: int = 400) -> tuple[bool, str]:
    """(succeeded, summary) of a tool's response as a client reports it after the call."""
    failed = False
    if isinstance(response, Mapping):
        failed = bool(
            response.get("is_error")
            or response.get("isError")
            or response.get("error")
            or response.get("interrupted")
            or response.get("success") is False
        )
    shown = response if isinstance(response, str) else json.dumps(response, default=str)
    shown = shown if len(shown) <= limit else shown[: limit - 1] + "…"
    return not failed, shown


# --------------------------------------------------------------------------- identity


def proposal_base(call: HookCall, agent: str, workspace: str) -> str:
    """The id stem of this call: the same session, tool, arguments and directory give the
    same stem, so a retry of the same call binds to the proposal the first attempt made."""
    key = json.dumps(
        [call.client, agent, workspace, call.session_id, call.tool, call.arguments, call.cwd],
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return "hk-" + hashlib.sha256(key.encode()).hexdigest()[:40]


def proposal_id(base: str, generation: int) -> str:
    """Generation 0 is the first time this call is made in the session; each time the same
    call ran (or its request expired or was withdrawn) the next one is a new proposal."""
    return base if generation == 0 else f"{base}.{generation}"


_TOKEN_BAD = re.compile(r"[^A-Za-z0-9_-]+")


def default_agent(client: str, user: str | None) -> str:
    """`<client>-<user>`, made a valid subject token."""
    name = f"{client}-{user or 'user'}"
    return _TOKEN_BAD.sub("_", name)[:128]


# --------------------------------------------------------------------------- wording


def pending_reason(request_id: str | None, proposal: str, waited: float) -> str:
    ask = f"request {request_id}" if request_id else f"proposal {proposal}"
    return (
        f"Headgate is holding this call for a human approval ({ask}); nobody decided within "
        f"{waited:g}s. It has not run. Ask again later: retrying exactly the same call picks "
        "up the decision, it does not open a second request."
    )


def pending_answer(
    request_id: str | None, proposal: str, waited: float, on_pending: str = OnPending.DENY
) -> Answer:
    """The answer for a call still held after `waited` seconds: a deny naming the request, or
    (`on_pending="defer"`) a deferral with the same words."""
    reason = pending_reason(request_id, proposal, waited)
    if on_pending == OnPending.DEFER:
        return Answer(Action.DEFER, reason)
    return Answer(Action.DENY, reason)


def blocked_reason(outcome: str, reason: str, request_id: str | None) -> str:
    what = {
        "denied": "Headgate's policy denies this call",
        "rejected": "An approver rejected this call",
        "expired": "Nobody approved this call in time",
        "cancelled": "This call was withdrawn",
    }.get(outcome, f"Headgate blocked this call ({outcome})")
    where = f" (request {request_id})" if request_id else ""
    because = f": {reason}" if reason else ""
    return f"{what}{where}{because}. It did not run; do not retry it unchanged."


def unavailable_reason(problem: str) -> str:
    return (
        f"Headgate could not check this call, so it is blocked: {problem.rstrip('.')}. "
        "Nothing ran. Tell the user: the approval gateway or its hook needs attention."
    )
