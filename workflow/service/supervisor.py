"""Keeps the service's long-running tasks alive: a stage or a periodic task that stops is logged
with why and started again after a backoff; readiness names any that is down or stalled.

A stage cannot be ended by a message (see `workflow.service.stage.Settle`), but its loop can
still stop: the consumer could not be created, a bug outside the handler, the connection gone.
A stalled stage is one whose loop has given no sign of life (`beat`) for `stall_after` seconds:
its loop beats at least every second while idle or between batches, so only a batch that
hangs (a lock never released, a call that never returns) makes it stall.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from workflow.service.metrics import Metrics

log = logging.getLogger("headgate.supervisor")

Clock = Callable[[], float]
#: What a supervised task runs: given its `beat`, it returns only when the service stops.
Runner = Callable[[Callable[[], None]], Awaitable[None]]


@dataclass
class Health:
    """What the supervisor knows about one task."""

    name: str
    stall_after: float | None
    running: bool = False
    restarts: int = 0
    error: str | None = None
    beat: float = 0.0
    task: asyncio.Task[None] | None = field(default=None, repr=False)


@dataclass
class Supervisor:
    stopping: asyncio.Event
    metrics: Metrics | None = None
    #: Monotonic seconds; a test hands in its own to tell a stall without waiting for one.
    clock: Clock = time.monotonic
    backoff_base: float = 1.0
    backoff_max: float = 30.0
    tasks: dict[str, Health] = field(default_factory=dict)

    def start(self, name: str, run: Runner, *, stall_after: float | None = None) -> Health:
        """Run `run(beat)` until the service stops, restarting it whenever it ends early."""
        health = Health(name, stall_after, beat=self.clock())
        health.task = asyncio.create_task(self._keep(health, run), name=f"headgate-{name}")
        self.tasks[name] = health
        return health

    def _beat(self, health: Health) -> Callable[[], None]:
        def beat() -> None:
            health.beat = self.clock()

        return beat

    async def _keep(self, health: Health, run: Runner) -> None:
        failures = 0
        while not self.stopping.is_set():
            health.running, health.beat = True, self.clock()
            try:
                await run(self._beat(health))
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                log.error("%s stopped: %s", health.name, error, exc_info=exc)
            else:
                if self.stopping.is_set():
                    break
                error = "it returned while the service runs"
                log.error("%s stopped: %s", health.name, error)
            failures += 1
            delay = min(self.backoff_base * 2 ** (failures - 1), self.backoff_max)
            health.running, health.error = False, error
            health.restarts += 1
            if self.metrics is not None:
                self.metrics.stage_restarts.labels(health.name).inc()
            log.warning("%s: restarting in %.1f s (restart %d)", health.name, delay, failures)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), delay)
        health.running = False

    def problems(self) -> dict[str, str]:
        """Each task that is down or stalled, and why."""
        now = self.clock()
        found: dict[str, str] = {}
        for name, health in self.tasks.items():
            if not health.running:
                found[name] = f"stopped ({health.error or 'not started'}); restarting"
            elif health.stall_after is not None and now - health.beat > health.stall_after:
                found[name] = f"stalled: no progress for {now - health.beat:.0f} s"
        return found

    async def wait(self) -> None:
        """Wait for every task to end (after `stopping` was set)."""
        running = [h.task for h in self.tasks.values() if h.task is not None]
        if running:
            await asyncio.gather(*running, return_exceptions=True)
