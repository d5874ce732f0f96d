"""How long a running `headgate serve` takes to apply a change of the registered agents.

Run `python bench/bench_agent_access.py [ROUNDS]`. Starts the service with its embedded
nats-server in a temporary data dir, registers agents (`headgate agents add`'s function) up to
1, 50 and 200, and times `AgentAccess.apply` ROUNDS times (default 5) at each size: rewriting
the server's account config, SIGHUP to nats-server, and waiting until its monitoring port
reports the new `config_load_time`. The baseline, in the same run, is the same apply with no
agent registered; the last column is the median over the baseline's. The reload confirmation
polls every 10 ms.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from workflow import agent_identities
from workflow.service.embedded_access import CONFIG_FILE
from workflow.service.lifecycle import Service
from workflow.service.settings import Settings


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="headgate-bench-agents-") as tmp:
        data = Path(tmp) / ".headgate"
        service = Service(Settings(data_dir=data, prefix="hgbench"))
        await service.start()
        try:
            access = service.agent_access
            assert access is not None
            registered, baseline = 0, 0.0
            print(f"{'agents':>6} {'config KiB':>10} {'median ms':>9} {'min':>7} {'max':>7} "
                  f"{'x base':>6}")  # fmt: skip
            for size in (0, 1, 50, 200):
                while registered < size:
                    agent_identities.add(data, f"bot-{registered}")
                    registered += 1
                times = []
                for _ in range(rounds):
                    started = time.perf_counter()
                    if not await access.apply("bench"):
                        raise SystemExit("the embedded nats-server did not reload")
                    times.append((time.perf_counter() - started) * 1000)
                median = statistics.median(times)
                baseline = baseline or median
                kib = (data / "nats" / CONFIG_FILE).stat().st_size / 1024
                print(f"{size:>6} {kib:>10.1f} {median:>9.1f} {min(times):>7.1f} "
                      f"{max(times):>7.1f} {median / baseline:>6.2f}")  # fmt: skip
        finally:
            await service.stop()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 5))
