"""`WeakValues`: a map whose values are held weakly, lighter than `weakref.WeakValueDictionary`
for the shared terminal automata (registered by the dozen in every compile)."""

from __future__ import annotations

import weakref
from typing import Generic, TypeVar

__all__ = ["WeakValues"]

K = TypeVar("K")
V = TypeVar("V")

#: dead entries are swept once the map holds this many more than after the last sweep, at least
_MIN_SWEEP = 64


class WeakValues(Generic[K, V]):
    """Keys to weak references without callbacks; not thread-safe (callers hold a lock).

    `WeakValueDictionary` makes a `KeyedRef` (Python code) per entry and runs a Python callback
    when a value dies, hashing its key again: three times the cost of a plain reference, paid
    for every terminal automaton built and every one freed. Here a dead value's entry stays
    until a sweep, which runs once the map has doubled since the last one (amortised O(1) per
    insertion; at most about half the entries dead). A dead entry reads as missing.
    """

    __slots__ = ("_data", "_sweep_above")

    def __init__(self) -> None:
        self._data: dict[K, weakref.ref[V]] = {}
        self._sweep_above = _MIN_SWEEP

    def get(self, key: K) -> V | None:
        ref = self._data.get(key)
        return None if ref is None else ref()

    def setdefault(self, key: K, value: V) -> V:
        """The live value of `key`, else `value` stored under it."""
        data = self._data
        ref = data.get(key)
        if ref is not None:
            hit = ref()
            if hit is not None:
                return hit
        data[key] = weakref.ref(value)
        if len(data) > self._sweep_above:
            self._sweep()
        return value

    def pop(self, key: K, default: V | None = None) -> V | None:
        ref = self._data.pop(key, None)
        value = None if ref is None else ref()
        return default if value is None else value

    def clear(self) -> None:
        self._data.clear()
        self._sweep_above = _MIN_SWEEP

    def __len__(self) -> int:
        """The live entries (sweeps first)."""
        self._sweep()
        return len(self._data)

    def _sweep(self) -> None:
        data = self._data
        for key in [key for key, ref in data.items() if ref() is None]:
            del data[key]
        self._sweep_above = max(_MIN_SWEEP, 2 * len(data))
