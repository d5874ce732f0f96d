"""The database writer's queue: a lock whose urgent waiters are served before the others.

An approval, a rejection, a cancel or an expiry is a person (or their deadline) waiting for an
answer; the intake's batches are machines. When both wait for the writer, the urgent one goes
first, whatever the order they arrived in. Housekeeping (the retention pruner) goes last: a
background waiter is served when nobody else waits, or once it has waited `patience` seconds
(then before the normal waiters, never before an urgent one), so pruning neither holds up the
intake under load nor starves. Within each class the order is first come, first served, and
the lock is handed straight to the next waiter when released, so a newcomer never overtakes a
waiter.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

#: Seconds a background waiter waits behind normal waiters before it goes first among them.
PATIENCE = 1.0


class PriorityLock:
    """An asyncio lock with three queues of waiters: urgent, normal, then background."""

    def __init__(
        self, *, patience: float = PATIENCE, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._locked = False
        self._urgent: deque[asyncio.Future[None]] = deque()
        self._normal: deque[asyncio.Future[None]] = deque()
        self._background: deque[tuple[asyncio.Future[None], float]] = deque()
        self._patience = patience
        self._clock = clock

    def locked(self) -> bool:
        return self._locked

    @property
    def waiting(self) -> tuple[int, int]:
        """How many urgent and normal acquirers wait now."""
        return len(self._urgent), len(self._normal)

    @property
    def waiting_background(self) -> int:
        return len(self._background)

    async def acquire(self, *, urgent: bool = False, background: bool = False) -> None:
        if urgent and background:
            raise ValueError("a waiter is urgent or background, not both")
        if not self._locked:
            self._locked = True
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if background:
            entry = (waiter, self._clock())
            self._background.append(entry)
        else:
            (self._urgent if urgent else self._normal).append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # it was handed to us as we were cancelled: pass it on
            elif background:
                if entry in self._background:  # (a release may have dropped it already)
                    self._background.remove(entry)
            else:
                queue = self._urgent if urgent else self._normal
                if waiter in queue:
                    queue.remove(waiter)
            raise

    def release(self) -> None:
        if not self._locked:
            raise RuntimeError("release of an unlocked PriorityLock")
        if self._hand_over(self._urgent):
            return
        self._drop_cancelled_background()
        overdue = bool(self._background) and (
            self._clock() - self._background[0][1] >= self._patience
        )
        if overdue and self._hand_over_background():
            return
        if self._hand_over(self._normal) or self._hand_over_background():
            return
        self._locked = False

    @staticmethod
    def _hand_over(queue: deque[asyncio.Future[None]]) -> bool:
        while queue:
            waiter = queue.popleft()
            if not waiter.done():
                waiter.set_result(None)  # handed over: it stays locked
                return True
        return False

    def _drop_cancelled_background(self) -> None:
        while self._background and self._background[0][0].done():
            self._background.popleft()

    def _hand_over_background(self) -> bool:
        self._drop_cancelled_background()
        if not self._background:
            return False
        waiter, _ = self._background.popleft()
        waiter.set_result(None)
        return True

    @asynccontextmanager
    async def hold(self, *, urgent: bool = False, background: bool = False) -> AsyncIterator[None]:
        await self.acquire(urgent=urgent, background=background)
        try:
            yield
        finally:
            self.release()
