"""The `headgate` command."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from workflow.cli import (
    backtest,
    bench,
    calls,
    controls,
    db,
    dead,
    hook,
    inbox,
    offline,
    policy_cmds,
    web,
)
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


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("headgate")
        except PackageNotFoundError:  # run from a source tree that was never installed
            found = "(version unknown: the package is not installed)"
        sys.stdout.write(f"headgate {found}\n")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    pass


app.command()(serve)
app.command()(calls.propose)
app.command()(calls.pending)
app.command()(calls.approve)
app.command()(calls.reject)
app.command()(calls.show)
app.command()(dead.dead)
app.command()(inbox.inbox)
app.command()(bench.bench)
app.command()(hook.hook)
app.command("mcp-proxy")(hook.mcp_proxy)
app.command()(offline.classify)
app.command()(offline.rules)
app.command()(offline.schemas)
app.command()(policy_cmds.explain)
app.command()(controls.freeze)
app.command()(controls.thaw)
policy_cmds.policy_app.command("backtest")(backtest.backtest)
app.add_typer(policy_cmds.policy_app, name="policy")
app.add_typer(policy_cmds.tools_app, name="tools")
app.add_typer(offline.keys_app, name="keys")
app.add_typer(offline.audit_app, name="audit")
app.add_typer(db.db_app, name="db")
app.add_typer(web.web_app, name="web")
app.add_typer(controls.grants_app, name="grants")


def main() -> None:
    try:
        app()
    except HeadgateError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
