"""The web inbox's queries on `<prefix>.api.web.*`: invitations and passkeys.

The web inbox reads and decides through the ordinary API and the decisions subject; these four
queries are what it needs beyond that, and they are answered here, by the service that owns
the database:

| subject | who asks | what |
|---|---|---|
| `api.web.invite` | `headgate web invite NAME` | a one-time link to register a passkey (signed) |
| `api.web.invitation` | the inbox | the approver an unused, unexpired link is for |
| `api.web.register` | the inbox | use the link, store the verified passkey (audited) |
| `api.web.passkey` | the inbox | a passkey's public key and its approver's roles and scope |

An invitation is asked for with a request signed like a decision, by an approver with the
`admin` role or by the invited approver: a passkey becomes a way to sign as that person.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from workflow.approvals import DEFAULT_MAX_SKEW
from workflow.messages import (
    ApiError,
    InvitationQuery,
    InvitationReply,
    PasskeyInfo,
    PasskeyQuery,
    PasskeyRegistration,
    WebInvite,
    WebInviteReply,
)
from workflow.service.api import RoutedHandler, answer_routed
from workflow.service.context import ServiceContext
from workflow.signing import verify_raw
from workflow.store.passkeys import PasskeyTaken
from workflow.subjects import WEB_API_NAMES

log = logging.getLogger("headgate.api")
ADMIN_ROLE = "admin"


async def invite(ctx: ServiceContext, raw: dict[str, Any], query: WebInvite) -> BaseModel:
    now = ctx.now()
    if not query.key or not query.signature or not verify_raw(raw):
        return ApiError(error="The invitation request is not signed by an approver key.")
    signer = ctx.policy.approver_by_key(query.key)
    if signer is None:
        return ApiError(error=f"The key {query.key[:12]}… is not a registered approver.")
    name, profile = signer
    if name != query.approver and ADMIN_ROLE not in profile.roles:
        return ApiError(
            error=f"Approver {name} may invite only themselves; inviting {query.approver} "
            f"needs the {ADMIN_ROLE} role."
        )
    if abs(now - query.issued_at) > DEFAULT_MAX_SKEW:
        return ApiError(error="The invitation request is stale (check the clock).")
    if query.approver not in ctx.policy.approvers:
        return ApiError(
            error=f"{query.approver} is not an approver in the policy; register them there first."
        )
    token = secrets.token_urlsafe(32)
    expires_at = now + timedelta(seconds=query.ttl_seconds)
    if not await ctx.store.passkeys.invite(
        token, approver=query.approver, created_by=name, nonce=query.nonce,
        expires_at=expires_at, now=now,
    ):  # fmt: skip
        return ApiError(error="This invitation request was already answered (a replay).")
    url = f"{ctx.web_url.rstrip('/')}/invite/{token}" if ctx.web_url else None
    log.info("%s invited %s to register a passkey (until %s)", name, query.approver, expires_at)
    return WebInviteReply(approver=query.approver, token=token, url=url, expires_at=expires_at)


async def invitation(ctx: ServiceContext, query: InvitationQuery) -> BaseModel:
    found = await ctx.store.passkeys.invitation(query.token, ctx.now())
    if found is None:
        return ApiError(error="The invitation was used already, has expired, or never existed.")
    return InvitationReply(
        approver=found.approver,
        expires_at=found.expires_at,
        credential_ids=await ctx.store.passkeys.of(found.approver),
    )


async def register(ctx: ServiceContext, query: PasskeyRegistration) -> BaseModel:
    try:
        approver = await ctx.store.passkeys.register(
            query.token, credential_id=query.credential_id, public_key=query.public_key,
            rp_id=query.rp_id, sign_count=query.sign_count, label=query.label, now=ctx.now(),
        )  # fmt: skip
    except PasskeyTaken:
        return ApiError(error="This passkey is registered already.")
    if approver is None:
        return ApiError(error="The invitation was used already, has expired, or never existed.")
    log.info("%s registered a passkey (%s…)", approver, query.credential_id[:12])
    return await passkey(ctx, PasskeyQuery(credential_id=query.credential_id))


async def passkey(ctx: ServiceContext, query: PasskeyQuery) -> BaseModel:
    found = await ctx.store.passkeys.get(query.credential_id)
    if found is None:
        return ApiError(error="This passkey is not registered with Headgate.")
    approver = ctx.policy.approvers.get(found.approver)
    if approver is None:
        return ApiError(error=f"{found.approver} is no longer an approver in the policy.")
    return PasskeyInfo(
        approver=found.approver,
        credential_id=found.credential_id,
        public_key=found.public_key,
        rp_id=found.rp_id,
        sign_count=found.sign_count,
        roles=list(approver.roles),
        workspaces=list(approver.workspaces),
        credential_ids=await ctx.store.passkeys.of(found.approver),
    )


Handler = RoutedHandler


def _plain(
    fn: Callable[[ServiceContext, Any], Awaitable[BaseModel]],
) -> Handler:
    async def handler(ctx: ServiceContext, raw: dict[str, Any], query: Any) -> BaseModel:
        return await fn(ctx, query)

    return handler


ROUTES: dict[str, tuple[type[BaseModel], Handler]] = {
    "invite": (WebInvite, invite),
    "invitation": (InvitationQuery, _plain(invitation)),
    "register": (PasskeyRegistration, _plain(register)),
    "passkey": (PasskeyQuery, _plain(passkey)),
}
assert set(ROUTES) == set(WEB_API_NAMES)


async def answer(ctx: ServiceContext, name: str, data: bytes) -> bytes:
    """The reply to one `api.web.<name>` request: never raises, errors answer as ApiError."""
    return await answer_routed(ROUTES, f"web.{name}", ctx, name, data)
