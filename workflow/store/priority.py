"""The database writer's queue: a lock whose urgent waiters are served before the others.

An approval, a rejection, a cancel or an expiry is a person (or their deadline) waiting for an
answer; the intake's batches are machines. When both wait for the writer, the urgent one goes
first, whatever the order they arrived in. Within each class the order is first come, first
served, and the lock is handed straight to the next waiter when released, so a newcomer never
overtakes a waiter.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class PriorityLock:
    """An asyncio lock with two queues of waiters: urgent first, then normal."""

    def __init__(self) -> None:
        self._locked = False
        self._urgent: deque[asyncio.Future[None]] = deque()
        self._normal: deque[asyncio.Future[None]] = deque()

    def locked(self) -> bool:
        return self._locked

    @property
    def waiting(self) -> tuple[int, int]:
        """How many urgent and normal acquirers wait now."""
        return len(self._urgent), len(self._normal)

    async def acquire(self, *, urgent: bool = False) -> None:
        if not self._locked:
            self._locked = True
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._urgent if urgent else self._normal
        queue.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # it was handed to us as we were cancelled: pass it on
            elif waiter in queue:  # (a release may have dropped it already)
                queue.remove(waiter)
            raise

    def release(self) -> None:
        if not self._locked:
            raise RuntimeError("release of an unlocked PriorityLock")
        for queue in (self._urgent, self._normal):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)  # handed over: it stays locked
                    return
        self._locked = False

    @asynccontextmanager
    async def hold(self, *, urgent: bool = False) -> AsyncIterator[None]:
        await self.acquire(urgent=urgent)
        try:
            yield
        finally:
            self.release()
