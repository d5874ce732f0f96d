"""The `headgate` command."""

from __future__ import annotations

import sys

import typer

from workflow.cli import bench, calls, dead, inbox, offline, policy_cmds
from workflow.cli.common import err_console
from workflow.cli.serve import serve
from workflow.errors import HeadgateError

app = typer.Typer(
    name="headgate",
    help="Approval gateway for AI-agent tool calls on NATS JetStream.",
    no_args_is_help=True,
    rich_markup_mode="markdown",  # help paragraphs reflow to the terminal's width
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command()(serve)
app.command()(calls.propose)
app.command()(calls.pending)
app.command()(calls.approve)
app.command()(calls.reject)
app.command()(calls.show)
app.command()(dead.dead)
app.command()(inbox.inbox)
app.command()(bench.bench)
app.command()(offline.classify)
app.command()(offline.schemas)
app.command()(policy_cmds.explain)
app.add_typer(policy_cmds.policy_app, name="policy")
app.add_typer(policy_cmds.tools_app, name="tools")
app.add_typer(offline.keys_app, name="keys")
app.add_typer(offline.audit_app, name="audit")


def main() -> None:
    try:
        app()
    except HeadgateError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
