"""Delivering a notice: a generic webhook (JSON, HMAC-signed) or any apprise URL.

A webhook request carries

    X-Headgate-Event: held                       (or released, rejected, …, escalated)
    X-Headgate-Delivery: rq_…:held               (stable: deduplicate retries with it)
    X-Headgate-Timestamp: 1764547200             (Unix seconds)
    X-Headgate-Signature: sha256=<hex>           (HMAC-SHA256 of "<timestamp>.<body>")

and `verify_webhook` is the receiver's check. A channel raises `DeliveryError` when a try
fails; the notifier retries with backoff and records the outcome.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import warnings
from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

import httpx

from workflow.errors import ConfigError, HeadgateError
from workflow.notify.config import ChannelSpec
from workflow.notify.text import Notice

SIGNATURE_HEADER = "X-Headgate-Signature"
TIMESTAMP_HEADER = "X-Headgate-Timestamp"
DELIVERY_HEADER = "X-Headgate-Delivery"
EVENT_HEADER = "X-Headgate-Event"


class DeliveryError(HeadgateError):
    """One try at one channel failed (the notifier tries again, then records a failure)."""


class Channel(Protocol):
    name: str
    kind: str

    async def send(self, notice: Notice, now: datetime) -> None: ...

    async def close(self) -> None: ...


def sign_webhook(secret: bytes, timestamp: str, body: bytes) -> str:
    """The value of `X-Headgate-Signature` for a body sent at `timestamp`."""
    mac = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify_webhook(
    secret: bytes, body: bytes, timestamp: str, signature: str, *, now: float,
    tolerance: float = 300.0,
) -> bool:  # fmt: skip
    """A receiver's check: the signature matches and the timestamp is recent (no replays of an
    old delivery)."""
    try:
        sent = float(timestamp)
    except ValueError:
        return False
    if abs(now - sent) > tolerance:
        return False
    return hmac.compare_digest(sign_webhook(secret, timestamp, body), signature)


class WebhookChannel:
    kind = "webhook"

    def __init__(self, name: str, url: str, secret: bytes, *, timeout: float):
        self.name = name
        self.url = url
        self._secret = secret
        self._client = httpx.AsyncClient(timeout=timeout, follow_redirects=False)

    async def send(self, notice: Notice, now: datetime) -> None:
        body = json.dumps(notice.body(now), ensure_ascii=False, sort_keys=True).encode()
        timestamp = str(int(now.timestamp()))
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "headgate-notifier",
            EVENT_HEADER: notice.kind,
            DELIVERY_HEADER: notice.delivery_id,
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: sign_webhook(self._secret, timestamp, body),
        }
        try:
            response = await self._client.post(self.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            raise DeliveryError(f"{type(exc).__name__}: {exc}") from exc
        if not 200 <= response.status_code < 300:
            raise DeliveryError(f"the endpoint answered HTTP {response.status_code}")

    async def close(self) -> None:
        await self._client.aclose()


class AppriseChannel:
    """Slack, Teams, ntfy, e-mail, Discord, Matrix, … — one apprise URL per channel."""

    kind = "apprise"

    def __init__(self, name: str, url: str, *, timeout: float):
        with warnings.catch_warnings():
            # apprise loads its plugins on the first `add`, some of them importing modules
            # Python deprecates (imghdr): not something an operator can act on.
            warnings.simplefilter("ignore", DeprecationWarning)
            import apprise  # only a service with an apprise channel pays for importing it

            self._apprise = apprise.Apprise()
            added = self._apprise.add(url)
        self.name = name
        self._timeout = timeout
        if not added:
            raise ConfigError(
                "apprise does not recognise this URL (see the apprise documentation for the "
                "service's URL format)",
                key=f"notify.channels.{name}",
            )

    async def send(self, notice: Notice, now: datetime) -> None:
        result = await self._apprise.async_notify(
            body=notice.text(now), title=notice.title(), timeout=self._timeout
        )
        if not result:
            raise DeliveryError("apprise could not deliver the notification")

    async def close(self) -> None:
        return None


def _from_env(env: Mapping[str, str], name: str, what: str, channel: str) -> str:
    value = env.get(name, "")
    if not value:
        raise ConfigError(
            f"the environment variable {name} ({what}) is not set",
            key=f"notify.channels.{channel}",
        )
    return value


def open_channel(
    name: str,
    spec: ChannelSpec,
    *,
    fallback_secret: bytes,
    timeout: float,
    env: Mapping[str, str] | None = None,
) -> Channel:
    """A ready channel; ConfigError (naming the channel) when it cannot be opened."""
    env = os.environ if env is None else env
    url = spec.url or _from_env(env, spec.url_env or "", "the channel's URL", name)
    if spec.kind_for(url) == "apprise":
        return AppriseChannel(name, url, timeout=timeout)
    if spec.secret is not None:
        secret = spec.secret.encode()
    elif spec.secret_env is not None:
        secret = _from_env(env, spec.secret_env, "the webhook's HMAC key", name).encode()
    else:
        secret = fallback_secret
    return WebhookChannel(name, url, secret, timeout=timeout)
