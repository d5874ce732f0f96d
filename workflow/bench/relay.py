"""The baseline: the fastest bare relay through JetStream written with nats-py alone.

Same shape of work as Headgate's intake stage, minus everything Headgate adds: a durable pull
consumer fetching batches from a work-queue stream, every message re-published to an output
stream with `Nats-Msg-Id` (pipelined `publish_async`, all PubAcks awaited), then acked. The
fetch of the next batch overlaps the PubAck wait of the current one. No JSON, no
classification, no database.

Run as a process of its own (`python -m workflow.bench.relay --url URL --prefix P`) so that its
CPU time is accounted like the service's; it prints `ready` when it consumes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal

import nats
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import FetchTimeoutError, NotFoundError

DUPLICATE_WINDOW = 600.0
DURABLE = "relay"


def stream_names(prefix: str) -> tuple[str, str]:
    base = prefix.upper().replace(".", "_").replace("-", "_")
    return f"{base}_IN", f"{base}_OUT"


async def ensure_relay_streams(js: JetStreamContext, prefix: str) -> None:
    """The input (work queue) and output (limits) streams, configured like Headgate's."""
    in_name, out_name = stream_names(prefix)
    for config in (
        StreamConfig(
            name=in_name, subjects=[f"{prefix}.in.>"], storage=StorageType.FILE,
            retention=RetentionPolicy.WORK_QUEUE, duplicate_window=DUPLICATE_WINDOW,
        ),
        StreamConfig(
            name=out_name, subjects=[f"{prefix}.out.>"], storage=StorageType.FILE,
            retention=RetentionPolicy.LIMITS, duplicate_window=DUPLICATE_WINDOW,
        ),
    ):  # fmt: skip
        assert config.name is not None
        try:
            await js.stream_info(config.name)
        except NotFoundError:
            await js.add_stream(config=config)


async def delete_relay_streams(js: JetStreamContext, prefix: str) -> None:
    for name in stream_names(prefix):
        with contextlib.suppress(Exception):
            await js.delete_stream(name)


class Relay:
    def __init__(self, js: JetStreamContext, prefix: str):
        self.js = js
        self.in_head = f"{prefix}.in."
        self.out_head = f"{prefix}.out."
        self.relayed = 0

    async def handle(self, msgs: list[Msg]) -> None:
        js, cut, out = self.js, len(self.in_head), self.out_head
        futures = []
        for msg in msgs:
            headers = msg.headers
            mid = headers.get("Nats-Msg-Id") if headers else None
            if mid is None:
                mid = f"{msg.metadata.stream}:{msg.metadata.sequence.stream}"
            futures.append(
                await js.publish_async(
                    out + msg.subject[cut:], msg.data, headers={"Nats-Msg-Id": "relay:" + mid}
                )
            )
        try:
            await asyncio.wait_for(asyncio.gather(*futures), 10.0)
        except Exception:
            for msg in msgs:
                await msg.nak(delay=1.0)
            return
        for msg in msgs:
            await msg.ack()
        self.relayed += len(msgs)


async def run_relay(url: str, prefix: str, batch: int, stopping: asyncio.Event) -> None:
    nc = await nats.connect(url, name="headgate-bench-relay")
    js = nc.jetstream()
    await ensure_relay_streams(js, prefix)
    in_name, _ = stream_names(prefix)
    await js.add_consumer(
        in_name,
        config=ConsumerConfig(
            durable_name=DURABLE, ack_policy=AckPolicy.EXPLICIT, ack_wait=30.0,
            max_ack_pending=4096, filter_subject=f"{prefix}.in.>",
        ),
    )  # fmt: skip
    sub = await js.pull_subscribe_bind(DURABLE, stream=in_name)
    relay = Relay(js, prefix)
    print("ready", flush=True)
    in_flight: asyncio.Task[None] | None = None
    try:
        while not stopping.is_set():
            try:
                msgs = await sub.fetch(batch, timeout=1.0)
            except (TimeoutError, FetchTimeoutError, NatsTimeoutError):
                continue
            if in_flight is not None:
                await in_flight
            in_flight = asyncio.create_task(relay.handle(msgs))
        if in_flight is not None:
            await in_flight
    finally:
        with contextlib.suppress(Exception):
            await nc.drain()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--prefix", default="hgrelay")
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()

    async def go() -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopping.set)
        await run_relay(args.url, args.prefix, args.batch, stopping)

    asyncio.run(go())


if __name__ == "__main__":
    main()
