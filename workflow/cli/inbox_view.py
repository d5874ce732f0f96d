"""The live view of `headgate inbox --watch`: pending requests; approve or reject with keys.

It refreshes every --interval seconds (what it shows is `workflow.cli.inbox_render`, all that
`inbox` without --watch imports); when stdin is a terminal it also reads keys (cbreak mode,
restored on exit):
↑/↓ or k/j select, `a` approve, `r` reject (type the reason, Enter sends, Esc cancels), `q` quit.
Arguments are shown with secrets masked; every line names the tool and its command or target.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import termios
import tty
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.live import Live

from workflow.cli.common import load_key
from workflow.cli.inbox_render import (
    BACKSPACE,
    DOWN,
    ENTER,
    ESCAPE,
    UP,
    Action,
    InboxState,
    fetch,
    render,
)
from workflow.client import transport
from workflow.client.approver import Approver
from workflow.client.display import mask_text
from workflow.client.verify import ShownRequest, shown_proposal
from workflow.controls import FreezeInfo
from workflow.errors import HeadgateError
from workflow.messages import DecisionVerdict
from workflow.signing import ApproverKey

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


async def _decide(approver: Approver, action: Action, signer: ApproverKey) -> str:
    """Sign the decision only for the proposal the view showed: fetched whole by request id,
    it must agree with the entry and hash to the entry's digest."""
    approver.key = signer
    entry = action.entry
    history = await transport.history(approver.nc, approver.subjects, entry.request_id)
    if history is None or history.request_id != entry.request_id:
        return f"error: the service does not know request {entry.request_id}"
    proposal = shown_proposal(entry, history.proposal)
    request = ShownRequest(entry.request_id, proposal, entry.proposal_digest)
    result = await approver.decide(request, action.verdict, action.reason)
    what = "approved" if action.verdict == DecisionVerdict.APPROVE else "rejected"
    verdict = {True: "accepted", False: "refused", None: "sent"}[result.accepted]
    return f"{what} {entry.tool} ({entry.request_id}): {verdict} — {mask_text(result.message)}"


async def watch_inbox(
    approver: Approver, workspaces: Sequence[str], limit: int, interval: float,
    out: Console, interactive: bool, load_key: KeyLoader,
) -> None:  # fmt: skip
    state = InboxState()
    keys: asyncio.Queue[str] = asyncio.Queue()
    unreachable = False
    view = _View(out)
    with key_reader(keys) if interactive else contextlib.nullcontext(), view:
        while not state.quit:
            try:
                state.update(await fetch(approver, workspaces, limit))
                state.freezes = await _freezes(approver, state.freezes)
                if unreachable:
                    state.message, unreachable = "connected to the service again", False
            except HeadgateError as exc:  # serve restarting: keep the last view, try again
                state.message, unreachable = f"the service is unreachable ({exc}); retrying", True
            view.show(state, interactive=interactive)
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


async def _freezes(approver: Approver, shown: list[FreezeInfo]) -> list[FreezeInfo]:
    """The freezes in force; what was shown when they cannot be read now (an older service,
    a server that does not let this approver ask)."""
    try:
        return (await approver.freezes()).freezes
    except HeadgateError:
        return shown


class _View:
    """A terminal redraws the view in place; anything else (a pipe, a log file) gets the whole
    view again each time what it shows changes, so the output is a readable log."""

    def __init__(self, out: Console):
        self.out = out
        self.live = Live(console=out, auto_refresh=False, screen=False) if out.is_terminal else None
        self.last: tuple[object, ...] | None = None

    def __enter__(self) -> _View:
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    def show(self, state: InboxState, *, interactive: bool) -> None:
        now = datetime.now(UTC)
        if self.live is not None:
            self.live.update(render(state, now, interactive=interactive), refresh=True)
            return
        seen = (
            tuple((e.request_id, tuple(e.approvals)) for e in state.entries),
            tuple(f.freeze_id for f in state.freezes),
            state.message,
        )
        if seen != self.last:
            self.last = seen
            self.out.print(f"--- {now:%Y-%m-%d %H:%M:%S} UTC")
            self.out.print(render(state, now, interactive=False))
            self.out.file.flush()


class KeyLoader:
    """Loads the approver key on first use, so a read-only view needs none."""

    def __init__(self, key: Path | None, data_dir: Path):
        self.path, self.data_dir = key, data_dir
        self.loaded: ApproverKey | None = None

    def __call__(self) -> ApproverKey:
        if self.loaded is None:
            self.loaded = load_key(self.path, self.data_dir)
        return self.loaded
