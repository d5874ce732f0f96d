"""Sessions, CSRF tokens, one-time ceremony challenges and rate limits for the web inbox.

A session says who signed in with a passkey; it never approves anything by itself: every
decision carries a fresh passkey assertion over that very decision. State is kept in memory
(a restarted inbox asks its approvers to sign in again) and every clock read is `self.clock()`,
so tests pass their own.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

SESSION_COOKIE = "hg_session"
CEREMONY_COOKIE = "hg_ceremony"
CSRF_HEADER = "X-CSRF-Token"


@dataclass(slots=True)
class Session:
    id: str
    approver: str
    credential_id: str
    csrf: str
    expires: float
    roles: tuple[str, ...] = ()
    workspaces: tuple[str, ...] = ("*",)
    credential_ids: tuple[str, ...] = ()

    def csrf_ok(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(self.csrf, token)


@dataclass(slots=True)
class Ceremony:
    """A pending WebAuthn ceremony: the challenge the browser must sign, used once."""

    challenge: bytes
    purpose: str
    """`signin` or `register:<invite token>`."""
    expires: float


@dataclass
class Sessions:
    ttl: float = 12 * 3600.0
    ceremony_ttl: float = 300.0
    clock: Callable[[], float] = time.monotonic
    _sessions: dict[str, Session] = field(default_factory=dict)
    _ceremonies: dict[str, Ceremony] = field(default_factory=dict)

    def open(
        self,
        approver: str,
        credential_id: str,
        *,
        roles: tuple[str, ...] = (),
        workspaces: tuple[str, ...] = ("*",),
        credential_ids: tuple[str, ...] = (),
    ) -> Session:
        self._sweep()
        session = Session(
            id=secrets.token_urlsafe(32), approver=approver, credential_id=credential_id,
            csrf=secrets.token_urlsafe(32), expires=self.clock() + self.ttl, roles=roles,
            workspaces=workspaces, credential_ids=credential_ids or (credential_id,),
        )  # fmt: skip
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None or session.expires <= self.clock():
            self._sessions.pop(session_id, None)
            return None
        return session

    def close(self, session_id: str | None) -> None:
        if session_id:
            self._sessions.pop(session_id, None)

    def close_approver(self, approver: str) -> None:
        """End every session of an approver (their passkeys were revoked)."""
        for sid in [s.id for s in self._sessions.values() if s.approver == approver]:
            del self._sessions[sid]

    def begin(self, purpose: str) -> tuple[str, bytes]:
        """A new ceremony: (its id for the cookie, the challenge)."""
        self._sweep()
        ceremony_id = secrets.token_urlsafe(24)
        challenge = secrets.token_bytes(32)
        self._ceremonies[ceremony_id] = Ceremony(
            challenge, purpose, self.clock() + self.ceremony_ttl
        )
        return ceremony_id, challenge

    def finish(self, ceremony_id: str | None, purpose: str) -> bytes | None:
        """The challenge of a ceremony begun for `purpose`, once; None if unknown or expired."""
        if not ceremony_id:
            return None
        ceremony = self._ceremonies.pop(ceremony_id, None)
        if ceremony is None or ceremony.expires <= self.clock() or ceremony.purpose != purpose:
            return None
        return ceremony.challenge

    def _sweep(self) -> None:
        now = self.clock()
        for store in (self._sessions, self._ceremonies):
            for key in [k for k, v in store.items() if v.expires <= now]:
                del store[key]


@dataclass
class RateLimit:
    """At most `limit` events per `window` seconds per key (a sliding window)."""

    limit: int
    window: float
    clock: Callable[[], float] = time.monotonic
    _events: dict[str, deque[float]] = field(default_factory=dict)

    def allow(self, key: str) -> bool:
        now = self.clock()
        events = self._events.setdefault(key, deque())
        while events and events[0] <= now - self.window:
            events.popleft()
        if len(events) >= self.limit:
            return False
        events.append(now)
        if len(self._events) > 10_000:  # forget idle keys
            for k in [k for k, v in self._events.items() if not v or v[-1] <= now - self.window]:
                del self._events[k]
        return True

    def retry_after(self, key: str) -> int:
        events = self._events.get(key)
        if not events:
            return 0
        return max(1, int(events[0] + self.window - self.clock()) + 1)
