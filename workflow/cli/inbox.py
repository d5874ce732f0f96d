"""`headgate inbox`: pending requests in a live terminal view; approve or reject with keys.

What it shows is `workflow.cli.inbox_render`, and the live view `workflow.cli.inbox_view`,
each imported when the command runs (the live one only with --watch).
"""

from __future__ import annotations

import contextlib
import getpass
import sys
from datetime import UTC, datetime
from typing import Annotated

import typer

from workflow.cli.common import (
    DEFAULT_DATA_DIR,
    DataDir,
    KeyOpt,
    NatsUrl,
    Prefix,
    connected,
    console,
)


def inbox(
    watch: Annotated[
        bool, typer.Option("--watch", help="Keep the view live (keys on a TTY).")
    ] = False,
    workspace: Annotated[
        list[str] | None,
        typer.Option("--workspace", help="Only this workspace (repeat for several)."),
    ] = None,
    key: KeyOpt = None,
    approver: Annotated[str | None, typer.Option("--approver", help="Display name.")] = None,
    interval: Annotated[float, typer.Option("--interval", min=0.2, help="Refresh seconds.")] = 1.0,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 100,
    nats_url: NatsUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    prefix: Prefix = "headgate",
) -> None:
    """Pending requests, newest first, secrets masked. --watch: live, with keys to decide."""
    import asyncio

    from workflow.cli.inbox_render import InboxState, fetch, render
    from workflow.client.approver import Approver

    workspaces = list(workspace or [])
    interactive = watch and sys.stdin.isatty()

    async def run() -> None:
        async with connected(nats_url, data_dir) as nc:
            # No key until the first decision: a read-only view needs none.
            client = Approver(nc, name=approver or getpass.getuser(), key=None, prefix=prefix)
            if not watch:
                state = InboxState()
                state.update(await fetch(client, workspaces, limit))
                console.print(render(state, datetime.now(UTC), interactive=False))
                return
            from workflow.cli.inbox_view import KeyLoader, watch_inbox

            load_key = KeyLoader(key, data_dir)
            with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
                await watch_inbox(
                    client, workspaces, limit, interval, console, interactive, load_key
                )

    asyncio.run(run())
