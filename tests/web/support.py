"""Running the web inbox in a test: a real service, the inbox on a free port, Chromium."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from tests.service.helpers import Harness
from workflow.messages import InvitationReply, PasskeyInfo, PasskeyRegistration
from workflow.web.app import WebInbox, WebSettings
from workflow.web.backend import BackendError, NatsBackend
from workflow.web.server import WebServer, default_url, listen


@dataclass
class RegistryBackend(NatsBackend):
    """The service's API for everything but passkeys, which it keeps here in memory.

    Stands in for `api.web.*` until the service answers them itself.
    """

    invites: dict[str, str] = field(default_factory=dict)
    passkeys: dict[str, PasskeyInfo] = field(default_factory=dict)

    def __init__(self, harness: Harness):
        super().__init__(harness.nc, harness.subjects)
        self.invites = {}
        self.passkeys = {}

    def invite(self, approver: str) -> str:
        token = secrets.token_urlsafe(32)
        self.invites[token] = approver
        return token

    async def invitation(self, token: str) -> InvitationReply | None:
        approver = self.invites.get(token)
        if approver is None:
            return None
        return InvitationReply(
            approver=approver,
            expires_at=datetime.now(UTC) + timedelta(minutes=30),
            credential_ids=[c for c, p in self.passkeys.items() if p.approver == approver],
        )

    async def register(self, registration: PasskeyRegistration) -> str:
        approver = self.invites.pop(registration.token, None)
        if approver is None:
            raise BackendError("The invitation was used already or has expired.")
        self.passkeys[registration.credential_id] = PasskeyInfo(
            approver=approver, credential_id=registration.credential_id,
            public_key=registration.public_key, rp_id=registration.rp_id,
            sign_count=registration.sign_count, roles=["approver"], workspaces=["*"],
        )  # fmt: skip
        return approver

    async def passkey(self, credential_id: str) -> PasskeyInfo | None:
        found = self.passkeys.get(credential_id)
        if found is None:
            return None
        mine = [c for c, p in self.passkeys.items() if p.approver == found.approver]
        return found.model_copy(update={"credential_ids": mine})


@asynccontextmanager
async def web_inbox(backend: NatsBackend) -> AsyncIterator[WebServer]:
    sock = listen("127.0.0.1", 0)
    url = default_url("127.0.0.1", sock.getsockname()[1], tls=False)
    server = WebServer(WebInbox(backend, WebSettings(url=url)), sock)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
