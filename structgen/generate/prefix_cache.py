"""`PrefixCache`: keys and values of long shared prompt prefixes, reused across requests.

A small LRU keyed by token ids. An entry holds the batch-1 (keys, values) tensors of one prefill.
A lookup returns the longest common prefix between the request's tokens and any entry (at least
`min_tokens` long); the loop then starts from a copy of that many positions instead of running
them through the model again. A partial match (a new user message after the same system prompt)
is stored as its own entry, so the shared part outlives the longer prompts that produced it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from structgen.generate.model_io import KV

__all__ = ["PrefixCache", "PrefixHit"]


@dataclass(frozen=True, slots=True)
class PrefixHit:
    """`length` leading tokens of the request can be taken from `kv` (batch 1)."""

    length: int
    kv: KV


class PrefixCache:
    """An LRU of prefix KV tensors (`max_entries` prefixes of at least `min_tokens` tokens)."""

    def __init__(self, max_entries: int = 4, *, min_tokens: int = 32) -> None:
        self.max_entries = max(0, int(max_entries))
        self.min_tokens = max(1, int(min_tokens))
        self._entries: OrderedDict[tuple[int, ...], KV] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def lookup(self, tokens: Sequence[int]) -> PrefixHit | None:
        """The longest cached prefix of `tokens` (>= `min_tokens`), or None."""
        key = tuple(tokens)
        with self._lock:
            best_len, best_key = 0, None
            for stored in self._entries:  # longest match; on a tie, the shortest entry
                n = _common_prefix(stored, key)
                if n > best_len or (n == best_len and best_key and len(stored) < len(best_key)):
                    best_len, best_key = n, stored
            if best_key is None or best_len < self.min_tokens:
                self.misses += 1
                return None
            self.hits += 1
            self._entries.move_to_end(best_key)
            kv = self._entries[best_key]
            if best_len < len(best_key):  # keep the shared part as its own entry
                shared = [(k[:, :, :best_len].clone(), v[:, :, :best_len].clone()) for k, v in kv]
                self._put(key[:best_len], shared)
            return PrefixHit(best_len, kv)

    def store(self, tokens: Sequence[int], kv: KV) -> None:
        """Remember the batch-1 `kv` of `tokens` (its positions must cover all of them)."""
        if len(tokens) < self.min_tokens or self.max_entries == 0:
            return
        with self._lock:
            self._put(tuple(tokens), kv)

    def _put(self, key: tuple[int, ...], kv: KV) -> None:
        self._entries[key] = kv
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
