"""`LRU`: the one bounded, thread-safe least-recently-used map behind structgen's module-level
caches (token classes, spellings, digests, the recent terminal automata); `clear_caches()`
empties every one it knows."""

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

    With `weigh` (an estimate of a value's bytes), the entries also weigh at most
    `max_weight` together (the newest always stays). A value is weighed when stored; values
    that grow afterwards (automata build rows as they are read) are weighed again, each within
    `reweigh_every` insertions of the last time, not on every read: every insertion re-weighs a
    few of the stored entries in turn (all at once every `reweigh_every` insertions was a
    pause of milliseconds inside about one MaskBench compile in seventy-five). With
    `max_entry_weight`, an entry found heavier than that when re-weighed leaves at once: one
    value that grew large (a big automaton's rows built) would otherwise push out hundreds of
    small ones, each freed inside the compile that stored the next value.
    """

    def __init__(
        self,
        max_entries: int,
        *,
        max_weight: int | None = None,
        weigh: Callable[[V], int] | None = None,
        reweigh_every: int = 1024,
        max_entry_weight: int | None = None,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        if (max_weight is None) != (weigh is None):
            raise ValueError("max_weight and weigh go together")
        self.max_entries = max_entries
        self.max_weight = max_weight
        self._weigh = weigh
        self._reweigh_every = reweigh_every
        self._max_entry_weight = max_entry_weight
        self._to_reweigh: list[K] = []  # this round's keys not re-weighed yet (popped from the end)
        self._reweigh_credit = 0.0  # re-weighs owed: len / reweigh_every per insertion
        self._weights: dict[int, int] = {}  # id(entry) -> its weight (weighed caches)
        self.weight = 0  # the stored values' total weight (weighed caches)
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
            if self._weigh is not None:
                self._account(entry)
            while len(data) > self.max_entries:
                self._forget(data.popitem(last=False)[1])
            return entry[1]

    def _account(self, entry: tuple[K, V]) -> None:
        """Weigh a new entry (a read-and-move of a stored one costs nothing), re-weigh the
        next few stored ones, and evict the oldest while over `max_weight`. Under the lock."""
        weights = self._weights
        if id(entry) in weights:
            return
        weigh = self._weigh
        assert weigh is not None and self.max_weight is not None
        weight = weights[id(entry)] = weigh(entry[1])
        self.weight += weight
        data = self._data
        # A round re-weighs every entry stored when it began, spread over `reweigh_every`
        # insertions (keys, not entries: an evicted value is not kept alive by the round).
        pending = self._to_reweigh
        if not pending:
            pending.extend(reversed(data))  # (the oldest, next to go, first)
            self._reweigh_credit = 0.0
        self._reweigh_credit += len(data) / self._reweigh_every
        heaviest = self._max_entry_weight
        while self._reweigh_credit >= 1 and pending:
            self._reweigh_credit -= 1
            key = pending.pop()
            stored = data.get(key)
            if stored is not None and stored is not entry:
                old = weights.get(id(stored), 0)
                new = weights[id(stored)] = weigh(stored[1])
                self.weight += new - old
                if heaviest is not None and new > heaviest:
                    self._forget(data.pop(key))  # (grown too heavy: it leaves, alone)
        while self.weight > self.max_weight and len(data) > 1:
            self._forget(data.popitem(last=False)[1])

    def _forget(self, entry: tuple[K, V]) -> None:
        if self._weigh is not None:
            self.weight -= self._weights.pop(id(entry), 0)

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        """The entry of `key`, made (outside the lock) when missing."""
        hit = self.get(key)
        return hit if hit is not None else self.put(key, make())

    def discard(self, key: K) -> None:
        """Forget `key` (nothing if it is not there)."""
        with self._lock:
            entry = self._data.pop(key, None)
            if entry is not None:
                self._forget(entry)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._weights.clear()
            self._to_reweigh.clear()
            self.weight = 0

    def __len__(self) -> int:
        return len(self._data)


def clear_all() -> None:
    """Empty every `LRU` alive."""
    for cache in list(_ALL):
        cache.clear()
