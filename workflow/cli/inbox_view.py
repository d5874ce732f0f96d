"""The terminal view of `headgate inbox`: pending requests, live; approve or reject with keys.

Without --watch it prints the list once. With --watch it refreshes every --interval seconds;
when stdin is a terminal it also reads keys (cbreak mode, restored on exit):
↑/↓ or k/j select, `a` approve, `r` reject (type the reason, Enter sends, Esc cancels), `q` quit.
Arguments are shown with secrets masked; every line names the tool and its command or target.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import termios
import tty
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from workflow.cli.common import (
    load_key,
)
from workflow.client.approver import Approver
from workflow.client.display import mask_secrets, summarize, target_of, time_left
from workflow.errors import HeadgateError
from workflow.messages import DecisionVerdict, PendingEntry
from workflow.signing import ApproverKey

UP, DOWN, ENTER, ESCAPE, BACKSPACE = "up", "down", "enter", "escape", "backspace"
_SEVERITY_STYLE = {"low": "green", "medium": "yellow", "high": "red", "critical": "bold red"}


# --------------------------------------------------------------------------- view state


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

    def update(self, entries: Sequence[PendingEntry]) -> None:
        """New data, newest first; the selection follows the request it was on."""
        current = self.current
        self.entries = sorted(entries, key=lambda e: e.created_at, reverse=True)
        ids = [e.request_id for e in self.entries]
        if current is not None and current.request_id in ids:
            self.selected = ids.index(current.request_id)
        self.selected = max(0, min(self.selected, len(self.entries) - 1))

    @property
    def current(self) -> PendingEntry | None:
        return self.entries[self.selected] if 0 <= self.selected < len(self.entries) else None

    def on_key(self, key: str) -> Action | None:
        if self.typing_reason:
            return self._reason_key(key)
        if key in (UP, "k"):
            self.selected = max(self.selected - 1, 0)
        elif key in (DOWN, "j"):
            self.selected = min(self.selected + 1, max(len(self.entries) - 1, 0))
        elif key == "q":
            self.quit = True
        elif key == "a" and self.current is not None:
            return Action(DecisionVerdict.APPROVE, self.current, "")
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


def render(state: InboxState, now: datetime, *, interactive: bool) -> RenderableType:
    """The inbox as a rich renderable: a table of pending requests and a status area."""
    table = Table(
        title=f"{len(state.entries)} pending" if state.entries else "nothing pending",
        expand=True, show_lines=True, title_justify="left",
    )  # fmt: skip
    for name, ratio in (("", 0), ("tool", 1), ("arguments", 3), ("risk", 3), ("approvals", 1),
                        ("agent / workspace", 1), ("left", 0)):  # fmt: skip
        table.add_column(name, ratio=ratio or None, overflow="fold")
    for i, e in enumerate(state.entries):
        mark = "▶" if interactive and i == state.selected else ""
        style = _SEVERITY_STYLE.get(str(e.severity), "")
        risk = Text(f"{e.risk_class} ({e.severity})", style=style)
        for reason in e.reasons:
            risk.append(f"\n• {reason}", style="dim")
        needed = e.requirement.approvals_needed
        approvals = f"{len(e.approvals)}/{needed}" + (
            "\n" + ", ".join(e.approvals) if e.approvals else ""
        )
        table.add_row(
            mark, Text(e.tool, style="bold"), Text(_arguments(e)), risk, Text(approvals),
            Text(f"{e.agent} / {e.workspace}"), Text(time_left(e.expires_at, now)),
        )  # fmt: skip
    footer: list[RenderableType] = []
    current = state.current
    if current is not None:
        footer.append(Text(summarize(current, now)))
    if state.typing_reason:
        footer.append(Text(f"reject — reason: {state.reason}▏ (Enter sends, Esc cancels)"))
    elif interactive:
        footer.append(Text("↑/↓ select · a approve · r reject · q quit", style="dim"))
    if state.message:
        footer.append(Text(state.message, style="italic"))
    return Group(table, *footer)


def _arguments(entry: PendingEntry) -> str:
    target = target_of(entry.arguments)
    masked = json.dumps(mask_secrets(entry.arguments), ensure_ascii=False, sort_keys=True)
    if len(masked) > 400:
        masked = masked[:399] + "…"
    return f"{target}\n{masked}" if target and target not in masked else masked


# --------------------------------------------------------------------------- terminal keys


def parse_keys(data: str) -> Iterator[str]:
    """Key names from raw terminal input (arrow escape sequences, Enter, Backspace, chars)."""
    i = 0
    while i < len(data):
        if data.startswith(("\x1b[A", "\x1bOA"), i):
            yield UP
            i += 3
        elif data.startswith(("\x1b[B", "\x1bOB"), i):
            yield DOWN
            i += 3
        elif data[i] == "\x1b":
            yield ESCAPE
            i += 1
        else:
            ch = data[i]
            yield ENTER if ch in "\r\n" else BACKSPACE if ch in "\x7f\x08" else ch
            i += 1


@contextlib.contextmanager
def key_reader(queue: asyncio.Queue[str]) -> Iterator[None]:
    """Put keys typed on the terminal into `queue` (cbreak mode, restored on exit)."""
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    loop = asyncio.get_running_loop()

    def readable() -> None:
        for key in parse_keys(os.read(fd, 64).decode(errors="ignore")):
            queue.put_nowait(key)

    tty.setcbreak(fd)
    loop.add_reader(fd, readable)
    try:
        yield
    finally:
        loop.remove_reader(fd)
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


# --------------------------------------------------------------------------- command


async def fetch(approver: Approver, workspaces: Sequence[str], limit: int) -> list[PendingEntry]:
    if len(workspaces) == 1:
        return await approver.pending(workspace=workspaces[0], limit=limit)
    entries = await approver.pending(limit=1000)
    return [e for e in entries if not workspaces or e.workspace in workspaces][:limit]


async def _decide(approver: Approver, action: Action, signer: ApproverKey) -> str:
    approver.key = signer
    result = await approver.decide(
        action.entry.request_id, action.entry.proposal_digest, action.verdict, action.reason
    )
    what = "approved" if action.verdict == DecisionVerdict.APPROVE else "rejected"
    verdict = {True: "accepted", False: "refused", None: "sent"}[result.accepted]
    return f"{what} {action.entry.tool} ({action.entry.request_id}): {verdict} — {result.message}"


async def watch_inbox(
    approver: Approver, workspaces: Sequence[str], limit: int, interval: float,
    out: Console, interactive: bool, load_key: KeyLoader,
) -> None:  # fmt: skip
    state = InboxState()
    keys: asyncio.Queue[str] = asyncio.Queue()
    with (
        key_reader(keys) if interactive else contextlib.nullcontext(),
        Live(console=out, auto_refresh=False, screen=False) as live,
    ):
        while not state.quit:
            state.update(await fetch(approver, workspaces, limit))
            live.update(render(state, datetime.now(UTC), interactive=interactive), refresh=True)
            try:
                key = await asyncio.wait_for(keys.get(), interval)
            except TimeoutError:
                continue
            action = state.on_key(key)
            if action is not None:
                try:
                    state.message = await _decide(approver, action, load_key())
                except HeadgateError as exc:
                    state.message = f"error: {exc}"


class KeyLoader:
    """Loads the approver key on first use, so a read-only view needs none."""

    def __init__(self, key: Path | None, data_dir: Path):
        self.path, self.data_dir = key, data_dir
        self.loaded: ApproverKey | None = None

    def __call__(self) -> ApproverKey:
        if self.loaded is None:
            self.loaded = load_key(self.path, self.data_dir)
        return self.loaded
