"""The approver SDK's controls: grants and freezes, signed with the approver's key.

    async with Approver.connect(url, name="alice", key=Path("alice.seed")) as approver:
        async for item in approver.inbox():
            await item.approve()
            await approver.grant(item, ttl=3600)           # calls like this one, for an hour
        print(await approver.grants())                     # the grants in force
        await approver.freeze(workspace="prod", reason="incident 42")
        await approver.thaw(workspace="prod")

Each request is answered by the service (`<prefix>.api.grant.*`, `.freeze`, `.freezes`); a
refusal raises `ApiRefused` with the service's sentence.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from nats.aio.client import Client as NATS

from workflow.canonical import SIGNATURE_SCHEME
from workflow.client import transport
from workflow.controls import (
    BacktestQuery,
    BacktestReply,
    FreezeOrder,
    FreezeReply,
    FreezesQuery,
    GrantInfo,
    GrantIssue,
    GrantRevoke,
    GrantScope,
    GrantsQuery,
    GrantsReply,
)
from workflow.errors import ConfigError
from workflow.messages import Proposal
from workflow.signing import ApproverKey
from workflow.subjects import Subjects

S = TypeVar("S", GrantIssue, GrantRevoke, FreezeOrder)


def signed(key: ApproverKey, body: S) -> S:
    """`body` signed like a decision: Ed25519 over the canonical JSON of its other fields."""
    unsigned = body.model_copy(
        update={"key": key.public_key, "signature": None, "signature_scheme": SIGNATURE_SCHEME}
    )
    return unsigned.model_copy(update={"signature": key.sign(unsigned.signing_payload())})


def default_scope(
    proposal: Proposal, scope: GrantScope | None
) -> tuple[GrantScope, list[str] | None, str | None]:
    """The scope of a grant made from `proposal`: the call's own argv as command prefix, or
    its path's directory (and below) — or the tool, when asked for or when neither exists."""
    # Imported here: the shell parser is heavy, and only granting needs it.
    from workflow.policy.grants import default_glob, default_prefix

    cwd = proposal.context.cwd if proposal.context else None
    prefix = default_prefix(proposal.arguments)
    glob = default_glob(proposal.arguments, cwd)
    if scope is None:
        scope = (
            GrantScope.COMMAND_PREFIX if prefix else GrantScope.PATH if glob else GrantScope.TOOL
        )
    if scope is GrantScope.COMMAND_PREFIX:
        if not prefix:
            raise ConfigError(
                "the call is not one simple command, so no command-prefix grant can cover it"
            )
        return scope, list(prefix), None
    if scope is GrantScope.PATH:
        if not glob:
            raise ConfigError("the call names no single absolute path to make a path grant from")
        return scope, None, glob
    return scope, None, None


async def issue_grant(
    nc: NATS,
    subjects: Subjects,
    key: ApproverKey,
    name: str,
    *,
    request_id: str,
    proposal: Proposal,
    ttl: timedelta,
    now: datetime,
    scope: GrantScope | None = None,
    prefix: Sequence[str] | None = None,
    path_glob: str | None = None,
    any_agent: bool = False,
    this_session: bool = False,
    max_uses: int | None = None,
    reason: str = "",
) -> GrantInfo:
    """Ask the service to store a grant made from the held request `request_id`."""
    chosen, default_prefix, default_glob = default_scope(proposal, scope)
    session = proposal.context.session_id if proposal.context else None
    if this_session and session is None:
        raise ConfigError("the call names no client session, so the grant cannot be limited to one")
    body = GrantIssue(
        grant_id=f"gr_{uuid.uuid4().hex[:20]}",
        request_id=request_id,
        tool=proposal.tool,
        workspace=proposal.workspace,
        agent=None if any_agent else proposal.agent,
        session_id=session if this_session else None,
        scope=chosen,
        command_prefix=list(prefix) if prefix else default_prefix,
        path_glob=path_glob or default_glob,
        expires_at=now + ttl,
        max_uses=max_uses,
        approver=name,
        reason=reason,
        nonce=uuid.uuid4().hex,
        issued_at=now,
    )
    return await transport.ask(
        nc, subjects.api_control("grant.issue"), signed(key, body), GrantInfo
    )


async def list_grants(
    nc: NATS, subjects: Subjects, *, every: bool = False, workspace: str | None = None
) -> list[GrantInfo]:
    reply = await transport.ask(
        nc,
        subjects.api_control("grant.list"),
        GrantsQuery(all=every, workspace=workspace),
        GrantsReply,
    )
    return reply.grants


async def revoke_grant(
    nc: NATS, subjects: Subjects, key: ApproverKey, name: str, grant_id: str, *,
    now: datetime, reason: str = "",
) -> GrantInfo:  # fmt: skip
    body = GrantRevoke(
        grant_id=grant_id, approver=name, reason=reason, nonce=uuid.uuid4().hex, issued_at=now
    )
    return await transport.ask(
        nc, subjects.api_control("grant.revoke"), signed(key, body), GrantInfo
    )


async def order_freeze(
    nc: NATS, subjects: Subjects, key: ApproverKey, name: str, *, thaw: bool, now: datetime,
    agent: str | None = None, workspace: str | None = None, all_calls: bool = False,
    reason: str = "",
) -> FreezeReply:  # fmt: skip
    body = FreezeOrder(
        thaw=thaw, agent=agent, workspace=workspace, all_calls=all_calls, reason=reason,
        approver=name, nonce=uuid.uuid4().hex, issued_at=now,
    )  # fmt: skip
    return await transport.ask(nc, subjects.api_control("freeze"), signed(key, body), FreezeReply)


async def run_backtest(
    nc: NATS, subjects: Subjects, policy: str, *, since: timedelta | None = None,
    examples: int = 3, timeout: float = 120.0,
) -> dict[str, Any]:  # fmt: skip
    query = BacktestQuery(
        policy=policy,
        since_seconds=int(since.total_seconds()) if since is not None else None,
        examples=examples,
    )
    reply = await transport.ask(
        nc, subjects.api_control("policy.backtest"), query, BacktestReply, timeout
    )
    return reply.report


async def list_freezes(nc: NATS, subjects: Subjects) -> FreezeReply:
    return await transport.ask(nc, subjects.api_control("freezes"), FreezesQuery(), FreezeReply)


def grant_row(g: GrantInfo) -> Mapping[str, Any]:
    """One grant as `headgate grants list` prints it."""
    if g.scope is GrantScope.COMMAND_PREFIX:
        scope = f"command `{' '.join(g.command_prefix or [])}`"
    elif g.scope is GrantScope.PATH:
        scope = f"path {g.path_glob}"
    else:
        scope = "tool"
    uses = f"{g.uses}/{g.max_uses}" if g.max_uses else str(g.uses)
    return {
        "id": g.grant_id,
        "approver": g.approver,
        "scope": f"{g.tool} {scope} ({g.agent or 'any agent'}"
        + (f", session {g.session_id}" if g.session_id else "")
        + f" in {g.workspace})",
        "expires": g.expires_at.strftime("%Y-%m-%d %H:%M:%S"),
        "uses": uses,
        "status": g.status,
    }
