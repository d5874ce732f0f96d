"""Request/reply on FastStream against a bare nats-py responder, on one embedded nats-server.

Run `python bench/bench_api.py [REQUESTS]`. Three responders answer the same 10-byte query with
a small JSON reply, each on its own subject in a queue group: nats-py's `subscribe(cb=...)`
(the baseline), FastStream as the service runs it (`apply_types=False`, the message read from
`broker.context`), and FastStream with a `NatsMessage` parameter (which fast-depends resolves
through a worker thread). One client asks sequentially; the median of 3 rounds is printed, with
each FastStream figure as a ratio to the baseline of the same round.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nats
from faststream.nats import NatsBroker, NatsMessage
from nats.aio.msg import Msg

from workflow.service.embedded import EmbeddedNats


async def rate(nc: Any, subject: str, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        await nc.request(subject, b'{"id":"x"}', timeout=5)
    return n / (time.perf_counter() - start)


async def main(n: int) -> None:
    server = EmbeddedNats(store_dir=Path(tempfile.mkdtemp()))
    url = server.start()
    try:
        raw = await nats.connect(url)

        async def respond(msg: Msg) -> None:
            await msg.respond(json.dumps({"subject": msg.subject}).encode())

        await raw.subscribe("bench.raw", queue="q", cb=respond)
        lean = NatsBroker(url, logger=None, apply_types=False)

        @lean.subscriber("bench.lean", queue="q")
        async def lean_handler(body: Any) -> bytes:
            msg = lean.context.get_local("message").raw_message
            return json.dumps({"subject": msg.subject}).encode()

        typed = NatsBroker(url, logger=None)

        @typed.subscriber("bench.typed", queue="q")
        async def typed_handler(msg: NatsMessage) -> bytes:
            return json.dumps({"subject": msg.raw_message.subject}).encode()

        await lean.start()
        await typed.start()
        client = await nats.connect(url)
        rounds: dict[str, list[float]] = {"nats-py": [], "lean": [], "typed": []}
        for _ in range(3):
            rounds["nats-py"].append(await rate(client, "bench.raw", n))
            rounds["lean"].append(await rate(client, "bench.lean", n))
            rounds["typed"].append(await rate(client, "bench.typed", n))
        base = statistics.median(rounds["nats-py"])
        print(f"{n} sequential requests per round, median of 3 rounds")
        print(f"nats-py responder                        {base:8.0f} req/s")
        for label, key in (
            ("FastStream, apply_types=False (service)", "lean"),
            ("FastStream, NatsMessage parameter", "typed"),
        ):
            value = statistics.median(rounds[key])
            print(f"{label:40} {value:8.0f} req/s  ×{value / base:.2f}")
        await client.close()
        await lean.stop()
        await typed.stop()
        await raw.close()
    finally:
        server.stop()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000))
