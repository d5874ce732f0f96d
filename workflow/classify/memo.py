"""Values derived from objects that never change (classifier tables, policies), computed once
per object instead of once per proposal; and a cache bounded by what its entries cost."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class PerObject(Generic[K, V]):
    """`derive(obj)`, remembered by the identity of `obj` for the last few objects seen.

    Only for objects that are never changed after they are built (the frozen tables and
    policies): the cache answers for the object, not for its content. An entry holds its object,
    so an id in the cache always names that very object and is never reused for another.
    """

    def __init__(self, derive: Callable[[K], V], size: int = 16) -> None:
        self._derive = derive
        self._size = size
        self._cache: dict[int, tuple[K, V]] = {}

    def __call__(self, obj: K) -> V:
        hit = self._cache.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        value = self._derive(obj)
        if len(self._cache) >= self._size:
            self._cache.clear()  # rare (a policy reload); clearing is atomic, unlike evicting
        self._cache[id(obj)] = (obj, value)
        return value


def per_object(derive: Callable[[K], V]) -> PerObject[K, V]:
    """Decorator form of `PerObject`."""
    return PerObject(derive)


class CostBoundedLRU(Generic[K, V]):
    """A least-recently-used cache bounded by the total cost of its values, not their count.

    `cost(key)` estimates what an entry holds (for parse trees: about 100 bytes per source
    byte, measured); an entry costing more than `max_entry` is never kept. Thread-safe.
    """

    def __init__(
        self, compute: Callable[[K], V], cost: Callable[[K], int], budget: int, max_entry: int
    ) -> None:
        self._compute = compute
        self._cost = cost
        self.budget = budget
        self.max_entry = max_entry
        self.total = 0
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, key: K) -> V:
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                return hit[0]
        value = self._compute(key)
        cost = self._cost(key)
        if cost > self.max_entry:
            return value
        with self._lock:
            if key not in self._entries:
                self._entries[key] = (value, cost)
                self.total += cost
            while self.total > self.budget and self._entries:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.total -= dropped
        return value

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.total = 0
