"""Where a Headgate client connects, and as whom; and a first connect that ends in bounded time.

Every client (the SDKs, the CLI, the agent hooks) finds NATS the same way, through
`resolve_nats` (in the light `workflow.nats_target`, re-exported here: the arguments, the
environment, then the data dir of a local `headgate serve`). `connect` then makes the first
connection within ``connect_timeout`` seconds (one sentence in a `ConnectError` otherwise, no
traceback) and reconnects afterwards (``max_reconnect_attempts``, -1 = for ever), logging one
line per outage.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from workflow.errors import ConfigError, ConnectError
from workflow.nats_target import CREDENTIALS_DIR as CREDENTIALS_DIR
from workflow.nats_target import DEFAULT_DATA_DIR as DEFAULT_DATA_DIR
from workflow.nats_target import SERVICE_KEY_FILE as SERVICE_KEY_FILE
from workflow.nats_target import URL_FILE as URL_FILE
from workflow.nats_target import NatsTarget as NatsTarget
from workflow.nats_target import Role as Role
from workflow.nats_target import agent_credentials_file as agent_credentials_file
from workflow.nats_target import credentials_file as credentials_file
from workflow.nats_target import data_dir_from as data_dir_from
from workflow.nats_target import inbox_prefix_for as inbox_prefix_for
from workflow.nats_target import refusal_hint
from workflow.nats_target import resolve_nats as resolve_nats

if TYPE_CHECKING:  # nats-py and asyncio are imported by `connect`: finding NATS (the data
    # dir, the credentials) is what a hook or `headgate --help` needs, not the client library
    import asyncio

    from nats.aio.client import Client as NATS

log = logging.getLogger("headgate.client.connection")

#: Seconds a first connect may take, by default, before it fails with one sentence.
DEFAULT_CONNECT_TIMEOUT = 10.0

# --------------------------------------------------------------------------- connecting

Callback = Callable[[], Awaitable[None]]


class _ConnectionLog:
    """nats-py's callbacks, logged as one line per event instead of a traceback per attempt.

    While the connection is down, nats-py retries every `reconnect_time_wait`; those attempts
    are logged at debug level, the outage itself once when it starts and once when it ends.
    """

    def __init__(self, name: str, url: str, user_callbacks: dict[str, Any]):
        self.name, self.url = name, url
        self.user = user_callbacks
        self.connected = False
        self.down = False
        self.last_error: Exception | None = None
        self.refused: asyncio.Future[Exception] | None = None
        self.nc: NATS | None = None
        self.listeners: list[Callback] = []

    async def error(self, exc: Exception) -> None:
        self.last_error = exc
        if _refused(exc) and self.refused is not None and not self.refused.done():
            self.refused.set_result(exc)
        if self.connected and not self.down:
            log.warning("%s: NATS error: %s", self.name, _describe(exc))
        else:
            log.debug("%s: NATS error: %s", self.name, _describe(exc))
        await self._forward("error_cb", exc)

    async def disconnected(self) -> None:
        if self.nc is not None and (self.nc.is_draining or self.nc.is_closed):
            return  # our own close
        if self.connected and not self.down:
            log.warning("%s: disconnected from NATS; reconnecting", self.name)
        self.down = True
        await self._forward("disconnected_cb")

    async def reconnected(self) -> None:
        if self.down:
            log.warning("%s: reconnected to NATS", self.name)
        self.down = False
        await self._forward("reconnected_cb")
        for listener in list(self.listeners):
            try:
                await listener()
            except Exception as exc:  # one listener's failure must not stop the others
                log.warning("%s: after reconnecting: %s", self.name, _describe(exc))

    async def _forward(self, key: str, *args: Any) -> None:
        callback = self.user.get(key)
        if callback is not None:
            await callback(*args)


#: The callbacks of every connection made by `connect`, by connection.
_LOGS: weakref.WeakKeyDictionary[NATS, _ConnectionLog] = weakref.WeakKeyDictionary()


def when_reconnected(nc: NATS, listener: Callback) -> bool:
    """Call `listener` each time `nc` has reconnected (after a restart of the server, say).

    False when `nc` was not made by `connect` (nothing is registered then)."""
    found = _LOGS.get(nc)
    if found is None:
        return False
    found.listeners.append(listener)
    return True


def _refused(exc: Exception) -> bool:
    """The server refused the credentials (nats-py reports it as a plain protocol error)."""
    from nats.errors import AuthorizationError

    text = str(exc).lower()
    return (
        isinstance(exc, AuthorizationError)
        or "authorization violation" in text
        or ("authentication" in text and ("expired" in text or "revoked" in text))
    )


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__


async def connect(
    target: NatsTarget | str,
    *,
    name: str,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    max_reconnect_attempts: int = -1,
    reconnect_time_wait: float = 0.5,
    **options: Any,
) -> NATS:
    """Connect within `connect_timeout` seconds, then keep the connection alive.

    The first connect retries a refused or unreachable server until `connect_timeout` passes
    and then raises `ConnectError` with one sentence (refused credentials fail at once). After
    that nats-py reconnects by itself, up to `max_reconnect_attempts` per server (-1: for ever),
    so a client survives a restart of the server. `options` go to nats-py's `connect` and win
    over these defaults; its `error_cb`, `disconnected_cb` and `reconnected_cb` are still called.
    """
    import asyncio

    if isinstance(target, str):
        target = NatsTarget(url=target)
    if connect_timeout <= 0:
        raise ConfigError(f"connect_timeout must be positive, not {connect_timeout:g}")
    callbacks: dict[str, Any] = {
        key: options.pop(key)
        for key in ("error_cb", "disconnected_cb", "reconnected_cb")
        if key in options
    }
    events = _ConnectionLog(name, target.url, callbacks)
    loop = asyncio.get_running_loop()
    events.refused = loop.create_future()
    settings: dict[str, Any] = {
        "servers": target.servers,
        "name": name,
        "connect_timeout": min(2.0, connect_timeout),
        "allow_reconnect": True,
        "max_reconnect_attempts": max_reconnect_attempts,
        "reconnect_time_wait": reconnect_time_wait,
        **target.connect_options(),
        **options,
        "error_cb": events.error,
        "disconnected_cb": events.disconnected,
        "reconnected_cb": events.reconnected,
    }
    from nats.aio.client import Client as NATS

    nc = events.nc = NATS()
    _LOGS[nc] = events
    attempt = asyncio.ensure_future(nc.connect(**settings))
    waiting: set[asyncio.Future[Any]] = {attempt, events.refused}
    done, _ = await asyncio.wait(
        waiting, timeout=connect_timeout, return_when=asyncio.FIRST_COMPLETED
    )
    if attempt in done and attempt.exception() is None:
        events.connected = True
        return nc
    attempt.cancel()
    with contextlib.suppress(BaseException):
        await attempt
    with contextlib.suppress(Exception):
        await nc.close()
    raise ConnectError(_failure(target, connect_timeout, events, attempt))


def _failure(
    target: NatsTarget, timeout: float, events: _ConnectionLog, attempt: asyncio.Future[Any]
) -> str:
    if events.refused is not None and events.refused.done():
        how = f" ({target.origin})" if target.origin != "arguments" else ""
        return (
            f"NATS at {target.url} refused the credentials{how}: authorization violation. "
            "Check the user, password, nkey or creds file." + refusal_hint(target)
        )
    error: BaseException | None = events.last_error
    if attempt.done() and not attempt.cancelled() and attempt.exception() is not None:
        error = attempt.exception()
    reason = f" (last error: {_describe(error)})" if error is not None else ""
    return f"cannot reach NATS at {target.url} within {timeout:g}s{reason}"
