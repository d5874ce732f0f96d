"""`headgate hook <client>`: gate a coding agent's tool calls through its hooks."""

from __future__ import annotations

import getpass
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from workflow.cli.common import DEFAULT_DATA_DIR, DataDir, NatsUrl, Prefix

if TYPE_CHECKING:
    from workflow.adapters.options import GateOptions

CLIENT_NAMES = ("claude-code", "codex", "gemini", "cursor")


def _client(value: str) -> str:
    if value not in CLIENT_NAMES:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(CLIENT_NAMES)}")
    return value


def hook(
    client: Annotated[
        str,
        typer.Argument(
            help="The client whose hook JSON comes on stdin: claude-code, codex, gemini or cursor.",
            callback=_client,
            show_default=False,
        ),
    ],
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            envvar="HEADGATE_AGENT",
            help="Agent name. Default: the client and the user, e.g. claude-code-alice.",
        ),
    ] = None,
    workspace: Annotated[
        str, typer.Option("--workspace", envvar="HEADGATE_WORKSPACE", help="Workspace.")
    ] = "default",
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            min=0,
            help="Seconds to hold the client for a decision before answering that the call "
            "is pending (blocked for now; the same call retried picks up the decision).",
        ),
    ] = 20.0,
    connect_timeout: Annotated[
        float,
        typer.Option(
            "--connect-timeout", min=0.1, help="Seconds to reach NATS before blocking the call."
        ),
    ] = 3.0,
    nats_url: NatsUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    prefix: Prefix = "headgate",
    on_pending: Annotated[
        str,
        typer.Option(
            "--on-pending",
            help="The answer for a call still pending after --wait: deny (names the request; "
            "the same call retried binds to it) or defer (claude-code under `claude -p` only: "
            "the run ends as deferred and `claude -p --resume SESSION` asks again).",
        ),
    ] = "deny",
    print_config: Annotated[
        bool,
        typer.Option(
            "--print-config",
            help="Print the settings snippet that runs this hook (matcher, command, timeout) "
            "and exit.",
        ),
    ] = False,
    http: Annotated[
        bool,
        typer.Option(
            "--http",
            help="With --print-config: an HTTP hook against `serve --hook-listen` instead of "
            "the command (claude-code only). It fails open: with serve down, calls go ahead.",
        ),
    ] = False,
    hook_url: Annotated[
        str | None,
        typer.Option(
            "--hook-url",
            help="With --http: the HTTP hooks' address, e.g. http://127.0.0.1:8788. Default: "
            "the one `serve --hook-listen` recorded in the data dir (hook.url).",
        ),
    ] = None,
) -> None:
    """Answer one hook event of a coding agent (the client's JSON on stdin).

    Before a tool runs, the call becomes a proposal and the answer is Headgate's outcome in the
    shape that client honours: released → allow, blocked → deny with the reason (it reaches the
    model), still pending after --wait → deny naming the request ("ask again later"), or with
    --on-pending defer a deferral (`claude -p` ends; `--resume` asks again). After a
    tool ran, it is reported as executed. It fails closed: bad input, no NATS, no service or any
    error blocks the call (exit 2, the reason on stderr) within --connect-timeout + --wait + a
    few seconds. `--print-config` prints what to paste into the client's settings.
    """
    from workflow.adapters.hook import options_for

    try:
        options = options_for(
            client, agent=agent, workspace=workspace, wait=wait,
            connect_timeout=connect_timeout, nats_url=nats_url, data_dir=data_dir,
            prefix=prefix, on_pending=on_pending,
        )  # fmt: skip
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if print_config and http:
        sys.stdout.write(_http_snippet(client, options, hook_url))
        raise typer.Exit(0)
    if print_config:
        from workflow.adapters.hook import CLIENTS
        from workflow.adapters.hook import print_config as snippet

        command = _command(client, options, agent, nats_url)
        sys.stdout.write(f"# {CLIENTS[client].config_file}\n{snippet(client, command, options)}\n")
        raise typer.Exit(0)
    from workflow.adapters.hook import run

    raise typer.Exit(run(client, options))


#: The variable the HTTP hook's Authorization header is filled from.
TOKEN_ENV = "HEADGATE_HOOK_TOKEN"


def _http_snippet(client: str, options: GateOptions, hook_url: str | None) -> str:
    from urllib.parse import urlencode

    from workflow import datadir
    from workflow.adapters.hook import CLIENTS, client_timeout

    config = CLIENTS[client].http_config
    if config is None:
        raise typer.BadParameter(f"{client} has no HTTP hooks: use the command hook")
    data_dir = options.data_dir or Path(DEFAULT_DATA_DIR)
    if hook_url is None:
        try:
            hook_url = (data_dir / datadir.HOOK_URL_FILE).read_text().strip()
        except OSError:
            raise typer.BadParameter(
                f"no {datadir.HOOK_URL_FILE} in {data_dir}: start `headgate serve --hook-listen "
                "127.0.0.1:8788` first, or pass --hook-url"
            ) from None
    query = {"agent": options.agent}
    if options.workspace != "default":
        query["workspace"] = options.workspace
    query["wait"] = f"{options.wait:g}"
    if options.on_pending != "deny":
        query["on_pending"] = options.on_pending
    url = f"{hook_url.rstrip('/')}/hooks/{client}?{urlencode(query)}"
    from workflow.agent_identities import token_file

    token = token_file(data_dir, options.agent)  # a registered agent's own, else the shared one
    if not token.is_file():
        token = data_dir / datadir.HOOK_TOKEN_FILE
    return (
        f"# {CLIENTS[client].config_file}\n"
        "# WARNING: an HTTP hook fails open. When serve is down, unreachable, slow or answers\n"
        f"# with an error, {client} goes on as if no hook ran and the call goes ahead (under\n"
        "# its own permission rules). The command hook (--print-config without --http) blocks\n"
        "# then: it stays the safe default.\n"
        f"# The agent's environment needs the token: export {TOKEN_ENV}=$(cat {token})\n"
        f"{config(url, client_timeout(options), TOKEN_ENV)}\n"
    )


def _command(client: str, options: GateOptions, agent: str | None, nats_url: str | None) -> str:
    exe = shutil.which("headgate") or str(Path(sys.argv[0]).absolute())
    argv = [exe, "hook", client]
    if agent:
        argv += ["--agent", options.agent]
    if options.workspace != "default":
        argv += ["--workspace", options.workspace]
    argv += ["--wait", f"{options.wait:g}", "--connect-timeout", f"{options.connect_timeout:g}"]
    if nats_url:
        argv += ["--nats-url", nats_url]
    if options.data_dir is not None and (nats_url is None or options.data_dir.is_dir()):
        argv += ["--data-dir", str(options.data_dir)]
    if options.prefix != "headgate":
        argv += ["--prefix", options.prefix]
    if options.on_pending != "deny":
        argv += ["--on-pending", options.on_pending]
    return shlex.join(argv)


def mcp_proxy(
    command: Annotated[
        list[str] | None,
        typer.Argument(
            help="The upstream MCP server to run (stdio), after `--`.", show_default=False
        ),
    ] = None,
    upstream_url: Annotated[
        str | None,
        typer.Option(
            "--upstream-url",
            help="A streamable HTTP MCP server to proxy instead of a command, e.g. "
            "http://127.0.0.1:8000/mcp.",
        ),
    ] = None,
    listen: Annotated[
        str | None,
        typer.Option(
            "--listen",
            help="Serve streamable HTTP on HOST:PORT (at /mcp) instead of stdio.",
        ),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            envvar="HEADGATE_AGENT",
            help="Agent name. Default: mcp-<user>.",
        ),
    ] = None,
    workspace: Annotated[
        str, typer.Option("--workspace", envvar="HEADGATE_WORKSPACE", help="Workspace.")
    ] = "default",
    server_kind: Annotated[
        str | None,
        typer.Option(
            "--server-kind",
            help="What the upstream server is (e.g. github-mcp): carried in each tool's "
            "definition and as the proposal's source.",
        ),
    ] = None,
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            min=0,
            help="Seconds to hold a call for its decision (sending progress notifications) "
            "before answering that it is pending.",
        ),
    ] = 50.0,
    progress_every: Annotated[
        float,
        typer.Option("--progress-every", min=0.05, help="Seconds between progress notifications."),
    ] = 5.0,
    upstream_timeout: Annotated[
        float,
        typer.Option("--upstream-timeout", min=0.1, help="Seconds the upstream has to answer."),
    ] = 120.0,
    start_timeout: Annotated[
        float,
        typer.Option(
            "--start-timeout", min=0.1, help="Seconds the upstream has to start (MCP handshake)."
        ),
    ] = 30.0,
    catalog: Annotated[
        Path | None,
        typer.Option(
            "--catalog",
            help="Write the upstream's tools/list here on each listing (for `headgate tools "
            "pin --tools`).",
        ),
    ] = None,
    connect_timeout: Annotated[
        float, typer.Option("--connect-timeout", min=0.1, help="Seconds to reach NATS.")
    ] = 5.0,
    nats_url: NatsUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    prefix: Prefix = "headgate",
) -> None:
    """Run an MCP server behind Headgate: `headgate mcp-proxy -- npx server-x`.

    tools/list passes through without the tools the policy denies this agent; every
    tools/call is a proposal carrying the tool's definition, held (with progress
    notifications) until Headgate decides, then run upstream with the released arguments and
    reported as executed. Blocked or still pending after --wait, the client gets an error
    result with the reason or the request id (the same call retried binds to that request).
    """
    from workflow.errors import ConfigError

    try:
        from workflow.adapters.mcp_proxy import ProxyOptions, serve
    except ImportError as exc:
        raise ConfigError(
            f"the MCP proxy needs the MCP SDK ({exc.name}): pip install 'headgate[mcp]'"
        ) from exc
    import anyio

    from workflow.adapters.calls import default_agent

    if bool(command) == bool(upstream_url):
        raise ConfigError("give the upstream MCP server: a command after `--`, or --upstream-url")
    address = None
    if listen is not None:
        host, _, port = listen.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"--listen must be HOST:PORT, e.g. 127.0.0.1:8765, not {listen!r}")
        address = (host.strip("[]"), int(port))

    try:
        user = getpass.getuser()
    except Exception:
        user = None
    options = ProxyOptions(
        agent=agent or default_agent("mcp", user), command=command or [], workspace=workspace,
        server_kind=server_kind, wait=wait, progress_every=progress_every,
        upstream_timeout=upstream_timeout, start_timeout=start_timeout,
        connect_timeout=connect_timeout, prefix=prefix, nats_url=nats_url,
        data_dir=data_dir.absolute(), catalog=catalog, upstream_url=upstream_url, listen=address,
    )  # fmt: skip
    anyio.run(serve, options)
