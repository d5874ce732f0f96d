"""What both SDKs share: connecting, JetStream publishes with `Nats-Msg-Id`, API queries."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import nats
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from pydantic import BaseModel

from workflow.errors import ConnectError, HeadgateError
from workflow.messages import ApiError, GetQuery, ProposalHistory
from workflow.subjects import Subjects

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


async def connect(url: str, *, name: str, **options: Any) -> NATS:
    """Connect to NATS (comma-separated URLs for a cluster), reconnecting forever afterwards."""
    try:
        return await nats.connect(
            servers=url.split(","), name=name, connect_timeout=3, allow_reconnect=True,
            max_reconnect_attempts=-1, reconnect_time_wait=0.5, **options,
        )  # fmt: skip
    except Exception as exc:
        raise ConnectError(f"cannot reach NATS at {url} ({exc or type(exc).__name__})") from exc


async def publish(nc: NATS, subject: str, body: BaseModel, msg_id: str) -> bool:
    """Publish into JetStream, deduplicated by `msg_id`; True when the server already had it."""
    ack = await nc.jetstream().publish(
        subject, body.model_dump_json().encode(), headers={"Nats-Msg-Id": msg_id}
    )
    return bool(ack.duplicate)


class ApiRefused(HeadgateError):
    """The service answered a query with an error (an unknown id, an invalid request)."""


async def ask(nc: NATS, subject: str, body: BaseModel, reply: type[M], timeout: float = 5.0) -> M:
    """Ask a request/reply subject of the service; ApiRefused carries its error sentence."""
    try:
        msg = await nc.request(subject, body.model_dump_json().encode(), timeout=timeout)
    except NoRespondersError as exc:
        raise ConnectError(
            f"no Headgate service answers on {subject} (is it running, with the same prefix?)"
        ) from exc
    except TimeoutError as exc:  # nats-py's TimeoutError is one too
        raise ConnectError(f"the Headgate service did not answer within {timeout:g}s") from exc
    data = json.loads(msg.data)
    if isinstance(data, dict) and set(data) == {"error"}:
        raise ApiRefused(ApiError.model_validate(data).error)
    return reply.model_validate(data)


async def request(
    nc: NATS,
    subjects: Subjects,
    name: str,
    body: BaseModel,
    reply: type[M],
    timeout: float = 5.0,
    *,
    subject: str | None = None,
) -> M | None:
    """Ask `<prefix>.api.<name>` (or `subject`); None when the service answers with an error."""
    try:
        return await ask(nc, subject or subjects.api(name), body, reply, timeout)
    except ApiRefused:
        return None


async def history(
    nc: NATS, subjects: Subjects, ident: str, *, agent: str | None = None
) -> ProposalHistory | None:
    """A proposal's history from the service, or None when it does not know the id (yet).

    With `agent`, asks the agent's own status subject, which NATS permissions can grant to
    that agent alone (the service answers only about its proposals there)."""
    subject = subjects.api_status(agent) if agent else None
    return await request(nc, subjects, "get", GetQuery(id=ident), ProposalHistory, subject=subject)


async def poll(
    probe: Callable[[], Awaitable[T | None]],
    *,
    timeout: float,
    first: float = 0.005,
    cap: float = 0.25,
    interrupt: asyncio.Future[Any] | None = None,
) -> T | None:
    """Call `probe` with a doubling backoff until it returns a value, the time is up (None), or
    `interrupt` completes (None): for state the service announces no event for."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = first
    while True:
        try:
            value = await probe()
        except ConnectError:
            value = None  # the service may be restarting: keep trying until the deadline
        if value is not None:
            return value
        left = deadline - loop.time()
        if left <= 0:
            return None
        pause = min(delay, left)
        if interrupt is not None:
            await asyncio.wait([interrupt], timeout=pause)
            if interrupt.done():
                return None
        else:
            await asyncio.sleep(pause)
        delay = min(delay * 2, cap)
