"""Token masks of a byte automaton: which tokens keep a DFA state alive.

For a DFA state `q`, token `t` is allowed iff reading all of `t`'s bytes from `q` never hits the
dead state. Computing that for 128k tokens is the hot path, so:

* **Byte classes.** A DFA treats many bytes alike; tokens whose bytes map to the same class
  sequence share their fate in every state. The vocabulary is deduplicated once per class
  partition (two independent 64-bit hashes; the second verifies the first) and only one
  representative per class sequence is walked.
* **Column walk.** Representatives are stored column-major, longest first. All live ones advance
  one byte per numpy gather; dead ones drop out, so pruning matches a trie walk.
* **Per-state cache.** The packed mask of each state is computed once and copied afterwards
  (a few microseconds).

See docs/design/token-masks.md.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from structgen.masks._bitmask import pack_bool_mask
from structgen.vocab import Vocabulary

__all__ = ["ByteAutomaton", "TokenClasses", "TokenMaskWalker", "token_classes"]

_PYTHON_TAIL = 6  # below this many live tokens, a Python loop beats numpy call overhead
_P1 = np.uint64(0x100000001B3)
_P2 = np.uint64(0x9E3779B97F4A7C15)


class ByteAutomaton(Protocol):
    """What the walker needs of a lazily built byte DFA (see structgen.automata.ByteDFA)."""

    @property
    def table(self) -> npt.NDArray[np.int32]: ...

    @property
    def byte_classes(self) -> npt.NDArray[np.uint8]: ...

    def row(self, state: int) -> npt.NDArray[np.int32]: ...


class TokenClasses:
    """The vocabulary's tokens grouped by byte-class sequence for one class partition."""

    __slots__ = ("columns", "counts", "inverse", "lengths", "num_reps", "rep_of_id", "token_ids")

    def __init__(self, vocab: Vocabulary, byte_classes: npt.NDArray[np.uint8]) -> None:
        trie = vocab.trie
        n = trie.num_tokens
        lengths = trie.lengths
        classes = byte_classes.astype(np.uint64) + np.uint64(1)
        h1 = np.zeros(n, dtype=np.uint64)
        h2 = np.zeros(n, dtype=np.uint64)
        with np.errstate(over="ignore"):
            for k in range(trie.max_length):
                live = int(trie.counts[k])
                c = classes[trie.columns[k, :live]]
                h1[:live] = h1[:live] * _P1 + c
                h2[:live] = h2[:live] * _P2 + c
            h1 = h1 * _P1 + lengths.astype(np.uint64)
        _, first, inverse = np.unique(h1, return_index=True, return_inverse=True)
        if not np.array_equal(h2[first][inverse], h2):  # a 64-bit collision: walk every token
            first = np.arange(n)
            inverse = np.arange(n)
        # Representatives ordered longest first, so live ones at column k are a prefix.
        order = np.argsort(-lengths[first], kind="stable")
        reps = first[order]
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        self.inverse: npt.NDArray[np.intp] = rank[inverse]
        self.lengths: npt.NDArray[np.int32] = lengths[reps]
        max_len = int(self.lengths[0]) if len(reps) else 0
        self.columns: npt.NDArray[np.uint8] = np.ascontiguousarray(trie.columns[:max_len, reps])
        neg = -self.lengths.astype(np.int64)
        self.counts: npt.NDArray[np.int64] = np.searchsorted(
            neg, -np.arange(max_len + 1, dtype=np.int64), side="left"
        ).astype(np.int64)
        self.token_ids: npt.NDArray[np.int32] = trie.ids
        self.num_reps = len(reps)
        #: representative of every token id; `num_reps` (a slot that is never allowed) for
        #: special and padding ids, so a mask is one gather `ok[rep_of_id]`
        self.rep_of_id: npt.NDArray[np.int32] = np.full(vocab.size, len(reps), dtype=np.int32)
        self.rep_of_id[trie.ids] = self.inverse


_CLASS_CACHE: OrderedDict[tuple[str, bytes], TokenClasses] = OrderedDict()
_CLASS_CACHE_LOCK = threading.Lock()
_CLASS_CACHE_SIZE = 64


def token_classes(vocab: Vocabulary, byte_classes: npt.NDArray[np.uint8]) -> TokenClasses:
    """`TokenClasses` for a partition, cached per (vocabulary, partition) across automata."""
    key = (vocab.fingerprint, np.ascontiguousarray(byte_classes, dtype=np.uint8).tobytes())
    with _CLASS_CACHE_LOCK:
        hit = _CLASS_CACHE.get(key)
        if hit is not None:
            _CLASS_CACHE.move_to_end(key)
            return hit
    built = TokenClasses(vocab, byte_classes)
    with _CLASS_CACHE_LOCK:
        _CLASS_CACHE[key] = built
        while len(_CLASS_CACHE) > _CLASS_CACHE_SIZE:
            _CLASS_CACHE.popitem(last=False)
    return built


class TokenMaskWalker:
    """Packed token masks of one automaton's states over one vocabulary, cached per state."""

    def __init__(self, vocab: Vocabulary, dfa: Any, *, max_cached_masks: int = 4096) -> None:
        self.vocab = vocab
        self.dfa = dfa
        self._classes: TokenClasses | None = None
        self._cache: OrderedDict[int, npt.NDArray[np.int32]] = OrderedDict()
        self._max_cached = max_cached_masks
        self._lock = threading.Lock()

    @property
    def classes(self) -> TokenClasses:
        if self._classes is None:
            self._classes = token_classes(self.vocab, self.dfa.byte_classes)
        return self._classes

    def mask(self, state: int) -> npt.NDArray[np.int32]:
        """Read-only packed mask [ceil(size/32)] of the tokens allowed in `state` (no EOS)."""
        with self._lock:
            hit = self._cache.get(state)
            if hit is not None:
                self._cache.move_to_end(state)
                return hit
            packed = pack_bool_mask(self.allowed(state))
            packed.setflags(write=False)
            self._cache[state] = packed
            while len(self._cache) > self._max_cached:
                self._cache.popitem(last=False)
            return packed

    def allowed(self, state: int) -> npt.NDArray[np.bool_]:
        """Bool array [vocab.size]: tokens whose bytes all keep `state` alive."""
        classes = self.classes
        return self._walk(state, classes)[classes.rep_of_id]

    def _walk(self, state: int, classes: TokenClasses) -> npt.NDArray[np.bool_]:
        """Bool per representative: its bytes keep `state` alive to the end."""
        dfa = self.dfa
        ok = np.zeros(classes.num_reps + 1, dtype=bool)  # last slot: never allowed (specials)
        if classes.num_reps == 0:
            return ok
        columns = classes.columns
        counts = classes.counts
        states = dfa.row(state)[columns[0]]
        idx = np.flatnonzero(states >= 0)
        states = states[idx]
        k = 1
        # idx stays sorted and representatives are sorted longest first, so the ones that end
        # at column k are a suffix of idx: a searchsorted splits them off without a mask.
        while idx.size > _PYTHON_TAIL:
            cut = int(np.searchsorted(idx, counts[k]))
            ok[idx[cut:]] = True
            if cut == 0:
                return ok
            idx = idx[:cut]
            states = states[:cut]
            table = dfa.table
            nxt = table[states, columns[k, idx]]
            if nxt.min() == -2:  # some source rows are not built yet
                for s in np.unique(states[nxt == -2]).tolist():
                    dfa.row(int(s))
                table = dfa.table
                nxt = table[states, columns[k, idx]]
            alive = nxt >= 0
            idx = idx[alive]
            states = nxt[alive]
            k += 1
        # The long tail: a handful of long tokens, walked one byte at a time.
        lengths = classes.lengths
        for rep, current in zip(idx.tolist(), states.tolist()):
            s = current
            for pos in range(k, int(lengths[rep])):
                s = int(dfa.next_state(s, int(columns[pos, rep])))
                if s < 0:
                    break
            else:
                ok[rep] = True
        return ok
