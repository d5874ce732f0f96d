"""Serving the web inbox with uvicorn on the service's event loop (HTTP, or HTTPS with a
certificate and key)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp

from workflow.errors import ConfigError
from workflow.web.app import WebInbox

log = logging.getLogger("headgate.web")


def default_url(host: str, port: int, tls: bool) -> str:
    """The inbox's URL when none is given. WebAuthn accepts `localhost` over plain HTTP but not
    an IP address (a relying party id is a domain), so loopback addresses become `localhost`."""
    name = "localhost" if host in ("127.0.0.1", "::1", "0.0.0.0", "::", "localhost") else host
    return f"{'https' if tls else 'http'}://{name}:{port}"


def listen(host: str = "127.0.0.1", port: int = 0, what: str = "the web inbox") -> socket.socket:
    """Bind the server's socket first, so its URL (with the port, when 0 asked for a free one)
    is known before the application is built."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port} for {what}: {exc}") from exc
    return sock


def check_tls(cert: Path | None, key: Path | None) -> None:
    """A clear error for a missing or unusable certificate or key, before anything starts."""
    if (cert is None) != (key is None):
        raise ConfigError("--web-cert and --web-key go together")
    if cert is not None and key is not None:
        for path in (cert, key):
            if not path.is_file():
                raise ConfigError(f"no such file: {path}")
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"cannot use the certificate and key: {exc}") from exc


class AppServer:
    """An ASGI application served by uvicorn on the service's event loop, on a bound socket."""

    def __init__(
        self,
        app: ASGIApp,
        sock: socket.socket,
        *,
        what: str,
        cert: Path | None = None,
        key: Path | None = None,
    ):
        check_tls(cert, key)
        self.what = what
        self._socket = sock
        self.host, self.port = sock.getsockname()[:2]
        self._server = uvicorn.Server(
            uvicorn.Config(
                app, log_config=None, access_log=False, lifespan="on",
                ssl_certfile=str(cert) if cert else None, ssl_keyfile=str(key) if key else None,
                timeout_graceful_shutdown=3, proxy_headers=False,
            )
        )  # fmt: skip
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._socket.listen(128)
        self._socket.setblocking(False)
        self._task = asyncio.create_task(self._server.serve(sockets=[self._socket]))
        while not self._server.started:
            if self._task.done():
                await self._task  # raises what stopped it
                raise ConfigError(f"{self.what} stopped while starting")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 10)
        self._socket.close()


class WebServer(AppServer):
    def __init__(
        self,
        inbox: WebInbox,
        sock: socket.socket,
        *,
        cert: Path | None = None,
        key: Path | None = None,
    ):
        super().__init__(inbox.app, sock, what="the web inbox", cert=cert, key=key)
        self.inbox = inbox

    async def start(self) -> None:
        await super().start()
        url = self.inbox.settings.url
        log.info("web inbox on %s (listening on %s:%d)", url, self.host, self.port)

    async def stop(self) -> None:
        await self.inbox.feed.stop()  # ends the live streams, so the server can close them
        await super().stop()
