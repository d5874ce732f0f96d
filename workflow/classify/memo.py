"""Values derived from objects that never change (classifier tables, policies), computed once
per object instead of once per proposal."""

from __future__ import annotations

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
