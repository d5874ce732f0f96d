"""Commands that talk to a running service: propose, pending, approve, reject, show."""

from __future__ import annotations

import getpass
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from workflow.cli.common import (
    CLI_CONNECT_TIMEOUT,
    DEFAULT_DATA_DIR,
    DataDir,
    JsonOut,
    KeyOpt,
    NatsUrl,
    Prefix,
    ScopeOpt,
    api_call,
    connected,
    console,
    fail,
    load_key,
    parse_json_option,
    print_json,
)
from workflow.errors import ConfigError, ConnectError, describe_invalid
from workflow.ids import proposal_msg_id
from workflow.subjects import Subjects

if TYPE_CHECKING:
    from pydantic import ValidationError
    from rich.table import Table
    from rich.text import Text

    from workflow.cli import controls
    from workflow.client import transport
    from workflow.client.agent import Headgate
    from workflow.client.approver import Approver
    from workflow.client.connection import Role, resolve_nats
    from workflow.client.display import (
        INTENT_LABEL,
        intent_text,
        mask_text,
        masked_entry,
        masked_history,
        target_of,
    )
    from workflow.client.errors import NotProcessed, ResultTimeout
    from workflow.client.verify import ShownRequest, check_digest
    from workflow.messages import (
        DecisionVerdict,
        GetQuery,
        PendingQuery,
        PendingReply,
        Proposal,
        ProposalHistory,
        Released,
    )


def _agent_runtime() -> None:
    """Import what `propose` uses, when it runs: the wire model and a JetStream publish, not
    the agent SDK (only `--wait` follows the call) nor the approver's side (`headgate --help`
    and the CLI's start load none of it; see `workflow.cli.common`)."""
    from pydantic import ValidationError  # noqa: F401

    from workflow.client import transport  # noqa: F401
    from workflow.client.connection import Role  # noqa: F401
    from workflow.messages import Proposal  # noqa: F401

    globals().update(locals())


def _wait_runtime() -> None:
    """What `propose --wait` adds: the agent SDK, which follows the call to its outcome."""
    from workflow.client.agent import Headgate  # noqa: F401
    from workflow.client.connection import resolve_nats  # noqa: F401
    from workflow.client.display import mask_text  # noqa: F401
    from workflow.client.errors import NotProcessed, ResultTimeout  # noqa: F401
    from workflow.messages import Released  # noqa: F401

    globals().update(locals())


def _runtime() -> None:
    """Import what the approver's commands use, when one runs (the live inbox and the grant
    and batch modes of `approve` are imported by those alone)."""
    from rich.table import Table  # noqa: F401
    from rich.text import Text  # noqa: F401

    from workflow.client.approver import Approver  # noqa: F401
    from workflow.client.display import (  # noqa: F401
        INTENT_LABEL,
        intent_text,
        mask_text,
        masked_entry,
        masked_history,
        target_of,
    )
    from workflow.client.verify import ShownRequest, check_digest  # noqa: F401
    from workflow.messages import (  # noqa: F401
        DecisionVerdict,
        GetQuery,
        PendingQuery,
        PendingReply,
        ProposalHistory,
    )

    globals().update(locals())


EXIT_BLOCKED = 3
EXIT_PENDING = 4


def _ago(when: datetime) -> str:
    seconds = int((datetime.now(UTC) - when).total_seconds())
    return _span(seconds)


def _span(seconds: int) -> str:
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 120:
        return f"{sign}{seconds}s"
    if seconds < 7200:
        return f"{sign}{seconds // 60}m"
    return f"{sign}{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


def propose(
    agent: Annotated[str, typer.Option("--agent", help="Agent name (a subject token).")],
    tool: Annotated[str, typer.Option("--tool", help="Tool name, e.g. write_file.")],
    args: Annotated[str, typer.Option("--args", help="Tool arguments as a JSON object.")] = "{}",
    workspace: Annotated[str, typer.Option("--workspace")] = "default",
    intent: Annotated[str | None, typer.Option("--intent", help="Shown to approvers.")] = None,
    proposal_id: Annotated[str | None, typer.Option("--id", help="Idempotency key.")] = None,
    wait: Annotated[
        float | None,
        typer.Option("--wait", help="Wait up to SECONDS for the outcome and print it."),
    ] = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    prefix: Prefix = "headgate",
    json_out: JsonOut = False,
) -> None:
    """Publish a tool-call proposal. With --wait, print its outcome.

    Exit codes with --wait: 0 released, 3 blocked (denied/rejected/expired/cancelled),
    4 still pending when the wait ended.
    """
    import asyncio

    _agent_runtime()
    if wait is not None:
        _wait_runtime()
    arguments = parse_json_option(args, "--args")
    if not isinstance(arguments, dict):
        raise ConfigError('--args must be a JSON object, e.g. \'{"path": "x"}\'')
    try:
        proposal = Proposal(
            id=proposal_id or f"cli-{uuid.uuid4().hex}",
            agent=agent,
            workspace=workspace,
            tool=tool,
            arguments=arguments,
            intent=intent,
            created_at=datetime.now(UTC),
        )
    except ValidationError as exc:
        raise ConfigError(f"invalid proposal: {describe_invalid(exc)}") from exc
    subjects = Subjects(prefix)
    code = asyncio.run(_propose(proposal, wait, nats_url, data_dir, subjects, json_out))
    raise typer.Exit(code)


async def _propose(
    proposal: Proposal,
    wait: float | None,
    nats_url: str | None,
    data_dir: Path,
    subjects: Subjects,
    json_out: bool,
) -> int:
    """Publish as the agent (agent credentials); with `wait`, follow it through the agent's
    own results stream, as the agent SDK does."""
    if wait is None:
        async with connected(nats_url, data_dir, role=Role.AGENT, agent=proposal.agent) as nc:
            duplicate = await transport.publish(
                nc, subjects.proposals(proposal.agent), proposal,
                proposal_msg_id(proposal.agent, proposal.id),
            )  # fmt: skip
        if json_out:
            print_json({"proposal_id": proposal.id, "duplicate": duplicate})
        else:
            console.print(
                f"proposed [bold]{escape(proposal.id)}[/]" + (" (duplicate)" if duplicate else "")
            )
        return 0
    target = resolve_nats(nats_url, role=Role.AGENT, data_dir=data_dir, agent=proposal.agent)
    try:
        client = Headgate.connect(
            target, agent=proposal.agent, workspace=proposal.workspace, prefix=subjects.prefix,
            connect_timeout=CLI_CONNECT_TIMEOUT, data_dir=data_dir,  # its service.pub is trusted
        )  # fmt: skip
        async with client as hg:
            return await _follow(hg, proposal, wait, json_out)
    except ConnectError as exc:
        raise ConnectError(f"{exc}; is `headgate serve` running?") from None


async def _follow(hg: Headgate, proposal: Proposal, wait: float, json_out: bool) -> int:
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    try:
        ticket = await hg.propose(
            proposal.tool, proposal.arguments, intent=proposal.intent,
            workspace=proposal.workspace, proposal_id=proposal.id, timeout=max(wait, 1.0),
        )  # fmt: skip
    except NotProcessed:
        _still(proposal.id, "unprocessed", wait, json_out)
        return EXIT_PENDING
    if ticket.held and not json_out:
        c = ticket.classification
        console.print(
            f"held for approval: request [bold]{escape(ticket.request_id or '?')}[/] "
            f"({c.risk_class}, {c.severity}); approve with "
            f"`headgate approve {ticket.request_id}`"
        )
    try:
        outcome = await ticket.result(timeout=max(deadline - loop.time(), 0.01))
    except ResultTimeout as exc:
        _still(proposal.id, exc.status or ticket.status, wait, json_out)
        return EXIT_PENDING
    if isinstance(outcome, Released):
        if json_out:
            print_json({"outcome": "released", **outcome.model_dump(mode="json")})
        else:
            who = ", ".join(a.approver for a in outcome.approvals) or "policy (allowed)"
            console.print(
                f"[green]released[/] {escape(proposal.id)} ({escape(proposal.tool)}); "
                f"approved by {escape(who)}"
            )
        return 0
    if json_out:
        print_json({"outcome": outcome.outcome, **outcome.model_dump(mode="json")})
    else:
        console.print(
            f"[red]{escape(outcome.outcome)}[/] {escape(proposal.id)}: "
            + escape(mask_text(outcome.reason))
        )
    return EXIT_BLOCKED


def _still(proposal_id: str, status: str, wait: float, json_out: bool) -> None:
    if json_out:
        print_json({"proposal_id": proposal_id, "outcome": status})
    else:
        console.print(f"{escape(proposal_id)}: still {status} after {wait:g}s")


def pending(
    workspace: Annotated[str | None, typer.Option("--workspace")] = None,
    agent: Annotated[str | None, typer.Option("--agent")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 100,
    nats_url: NatsUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    prefix: Prefix = "headgate",
    json_out: JsonOut = False,
) -> None:
    """List held approval requests, oldest first."""
    import asyncio

    _runtime()
    from workflow.cli.inbox_render import render_entries

    async def run() -> PendingReply:
        async with connected(nats_url, data_dir) as nc:
            query = PendingQuery(workspace=workspace, agent=agent, limit=limit)
            return await api_call(nc, Subjects(prefix), "pending", query, PendingReply)

    reply = asyncio.run(run())
    if json_out:  # secrets masked for scripts too: a person reads what they print
        print_json(PendingReply(items=[masked_entry(e) for e in reply.items]))
        return
    if not reply.items:
        console.print("nothing pending")
        return
    console.print(Text(f"{len(reply.items)} pending, oldest first", style="bold"))
    console.print()
    for block in render_entries(reply.items, datetime.now(UTC)):
        console.print(block)


def _decide(
    ident: str,
    verdict: DecisionVerdict,
    reason: str,
    key: Path | None,
    approver: str | None,
    nats_url: str | None,
    data_dir: Path,
    prefix: str,
    json_out: bool,
    granting: controls.GrantAsked | None = None,
    changes: dict[str, object] | None = None,
) -> None:
    import asyncio

    from workflow.cli import controls

    signer = load_key(key, data_dir)
    subjects = Subjects(prefix)

    async def run() -> tuple[bool, str, str]:
        async with connected(nats_url, data_dir) as nc:
            history = await api_call(nc, subjects, "get", GetQuery(id=ident), ProposalHistory)
            if history.request_id is None:
                return False, f"{ident} was never held for approval (it was {history.status}).", ""
            if history.status != "pending":
                return False, f"request {history.request_id} is already {history.status}.", ""
            # What is signed is the digest of the proposal printed here, or nothing.
            shown = ShownRequest(history.request_id, history.proposal, history.proposal_digest)
            check_digest(shown.request_id, shown.proposal, shown.proposal_digest)
            what = _what(history)
            if not json_out:
                console.print(Text(f"{verdict.value} {what}"))
            client = Approver(nc, name=approver or getpass.getuser(), key=signer, prefix=prefix)
            edited = None
            if changes is not None:
                edited = {**history.proposal.arguments, **changes}
                if not json_out:
                    shown_edit = mask_text(json.dumps(edited, ensure_ascii=False))
                    console.print(Text(f"edited to {shown_edit}"))
            result = await client.decide(
                shown, verdict, reason, timeout=5.0, edited_arguments=edited
            )
            if result.accepted is None:
                return (
                    False,
                    "the decision was published but the service has not processed it yet.",
                    what,
                )
            message = f"{result.message} Request {history.request_id} is now {result.status}."
            if result.accepted and granting is not None:
                grant_lines.append(await controls.grant_line(client, history, granting, reason))
            return result.accepted, mask_text(message), what

    grant_lines: list[tuple[bool, str]] = []
    ok, message, what = asyncio.run(run())
    controls.print_decided(ok, message, what, grant_lines, json_out)


def _what(h: ProposalHistory) -> str:
    """One line naming the call a decision is about (secrets masked), with the agent's intent."""
    p, c = h.proposal, h.classification
    target = target_of(p.arguments)
    line = (
        f"{p.agent} wants {p.tool}" + (f" `{target}`" if target else "")
        + f" in {p.workspace} — {c.risk_class} ({c.severity}), request {h.request_id}"
    )  # fmt: skip
    said = intent_text(p.intent)
    return f'{line}; {INTENT_LABEL}: "{said}"' if said else line


def approve(
    ident: Annotated[
        str | None, typer.Argument(metavar="ID", help="Request id or proposal id.")
    ] = None,
    reason: Annotated[str, typer.Option("--reason")] = "",
    key: KeyOpt = None,
    approver: Annotated[str | None, typer.Option("--approver", help="Display name.")] = None,
    grant: Annotated[
        str | None,
        typer.Option(
            "--grant",
            help="Also allow calls like this one for this long (30m, 1h; at most the policy's "
            "[grants] max_ttl). Never for a denied, destructive or critical call, or one that "
            "needs more than one approval.",
        ),
    ] = None,
    scope: ScopeOpt = None,
    command_prefix: Annotated[
        str | None,
        typer.Option("--prefix", help="Command-prefix grant: the words a command starts with."),
    ] = None,
    path_glob: Annotated[
        str | None, typer.Option("--path-glob", help="Path grant: the glob paths must match.")
    ] = None,
    any_agent: Annotated[
        bool, typer.Option("--any-agent", help="The grant covers every agent, not just this one.")
    ] = False,
    max_uses: Annotated[
        int | None, typer.Option("--max-uses", min=1, help="The grant releases at most N calls.")
    ] = None,
    this_session: Annotated[
        bool,
        typer.Option("--this-session", help="The grant covers only this client session's calls."),
    ] = False,
    edit: Annotated[
        str | None,
        typer.Option(
            "--edit",
            help="Approve the call with these arguments changed instead (JSON object merged "
            'over the proposed arguments, e.g. \'{"command": "rm -rf build/"}\'); the edited '
            "call is classified and evaluated like any proposal.",
        ),
    ] = None,
    every: Annotated[
        bool, typer.Option("--all", help="Approve every pending request the filters match.")
    ] = False,
    agent: Annotated[str | None, typer.Option("--agent", help="With --all: this agent.")] = None,
    tool: Annotated[str | None, typer.Option("--tool", help="With --all: this tool.")] = None,
    workspace: Annotated[
        str | None, typer.Option("--workspace", help="With --all: this workspace.")
    ] = None,
    risk: Annotated[str | None, typer.Option("--risk", help="With --all: this risk class.")] = None,
    session: Annotated[
        str | None, typer.Option("--session", help="With --all: this client session.")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", help="With --all: do not ask.")] = False,
    nats_url: NatsUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    prefix: Prefix = "headgate",
    json_out: JsonOut = False,
) -> None:
    """Approve a held request, signed with your approver key.

    `--grant 1h` also allows calls like it for an hour; `--all` with filters approves every
    matching pending request (one signed decision each, after confirmation).
    """
    _runtime()
    from workflow.cli import controls

    changes = None
    if edit is not None:
        changes = parse_json_option(edit, "--edit")
        if not isinstance(changes, dict) or not changes:
            fail("--edit takes a JSON object of the arguments to change")
        if grant is not None:
            fail("--edit approves one edited call; it cannot also make a --grant")
    if every:
        if ident is not None or grant is not None or edit is not None:
            fail("--all approves the matching requests; it takes no ID and no --grant")
        controls.approve_all(
            reason, key, approver, agent, tool, workspace, risk, session, yes, nats_url,
            data_dir, prefix, json_out,
        )  # fmt: skip
        return
    if ident is None:
        fail("name the request to approve (ID), or use --all with filters")
    granting = None
    if grant is not None:
        granting = controls.GrantAsked(
            controls.parse_ttl(grant), controls.parse_scope(scope), command_prefix, path_glob,
            any_agent, max_uses, this_session,
        )  # fmt: skip
    elif scope or command_prefix or path_glob or any_agent or max_uses or this_session:
        fail("--scope, --prefix, --path-glob, --any-agent, --max-uses and --this-session shape "
             "a --grant")  # fmt: skip
    _decide(
        ident, DecisionVerdict.APPROVE, reason, key, approver, nats_url, data_dir, prefix,
        json_out, granting, changes,
    )  # fmt: skip


def reject(
    ident: Annotated[str, typer.Argument(metavar="ID", help="Request id or proposal id.")],
    reason: Annotated[str, typer.Option("--reason", help="Why (shown to the agent).")],
    key: KeyOpt = None,
    approver: Annotated[str | None, typer.Option("--approver", help="Display name.")] = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    prefix: Prefix = "headgate",
    json_out: JsonOut = False,
) -> None:
    """Reject a held request, signed with your approver key."""
    _runtime()
    if not reason.strip():
        fail("--reason must say why the call is rejected")
    _decide(
        ident, DecisionVerdict.REJECT, reason, key, approver, nats_url, data_dir, prefix, json_out
    )


def show(
    ident: Annotated[str, typer.Argument(metavar="ID", help="Proposal id or request id.")],
    nats_url: NatsUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    prefix: Prefix = "headgate",
    json_out: JsonOut = False,
) -> None:
    """Print a proposal's whole history: classification, verdict, decisions, outcome."""
    import asyncio

    _runtime()

    async def run() -> ProposalHistory:
        async with connected(nats_url, data_dir) as nc:
            return await api_call(nc, Subjects(prefix), "get", GetQuery(id=ident), ProposalHistory)

    h = masked_history(asyncio.run(run()))
    if json_out:
        print_json(h)
        return
    p, c, v = h.proposal, h.classification, h.verdict
    console.print(
        f"[bold]{escape(p.id)}[/]  {p.agent} / {p.workspace}  status: [bold]{h.status}[/]"
    )
    arguments = json.dumps(p.arguments, ensure_ascii=False)
    console.print(Text(f"tool {p.tool}  arguments {arguments}"))
    if p.intent:
        console.print(Text(f'intent — {INTENT_LABEL}: "{p.intent}"'))
    console.print(
        f"risk: {c.risk_class} ({c.severity})"
        + (f" categories {', '.join(c.categories)}" if c.categories else "")
        + (" [red]fail-closed[/]" if c.fail_closed else "")
    )
    for r in c.reasons:
        console.print(Text(f"  - {r.message}"))
    console.print(Text(f"verdict: {v.decision} — {v.reason}"))
    for step in v.trail:
        console.print(Text(f"  {step.step}: {step.decision} — {step.message}"))
    if h.request_id:
        req = h.requirement
        console.print(
            f"request {h.request_id}: needs {req.approvals_needed if req else '?'} approval(s)"
            + (f", expires {h.expires_at.isoformat()}" if h.expires_at else "")
        )
    table = Table("at", "event", "what", show_header=True)
    for e in h.events:
        table.add_row(e.at.strftime("%Y-%m-%d %H:%M:%S"), e.kind, Text(e.summary))
    console.print(table)
