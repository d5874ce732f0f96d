"""Fewer approvals: `headgate grants …`, `headgate freeze`, `headgate thaw`, and the grant and
batch modes of `headgate approve`."""

from __future__ import annotations

import getpass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NamedTuple

import typer
from rich.markup import escape

from workflow.cli.common import (
    DEFAULT_DATA_DIR,
    DataDir,
    JsonOut,
    KeyOpt,
    NatsUrl,
    Prefix,
    connected,
    console,
    fail,
    load_key,
    print_json,
)
from workflow.subjects import Subjects

if TYPE_CHECKING:
    from workflow.client.approver import Approver
    from workflow.controls import FreezeReply, GrantInfo, GrantScope
    from workflow.messages import PendingEntry, ProposalHistory

grants_app = typer.Typer(help="Approvers' grants: list and revoke.", no_args_is_help=True)


def parse_ttl(text: str) -> timedelta:
    from workflow.policy.durations import parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        fail(f"--grant {exc}")
    if not isinstance(seconds, int) or seconds <= 0:
        fail("--grant takes a duration such as 1h, 30m or 3600")
    return timedelta(seconds=seconds)


def parse_scope(text: str | None) -> GrantScope | None:
    from workflow.controls import GrantScope

    if text is None:
        return None
    try:
        return GrantScope(text)
    except ValueError:
        fail(f"--scope must be one of {', '.join(s.value for s in GrantScope)}, not {text!r}")


class GrantAsked(NamedTuple):
    """What `headgate approve ID --grant …` asked for."""

    ttl: timedelta
    scope: GrantScope | None
    prefix: str | None
    path_glob: str | None
    any_agent: bool
    max_uses: int | None
    this_session: bool


async def grant_from(
    client: Approver, history: ProposalHistory, asked: GrantAsked, reason: str
) -> GrantInfo:
    """The grant made from an approved request (`headgate approve ID --grant 1h`)."""
    from workflow.client.verify import ShownRequest

    assert history.request_id is not None
    shown = ShownRequest(history.request_id, history.proposal, history.proposal_digest)
    return await client.grant(
        shown, ttl=asked.ttl, scope=asked.scope,
        prefix=asked.prefix.split() if asked.prefix else None, path_glob=asked.path_glob,
        any_agent=asked.any_agent, this_session=asked.this_session, max_uses=asked.max_uses,
        reason=reason,
    )  # fmt: skip


async def grant_line(
    client: Approver, history: ProposalHistory, asked: GrantAsked, reason: str
) -> tuple[bool, str]:
    """Make the grant `--grant` asked for: (True, what it covers) or (False, why refused).
    The approval it follows stands either way."""
    from workflow.errors import HeadgateError

    try:
        made = await grant_from(client, history, asked, reason)
    except HeadgateError as exc:
        return False, str(exc)
    return True, describe_grant(made)


def print_decided(
    ok: bool, message: str, what: str, grants: list[tuple[bool, str]], json_out: bool
) -> None:
    """What `headgate approve|reject ID` prints; exit 1 when refused (or a grant was)."""
    if json_out:
        print_json({"accepted": ok, "message": message, "request": what,
                    "grant": [line for made, line in grants if made],
                    "grant_refused": [line for made, line in grants if not made]})  # fmt: skip
    else:
        console.print(("[green]accepted:[/] " if ok else "[red]refused:[/] ") + escape(message))
        for made, line in grants:
            mark = "[green]granted:[/]" if made else "[red]grant refused:[/]"
            console.print(f"{mark} {escape(line)}")
    if not ok or not all(made for made, _ in grants):
        raise typer.Exit(1)


def describe_grant(g: GrantInfo) -> str:
    from workflow.client.controls import grant_row

    row = grant_row(g)
    return f"grant {row['id']}: {row['scope']} until {row['expires']} UTC (uses {row['uses']})"


@grants_app.command("list")
def list_grants(
    every: Annotated[
        bool, typer.Option("--all", help="Also expired, used-up and revoked grants.")
    ] = False,
    workspace: Annotated[str | None, typer.Option("--workspace")] = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    prefix: Prefix = "headgate",
    json_out: JsonOut = False,
) -> None:
    """The grants in force: id, approver, scope, expiry, uses."""
    import asyncio

    from rich.table import Table
    from rich.text import Text

    from workflow.client import controls

    async def run() -> list[GrantInfo]:
        async with connected(nats_url, data_dir) as nc:
            return await controls.list_grants(
                nc, Subjects(prefix), every=every, workspace=workspace
            )

    found = asyncio.run(run())
    if json_out:
        print_json([g.model_dump(mode="json") for g in found])
        return
    if not found:
        console.print("No grants in force." if not every else "No grants.")
        return
    table = Table("id", "approver", "scope", "expires (UTC)", "uses", "status")
    for g in found:
        row = controls.grant_row(g)
        table.add_row(*(Text(str(row[k])) for k in ("id", "approver", "scope", "expires")),
                      Text(str(row["uses"])), Text(str(row["status"])))  # fmt: skip
    console.print(table)


@grants_app.command("revoke")
def revoke(
    grant_id: Annotated[str, typer.Argument(metavar="ID", help="The grant's id (grants list).")],
    reason: Annotated[str, typer.Option("--reason")] = "",
    key: KeyOpt = None,
    approver: Annotated[str | None, typer.Option("--approver", help="Display name.")] = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    prefix: Prefix = "headgate",
    json_out: JsonOut = False,
) -> None:
    """Revoke a grant: from the next proposal on it releases nothing."""
    import asyncio

    from workflow.client.approver import Approver

    signer = load_key(key, data_dir)

    async def run() -> GrantInfo:
        async with connected(nats_url, data_dir) as nc:
            client = Approver(nc, name=approver or getpass.getuser(), key=signer, prefix=prefix)
            return await client.revoke(grant_id, reason)

    g = asyncio.run(run())
    if json_out:
        print_json(g)
        return
    console.print(f"[green]revoked:[/] {escape(describe_grant(g))}")


ScopeAgent = Annotated[str | None, typer.Option("--agent", help="Only this agent's calls.")]
ScopeWorkspace = Annotated[
    str | None, typer.Option("--workspace", help="Only this workspace's calls.")
]


def _order(
    thaw: bool, agent: str | None, workspace: str | None, every: bool, all_calls: bool,
    reason: str, key: Path | None, approver: str | None, nats_url: str | None,
    data_dir: Path, prefix: str, json_out: bool,
) -> None:  # fmt: skip
    import asyncio

    from workflow.client.approver import Approver

    if agent is None and workspace is None and not every:
        fail("name a scope (--agent and/or --workspace), or --everything for every call")
    signer = load_key(key, data_dir)

    async def run() -> FreezeReply:
        async with connected(nats_url, data_dir) as nc:
            client = Approver(nc, name=approver or getpass.getuser(), key=signer, prefix=prefix)
            if thaw:
                return await client.thaw(agent=agent, workspace=workspace, reason=reason)
            return await client.freeze(
                agent=agent, workspace=workspace, all_calls=all_calls, reason=reason
            )

    reply = asyncio.run(run())
    if json_out:
        print_json(reply)
        return
    console.print(escape(reply.message))
    for f in reply.freezes:
        where = " ".join(x for x in (f.agent and f"agent {f.agent}",
                                     f.workspace and f"workspace {f.workspace}") if x)  # fmt: skip
        console.print(
            f"  in force: {escape(where or 'everything')}"
            + (" (reads too)" if f.all_calls else "")
            + f" by {escape(f.by)} since {f.at.strftime('%Y-%m-%d %H:%M:%S')} UTC"
        )


Everything = Annotated[
    bool,
    typer.Option("--everything", help="Every agent in every workspace (no --agent/--workspace)."),
]
Reason = Annotated[str, typer.Option("--reason", help="Why (audited, shown to approvers).")]


def freeze(
    agent: ScopeAgent = None,
    workspace: ScopeWorkspace = None,
    everything: Everything = False,
    all_calls: Annotated[
        bool, typer.Option("--all", help="Hold reads too (default: reads keep flowing).")
    ] = False,
    reason: Reason = "",
    key: KeyOpt = None,
    approver: Annotated[str | None, typer.Option("--approver", help="Display name.")] = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    prefix: Prefix = "headgate",
    json_out: JsonOut = False,
) -> None:
    """Hold every consequential call in scope now, on every replica, whatever a grant or an
    allow would do; pending requests stay pending. `headgate thaw` lifts it."""
    _order(False, agent, workspace, everything, all_calls, reason, key, approver, nats_url,
           data_dir, prefix, json_out)  # fmt: skip


def thaw(
    agent: ScopeAgent = None,
    workspace: ScopeWorkspace = None,
    everything: Everything = False,
    reason: Reason = "",
    key: KeyOpt = None,
    approver: Annotated[str | None, typer.Option("--approver", help="Display name.")] = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    prefix: Prefix = "headgate",
    json_out: JsonOut = False,
) -> None:
    """Lift the freezes of exactly this scope (as `headgate freeze` named it)."""
    _order(True, agent, workspace, everything, False, reason, key, approver, nats_url,
           data_dir, prefix, json_out)  # fmt: skip


# --------------------------------------------------------------------------- batch approval


def matches(
    entry: PendingEntry, agent: str | None, tool: str | None, workspace: str | None,
    risk: str | None,
) -> bool:  # fmt: skip
    return (
        (agent is None or entry.agent == agent)
        and (tool is None or entry.tool == tool)
        and (workspace is None or entry.workspace == workspace)
        and (risk is None or entry.risk_class == risk)
    )


def approve_all(
    reason: str, key: Path | None, approver: str | None, agent: str | None, tool: str | None,
    workspace: str | None, risk: str | None, session: str | None, yes: bool,
    nats_url: str | None, data_dir: Path, prefix: str, json_out: bool,
) -> None:  # fmt: skip
    """`headgate approve --all …`: show the matching requests, ask, then sign one decision per
    request, each over the digest of the proposal shown (checked before signing)."""
    import asyncio

    from rich.table import Table
    from rich.text import Text

    from workflow.client import transport
    from workflow.client.approver import Approver
    from workflow.client.display import target_of
    from workflow.client.verify import ShownRequest
    from workflow.messages import GetQuery, ProposalHistory

    if agent is None and tool is None and workspace is None and risk is None and session is None:
        fail("--all needs at least one filter: --agent, --tool, --workspace, --risk or --session")
    signer = load_key(key, data_dir)
    subjects = Subjects(prefix)

    async def run() -> list[tuple[str, bool, str]]:
        async with connected(nats_url, data_dir) as nc:
            client = Approver(nc, name=approver or getpass.getuser(), key=signer, prefix=prefix)
            entries = [
                e for e in await client.pending(workspace=workspace, agent=agent, limit=1000)
                if matches(e, agent, tool, workspace, risk)
            ]  # fmt: skip
            # Each request's whole proposal: what is shown, filtered by session, and hashed
            # here to the digest signed (one that does not match stops the batch before
            # anything is signed).
            shown: list[ShownRequest] = []
            for e in entries:
                history = await transport.ask(
                    nc, subjects.api("get"), GetQuery(id=e.request_id), ProposalHistory
                )
                context = history.proposal.context
                if history.request_id is None or history.status != "pending":
                    continue
                if session is not None and (context is None or context.session_id != session):
                    continue
                shown.append(ShownRequest(history.request_id, history.proposal, e.proposal_digest))
            if not shown:
                return []
            if not json_out:
                table = Table("request", "agent", "workspace", "tool", "call")
                for r in shown:
                    p = r.proposal
                    table.add_row(r.request_id, p.agent, p.workspace, p.tool,
                                  Text(target_of(p.arguments, 60)))  # fmt: skip
                console.print(table)
            if not yes and not typer.confirm(f"Approve these {len(shown)} requests?"):
                raise typer.Exit(1)
            results: list[tuple[str, bool, str]] = []
            decided = await client.approve_all(shown, reason)
            for request, result in zip(shown, decided, strict=True):
                results.append((request.request_id, bool(result.accepted), result.message))
            return results

    _print_results(asyncio.run(run()), json_out)


def _print_results(results: list[tuple[str, bool, str]], json_out: bool) -> None:
    if json_out:
        print_json([{"request_id": r, "accepted": ok, "message": m} for r, ok, m in results])
    elif not results:
        console.print("No pending request matches.")
    for request_id, ok, message in results if not json_out else []:
        mark = "[green]approved[/]" if ok else "[red]refused[/]"
        console.print(f"{mark} {request_id}: {escape(message)}")
    if any(not ok for _, ok, _ in results):
        raise typer.Exit(1)


def now() -> datetime:
    return datetime.now(UTC)
