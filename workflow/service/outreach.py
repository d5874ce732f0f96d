"""How the service reaches approvers beyond the CLI: the web inbox (and the API it needs),
the notifier, and the escalation ladder. Started after the stages, stopped before them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from workflow import datadir
from workflow.notify.config import NotifyConfig, with_url
from workflow.notify.notifier import Notifier
from workflow.service.context import ServiceContext
from workflow.service.escalator import escalate_every
from workflow.service.settings import Settings

if TYPE_CHECKING:  # the web inbox's modules load only when it is served
    from workflow.web.server import WebServer

log = logging.getLogger("headgate")

NOTIFY_SECRET_ENV = "HEADGATE_NOTIFY_SECRET"


def notify_config(settings: Settings, policy_notify: NotifyConfig) -> NotifyConfig:
    config = policy_notify
    if settings.notify_url:
        secret_env = NOTIFY_SECRET_ENV if os.environ.get(NOTIFY_SECRET_ENV) else None
        config = with_url(config, settings.notify_url, secret_env=secret_env)
    return config


class Outreach:
    """`servers` and `connect` are for the notifier's own FastStream broker (the service's
    servers and credentials)."""

    def __init__(
        self,
        ctx: ServiceContext,
        settings: Settings,
        *,
        servers: Sequence[str] | None = None,
        connect: Mapping[str, Any] | None = None,
    ):
        self.ctx = ctx
        self.settings = settings
        self.servers = servers
        self.connect = connect
        self.web: WebServer | None = None
        self.notifier: Notifier | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.stopping = asyncio.Event()

    async def start(self) -> None:
        """Before the stages start: the notifier's consumers must exist before anything is
        held, so that it misses nothing."""
        ctx, s = self.ctx, self.settings
        if s.web_port is not None:
            await self._start_web()
        config = notify_config(s, ctx.policy.notify)
        if config.enabled:
            if config.inbox_url is None and ctx.web_url:
                config = config.model_copy(update={"inbox_url": ctx.web_url})
            secret, path = datadir.notify_key(s.data_dir)
            self.notifier = Notifier.open(
                ctx.nc, config, fallback_secret=secret, subjects=ctx.subjects,
                registry=ctx.metrics.registry, servers=self.servers,
                connect=self.connect, signer=ctx.signer,
            )  # fmt: skip
            await self.notifier.ensure()
            self.tasks.append(asyncio.create_task(self.notifier.run(self.stopping)))
            log.info(
                "notifying %s (webhooks without a secret of their own are signed with %s)",
                ", ".join(f"{n} ({c.kind})" for n, c in self.notifier.channels.items()),
                path,
            )
        self.tasks.append(asyncio.create_task(escalate_every(s.sweep_interval, ctx, self.stopping)))

    async def _start_web(self) -> None:
        from workflow.web.app import WebInbox, WebSettings
        from workflow.web.backend import NatsBackend
        from workflow.web.server import WebServer, check_tls, default_url, listen

        s, ctx = self.settings, self.ctx
        assert s.web_port is not None
        check_tls(s.web_cert, s.web_key)
        sock = listen(s.web_host, s.web_port)
        url = s.web_url or default_url(s.web_host, sock.getsockname()[1], s.web_cert is not None)
        server = WebServer(
            WebInbox(NatsBackend(ctx.nc, ctx.subjects), WebSettings(url=url.rstrip("/"))),
            sock, cert=s.web_cert, key=s.web_key,
        )  # fmt: skip
        await server.start()
        self.web = server
        ctx.web_url = url.rstrip("/")
        datadir.record(s.data_dir, datadir.WEB_URL_FILE, ctx.web_url + "\n")
        log.info("web inbox at %s (invite approvers with: headgate web invite NAME)", url)

    async def stop(self) -> None:
        self.stopping.set()
        if self.web is not None:
            await self.web.stop()
            with contextlib.suppress(OSError):
                (self.settings.data_dir / datadir.WEB_URL_FILE).unlink()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.notifier is not None:
            await self.notifier.close()

    async def reload(self) -> None:
        """The policy changed: the notifier follows its `[notify]` section."""
        config = notify_config(self.settings, self.ctx.policy.notify)
        if self.notifier is not None and config.enabled:
            await self.notifier.reconfigure(config)
        elif config.enabled:
            log.warning("[notify] was added to the policy: restart serve to start notifying")
