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
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["TokenTrie"]


class TokenTrie:
    """Column-major token bytes of every text-matching token, longest tokens first."""

    __slots__ = (
        "_blob",
        "_data",
        "_lex",
        "_offsets",
        "_sorted",
        "_sorted_ids",
        "columns",
        "counts",
        "first_byte_of_id",
        "ids",
        "lengths",
        "position_of_id",
    )

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
        self._data = data
        self._blob = blob
        self._offsets = offsets
        self._lex: dict[str, npt.NDArray[Any]] | None = None
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
        #: position of every token id in `ids` (-1 for special and padding ids)
        pos = np.full(len(special), -1, dtype=np.int64)
        pos[self.ids] = np.arange(len(self.ids))
        self.position_of_id: npt.NDArray[np.int64] = pos
        #: first byte of every token id; 256 for special and padding ids
        first = np.full(len(special), 256, dtype=np.int16)
        if len(self.ids):
            first[self.ids] = columns[0]
        self.first_byte_of_id: npt.NDArray[np.int16] = first
        self.first_byte_of_id.setflags(write=False)

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
            blob = self._blob
            starts = self._offsets[self.ids].tolist()
            pairs = sorted(
                (blob[start : start + length], token_id)
                for start, length, token_id in zip(starts, self.lengths.tolist(), self.ids.tolist())
            )
            self._sorted_ids = [p[1] for p in pairs]
            self._sorted = [p[0] for p in pairs]
        return self._sorted, self._sorted_ids

    def lexicographic_arrays(self) -> dict[str, npt.NDArray[Any]]:
        """Tokens in byte order with their common-prefix lengths: the flat trie of the C walk.

        Keys: `ids`, `offsets` (into `blob`), `lengths`, `lcp` (prefix shared with the previous
        token), `blob` (the token bytes in this order), `skip0` (end of each first-byte bucket).
        """
        if self._lex is None:
            ids, lengths, lcp, blob = self._lexicographic_layout()
            offsets = np.zeros(len(ids), dtype=np.int64)
            if len(ids):
                offsets[1:] = np.cumsum(lengths[:-1], dtype=np.int64)
            # skip0[i]: the first token after i whose first byte differs (end of i's bucket).
            first = blob[offsets] if len(ids) else np.zeros(0, dtype=np.uint8)
            change = np.flatnonzero(np.diff(first.astype(np.int16)) != 0) + 1
            ends = np.append(change, len(ids)).astype(np.int64)
            sizes = np.diff(np.insert(ends, 0, 0)).astype(np.int64)
            skip0 = np.repeat(ends, sizes).astype(np.int64)
            self._lex = {
                "ids": ids,
                "offsets": offsets,
                "lengths": lengths,
                "lcp": lcp,
                "blob": blob,
                "skip0": skip0,
            }
        return self._lex

    def _lexicographic_layout(
        self,
    ) -> tuple[
        npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.uint8]
    ]:
        """(ids, lengths, lcp, bytes) in true byte order, a token's prefixes before it.

        Sorted by each token's first 8 bytes (zero padded, one big-endian integer: byte order
        refines that order), then the tokens that tie on them — a few thousand: runs of
        dashes, spaces, a long word's variants — by their whole bytes; a stable order, so equal
        keys keep trie order. No padded byte matrix (128k rows of the longest token's width:
        its copies and masks were ~0.15 s of the first compile per vocabulary)."""
        n = len(self.ids)
        width = min(8, self.columns.shape[0])
        prefix = np.zeros((n, 8), dtype=np.uint8)
        prefix[:, :width] = self.columns[:width].T
        keys = prefix.view(">u8").ravel()
        order = np.argsort(keys, kind="stable")
        ranked = keys[order]
        tied = np.zeros(n, dtype=bool)  # (slots whose key equals a neighbour's)
        if n > 1:
            same = ranked[1:] == ranked[:-1]
            tied[1:] |= same
            tied[:-1] |= same
        data, starts = self._blob, self._offsets[self.ids].tolist()
        lengths_list = self.lengths.tolist()

        def text(position: int) -> bytes:
            start = starts[position]
            return data[start : start + lengths_list[position]]

        slots = np.flatnonzero(tied)
        if len(slots):
            order[slots] = sorted(order[slots].tolist(), key=text)
        ids = self.ids[order].astype(np.int32)
        lengths = self.lengths[order].astype(np.int32)
        # lcp: the bytes shared with the previous token, from the first 8 (the first byte
        # that differs), the rest read where all 8 agree
        lcp = np.zeros(n, dtype=np.int32)
        if n > 1:
            sorted_prefix = prefix[order]
            differ = sorted_prefix[1:] != sorted_prefix[:-1]
            first_diff = np.where(differ.any(axis=1), differ.argmax(axis=1), 8).astype(np.int32)
            lcp[1:] = first_diff
            pairs = np.flatnonzero(first_diff == 8)  # (the next 8 bytes of those, and so on)
            columns = self.columns
            for at in range(8, columns.shape[0], 8):
                if not len(pairs):
                    break
                chunk = columns[at : at + 8]
                differ = chunk[:, order[pairs]] != chunk[:, order[pairs + 1]]
                found = differ.any(axis=0)
                lcp[pairs + 1] = np.where(found, at + differ.argmax(axis=0), at + len(chunk))
                pairs = pairs[~found]
            np.minimum(lcp[1:], np.minimum(lengths[1:], lengths[:-1]), out=lcp[1:])
        # the bytes in this order (the walk reads memory sequentially)
        total = int(lengths.sum())
        if not total:
            return ids, lengths, lcp, np.zeros(0, dtype=np.uint8)
        ends = np.cumsum(lengths, dtype=np.int64)
        gather = np.repeat(self._offsets[ids].astype(np.int64) - (ends - lengths), lengths)
        gather += np.arange(total, dtype=np.int64)
        return ids, lengths, lcp, np.ascontiguousarray(self._data[gather])

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
