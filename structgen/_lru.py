"""`LRU`: the one bounded, thread-safe least-recently-used map behind structgen's module-level
caches (token classes, spellings, digests); `clear_caches()` empties every one it knows."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["LRU", "clear_all"]

K = TypeVar("K")
V = TypeVar("V")

_ALL: weakref.WeakSet[LRU[object, object]] = weakref.WeakSet()


class LRU(Generic[K, V]):
    """At most `max_entries` entries; reading one makes it the most recent. Thread-safe.

    Reads take no lock: each `OrderedDict` operation is atomic, and a key another thread
    evicts between the read and its move to the end is simply not moved (the caches are read
    tens of thousands of times per compile; the lock was half a read's cost). Writes lock, so
    that evictions keep the size bound.

    Each entry keeps its own key beside the value: the move to the end looks the entry up by
    that stored key, found by identity, where the key asked with may be an equal but distinct
    regex tree that would be compared node by node a second time.
    """

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self.max_entries = max_entries
        self._data: OrderedDict[K, tuple[K, V]] = OrderedDict()
        self._lock = threading.Lock()
        _ALL.add(self)  # type: ignore[arg-type]

    def get(self, key: K) -> V | None:
        data = self._data
        entry = data.get(key)
        if entry is None:
            return None
        try:  # noqa: SIM105  (contextlib.suppress costs more than the read)
            data.move_to_end(entry[0])
        except KeyError:  # (evicted meanwhile by another thread: still a valid answer)
            pass
        return entry[1]

    def put(self, key: K, value: V) -> V:
        """Store `value` unless another thread stored one first; returns the stored one."""
        with self._lock:
            data = self._data
            entry = data.setdefault(key, (key, value))
            data.move_to_end(entry[0])
            while len(data) > self.max_entries:
                data.popitem(last=False)
            return entry[1]

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        """The entry of `key`, made (outside the lock) when missing."""
        hit = self.get(key)
        return hit if hit is not None else self.put(key, make())

    def discard(self, key: K) -> None:
        """Forget `key` (nothing if it is not there)."""
        with self._lock:
            self._data.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


def clear_all() -> None:
    """Empty every `LRU` alive."""
    for cache in list(_ALL):
        cache.clear()
