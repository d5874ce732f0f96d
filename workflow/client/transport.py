"""What both SDKs share: connecting (`connection.connect`), JetStream publishes with
`Nats-Msg-Id`, API queries."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from nats.aio.client import Client as NATS
from nats.errors import ConnectionReconnectingError, NoRespondersError
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import ServiceUnavailableError
from pydantic import BaseModel

from workflow.client.connection import connect as connect
from workflow.client.trust import NotFromService, trust_for
from workflow.errors import ConnectError, HeadgateError
from workflow.messages import ApiError, GetQuery, ProposalHistory
from workflow.subjects import Subjects

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


#: Seconds a JetStream publish is retried while the server cannot confirm it (restarting).
PUBLISH_TIMEOUT = 15.0

#: An agent's or approver's durable consumer that no client has read for this long is removed
#: by the server, so abandoned names do not pile up: it is the inbox and results streams' age
#: limit (7 days), past which nothing it would have delivered is left. A client that comes back
#: later creates it again and reads whatever the stream still holds.
DURABLE_INACTIVE_THRESHOLD = 7 * 24 * 3600.0


async def publish(
    nc: NATS, subject: str, body: BaseModel, msg_id: str, *, timeout: float = PUBLISH_TIMEOUT
) -> bool:
    """Publish into JetStream, deduplicated by `msg_id`; True when the server already had it.

    While the server cannot confirm it (reconnecting, JetStream recovering after a restart) the
    same message is published again, which `msg_id` makes harmless, for up to `timeout` seconds.
    """
    data = body.model_dump_json().encode()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = 0.05
    while True:
        left = deadline - loop.time()
        try:
            ack = await nc.jetstream().publish(
                subject, data, headers={"Nats-Msg-Id": msg_id}, timeout=max(min(2.0, left), 0.1)
            )
            return bool(ack.duplicate)
        except (NatsTimeoutError, NoRespondersError, ServiceUnavailableError,
                ConnectionReconnectingError) as exc:  # fmt: skip
            if loop.time() + delay >= deadline:
                raise ConnectError(
                    f"JetStream did not confirm the publish on {subject} within {timeout:g}s "
                    f"({exc or type(exc).__name__})"
                ) from exc
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)


class ApiRefused(HeadgateError):
    """The service answered a query with an error (an unknown id, an invalid request)."""


async def ask(nc: NATS, subject: str, body: BaseModel, reply: type[M], timeout: float = 5.0) -> M:
    """Ask a request/reply subject of the service; ApiRefused carries its error sentence.

    The answer must be signed by the service (`workflow.client.trust`): an answer from any
    other subscriber of the subject raises `NotFromService` (a `ConnectError`)."""
    try:
        msg = await nc.request(subject, body.model_dump_json().encode(), timeout=timeout)
    except NoRespondersError as exc:
        raise ConnectError(
            f"no Headgate service answers on {subject} (is it running, with the same prefix?)"
        ) from exc
    except TimeoutError as exc:  # nats-py's TimeoutError is one too
        raise ConnectError(f"the Headgate service did not answer within {timeout:g}s") from exc
    except NatsError as exc:  # closed, reconnecting, a permissions violation
        raise ConnectError(f"cannot ask {subject}: {exc}") from exc
    prefix, api, _ = subject.partition(".api.")
    if api:
        await trust_for(nc, prefix).require(msg.subject, msg.data, msg.headers)
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
    grace: float = 0.0,
) -> T | None:
    """Call `probe` with a doubling backoff until it returns a value, the time is up (None), or
    `interrupt` completes (None): for state the service announces no event for.

    With `interrupt`, the first probe waits `grace` seconds for it (the event usually comes
    first, and a query costs the service more than an event), and a probe in flight is
    abandoned as soon as `interrupt` completes.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = first
    if interrupt is not None and grace > 0:
        await asyncio.wait([interrupt], timeout=min(grace, timeout))
        if interrupt.done():
            return None
    while True:
        value = await _probe_once(probe, interrupt)
        if interrupt is not None and interrupt.done():
            return None
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


async def _probe_once(
    probe: Callable[[], Awaitable[T | None]], interrupt: asyncio.Future[Any] | None
) -> T | None:
    task = asyncio.ensure_future(probe())
    if interrupt is not None:
        await asyncio.wait([task, interrupt], return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            return None
    try:
        return await task
    except NotFromService:
        raise  # the trusted key is not this service's: no later answer will verify either
    except ConnectError:
        return None  # the service may be restarting: keep trying until the deadline
