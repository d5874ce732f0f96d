"""Intake worker processes: the hot path on more than one core.

One Python process runs one core's worth of work at most (the GIL), and the intake — validate,
classify, evaluate, route, one transaction, publish — is where the CPU goes. `serve
--intake-processes N` starts N-1 more processes that run the intake stage only, on the same
durable pull consumer (JetStream spreads the batches over them) and the same database. Nothing
else changes: every process acks a proposal only after its own commit and PubAcks, the audit
chain is appended under the database's write lock (on SQLite a lock file all the processes
queue on, see `workflow.store.sqlite_writer.SqliteWriteLock`; `FOR UPDATE` on the head row on
PostgreSQL), and a redelivery that lands on another process finds the row committed and
re-sends the same events.

The main process owns everything else (streams, migrations, collector, sweeper, republisher,
API) and the workers' lifecycle: it starts them once the database is migrated and the streams
exist, restarts one that exits, and stops them (SIGTERM: each finishes the batch in hand) before
it stops itself. On Linux a worker also gets SIGTERM from the kernel if the main process dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from workflow.service.embedded import die_with_parent

log = logging.getLogger("headgate.workers")

#: A worker that exits sooner than this after starting is restarted only after this long.
RESTART_BACKOFF = 5.0


@dataclass
class _Worker:
    index: int
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0


@dataclass
class IntakeWorkers:
    """Runs one intake worker process per command line in `argv` (see `worker_argv`)."""

    argv: Sequence[Sequence[str]]
    env: dict[str, str] = field(default_factory=dict)
    poll: float = 1.0
    _workers: list[_Worker] = field(default_factory=list)
    _stopping: bool = False
    _monitor: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start every worker (from the main thread: the kernel's parent-death signal follows
        the thread that forks) and watch them."""
        self._workers = [_Worker(i) for i in range(len(self.argv))]
        for worker in self._workers:
            self._spawn(worker)
        self._monitor = asyncio.get_running_loop().create_task(self._watch())

    @property
    def pids(self) -> list[int]:
        return [w.process.pid for w in self._workers if w.process is not None]

    def _spawn(self, worker: _Worker) -> None:
        worker.process = subprocess.Popen(
            list(self.argv[worker.index]),
            stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env},
            preexec_fn=_worker_preexec(),  # a prctl call and a signal disposition
        )
        worker.started = time.monotonic()
        log.info("intake worker %d started (pid %d)", worker.index + 1, worker.process.pid)

    async def _watch(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.poll)
            for worker in self._workers:
                process = worker.process
                if self._stopping or process is None or process.poll() is None:
                    continue
                lived = time.monotonic() - worker.started
                log.error(
                    "intake worker %d (pid %d) exited with status %s; restarting it",
                    worker.index + 1,
                    process.pid,
                    process.returncode,
                )
                if lived < RESTART_BACKOFF:
                    await asyncio.sleep(RESTART_BACKOFF - lived)
                if not self._stopping:
                    try:
                        self._spawn(worker)
                    except OSError as exc:  # tried again at the next poll, after the backoff
                        worker.started = time.monotonic()
                        log.error("intake worker %d could not start (%s)", worker.index + 1, exc)

    def signal(self, signum: int) -> None:
        """Send `signum` to every running worker (SIGHUP: reload the policy)."""
        for worker in self._workers:
            if worker.process is not None and worker.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.send_signal(signum)

    async def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM every worker, wait for them to finish their batch, kill what is left."""
        self._stopping = True
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
        running = [w.process for w in self._workers if w.process and w.process.poll() is None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in running:
            try:
                await asyncio.to_thread(process.wait, max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                log.warning("intake worker pid %d did not stop in time; killing it", process.pid)
                process.kill()
                await asyncio.to_thread(process.wait)


def _worker_preexec() -> Callable[[], None]:
    """What runs between fork and exec: die with the main process (Linux), and ignore SIGHUP
    until the worker has installed its own handler (a policy reload sent while it starts would
    otherwise kill it; it reads the policy file when it starts anyway). Built before the fork:
    the child only makes the two system calls."""
    die = die_with_parent()

    def preexec() -> None:
        if die is not None:
            die()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    return preexec


def worker_argv(options: Sequence[str]) -> list[str]:
    """The command line of one worker: `headgate serve --intake-worker` with `options`."""
    return [sys.executable, "-m", "workflow", "serve", "--intake-worker", *options]
