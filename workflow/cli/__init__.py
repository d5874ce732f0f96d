"""The `headgate` command."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, MutableMapping
from typing import Annotated, Any

import typer
from typer import _click
from typer.core import TyperGroup
from typer.main import get_command_from_info, get_group_from_info
from typer.models import CommandInfo, TyperInfo

from workflow.errors import HeadgateError

#: Every command in the order `headgate --help` lists it: the module that defines it and the
#: function there, then the sub-command groups and their Typer apps. A module is imported when
#: its command runs (or when `--help` lists them all), so `headgate propose` loads what
#: proposing needs, not the policy engine, the classifier or the service.
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("workflow.cli.serve", "serve"),
    "propose": ("workflow.cli.calls", "propose"),
    "pending": ("workflow.cli.calls", "pending"),
    "approve": ("workflow.cli.calls", "approve"),
    "reject": ("workflow.cli.calls", "reject"),
    "show": ("workflow.cli.calls", "show"),
    "dead": ("workflow.cli.dead", "dead"),
    "inbox": ("workflow.cli.inbox", "inbox"),
    "bench": ("workflow.cli.bench", "bench"),
    "hook": ("workflow.cli.hook", "hook"),
    "mcp-proxy": ("workflow.cli.hook", "mcp_proxy"),
    "classify": ("workflow.cli.offline", "classify"),
    "rules": ("workflow.cli.offline", "rules"),
    "schemas": ("workflow.cli.offline", "schemas"),
    "explain": ("workflow.cli.policy_cmds", "explain"),
    "freeze": ("workflow.cli.controls", "freeze"),
    "thaw": ("workflow.cli.controls", "thaw"),
}
GROUPS: dict[str, tuple[str, str]] = {
    "policy": ("workflow.cli.policy_cmds", "policy_app"),
    "tools": ("workflow.cli.policy_cmds", "tools_app"),
    "keys": ("workflow.cli.offline", "keys_app"),
    "audit": ("workflow.cli.offline", "audit_app"),
    "web": ("workflow.cli.web", "web_app"),
    "grants": ("workflow.cli.controls", "grants_app"),
    "agents": ("workflow.cli.agents", "agents_app"),
    "db": ("workflow.cli.db", "db_app"),
}


def _attribute(where: tuple[str, str]) -> Any:
    module, name = where
    return getattr(importlib.import_module(module), name)


class _Commands(MutableMapping[str, "_click.Command"]):
    """The root group's commands by name, each built from its module on first use; the names
    (for `--help`, and "did you mean" after a typo) are known without importing any."""

    def __init__(self, group: LazyGroup) -> None:
        self._group = group
        self._built: dict[str, _click.Command] = {}

    def __getitem__(self, name: str) -> _click.Command:
        if name not in self._built:
            self._built[name] = self._build(name)
        return self._built[name]

    def _build(self, name: str) -> _click.Command:
        markup = self._group.rich_markup_mode
        if name in COMMANDS:
            info = CommandInfo(name, callback=_attribute(COMMANDS[name]))
            return get_command_from_info(
                info, pretty_exceptions_short=app.pretty_exceptions_short, rich_markup_mode=markup
            )
        if name in GROUPS:
            return get_group_from_info(
                TyperInfo(_attribute(GROUPS[name]), name=name),
                pretty_exceptions_short=app.pretty_exceptions_short,
                rich_markup_mode=markup,
                suggest_commands=self._group.suggest_commands,
            )
        raise KeyError(name)

    def __setitem__(self, name: str, command: _click.Command) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        raise TypeError("the CLI's commands are fixed")

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from GROUPS
        yield from (name for name in self._built if name not in COMMANDS and name not in GROUPS)

    def __len__(self) -> int:
        return len(list(iter(self)))

    def __contains__(self, name: object) -> bool:
        return name in COMMANDS or name in GROUPS or name in self._built


class LazyGroup(TyperGroup):
    """The `headgate` group, whose commands are built when they are looked up."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _Commands(self)

    def list_commands(self, ctx: _click.Context) -> list[str]:
        return list(self.commands)


app = typer.Typer(
    name="headgate",
    help="Approval gateway for AI-agent tool calls on NATS JetStream.",
    no_args_is_help=True,
    rich_markup_mode="markdown",  # help paragraphs reflow to the terminal's width
    pretty_exceptions_enable=False,
    add_completion=False,
    cls=LazyGroup,
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


def main() -> None:
    try:
        app()
    except HeadgateError as exc:
        from workflow.cli.common import print_error

        print_error(str(exc))
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
