"""`headgate agents …`: agents with an identity of their own on the embedded server."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from workflow.cli.common import DEFAULT_DATA_DIR, DataDir, JsonOut, console, fail, print_json
from workflow.errors import ConfigError

agents_app = typer.Typer(
    help="""Agents with their own identity. Without one, every agent connects to the embedded
    nats-server as the shared agent user, which can propose, cancel and read results as ANY
    agent (one prompt-injected agent can impersonate the others). A registered agent gets its
    own NATS user, allowed only its own subjects, and its own HTTP hook token; the shared user
    and the shared hook token are refused for it. Clients running as that agent (the SDK,
    `headgate propose`, `headgate hook`, `headgate mcp-proxy`) find its credentials in the data
    dir by themselves. A running `headgate serve` applies a change within a second.""",
    no_args_is_help=True,
)

NameArg = Annotated[
    str,
    typer.Argument(
        help="The agent's name, as the agent runs with (--agent): letters, digits, - and _.",
        show_default=False,
    ),
]
WaitOpt = Annotated[
    float,
    typer.Option(
        "--wait",
        help="Seconds to wait for a running `headgate serve` to apply the change.",
        min=0,
    ),
]


@agents_app.command()
def add(
    name: NameArg, data_dir: DataDir = DEFAULT_DATA_DIR, wait: WaitOpt = 15.0,
    json_out: JsonOut = False,
) -> None:  # fmt: skip
    """Register an agent: its own NATS credentials (credentials/agents/NAME.nk) and HTTP hook
    token (credentials/agents/NAME.token), both readable by their owner only.

    Exit 0 once the running `headgate serve` applied it (or none runs: the next start does);
    exit 1 when a running serve did not within --wait seconds.
    """
    from workflow import agent_identities

    try:
        found = agent_identities.add(data_dir, name)
    except ConfigError as exc:
        fail(str(exc))
    applied = _wait_applied(data_dir, name, present=True, wait=wait)
    if json_out:
        print_json({"agent": name, "credentials": str(found.seed), "hook_token": str(found.token),
                    "public_key": found.public_key, "applied": applied})  # fmt: skip
    else:
        console.print(f"registered agent [bold]{escape(name)}[/] ({found.public_key})")
        console.print(f"  NATS credentials: {escape(str(found.seed))}")
        console.print(f"  HTTP hook token:  {escape(str(found.token))}")
        console.print(f"  {escape(_applied_sentence(applied, data_dir, name, 'added'))}")
    if applied == "not applied":
        raise typer.Exit(1)


@agents_app.command()
def remove(
    name: NameArg, data_dir: DataDir = DEFAULT_DATA_DIR, wait: WaitOpt = 15.0,
    json_out: JsonOut = False,
) -> None:  # fmt: skip
    """Remove an agent's own identity: its connections are closed, and it connects as the shared
    agent user again (if `serve` keeps one).

    Exit 0 once the running `headgate serve` applied it (or none runs); exit 1 when a running
    serve did not within --wait seconds.
    """
    from workflow import agent_identities

    try:
        agent_identities.remove(data_dir, name)
    except ConfigError as exc:
        fail(str(exc))
    applied = _wait_applied(data_dir, name, present=False, wait=wait)
    if json_out:
        print_json({"agent": name, "removed": True, "applied": applied})
    else:
        console.print(f"removed agent [bold]{escape(name)}[/]")
        console.print(f"  {escape(_applied_sentence(applied, data_dir, name, 'removed'))}")
    if applied == "not applied":
        raise typer.Exit(1)


@agents_app.command("list")
def list_agents(data_dir: DataDir = DEFAULT_DATA_DIR, json_out: JsonOut = False) -> None:
    """The registered agents, and whether the running `headgate serve` has applied each."""
    from workflow import agent_identities, datadir

    found = agent_identities.registered(data_dir)
    running = datadir.running_serve(data_dir)
    applied = agent_identities.read_applied(data_dir) if running else None
    if applied is not None and applied.pid != running:
        applied = None  # a previous serve's
    rows = []
    for name, identity in found.items():
        if applied is None:
            state = "serve not running" if running is None else "not applied yet"
        elif applied.embedded and applied.agents.get(name) != identity.public_key:
            state = "not applied yet"
        elif not applied.embedded and name not in applied.hook_agents:
            state = "not applied yet"
        else:
            state = "applied" if applied.embedded else "hook token applied (external NATS)"
        rows.append({"agent": name, "public_key": identity.public_key, "state": state,
                     "credentials": str(identity.seed)})  # fmt: skip
    if json_out:
        print_json(
            {"agents": rows, "shared_agent": applied.shared_agent if applied is not None else None}
        )
        return
    if not rows:
        console.print(
            f"no registered agents in {escape(str(data_dir))}: every agent shares one NATS user "
            "(`headgate agents add NAME` gives one its own)"
        )
        return
    for row in rows:
        console.print(f"{escape(row['agent'])}  {row['public_key']}  {escape(row['state'])}")
    if applied is not None and applied.embedded:
        shared = "kept" if applied.shared_agent else "dropped (--no-shared-agent)"
        console.print(f"shared agent user: {shared}")


def _wait_applied(data_dir: Path, name: str, *, present: bool, wait: float) -> str:
    """One of "applied", "no serve" (none runs: its next start applies it), "external" (serve runs
    with --nats-url: only the hook token applies) or "not applied" within `wait` seconds."""
    from workflow import agent_identities, datadir

    pid = datadir.running_serve(data_dir)
    if pid is None:
        return "no serve"
    key = None
    if present:
        identity = agent_identities.registered(data_dir).get(name)
        key = identity.public_key if identity is not None else None
    until = time.monotonic() + wait
    while True:
        applied = agent_identities.read_applied(data_dir)
        if applied is not None and applied.pid == pid:
            if not applied.embedded and (name in applied.hook_agents) == present:
                return "external"
            if applied.embedded and applied.agents.get(name) == key:
                return "applied"
        if time.monotonic() >= until:
            return "not applied"
        time.sleep(0.1)


def _applied_sentence(applied: str, data_dir: Path, name: str, what: str) -> str:
    from workflow import datadir

    pid = datadir.running_serve(data_dir)
    if applied == "applied":
        return f"the running headgate serve (pid {pid}) applied it."
    if applied == "external":
        return (
            f"the running headgate serve (pid {pid}) uses an external NATS server (--nats-url): "
            f"its HTTP hook token applies; give {name} a NATS user of its own there "
            "(deploy/nats/accounts.conf)."
        )
    if applied == "no serve":
        return f"no headgate serve runs with {data_dir}: it is {what} when one starts."
    return (
        f"the running headgate serve (pid {pid}) has not applied it yet; send it SIGHUP "
        f"(kill -HUP {pid}) or restart it, and check its log."
    )
