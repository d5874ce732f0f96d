"""SQLite's one writer: the write lock the service's processes queue on, and the checkpointer
that copies the write-ahead log back into the database off the event loop."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from workflow.store.priority import PriorityLock

log = logging.getLogger("headgate.store")


class SqliteWriteLock:
    """The write lock of one SQLite file, for the tasks of this process and for other processes.

    SQLite serialises writers itself, but a writer that finds the file locked polls (sleeping
    1, 2, 5, 10… ms between tries), on the event loop's thread. The service's processes (the
    main one and its intake workers) instead queue on an `flock` of a file beside the database
    and are woken the moment it is released; within a process, tasks queue on a
    `PriorityLock` first (approval steps before intake batches), so at most one of them waits
    for the file. The checkpointer's last pass holds it too (see `WalCheckpointer`). `path` None
    (an in-memory database): this process only.
    """

    def __init__(self, path: str | None):
        self.local = PriorityLock()
        self._path = f"{path}-writer.lock" if path else None
        self._fd: int | None = None

    async def __aenter__(self) -> None:
        await self._acquire(urgent=False)

    async def __aexit__(self, *exc: object) -> None:
        self._release()

    @asynccontextmanager
    async def hold(self, *, urgent: bool = False, background: bool = False) -> AsyncIterator[None]:
        """Hold the lock; `urgent` waiters of this process are served before the others,
        `background` ones after them (see `PriorityLock`)."""
        await self._acquire(urgent=urgent, background=background)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, *, urgent: bool, background: bool = False) -> None:
        await self.local.acquire(urgent=urgent, background=background)
        try:
            await self._lock_file()
        except BaseException:
            self.local.release()
            raise

    def _release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self.local.release()

    async def _lock_file(self) -> None:
        if self._path is None:
            return
        if self._fd is None:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        fd = self._fd
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        # Another process writes: wait in a thread, so the loop goes on meanwhile.
        waiting = asyncio.ensure_future(asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX))
        try:
            await asyncio.shield(waiting)
        except asyncio.CancelledError:
            await asyncio.wait([waiting])  # the thread may still get it: give it back
            if not waiting.cancelled() and waiting.exception() is None:
                fcntl.flock(fd, fcntl.LOCK_UN)
            raise

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class WalCheckpointer:
    """Copies the SQLite write-ahead log back into the database file from a worker thread.

    The writer commits on the event loop with automatic checkpoints off. After a commit,
    `committed()` starts a checkpoint when the last one is `interval` seconds old and none is
    running. Only a completely copied log is started over by the next commit, and a commit
    landing during a pass leaves the log not completely copied: without help the log grows
    without end while commits keep coming (measured: 6 GB in 4 minutes at 600 proposals/s, its
    index mapped into memory with it). So a checkpoint makes passes without the lock, each
    copying what the commits added during the last, until one finds nothing left to copy (the
    log is complete as it stands: the next commit starts it over); when the first pass and
    `unlocked_passes` more each found more, its last pass holds the store's write lock, so
    that no commit lands during it. Writers wait for the lock only then; the event loop never
    does (the copy and its syncs run in the thread). The log file is cut back to
    `journal_size_limit` when it restarts.
    """

    def __init__(
        self, path: str, lock: SqliteWriteLock, interval: float = 1.0, unlocked_passes: int = 3
    ):
        self.path = path
        self.lock = lock
        self.interval = interval
        self.unlocked_passes = unlocked_passes
        #: Checkpoints that completed the log without the lock, and under it.
        self.completed_unlocked = 0
        self.completed_locked = 0
        self._last = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        self._thread: asyncio.Future[int | None] | None = None  # the pass running in a thread
        self._closing = False
        self._conn: sqlite3.Connection | None = None

    def committed(self) -> None:
        if self._closing or (self._task is not None and not self._task.done()):
            return
        if time.monotonic() - self._last < self.interval:
            return
        self._start()

    async def after_bulk_commit(self) -> None:
        """Checkpoint now, whatever the interval, and return when it is done: for a commit
        that wrote a lot to the log (a pruning transaction). Its frames are then copied
        without the lock before the next such commit lands; otherwise they arrive during the
        checkpoint's short passes, and its locked pass copies them while writers wait."""
        while self._task is not None and not self._task.done():
            await asyncio.wait([self._task])
        if not self._closing:
            await asyncio.wait([self._start()])

    def _start(self) -> asyncio.Task[None]:
        self._last = time.monotonic()
        self._task = asyncio.create_task(self._run())
        self._task.add_done_callback(_log_failure)
        return self._task

    async def _run(self) -> None:
        # A pass that copies frames may have missed a commit that landed during it; a pass that
        # finds the log complete, at the same length as the last pass left it, has missed none.
        copied_to: int | None = None
        for _ in range(self.unlocked_passes + 1):
            complete_at = await asyncio.shield(self._pass())
            if complete_at is not None and complete_at == copied_to:
                self.completed_unlocked += 1
                return
            copied_to = complete_at
        async with self.lock:
            done = self._pass()
            try:
                await asyncio.shield(done)
            except asyncio.CancelledError:
                await asyncio.wait([done])  # keep the lock until the thread is finished
                raise
        self.completed_locked += 1

    def _pass(self) -> asyncio.Future[int | None]:
        self._thread = asyncio.ensure_future(asyncio.to_thread(self._checkpoint))
        return self._thread

    def _checkpoint(self) -> int | None:
        """One passive pass; the log's length in frames when it is completely copied."""
        if self._conn is None:
            self._conn = sqlite3.connect(self.path, timeout=10, check_same_thread=False)
        _busy, frames, copied = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return int(frames) if frames == copied else None

    async def close(self) -> None:
        """Start no more checkpoints; wait for the running one, then close the connection.

        The thread is waited for, not only the task: a cancelled task leaves its shielded pass
        running, and closing the connection under a statement in another thread would crash."""
        self._closing = True
        if self._task is not None:
            await asyncio.wait([self._task])
        if self._thread is not None:
            await asyncio.wait([self._thread])
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("SQLite checkpoint failed (%s); the next commit retries", task.exception())
