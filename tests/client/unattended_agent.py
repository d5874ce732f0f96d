"""An unattended agent process for the tests (run with `sys.executable`).

unattended_agent.py enqueue URL PREFIX STATE_DIR PLAN
    PLAN is a JSON list of {"line": ..., "workspace": ...}; enqueues one `append_line` call
    per entry, prints {"id": ..., "line": ...} per call, then "ready", then waits to be
    killed.
unattended_agent.py work URL PREFIX STATE_DIR OUT
    runs `run_released` with an `append_line` handler that appends its line to OUT, until
    the ledger has no call left waiting; prints one JSON line per blocked call, then the
    worker's stats. A call whose line is "hang" prints "hanging" and never returns.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
from pathlib import Path

from nats.js.errors import NotFoundError

from workflow.client import Headgate
from workflow.client.worker import consumer_name
from workflow.messages import Blocked

AGENT = "night-owl"


def say(value: object) -> None:
    sys.stdout.write((value if isinstance(value, str) else json.dumps(value)) + "\n")
    sys.stdout.flush()


async def enqueue(url: str, prefix: str, state_dir: Path, plan: list[dict[str, str]]) -> None:
    async with Headgate.connect(url, agent=AGENT, prefix=prefix, state_dir=state_dir) as hg:
        for entry in plan:
            pid = await hg.enqueue(
                "append_line", {"line": entry["line"]}, workspace=entry["workspace"]
            )
            say({"id": pid, "line": entry["line"]})
        say("ready")
        await asyncio.Event().wait()  # until SIGKILL


async def work(url: str, prefix: str, state_dir: Path, out: Path) -> None:
    async def append_line(line: str) -> str:
        if line == "hang":
            say("hanging")
            await asyncio.Event().wait()
        with out.open("a") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        return f"appended {line}"

    def on_blocked(event: Blocked) -> None:
        say({"blocked": event.proposal_id, "outcome": event.outcome, "reason": event.reason})

    async with Headgate.connect(url, agent=AGENT, prefix=prefix, state_dir=state_dir) as hg:
        ledger = hg.ledger
        assert ledger is not None
        stop = asyncio.Event()

        async def drained() -> bool:
            if any(e.state in ("queued", "started") for e in ledger.entries()):
                return False
            try:
                info = await hg.nc.jetstream().consumer_info(
                    hg.subjects.stream("results"), consumer_name(AGENT)
                )
            except NotFoundError:
                return False  # run_released has not created it yet
            # Something delivered (every run here has events waiting), nothing left: a consumer
            # just made is not taken for a drained one.
            return bool(
                info.delivered.stream_seq > 0
                and info.num_pending == 0
                and info.num_ack_pending == 0
            )

        async def until_drained() -> None:
            while not await drained():
                await asyncio.sleep(0.05)
            stop.set()

        watcher = asyncio.create_task(until_drained())
        # A short ack wait: the releases a killed worker had fetched come back in seconds.
        stats = await hg.run_released({"append_line": append_line}, stop=stop,
                                      on_blocked=on_blocked, ack_wait=2.0)  # fmt: skip
        await watcher
        say({"stats": dataclasses.asdict(stats)})


def main() -> None:
    mode, url, prefix, state_dir = sys.argv[1:5]
    if mode == "enqueue":
        asyncio.run(enqueue(url, prefix, Path(state_dir), json.loads(sys.argv[5])))
    else:
        asyncio.run(work(url, prefix, Path(state_dir), Path(sys.argv[5])))


if __name__ == "__main__":
    main()
