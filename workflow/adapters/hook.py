"""`headgate hook <client>`: the process a client starts for each hook event.

No client fails closed: a hook that crashes, times out or prints something unexpected lets the
call run in every one of them. So this never raises and never hangs: whatever goes wrong
before Headgate has answered (bad input, no NATS, no service, an exception, the time budget
spent) ends in the client's blocking answer — exit 2 with the reason on stderr — within
`connect_timeout + wait` seconds and a small margin, and a timer kills the process with the
same answer should anything get stuck. A tool call goes through the light path
(`workflow.adapters.lite`: no asyncio, nats-py or pydantic), the rest needs no I/O at all.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import TextIO

from workflow.adapters import claude_code, codex, cursor, gemini
from workflow.adapters.calls import (
    BLOCK,
    Action,
    Answer,
    Client,
    HookCall,
    HookInputError,
    Phase,
    Reply,
    block,
    unavailable_reason,
)
from workflow.adapters.options import GateOptions

CLIENTS: dict[str, Client] = {
    c.name: c for c in (claude_code.CLIENT, codex.CLIENT, gemini.CLIENT, cursor.CLIENT)
}

#: Seconds the hook may take beyond `connect_timeout + wait` (lookups, publishing, answering).
MARGIN = 4.0
#: Largest hook input read (a Write of a big file carries the whole content).
MAX_INPUT = 16 * 1024 * 1024


def budget(options: GateOptions) -> float:
    """The longest a hook process takes before answering."""
    return options.connect_timeout + options.wait + MARGIN


def client_timeout(options: GateOptions) -> int:
    """The timeout to configure in the client: longer than the hook ever takes."""
    return int(budget(options) + 0.999) + 5


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer within the hook's time budget"
    text = str(exc).strip()
    return text or type(exc).__name__


def _parse(client: Client, raw: str) -> HookCall:
    try:
        event = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise HookInputError(f"the hook input is not JSON ({exc.msg} at {exc.pos})") from exc
    if not isinstance(event, Mapping):
        raise HookInputError("the hook input is not a JSON object")
    return client.parse(event)


def answer(client: Client, raw: str, options: GateOptions) -> Reply:
    """The reply to one hook event. Never raises: a failure is a block (or, after the call
    ran, a non-blocking error: the call cannot be stopped any more)."""
    call: HookCall | None = None
    try:
        call = _parse(client, raw)
        if call.phase is Phase.OTHER:
            return client.render(call, Answer(Action.NEUTRAL))
        from workflow.adapters.lite import decide  # NATS and the keys: only for a tool call

        return client.render(call, decide(call, options, budget(options)))
    except Exception as exc:
        if call is not None and call.phase is Phase.AFTER:
            return Reply(stderr=f"Headgate could not record that the call ran: {_describe(exc)}\n",
                         code=1)  # fmt: skip
        reason = unavailable_reason(_describe(exc))
        where = call or HookCall(client.name, "", Phase.BEFORE)
        try:
            return client.render(where, Answer(Action.DENY, reason))
        except Exception:
            return block(reason)


def _deadline(options: GateOptions, out: TextIO) -> None:
    """Past the budget (plus a second), answer "blocked" and end the process at once."""
    reason = unavailable_reason("the hook did not finish in time")

    def expire(signum: int, frame: FrameType | None) -> None:
        out.write(reason + "\n")
        out.flush()
        os._exit(2)

    signal.signal(signal.SIGALRM, expire)
    signal.alarm(int(budget(options) + 0.999) + 1)


def run(client_name: str, options: GateOptions, stdin: TextIO | None = None) -> int:
    """Read one event from stdin, write the reply, return the exit code."""
    _deadline(options, sys.stderr)
    client = CLIENTS[client_name]
    try:
        raw = (stdin or sys.stdin).read(MAX_INPUT)
    except Exception as exc:
        raw = ""
        reply = block(unavailable_reason(f"reading the hook input failed: {_describe(exc)}"))
    else:
        reply = answer(client, raw, options)
    if reply.stdout:
        sys.stdout.write(reply.stdout)
        sys.stdout.flush()
    if reply.stderr:
        sys.stderr.write(reply.stderr)
        sys.stderr.flush()
    signal.alarm(0)
    return reply.code


def print_config(client_name: str, command: str, options: GateOptions) -> str:
    client = CLIENTS[client_name]
    return client.config(command, client_timeout(options))


# --------------------------------------------------------------------------- the command line

CLIENT_NAMES = tuple(CLIENTS)


def parser() -> argparse.ArgumentParser:
    """`headgate hook CLIENT [options]` without the CLI framework: a hook starts per tool call,
    so it skips loading typer and rich (`--help` and `--print-config` go through the full CLI,
    `workflow.cli.hook`, which takes the same options)."""
    env = os.environ.get
    p = argparse.ArgumentParser(prog="headgate hook", add_help=False)
    p.add_argument("client", choices=CLIENT_NAMES)
    p.add_argument("--agent", default=env("HEADGATE_AGENT"))
    p.add_argument("--workspace", default=env("HEADGATE_WORKSPACE") or "default")
    p.add_argument("--wait", type=float, default=20.0)
    p.add_argument("--connect-timeout", type=float, default=3.0)
    p.add_argument("--nats-url", default=env("HEADGATE_NATS_URL"))
    p.add_argument("--data-dir", type=Path, default=Path(env("HEADGATE_DATA_DIR") or ".headgate"))
    p.add_argument("--prefix", default=env("HEADGATE_PREFIX") or "headgate")
    p.add_argument("--on-pending", default="deny")
    return p


def options_for(
    client: str, *, agent: str | None, workspace: str, wait: float, connect_timeout: float,
    nats_url: str | None, data_dir: Path, prefix: str, on_pending: str = "deny",
) -> GateOptions:  # fmt: skip
    """The hook's options; one place for both command lines."""
    from workflow.adapters.calls import OnPending, default_agent

    if wait < 0 or connect_timeout <= 0:
        raise ValueError("--wait must be >= 0 and --connect-timeout > 0")
    if on_pending not in tuple(OnPending):
        raise ValueError(f"--on-pending must be deny or defer, not {on_pending!r}")
    if on_pending == OnPending.DEFER and not CLIENTS[client].defers:
        able = ", ".join(c.name for c in CLIENTS.values() if c.defers)
        raise ValueError(
            f"--on-pending defer: {client} cannot defer a call (only {able}, under its "
            "non-interactive mode); use --on-pending deny"
        )
    if not agent:
        import getpass  # only for the default agent name

        try:
            user: str | None = getpass.getuser()
        except Exception:
            user = None
        agent = default_agent(client, user)
    return GateOptions(
        agent=agent, workspace=workspace, wait=wait,
        connect_timeout=connect_timeout, prefix=prefix, nats_url=nats_url or None,
        data_dir=data_dir.absolute(), on_pending=str(on_pending),
    )  # fmt: skip


def main(argv: list[str]) -> int:
    """`headgate hook …` from the entry point; a bad command line blocks the call (exit 2)."""
    args = parser().parse_args(argv)  # exits 2 with the usage on stderr: a block
    try:
        options = options_for(
            args.client, agent=args.agent, workspace=args.workspace, wait=args.wait,
            connect_timeout=args.connect_timeout, nats_url=args.nats_url,
            data_dir=args.data_dir, prefix=args.prefix, on_pending=args.on_pending,
        )  # fmt: skip
    except ValueError as exc:
        sys.stderr.write(f"headgate hook: {exc}\n")
        return BLOCK
    return run(args.client, options)
