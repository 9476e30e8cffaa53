"""`Recent`: a bounded map of recently used entries for the schema front end's module-level
memos, in plain dicts — native dictionary reads when the front end is compiled (the `LRU` of
`_lru.py` is Python code: half a microsecond a read, 1-2 to store, tens of thousands of times
per compile). `clear_recent()` (called by `structgen.clear_caches`) empties every one."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

__all__ = ["Recent", "clear_recent"]

K = TypeVar("K")
V = TypeVar("V")


class Recent(Generic[K, V]):
    """At most `max_entries` entries, in two generations: entries are stored in the new one;
    when it is full it becomes the old one (the previous old one is dropped) and a read that
    finds an entry in the old one moves it to the new one. What is used stays, what is not
    goes within two generations: an LRU's behaviour with dictionary reads only. Not locked:
    each dictionary operation is atomic, and a generation lost to a race is only a miss."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 2:
            raise ValueError("max_entries must be >= 2")
        self.half = max_entries // 2
        self.new: dict[K, V] = {}
        self.old: dict[K, V] = {}
        _ALL.append(self)

    def get(self, key: K) -> V | None:
        found = self.new.get(key)
        if found is None:
            found = self.old.get(key)
            if found is not None:
                self._store(key, found)
        return found

    def put(self, key: K, value: V) -> V:
        """Store `value` unless an entry is there; returns the stored one."""
        found = self.get(key)
        if found is not None:
            return found
        self._store(key, value)
        return value

    def _store(self, key: K, value: V) -> None:
        new = self.new
        if len(new) >= self.half:
            self.old = new
            new = self.new = {}
        new[key] = value

    def clear(self) -> None:
        self.new = {}
        self.old = {}

    def __len__(self) -> int:
        return len(self.new) + len(self.old)


_ALL: list[Recent[Any, Any]] = []  # (module-level memos only: made once per process)


def clear_recent() -> None:
    """Empty every `Recent` map."""
    for recent in _ALL:
        recent.clear()
