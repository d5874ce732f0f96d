"""The web inbox: a Starlette application, server-rendered pages, a little JavaScript, SSE.

Sign-in and every decision use passkeys (WebAuthn). The server keeps only public keys; a session
shows the inbox but cannot approve: each decision is a fresh assertion over the decision itself,
which the collector verifies like an nkeys signature. Every state-changing request needs the
session's CSRF token (a header) and the inbox's own Origin; sign-in and registration are rate
limited per client address.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from workflow.client.display import describe_freeze
from workflow.client.transport import ApiRefused
from workflow.controls import FreezeInfo
from workflow.errors import ConnectError, describe_invalid
from workflow.messages import (
    ApprovalDecision,
    InvitationReply,
    PasskeyRegistration,
    PendingEntry,
    Proposal,
)
from workflow.passkeys import (
    Passkey,
    credential_id_of,
    registration_options,
    signin_options,
    verify_registration,
    verify_signin,
)
from workflow.web.backend import Backend, BackendError
from workflow.web.security import (
    CEREMONY_COOKIE,
    CSRF_HEADER,
    SESSION_COOKIE,
    RateLimit,
    Session,
    Sessions,
)
from workflow.web.views import Viewer, canonical_proposal, detail_view, grouped, item_view

log = logging.getLogger("headgate.web")
HERE = Path(__file__).parent

#: Seconds between refreshes of the inbox while someone watches it (events refresh it sooner).
REFRESH = 5.0
#: Seconds an SSE stream stays quiet before a keep-alive comment.
KEEPALIVE = 15.0

_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # an invitation link must not leak to another site
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True, slots=True)
class WebSettings:
    """`url` is where approvers' browsers reach the inbox (the relying party is its host)."""

    url: str
    rp_name: str = "Headgate"
    signin_limit: int = 10
    """Sign-in and registration attempts per client address per minute."""
    decide_limit: int = 60
    """Decisions per session per minute."""

    @property
    def origin(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def rp_id(self) -> str:
        return urlsplit(self.url).hostname or "localhost"

    @property
    def secure_cookies(self) -> bool:
        # Browsers keep Secure cookies on http://localhost (a secure context) as well.
        return urlsplit(self.url).scheme == "https" or self.rp_id == "localhost"


@dataclass
class Snapshot:
    entries: list[PendingEntry] = field(default_factory=list)
    proposals: dict[str, Proposal] = field(default_factory=dict)
    version: int = 0
    error: str | None = None
    freezes: list[FreezeInfo] = field(default_factory=list)


class Feed:
    """The pending requests, refreshed when the service announces a change (and every few
    seconds while someone watches); SSE streams wait on it."""

    def __init__(self, backend: Backend, refresh: float = REFRESH):
        self.backend = backend
        self.refresh_every = refresh
        self.snapshot = Snapshot()
        self.changed = asyncio.Condition()
        self.watchers = 0
        self._poke = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._unwatch: Callable[[], Awaitable[None]] | None = None
        self.closed = asyncio.Event()

    async def start(self) -> None:
        self._unwatch = await self.backend.watch(self._poke.set)
        await self.refresh()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self.closed.set()
        self._poke.set()
        async with self.changed:
            self.changed.notify_all()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._unwatch is not None:
            await self._unwatch()

    def poke(self) -> None:
        self._poke.set()

    async def _run(self) -> None:
        while not self.closed.is_set():
            timeout = self.refresh_every if self.watchers else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), timeout)
            if self.closed.is_set():
                return
            await asyncio.sleep(0.15)  # let a burst of events coalesce into one refresh
            self._poke.clear()
            await self.refresh()

    async def refresh(self) -> Snapshot:
        try:
            entries = await self.backend.pending()
            proposals = dict(self.snapshot.proposals)
            for entry in entries:
                if entry.request_id not in proposals:
                    history = await self.backend.history(entry.request_id)
                    if history is not None:
                        proposals[entry.request_id] = history.proposal
            live = {e.request_id for e in entries}
            snapshot = Snapshot(
                [e for e in entries if e.request_id in proposals],
                {k: v for k, v in proposals.items() if k in live},
                self.snapshot.version + 1,
                freezes=await self.backend.freezes(),
            )
        except (ConnectError, ApiRefused) as exc:
            snapshot = Snapshot(
                self.snapshot.entries, self.snapshot.proposals, self.snapshot.version + 1,
                f"The service is not answering ({exc}); showing what it said last.",
                self.snapshot.freezes,
            )  # fmt: skip
        async with self.changed:
            self.snapshot = snapshot
            self.changed.notify_all()
        return snapshot


def _templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env


class WebInbox:
    def __init__(
        self,
        backend: Backend,
        settings: WebSettings,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sessions: Sessions | None = None,
    ):
        self.backend = backend
        self.settings = settings
        self.clock = clock
        self.sessions = sessions or Sessions()
        self.signin_limit = RateLimit(settings.signin_limit, 60.0)
        self.decide_limit = RateLimit(settings.decide_limit, 60.0)
        self.feed = Feed(backend)
        self.templates = _templates()
        self.app = Starlette(
            routes=[
                Route("/", self.inbox),
                Route("/signin", self.signin_page),
                Route("/invite/{token}", self.invite_page),
                Route("/requests/{ident}", self.detail),
                Route("/fragments/inbox", self.fragment),
                Route("/events", self.events),
                Route("/healthz", self.healthz),
                Route("/api/signin/begin", self.signin_begin, methods=["POST"]),
                Route("/api/signin/finish", self.signin_finish, methods=["POST"]),
                Route("/api/signout", self.signout, methods=["POST"]),
                Route("/api/invite/{token}/begin", self.invite_begin, methods=["POST"]),
                Route("/api/invite/{token}/finish", self.invite_finish, methods=["POST"]),
                Route("/api/decide", self.decide, methods=["POST"]),
                Route("/api/requests/{ident}/proposal", self.proposal),
                Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
            ],
            lifespan=self._lifespan,
            max_body_size=256 * 1024,
        )

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self.feed.start()
        try:
            yield
        finally:
            await self.feed.stop()

    # ------------------------------------------------------------------ helpers
    def _page(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        body = self.templates.get_template(name).render(
            now=self.clock().isoformat(), rp_id=self.settings.rp_id, **context
        )
        return HTMLResponse(body, status_code=status, headers=_SECURITY_HEADERS)

    def _json(self, data: dict[str, Any], status: int = 200) -> JSONResponse:
        return JSONResponse(data, status_code=status, headers=_SECURITY_HEADERS)

    def _error(self, message: str, status: int) -> JSONResponse:
        return self._json({"error": message}, status)

    def _session(self, request: Request) -> Session | None:
        return self.sessions.get(request.cookies.get(SESSION_COOKIE))

    def _same_origin(self, request: Request) -> bool:
        return request.headers.get("origin") == self.settings.origin

    def _client(self, request: Request) -> str:
        return request.client.host if request.client else "?"

    def _cookie(self, response: Response, name: str, value: str, max_age: int) -> None:
        response.set_cookie(
            name, value, max_age=max_age, httponly=True, samesite="strict",
            secure=self.settings.secure_cookies, path="/",
        )  # fmt: skip

    def _limited(self, limit: RateLimit, key: str) -> JSONResponse | None:
        if limit.allow(key):
            return None
        wait = limit.retry_after(key)
        response = self._error(f"Too many attempts; try again in {wait} s.", 429)
        response.headers["Retry-After"] = str(wait)
        return response

    async def _body(self, request: Request) -> dict[str, Any] | None:
        try:
            data = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        return data if isinstance(data, dict) else None

    def _viewer(self, session: Session) -> Viewer:
        return Viewer(session.approver, session.roles, session.workspaces)

    def _render_list(self, viewer: Viewer) -> tuple[str, str]:
        """The inbox list's HTML, and a key that changes when what it shows changes."""
        snap, now = self.feed.snapshot, self.clock()
        items = [
            item_view(e, snap.proposals[e.request_id], viewer, now)
            for e in snap.entries
            if e.request_id in snap.proposals
        ]
        frozen = [describe_freeze(f) for f in snap.freezes]
        html = self.templates.get_template("list.html").render(
            groups=grouped(items), error=snap.error, frozen=frozen
        )
        key = "|".join(sorted(i.fingerprint for i in items)) + f"|{snap.error}|{frozen}"
        return html, key

    # ------------------------------------------------------------------ pages
    async def healthz(self, request: Request) -> Response:
        return self._json({"status": "ok"})

    async def inbox(self, request: Request) -> Response:
        session = self._session(request)
        if session is None:
            return RedirectResponse("/signin", 303, headers=_SECURITY_HEADERS)
        html, _ = self._render_list(self._viewer(session))
        return self._page("inbox.html", session=session, list_html=html)

    async def fragment(self, request: Request) -> Response:
        session = self._session(request)
        if session is None:
            return self._error("Sign in first.", 401)
        await self.feed.refresh()
        html, _ = self._render_list(self._viewer(session))
        return HTMLResponse(html, headers=_SECURITY_HEADERS)

    async def signin_page(self, request: Request) -> Response:
        return self._page("signin.html", session=self._session(request))

    async def invite_page(self, request: Request) -> Response:
        invitation = await self._invitation(request.path_params["token"])
        if invitation is None:
            return self._page(
                "message.html", 404, title="This link does not work",
                message="The invitation was used already, has expired, or never existed. "
                "Ask for a new one: headgate web invite NAME.",
            )  # fmt: skip
        return self._page("invite.html", invitation=invitation, session=None)

    async def _invitation(self, token: str) -> InvitationReply | None:
        try:
            return await self.backend.invitation(token)
        except ConnectError:
            return None

    async def detail(self, request: Request) -> Response:
        session = self._session(request)
        if session is None:
            return RedirectResponse("/signin", 303, headers=_SECURITY_HEADERS)
        ident = request.path_params["ident"]
        history = await self.backend.history(ident)
        if history is None:
            return self._page(
                "message.html", 404, title="No such request", session=session,
                message=f"The service knows no request or proposal {ident}.",
            )  # fmt: skip
        entry = None
        if history.status == "pending":
            entry = next(
                (e for e in await self.backend.pending() if e.request_id == history.request_id),
                None,
            )
        view = detail_view(history, entry, self._viewer(session), self.clock())
        return self._page("detail.html", session=session, view=view)

    async def events(self, request: Request) -> Response:
        session = self._session(request)
        if session is None:
            return self._error("Sign in first.", 401)
        viewer = self._viewer(session)
        return StreamingResponse(
            self._stream(request, viewer),
            media_type="text/event-stream",
            headers={**_SECURITY_HEADERS, "X-Accel-Buffering": "no"},
        )

    async def _stream(self, request: Request, viewer: Viewer) -> AsyncIterator[str]:
        feed = self.feed
        feed.watchers += 1
        sent_key: str | None = None
        try:
            yield "retry: 2000\n\n"
            version = -1
            while not feed.closed.is_set():
                if feed.snapshot.version != version:
                    version = feed.snapshot.version
                    html, key = self._render_list(viewer)
                    if key != sent_key:
                        sent_key = key
                        yield _sse("inbox", json.dumps({"html": html}))
                async with feed.changed:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(
                            feed.changed.wait_for(
                                lambda seen=version: (  # type: ignore[misc]
                                    feed.snapshot.version != seen or feed.closed.is_set()
                                )
                            ),
                            KEEPALIVE,
                        )
                if feed.snapshot.version == version and not feed.closed.is_set():
                    if await request.is_disconnected():
                        return
                    yield ": keep-alive\n\n"
        finally:
            feed.watchers -= 1

    # ------------------------------------------------------------------ sign-in
    async def signin_begin(self, request: Request) -> Response:
        if not self._same_origin(request):
            return self._error("Cross-origin request refused.", 403)
        if limited := self._limited(self.signin_limit, self._client(request)):
            return limited
        ceremony, challenge = self.sessions.begin("signin")
        options = signin_options(rp_id=self.settings.rp_id, challenge=challenge)
        response = self._json({"options": json.loads(options)})
        self._cookie(response, CEREMONY_COOKIE, ceremony, 300)
        return response

    async def signin_finish(self, request: Request) -> Response:
        if not self._same_origin(request):
            return self._error("Cross-origin request refused.", 403)
        if limited := self._limited(self.signin_limit, self._client(request)):
            return limited
        challenge = self.sessions.finish(request.cookies.get(CEREMONY_COOKIE), "signin")
        body = await self._body(request)
        if challenge is None or body is None:
            return self._error("The sign-in expired; try again.", 400)
        credential = body.get("credential")
        cid = credential_id_of(credential) if isinstance(credential, dict) else None
        info = await self.backend.passkey(cid) if cid else None
        if info is None or not isinstance(credential, dict):
            return self._error("This passkey is not registered with Headgate.", 401)
        passkey = Passkey(info.credential_id, info.approver, info.public_key, info.rp_id,
                          info.sign_count)  # fmt: skip
        check = verify_signin(
            credential, challenge=challenge, passkey=passkey, origins=[self.settings.origin]
        )
        if not check.valid:
            log.warning("sign-in refused for %s: %s", info.approver, check.message)
            return self._error(check.message, 401)
        session = self.sessions.open(
            info.approver, info.credential_id, roles=tuple(info.roles),
            workspaces=tuple(info.workspaces), credential_ids=tuple(info.credential_ids),
        )  # fmt: skip
        log.info("%s signed in to the web inbox", info.approver)
        response = self._json({"approver": info.approver, "next": "/"})
        self._cookie(response, SESSION_COOKIE, session.id, int(self.sessions.ttl))
        response.delete_cookie(CEREMONY_COOKIE, path="/")
        return response

    async def signout(self, request: Request) -> Response:
        session = self._session(request)
        if session is not None:
            if not self._same_origin(request) or not session.csrf_ok(
                request.headers.get(CSRF_HEADER)
            ):
                return self._error("Missing or wrong CSRF token.", 403)
            self.sessions.close(session.id)
        response = self._json({"next": "/signin"})
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    # ------------------------------------------------------------------ invitations
    async def invite_begin(self, request: Request) -> Response:
        if not self._same_origin(request):
            return self._error("Cross-origin request refused.", 403)
        if limited := self._limited(self.signin_limit, self._client(request)):
            return limited
        token = request.path_params["token"]
        invitation = await self._invitation(token)
        if invitation is None:
            return self._error("The invitation was used already or has expired.", 404)
        ceremony, challenge = self.sessions.begin(f"register:{token}")
        options = registration_options(
            rp_id=self.settings.rp_id, rp_name=self.settings.rp_name,
            approver=invitation.approver, challenge=challenge,
            exclude=invitation.credential_ids,
        )  # fmt: skip
        response = self._json({"options": json.loads(options)})
        self._cookie(response, CEREMONY_COOKIE, ceremony, 300)
        return response

    async def invite_finish(self, request: Request) -> Response:
        if not self._same_origin(request):
            return self._error("Cross-origin request refused.", 403)
        if limited := self._limited(self.signin_limit, self._client(request)):
            return limited
        token = request.path_params["token"]
        challenge = self.sessions.finish(request.cookies.get(CEREMONY_COOKIE), f"register:{token}")
        body = await self._body(request)
        if challenge is None or body is None or not isinstance(body.get("credential"), dict):
            return self._error("The registration expired; open the link again.", 400)
        try:
            new = verify_registration(
                body["credential"], challenge=challenge, rp_id=self.settings.rp_id,
                origins=[self.settings.origin],
            )  # fmt: skip
        except ValueError as exc:
            return self._error(str(exc), 400)
        label = str(body.get("label") or request.headers.get("user-agent", ""))[:200]
        try:
            approver = await self.backend.register(
                PasskeyRegistration(
                    token=token, credential_id=new.credential_id, public_key=new.public_key,
                    sign_count=new.sign_count, rp_id=self.settings.rp_id, label=label,
                )
            )  # fmt: skip
            info = await self.backend.passkey(new.credential_id)
        except (BackendError, ConnectError) as exc:
            return self._error(str(exc), 400)
        if info is None:
            return self._error("The service did not keep the passkey; try again.", 500)
        session = self.sessions.open(
            approver, new.credential_id, roles=tuple(info.roles),
            workspaces=tuple(info.workspaces), credential_ids=tuple(info.credential_ids),
        )  # fmt: skip
        log.info("%s registered a passkey for the web inbox", approver)
        response = self._json({"approver": approver, "next": "/"})
        self._cookie(response, SESSION_COOKIE, session.id, int(self.sessions.ttl))
        response.delete_cookie(CEREMONY_COOKIE, path="/")
        return response

    # ------------------------------------------------------------------ decisions
    async def proposal(self, request: Request) -> Response:
        """The exact proposal a request holds (its canonical JSON, secrets included): what the
        browser hashes into the digest it signs. Fetched when deciding, never kept in a page."""
        session = self._session(request)
        if session is None:
            return self._error("Sign in first.", 401)
        history = await self.backend.history(request.path_params["ident"])
        if history is None or history.request_id is None:
            return self._error("No such request.", 404)
        if not self._viewer(session).may_approve_for(history.proposal.workspace):
            return self._error(
                f"You may not approve for workspace {history.proposal.workspace}.", 403
            )
        return self._json(
            {
                "request_id": history.request_id,
                "status": history.status,
                "proposal": canonical_proposal(history.proposal),
            }
        )

    async def decide(self, request: Request) -> Response:
        session = self._session(request)
        if session is None:
            return self._error("Sign in first.", 401)
        if not self._same_origin(request) or not session.csrf_ok(request.headers.get(CSRF_HEADER)):
            return self._error("Missing or wrong CSRF token.", 403)
        if limited := self._limited(self.decide_limit, session.id):
            return limited
        body = await self._body(request)
        raw = body.get("decision") if body else None
        if not isinstance(raw, dict) or not isinstance(body, dict):
            return self._error("The request carries no decision.", 400)
        raw = {**raw, "passkey": body.get("passkey")}
        try:
            decision = ApprovalDecision.model_validate(raw)
        except ValidationError as exc:
            return self._error(f"Invalid decision: {describe_invalid(exc)}.", 400)
        if decision.passkey is None or decision.signature is not None:
            return self._error("A decision from the web inbox is signed with a passkey.", 400)
        if decision.approver != session.approver:
            return self._error(
                f"This session is {session.approver}'s; it cannot send {decision.approver}'s "
                "decision.",
                403,
            )
        try:
            result = await self.backend.decide(raw)
        except ConnectError as exc:
            return self._error(f"The service is not answering: {exc}", 503)
        self.feed.poke()
        return self._json(
            {"accepted": result.accepted, "message": result.message, "status": result.status}
        )


def _sse(event: str, data: str) -> str:
    lines = "".join(f"data: {line}\n" for line in data.splitlines() or [""])
    return f"event: {event}\n{lines}\n"
