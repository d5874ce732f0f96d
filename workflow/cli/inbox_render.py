"""What `headgate inbox` and `headgate pending` show: the view's state (no I/O: a test drives
it with keys) and its rendering, pending requests with secrets masked.

The live view (`--watch`: the terminal, keys, decisions) is `workflow.cli.inbox_view`; this
module is all that `headgate pending` and `headgate inbox` without `--watch` import of it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from workflow.client.display import (
    INTENT_LABEL,
    describe_freeze,
    intent_text,
    mask_secrets,
    mask_text,
    summarize,
    target_of,
    time_left,
)
from workflow.controls import FreezeInfo
from workflow.messages import DecisionVerdict, PendingEntry

if TYPE_CHECKING:
    from workflow.client.approver import Approver

UP, DOWN, ENTER, ESCAPE, BACKSPACE = "up", "down", "enter", "escape", "backspace"
_SEVERITY_STYLE = {"low": "green", "medium": "yellow", "high": "red", "critical": "bold red"}


# --------------------------------------------------------------------------- view state

#: Calls approved only after a second key press: they run commands, destroy, or are high risk.
CONFIRM_CLASSES = frozenset({"exec", "destructive"})
CONFIRM_SEVERITIES = frozenset({"high", "critical"})


def needs_confirmation(entry: PendingEntry) -> bool:
    return entry.risk_class in CONFIRM_CLASSES or entry.severity in CONFIRM_SEVERITIES


@dataclass(frozen=True, slots=True)
class Action:
    verdict: DecisionVerdict
    entry: PendingEntry
    reason: str


@dataclass
class InboxState:
    """What the view shows and how keys change it; no I/O, so a test drives it directly."""

    entries: list[PendingEntry] = field(default_factory=list)
    selected: int = 0
    typing_reason: bool = False
    reason: str = ""
    message: str = ""
    quit: bool = False
    #: The selected request is shown whole (Enter or d toggles it).
    detail: bool = False
    #: An approval waiting for its confirmation (y), for a call that needs one.
    confirming: Action | None = None
    #: The freezes in force (`api.freezes`), shown above the requests.
    freezes: list[FreezeInfo] = field(default_factory=list)

    def update(self, entries: Sequence[PendingEntry]) -> None:
        """New data, newest first; the selection follows the request it was on."""
        current = self.current
        self.entries = sorted(entries, key=lambda e: e.created_at, reverse=True)
        ids = [e.request_id for e in self.entries]
        if current is not None and current.request_id in ids:
            self.selected = ids.index(current.request_id)
        self.selected = max(0, min(self.selected, len(self.entries) - 1))
        if self.confirming is not None and self.confirming.entry.request_id not in ids:
            self.confirming = None
            self.message = "the request waiting for confirmation is no longer pending"

    @property
    def current(self) -> PendingEntry | None:
        return self.entries[self.selected] if 0 <= self.selected < len(self.entries) else None

    def on_key(self, key: str) -> Action | None:
        if self.typing_reason:
            return self._reason_key(key)
        if self.confirming is not None:
            action, self.confirming = self.confirming, None
            if key in ("y", "Y"):
                return action
            self.message = "not approved"
            return None
        if key in (UP, "k"):
            self.selected = max(self.selected - 1, 0)
        elif key in (DOWN, "j"):
            self.selected = min(self.selected + 1, max(len(self.entries) - 1, 0))
        elif key in (ENTER, "d"):
            self.detail = not self.detail
        elif key == "q":
            self.quit = True
        elif key == "a" and self.current is not None:
            action = Action(DecisionVerdict.APPROVE, self.current, "")
            if needs_confirmation(self.current):
                self.confirming = action
                return None
            return action
        elif key == "r" and self.current is not None:
            self.typing_reason, self.reason = True, ""
        return None

    def _reason_key(self, key: str) -> Action | None:
        if key == ESCAPE:
            self.typing_reason = False
        elif key == BACKSPACE:
            self.reason = self.reason[:-1]
        elif key == ENTER:
            if not self.reason.strip():
                self.message = "a rejection needs a reason"
                return None
            self.typing_reason = False
            if self.current is not None:
                return Action(DecisionVerdict.REJECT, self.current, self.reason.strip())
        elif len(key) == 1 and key.isprintable():
            self.reason += key
        return None


def render_entries(
    entries: Sequence[PendingEntry], now: datetime, *, selected: int | None = None
) -> list[RenderableType]:
    """Each pending request as a block that reads at 80 columns: its request id alone at the
    start of the first line (so it can be selected and copied whole), then what it is."""
    blocks: list[RenderableType] = []
    for i, e in enumerate(entries):
        mark = "▶ " if selected is not None and i == selected else "  "
        head = Text(mark, style="bold")
        head.append(e.request_id, style="bold")
        head.append("  ")
        head.append(e.tool, style="bold")
        target = target_of(e.arguments)
        if target:
            head.append(f" `{target}`")
        lines: list[RenderableType] = [head]
        status = Text("  ")
        status.append(f"{e.risk_class} ({e.severity})", style=_SEVERITY_STYLE.get(str(e.severity)))
        status.append(
            f" · {_approvals(e)} · {e.agent} / {e.workspace} · {_left(e.expires_at, now)}"
        )
        lines.append(status)
        lines.append(Text(f"  arguments: {_arguments(e)}", style="dim"))
        said = intent_text(e.intent)
        if said:
            lines.append(Text(f'  {INTENT_LABEL}: "{said}"', style="italic"))
        for reason in e.reasons:
            lines.append(Text(f"  • {mask_text(reason)}", style="dim"))
        blocks.append(Group(*lines, Text("")))
    return blocks


def render_detail(entry: PendingEntry, now: datetime) -> RenderableType:
    """Everything about one request, arguments in full (secrets masked)."""
    req = entry.requirement
    needs = f"{req.approvals_needed} approval(s)"
    if req.roles:
        needs += f" from a role among {', '.join(req.roles)}"
    if req.four_eyes:
        needs += ", two distinct approvers"
    rows = [
        ("request", entry.request_id),
        ("proposal", entry.proposal_id),
        ("agent / workspace", f"{entry.agent} / {entry.workspace}"),
        ("tool", entry.tool),
        ("risk", f"{entry.risk_class} ({entry.severity})"),
        ("needs", needs),
        ("approved by", ", ".join(entry.approvals) or "nobody yet"),
        ("held", f"{entry.created_at:%Y-%m-%d %H:%M:%S} UTC"),
        ("expires", f"{entry.expires_at:%Y-%m-%d %H:%M:%S} UTC ({_left(entry.expires_at, now)})"),
    ]
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for name, value in rows:
        table.add_row(name, Text(value))
    said = intent_text(entry.intent, limit=2000)
    table.add_row(
        "intent", Text(f'{INTENT_LABEL}: "{said}"' if said else "none given", style="italic")
    )
    arguments = json.dumps(mask_secrets(entry.arguments), ensure_ascii=False, indent=2,
                           sort_keys=True)  # fmt: skip
    if len(arguments) > 8000:
        arguments = arguments[:7999] + "…"
    table.add_row("arguments", Text(arguments))
    table.add_row("reasons", Text("\n".join(f"• {mask_text(r)}" for r in entry.reasons)))
    return table


def render(state: InboxState, now: datetime, *, interactive: bool) -> RenderableType:
    """The inbox as a rich renderable: the pending requests and a status area."""
    title = Text(f"{len(state.entries)} pending" if state.entries else "nothing pending",
                 style="bold")  # fmt: skip
    parts: list[RenderableType] = [title]
    for freeze in state.freezes:
        parts.append(Text(f"frozen: {describe_freeze(freeze)}", style="bold red"))
    parts.append(Text(""))
    current = state.current
    if state.detail and current is not None:
        parts.append(render_detail(current, now))
        parts.append(Text(""))
    else:
        selected = state.selected if interactive else None
        parts.extend(render_entries(state.entries, now, selected=selected))
    if current is not None:
        parts.append(Text(summarize(current, now)))
    if state.confirming is not None:
        e = state.confirming.entry
        parts.append(
            Text(
                f"approve {e.tool} `{target_of(e.arguments)}` ({e.risk_class}, {e.severity}) "
                f"in request {e.request_id}? y approves, any other key cancels",
                style="bold",
            )
        )
    elif state.typing_reason:
        parts.append(Text(f"reject — reason: {state.reason}▏ (Enter sends, Esc cancels)"))
    elif interactive:
        parts.append(
            Text("↑/↓ select · Enter/d details · a approve · r reject · q quit", style="dim")
        )
    if state.message:
        parts.append(Text(state.message, style="italic"))
    return Group(*parts)


def _approvals(e: PendingEntry) -> str:
    needed = e.requirement.approvals_needed
    names = f" ({', '.join(e.approvals)})" if e.approvals else ""
    return f"{len(e.approvals)}/{needed} approvals{names}"


def _left(expires_at: datetime, now: datetime) -> str:
    left = time_left(expires_at, now)
    return left if left == "expired" else f"{left} left"


def _arguments(entry: PendingEntry) -> str:
    masked = json.dumps(mask_secrets(entry.arguments), ensure_ascii=False, sort_keys=True)
    return masked if len(masked) <= 400 else masked[:399] + "…"


async def fetch(approver: Approver, workspaces: Sequence[str], limit: int) -> list[PendingEntry]:
    if len(workspaces) == 1:
        return await approver.pending(workspace=workspaces[0], limit=limit)
    entries = await approver.pending(limit=1000)
    return [e for e in entries if not workspaces or e.workspace in workspaces][:limit]
