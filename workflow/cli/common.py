"""What every command shares: finding NATS, talking to the API, printing and errors."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from workflow.datadir import LOCAL_KEY_FILE
from workflow.errors import ConfigError, ConnectError

if TYPE_CHECKING:
    from nats.aio.client import Client as NATS
    from pydantic import BaseModel

    from workflow.client.connection import Role
    from workflow.signing import ApproverKey
    from workflow.subjects import Subjects

# The CLI starts light: a command imports its own module alone (`workflow.cli.COMMANDS`), and
# `headgate --help` the command modules, not NATS, pydantic, the SDKs, the classifier or the
# service. Each command imports what it uses when it runs, the client commands nothing of the
# service side (measured with `python -X importtime`; see the README's Development section).

console = Console()
err_console = Console(stderr=True, soft_wrap=True)

M = TypeVar("M", bound="BaseModel")

DataDir = Annotated[
    Path,
    typer.Option(
        "--data-dir",
        envvar="HEADGATE_DATA_DIR",
        help="Where serve keeps its state.",
        show_default=True,
    ),
]
NatsUrl = Annotated[
    str | None,
    typer.Option(
        "--nats-url",
        envvar="HEADGATE_NATS_URL",
        help="NATS server URL(s), comma-separated. Default: the one `headgate serve` recorded "
        "in the data dir.",
    ),
]
Prefix = Annotated[str, typer.Option("--prefix", envvar="HEADGATE_PREFIX", help="Subject prefix.")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
ScopeOpt = Annotated[
    str | None,
    typer.Option(
        "--scope",
        help="What the grant covers: `command-prefix` (default for a command: the call's argv), "
        "`path` (default for a file call: its directory and below) or `tool` (any call of the "
        "tool that carries no command).",
    ),
]

DEFAULT_DATA_DIR = Path(".headgate")


def print_error(message: str) -> None:
    """`error: <message>` on stderr. The message is escaped: it quotes paths, names and
    package extras (`headgate[postgres]`), whose brackets rich would take for markup."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False)


def fail(message: str, code: int = 2) -> NoReturn:
    print_error(message)
    raise typer.Exit(code)


#: Seconds a command waits for NATS before it gives up with one line (`--connect-timeout`).
CLI_CONNECT_TIMEOUT = 3.0


@asynccontextmanager
async def connected(
    nats_url: str | None,
    data_dir: Path,
    *,
    role: Role | None = None,
    agent: str | None = None,
    connect_timeout: float = CLI_CONNECT_TIMEOUT,
) -> AsyncIterator[NATS]:
    """A connection as `role` (default: approver), found by `resolve_nats` (option,
    environment, data dir; an `agent`'s own credentials when it has some)."""
    from workflow.client import connection
    from workflow.client.connection import Role, resolve_nats

    target = resolve_nats(nats_url, role=role or Role.APPROVER, data_dir=data_dir, agent=agent)
    try:
        nc = await connection.connect(target, name="headgate-cli", connect_timeout=connect_timeout)
    except ConnectError as exc:
        raise ConnectError(f"{exc}; is `headgate serve` running?") from None
    from workflow.client.trust import use_data_dir

    use_data_dir(nc, data_dir)  # the service key it wrote there (service.pub) is the one trusted
    try:
        yield nc
    finally:
        with contextlib.suppress(Exception):
            await nc.drain()


async def api_call(
    nc: NATS, subjects: Subjects, name: str, body: BaseModel, reply: type[M], timeout: float = 5.0
) -> M:
    """Ask `<prefix>.api.<name>`; the service's error sentence becomes the CLI's error."""
    from workflow.client import transport

    return await transport.ask(nc, subjects.api(name), body, reply, timeout)


def print_json(value: Any) -> None:
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        sys.stdout.write(value.model_dump_json(indent=2) + "\n")
    else:
        sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


def parse_json_option(text: str, option: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{option} is not valid JSON: {exc.msg} at column {exc.colno}") from exc


def load_key(key: Path | None, data_dir: Path) -> ApproverKey:
    from workflow.signing import ApproverKey

    if key is not None:
        return ApproverKey.from_file(key)
    env = os.environ.get("HEADGATE_APPROVER_KEY")
    if env:
        return ApproverKey.from_file(Path(env))
    local = data_dir / LOCAL_KEY_FILE
    if local.exists():
        return ApproverKey.from_file(local)
    raise ConfigError(
        "no approver key: pass --key FILE or set HEADGATE_APPROVER_KEY "
        f"(create one with `headgate keys new NAME`); {local} does not exist either."
    )


KeyOpt = Annotated[
    Path | None,
    typer.Option(
        "--key",
        help="Approver seed file. Default: $HEADGATE_APPROVER_KEY, then the data dir's local key.",
    ),
]
