"""The JetStream pull protocol the stages run on: pull requests kept outstanding on a private
inbox (`Puller`), and how many times a message was delivered (`attempts`).

FastStream is not used on this path: its per-message overhead caps a JetStream relay at a
fraction of what nats-py does with batched fetches and pipelined publishes (see docs/bench.md),
and a stage needs the whole batch to make one database transaction.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from workflow.service.streams import PRIORITY_FIRST, ConsumerSpec

log = logging.getLogger("headgate.stage")


def _ack_field(msg: Msg, after_delivered: int) -> int | None:
    """A number off the ack subject, `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.…`
    (9 tokens) or with a domain and account hash after `$JS.ACK` (12 tokens or more), counted
    from the delivery count: 1 µs against 5 µs for building `msg.metadata`."""
    tokens = (msg.reply or "").split(".")
    index = 4 if len(tokens) == 9 else 6 if len(tokens) >= 12 else None
    if index is not None and tokens[0] == "$JS" and tokens[1] == "ACK":
        value = tokens[index + after_delivered]
        if value.isdigit():
            return int(value)
    return None


def attempts(msg: Msg) -> int:
    """How many times JetStream has delivered `msg` (1 the first time; read once per message
    of every batch). A nats-server that was killed may count a delivery it had not yet
    written down as none: a message can come back with 1 after it was handled."""
    delivered = _ack_field(msg, 0)
    if delivered is not None:
        return delivered
    try:
        return int(msg.metadata.num_delivered)
    except Exception:  # not a JetStream message (tests)
        return 1


def stored_at_ns(msg: Msg) -> int | None:
    """When JetStream stored `msg` (ns since the epoch, the server's clock); None when it is
    not a JetStream message."""
    return _ack_field(msg, 3)


def stream_sequence(msg: Msg) -> int | None:
    """The message's sequence in its stream; None when it is not a JetStream message."""
    seq = _ack_field(msg, 1)
    if seq is not None:
        return seq
    try:
        return int(msg.metadata.sequence.stream)
    except Exception:  # not a JetStream message (tests)
        return None


# A pull request lives this long on the server; while it waits, the server sends an idle
# heartbeat this often, so a request lost with a connection or a server is noticed.
PULL_EXPIRES = 30.0
PULL_HEARTBEAT = 5.0


class PullFailed(Exception):
    """The server refused the pull requests (consumer deleted, no JetStream): back off."""


class Puller:
    """Pull requests kept outstanding on a private inbox; delivered messages queue here.

    Credit accounting: `pending` counts messages asked for and neither delivered nor given
    back by a status (408 expired, 409 leadership change…, with `Nats-Pending-Messages`).
    When it falls to half the credit, one request tops it up, so the server pushes messages
    the moment they are stored instead of waiting for the next fetch. A reconnect, or silence
    longer than two heartbeats while requests are out, means the requests may be gone:
    `pending` is reset and they are issued again (asking twice is harmless; the consumer's
    max_ack_pending bounds what the server hands out).
    """

    def __init__(
        self, nc: NATS, spec: ConsumerSpec, credit: int, tick: float, priority: int = PRIORITY_FIRST
    ):
        self.nc = nc
        self.subject = f"$JS.API.CONSUMER.MSG.NEXT.{spec.stream}.{spec.durable}"
        # On a prioritized consumer every request names the group and its priority.
        self.group = (
            b""
            if spec.priority_group is None
            else b',"group":"%s","priority":%d' % (spec.priority_group.encode(), priority)
        )
        self.inbox = nc.new_inbox()
        self.credit = max(credit, 1)
        self.tick = tick
        self.queue: deque[Msg] = deque()
        self.wake = asyncio.Event()
        self.pending = 0
        self.heard = 0.0
        self.reconnects = int(nc.stats["reconnects"])
        self.failure: str | None = None
        self.sub: Subscription | None = None
        self.loop = asyncio.get_running_loop()

    async def start(self) -> None:
        self.sub = await self.nc.subscribe(self.inbox, cb=self._on_msg)

    async def _on_msg(self, msg: Msg) -> None:
        self.heard = self.loop.time()
        headers = msg.headers
        status = headers.get("Status") if headers else None
        if status is None:
            if self.pending > 0:
                self.pending -= 1
            self.queue.append(msg)
            self.wake.set()
            return
        if status == "100":  # idle heartbeat
            return
        assert headers is not None
        released = headers.get("Nats-Pending-Messages")
        if released is not None and released.isdigit():
            self.pending = max(0, self.pending - int(released))
        else:  # a status that does not say how much it ends: assume every request ended
            self.pending = 0
        description = headers.get("Description", "")
        # 400: the request does not fit the consumer (a priority group missing or unknown, as
        # when another version of the service has just updated it): asking again at once
        # would only be refused again, so back off and make the consumer anew.
        if status in ("400", "503") or (status == "409" and "Deleted" in description):
            self.failure = f"{status} {description}".strip()
        elif status not in ("404", "408", "409"):
            log.warning("pull %s: unexpected status %s %s", self.subject, status, description)
        self.wake.set()

    async def top_up(self) -> None:
        now = self.loop.time()
        reconnects = int(self.nc.stats["reconnects"])
        if reconnects != self.reconnects:
            self.reconnects, self.pending = reconnects, 0
        elif self.pending and now - self.heard > 2 * PULL_HEARTBEAT:
            self.pending = 0
        if self.pending > self.credit // 2:
            return
        want = self.credit - self.pending - len(self.queue)
        if want <= 0:
            return
        request = b'{"batch":%d,"expires":%d,"idle_heartbeat":%d%s}' % (
            want,
            int(PULL_EXPIRES * 1e9),
            int(PULL_HEARTBEAT * 1e9),
            self.group,
        )
        await self.nc.publish(self.subject, request, reply=self.inbox)
        self.pending += want
        self.heard = max(self.heard, now)

    async def next_batch(
        self, limit: int, stopping: asyncio.Event, beat: Callable[[], None] = lambda: None
    ) -> list[Msg]:
        """What is queued, up to `limit`, as soon as there is one message; [] when stopping.
        `beat` is called on every wake-up (at least every `tick` seconds)."""
        while True:
            beat()
            if self.failure is not None:
                failure, self.failure = self.failure, None
                raise PullFailed(failure)
            if stopping.is_set():
                return []
            await self.top_up()
            if self.queue:
                break
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), self.tick)
            except TimeoutError:
                pass
        queue = self.queue
        if len(queue) <= limit:
            batch = list(queue)
            queue.clear()
        else:
            batch = [queue.popleft() for _ in range(limit)]
        return batch

    async def close(self) -> None:
        """Stop receiving; messages delivered but never handled go back at once."""
        if self.sub is not None:
            try:
                # Drain: the server stops delivering, what it already sent still arrives here.
                await asyncio.wait_for(self.sub.drain(), 2.0)  # type: ignore[no-untyped-call]
            except Exception:
                try:
                    await self.sub.unsubscribe()
                except Exception:
                    pass
        while self.queue:
            msg = self.queue.popleft()
            try:
                await msg.nak()
            except Exception:  # redelivered after ack_wait instead
                pass
