"""`TokenTrie`: the vocabulary laid out for vectorised walks against byte automata.

A pointer-based trie walked in Python is too slow for 128k tokens. Instead the tokens that can
match text are stored column-major (`columns[k, i]` is byte `k` of token `i`), ordered by length
descending, so that the tokens still long enough at column `k` are exactly the prefix
`[:counts[k]]`. A walk then advances all live tokens one byte at a time with numpy gathers and
drops dead ones, which prunes like a trie walk without a Python loop over tokens.
See docs/design/token-masks.md.
"""

from __future__ import annotations

import bisect

import numpy as np
import numpy.typing as npt

__all__ = ["TokenTrie"]


class TokenTrie:
    """Column-major token bytes of every text-matching token, longest tokens first."""

    __slots__ = ("ids", "lengths", "columns", "counts", "_sorted", "_sorted_ids")

    def __init__(
        self,
        blob: bytes,
        offsets: npt.NDArray[np.int64],
        special: npt.NDArray[np.bool_],
    ) -> None:
        all_lengths = np.diff(offsets)
        candidates = np.flatnonzero(~special & (all_lengths > 0))
        lengths = all_lengths[candidates]
        order = np.argsort(-lengths, kind="stable")
        #: token ids, longest first
        self.ids: npt.NDArray[np.int32] = candidates[order].astype(np.int32)
        #: byte length of each token in `ids` order
        self.lengths: npt.NDArray[np.int32] = lengths[order].astype(np.int32)
        max_len = int(self.lengths[0]) if len(self.lengths) else 0
        #: counts[k] = number of tokens longer than k (they occupy the prefix [:counts[k]])
        neg = -self.lengths.astype(np.int64)
        self.counts: npt.NDArray[np.int64] = np.searchsorted(
            neg, -np.arange(max_len, dtype=np.int64), side="left"
        ).astype(np.int64)
        data = np.frombuffer(blob, dtype=np.uint8)
        starts = offsets[self.ids].astype(np.int64)
        columns = np.zeros((max_len, len(self.ids)), dtype=np.uint8)
        for k in range(max_len):
            live = int(self.counts[k])
            columns[k, :live] = data[starts[:live] + k]
        #: columns[k, i] = byte k of token ids[i] (0 past its end)
        self.columns: npt.NDArray[np.uint8] = columns
        for arr in (self.ids, self.lengths, self.counts, self.columns):
            arr.setflags(write=False)
        self._sorted: list[bytes] | None = None
        self._sorted_ids: list[int] | None = None

    @property
    def num_tokens(self) -> int:
        """Number of tokens that can match text."""
        return len(self.ids)

    @property
    def max_length(self) -> int:
        """Length in bytes of the longest token."""
        return int(self.columns.shape[0])

    def token_bytes_at(self, position: int) -> bytes:
        """Bytes of the token at `position` in trie order."""
        n = int(self.lengths[position])
        return bytes(self.columns[:n, position])

    def _lexicographic(self) -> tuple[list[bytes], list[int]]:
        if self._sorted is None or self._sorted_ids is None:
            pairs = sorted(
                (self.token_bytes_at(i), int(self.ids[i])) for i in range(self.num_tokens)
            )
            self._sorted_ids = [p[1] for p in pairs]
            self._sorted = [p[0] for p in pairs]
        return self._sorted, self._sorted_ids

    def longest_token_prefix(self, data: bytes) -> tuple[int, int] | None:
        """(token id, length) of the longest token that is a prefix of `data`, if any."""
        sorted_bytes, sorted_ids = self._lexicographic()
        for end in range(min(len(data), self.max_length), 0, -1):
            piece = data[:end]
            pos = bisect.bisect_left(sorted_bytes, piece)
            if pos < len(sorted_bytes) and sorted_bytes[pos] == piece:
                return sorted_ids[pos], end
        return None

    def has_longer_token_with_prefix(self, prefix: bytes) -> bool:
        """True when some token starts with `prefix` and is longer than it."""
        sorted_bytes, _ = self._lexicographic()
        pos = bisect.bisect_right(sorted_bytes, prefix)
        return pos < len(sorted_bytes) and sorted_bytes[pos].startswith(prefix)
