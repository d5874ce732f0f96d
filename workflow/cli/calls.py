"""Commands that talk to a running service: propose, pending, approve, reject, show."""

from __future__ import annotations

import asyncio
import getpass
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from workflow.cli.common import (
    DEFAULT_DATA_DIR,
    DataDir,
    JsonOut,
    KeyOpt,
    NatsUrl,
    Prefix,
    api_call,
    connected,
    console,
    fail,
    load_key,
    parse_json_option,
    print_json,
)
from workflow.errors import ConfigError, describe_invalid
from workflow.subjects import Subjects

if TYPE_CHECKING:
    from nats.aio.msg import Msg

    from workflow.messages import DecisionVerdict, Proposal, ProposalHistory

# The wire models (pydantic), the SDK's display helpers and rich's tables are imported by the
# commands that use them, when they run (see `workflow.cli.common`).

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
    from pydantic import ValidationError

    from workflow.messages import Proposal

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
    from workflow.messages import GetQuery, ProposalHistory

    async with connected(nats_url, data_dir) as nc:
        outcome: asyncio.Future[tuple[str, dict[str, Any]]] = (
            asyncio.get_running_loop().create_future()
        )
        held: list[dict[str, Any]] = []

        async def on_event(msg: Msg) -> None:
            body = json.loads(msg.data)
            if body.get("proposal_id") != proposal.id:
                return
            kind = msg.subject.split(".")[-2]
            if kind == "inbox":
                held.append(body)
                if not json_out:
                    console.print(
                        f"held for approval: request [bold]{escape(body['request_id'])}[/] "
                        f"({body['classification']['risk_class']}, "
                        f"{body['classification']['severity']}); approve with "
                        f"`headgate approve {body['request_id']}`"
                    )
            elif not outcome.done():
                outcome.set_result((kind, body))

        if wait is not None:
            for subject in (
                subjects.released(proposal.agent),
                subjects.blocked(proposal.agent),
                subjects.inbox(proposal.workspace),
            ):
                await nc.subscribe(subject, cb=on_event)
        ack = await nc.jetstream().publish(
            subjects.proposals(proposal.agent),
            proposal.model_dump_json().encode(),
            headers={"Nats-Msg-Id": proposal.id},
        )
        if wait is None:
            if json_out:
                print_json({"proposal_id": proposal.id, "duplicate": ack.duplicate})
            else:
                console.print(
                    f"proposed [bold]{escape(proposal.id)}[/]"
                    + (" (duplicate)" if ack.duplicate else "")
                )
            return 0
        try:
            kind, body = await asyncio.wait_for(outcome, wait)
        except TimeoutError:
            history = await api_call(nc, subjects, "get", GetQuery(id=proposal.id), ProposalHistory)
            if json_out:
                print_json({"proposal_id": proposal.id, "outcome": history.status})
            else:
                console.print(f"{escape(proposal.id)}: still {history.status} after {wait:g}s")
            return (
                0
                if history.status == "released"
                else EXIT_PENDING
                if history.status == "pending"
                else EXIT_BLOCKED
            )
        if json_out:
            print_json({"outcome": "released" if kind == "released" else body["outcome"], **body})
        elif kind == "released":
            who = ", ".join(a["approver"] for a in body["approvals"]) or "policy (allowed)"
            console.print(
                f"[green]released[/] {escape(proposal.id)} ({escape(proposal.tool)}); "
                f"approved by {escape(who)}"
            )
        else:
            console.print(
                f"[red]{escape(body['outcome'])}[/] {escape(proposal.id)}: {escape(body['reason'])}"
            )
        return 0 if kind == "released" else EXIT_BLOCKED


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
    from rich.table import Table
    from rich.text import Text

    from workflow.client.display import mask_secrets
    from workflow.messages import PendingQuery, PendingReply

    async def run() -> PendingReply:
        async with connected(nats_url, data_dir) as nc:
            query = PendingQuery(workspace=workspace, agent=agent, limit=limit)
            return await api_call(nc, Subjects(prefix), "pending", query, PendingReply)

    reply = asyncio.run(run())
    if json_out:
        print_json(reply)
        return
    if not reply.items:
        console.print("nothing pending")
        return
    table = Table(title=f"{len(reply.items)} pending", show_lines=True)
    for col in (
        "request",
        "agent / workspace",
        "tool",
        "arguments",
        "risk",
        "reasons",
        "approvals",
        "age",
        "expires in",
    ):
        table.add_column(col, overflow="fold")
    for it in reply.items:
        table.add_row(
            *(
                Text(str(cell))
                for cell in (
                    it.request_id,
                    f"{it.agent} / {it.workspace}",
                    it.tool,
                    json.dumps(mask_secrets(it.arguments), ensure_ascii=False)[:200],
                    f"{it.risk_class} ({it.severity})",
                    "\n".join(it.reasons),
                    f"{len(it.approvals)}/{it.requirement.approvals_needed}"
                    + (f" ({', '.join(it.approvals)})" if it.approvals else ""),
                    _ago(it.created_at),
                    _span(int((it.expires_at - datetime.now(UTC)).total_seconds())),
                )
            )
        )
    console.print(table)


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
) -> None:
    from workflow.messages import ApprovalDecision, GetQuery, ProposalHistory

    signer = load_key(key, data_dir)
    subjects = Subjects(prefix)

    async def run() -> tuple[bool, str]:
        async with connected(nats_url, data_dir) as nc:
            history = await api_call(nc, subjects, "get", GetQuery(id=ident), ProposalHistory)
            if history.request_id is None:
                return False, f"{ident} was never held for approval (it was {history.status})."
            if history.status != "pending":
                return False, f"request {history.request_id} is already {history.status}."
            decision = signer.sign_decision(
                ApprovalDecision(
                    request_id=history.request_id,
                    proposal_digest=history.proposal_digest,
                    verdict=verdict,
                    approver=approver or getpass.getuser(),
                    reason=reason,
                    nonce=uuid.uuid4().hex,
                    issued_at=datetime.now(UTC),
                )
            )
            await nc.jetstream().publish(
                subjects.decisions(history.request_id),
                decision.model_dump_json().encode(),
                headers={"Nats-Msg-Id": f"decision:{decision.nonce}"},
            )
            for _ in range(50):
                await asyncio.sleep(0.1)
                after = await api_call(nc, subjects, "get", GetQuery(id=ident), ProposalHistory)
                for event in after.events:
                    if event.data.get("nonce") == decision.nonce:
                        ok = event.kind == "decision.accepted"
                        message = str(event.data.get("message") or event.summary)
                        return ok, f"{message} Request {history.request_id} is now {after.status}."
            return False, "the decision was published but the service has not processed it yet."

    ok, message = asyncio.run(run())
    if json_out:
        print_json({"accepted": ok, "message": message})
    else:
        console.print(("[green]accepted:[/] " if ok else "[red]refused:[/] ") + escape(message))
    if not ok:
        raise typer.Exit(1)


def approve(
    ident: Annotated[str, typer.Argument(metavar="ID", help="Request id or proposal id.")],
    reason: Annotated[str, typer.Option("--reason")] = "",
    key: KeyOpt = None,
    approver: Annotated[str | None, typer.Option("--approver", help="Display name.")] = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    prefix: Prefix = "headgate",
    json_out: JsonOut = False,
) -> None:
    """Approve a held request, signed with your approver key."""
    from workflow.messages import DecisionVerdict

    _decide(
        ident, DecisionVerdict.APPROVE, reason, key, approver, nats_url, data_dir, prefix, json_out
    )


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
    if not reason.strip():
        fail("--reason must say why the call is rejected")
    from workflow.messages import DecisionVerdict

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
    from rich.table import Table
    from rich.text import Text

    from workflow.client.display import mask_secrets
    from workflow.messages import GetQuery, ProposalHistory

    async def run() -> ProposalHistory:
        async with connected(nats_url, data_dir) as nc:
            return await api_call(nc, Subjects(prefix), "get", GetQuery(id=ident), ProposalHistory)

    h = asyncio.run(run())
    if json_out:
        print_json(h)
        return
    p, c, v = h.proposal, h.classification, h.verdict
    console.print(
        f"[bold]{escape(p.id)}[/]  {p.agent} / {p.workspace}  status: [bold]{h.status}[/]"
    )
    arguments = json.dumps(mask_secrets(p.arguments), ensure_ascii=False)
    console.print(Text(f"tool {p.tool}  arguments {arguments}"))
    if p.intent:
        console.print(Text(f"intent (not trusted): {p.intent}"))
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
