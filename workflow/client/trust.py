"""Which service a client believes: the service's public key, and the check of its signature.

The service signs every event it publishes (inbox items, held / released / blocked, …) and
every API answer with its own key (`workflow.signing.ServiceKey`): an Ed25519 signature over
the subject and the payload, in the ``Headgate-Signature`` header. Any NATS client that may
publish on an inbox or results subject could otherwise pass off an inbox item (approval
phishing) or a release (the agent would run a call nobody approved) as the service's.

A client learns the key, in order, from:

1. the key passed explicitly (``service_key=``, ``--service-key``) or ``HEADGATE_SERVICE_KEY``;
2. the data dir of a local ``headgate serve`` (``service.pub``, beside ``nats.url``);
3. the service itself, asked once on ``<prefix>.api.key``: trust on first use, as sound as the
   NATS permissions that let only the service answer ``api.*`` (the embedded server's
   accounts and ``deploy/nats/accounts.conf`` do). Pin the key where they do not.

What does not verify is never shown to an approver and never run by an agent.
"""

from __future__ import annotations

import asyncio
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

from workflow.errors import ConnectError
from workflow.eventsig import SERVICE_KEY_ENV as SERVICE_KEY_ENV
from workflow.eventsig import (
    SIGNER_HEADER,
    key_from_answer,
    pinned_key_from,
    verify_event,
)
from workflow.eventsig import pinned_key as pinned_key
from workflow.nats_target import SERVICE_KEY_FILE

if TYPE_CHECKING:
    from nats.aio.client import Client as NATS

#: Seconds to wait for the service to say its key.
KEY_TIMEOUT = 5.0


class NotFromService(ConnectError):
    """A message that claims to be the service's does not carry the service's signature."""

    def __init__(self, subject: str, why: str):
        self.subject = subject
        super().__init__(
            f"the message on {subject} is not the Headgate service's ({why}); it was ignored"
        )


class ServiceTrust:
    """The key a connection trusts for one subject prefix, and the checks made with it."""

    def __init__(self, nc: NATS, prefix: str, key: str | None = None, origin: str | None = None):
        self.nc = nc
        self.prefix = prefix
        self._key = key
        #: Where the key was found (a `service.pub` path, the environment variable); None
        #: when it is learnt from the service.
        self._origin = origin if key is not None else None
        self._lock = asyncio.Lock()

    @property
    def known(self) -> str | None:
        return self._key

    async def key(self) -> str:
        """The trusted key; asked of the service once when none is pinned (ConnectError when
        it does not answer: nothing can be verified, so nothing is trusted)."""
        if self._key is not None:
            return self._key
        async with self._lock:
            if self._key is None:
                self._key = await self._ask()
        return self._key

    async def _ask(self) -> str:
        from nats.errors import Error as NatsError

        subject = f"{self.prefix}.api.key"
        try:
            msg = await self.nc.request(subject, b"{}", timeout=KEY_TIMEOUT)
        except (TimeoutError, NatsError) as exc:
            raise ConnectError(
                f"cannot learn the Headgate service's key on {subject} ({exc or 'no answer'}); "
                f"set {SERVICE_KEY_ENV} to the key in the service's data dir (service.pub)"
            ) from exc
        return key_from_answer(subject, msg.subject, msg.data, msg.headers)

    async def verified(self, subject: str, data: bytes, headers: dict[str, str] | None) -> bool:
        """True when the message is signed by the service (ConnectError: key not known)."""
        return verify_event(await self.key(), subject, data, headers)

    async def require(self, subject: str, data: bytes, headers: dict[str, str] | None) -> None:
        """Raise `NotFromService` unless the message is signed by the service."""
        if await self.verified(subject, data, headers):
            return
        signer = (headers or {}).get(SIGNER_HEADER)
        why = (
            "no service signature"
            if not headers or "Headgate-Signature" not in headers
            else f"signed by {signer or 'another key'}, not by the service key {self._key}"
            f"{self._whence()}"
        )
        raise NotFromService(subject, why)

    def _whence(self) -> str:
        """Where the trusted key came from, and what to change when it is another service's:
        a data dir where an earlier or another `headgate serve` ran is the usual cause."""
        if self._origin is None:
            return ", learnt from the service when this client connected"
        if self._origin.endswith(SERVICE_KEY_FILE):
            return (
                f" read from {self._origin}: is that the data dir of another `headgate serve`? "
                f"Use this service's (--data-dir, HEADGATE_DATA_DIR) or pin its key "
                f"({SERVICE_KEY_ENV})"
            )
        if self._origin == SERVICE_KEY_ENV:
            return f" set in {SERVICE_KEY_ENV}"
        return " the client was given"


_TRUST: weakref.WeakKeyDictionary[NATS, dict[str, ServiceTrust]] = weakref.WeakKeyDictionary()
#: The data dir a connection was found through (the CLI's `--data-dir`): its `service.pub`.
_DATA_DIRS: weakref.WeakKeyDictionary[NATS, Path] = weakref.WeakKeyDictionary()


def use_data_dir(nc: NATS, data_dir: Path) -> None:
    """Look for the service's key in `data_dir` for the trust made on `nc` from now on."""
    _DATA_DIRS[nc] = data_dir


def trust_for(
    nc: NATS, prefix: str, *, key: str | None = None, data_dir: Path | str | None = None
) -> ServiceTrust:
    """The trust of connection `nc` in the service of `prefix`, made on first use from `key`,
    the environment or the data dir (`pinned_key`), else learnt from the service."""
    per_prefix = _TRUST.setdefault(nc, {})
    found = per_prefix.get(prefix)
    if data_dir is None:
        data_dir = _DATA_DIRS.get(nc)
    if found is None or (key is not None and found.known != key):
        pinned, origin = pinned_key_from(key, data_dir=data_dir, env=None)
        found = per_prefix[prefix] = ServiceTrust(nc, prefix, pinned, origin)
    return found
