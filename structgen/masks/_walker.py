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
import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from structgen._gc import paused_gc
from structgen._lru import LRU
from structgen.automata.nfa import extension_function
from structgen.masks._bitmask import pack_bool_mask
from structgen.masks._kernel import (
    Events,
    NativeWalk,
    SharingTables,
    SparseWords,
    TrieTooLarge,
    equality_available,
    native_available,
)
from structgen.vocab import Vocabulary

__all__ = ["ByteAutomaton", "TokenClasses", "TokenMaskWalker", "token_classes"]

_DEDUPE_AFTER = 2  # walks on identity classes before grouping tokens by byte classes
_SCATTER_REPS = 512  # few allowed tokens: set their bits directly instead of packing all
_SCATTER_TOKENS = 4096
_FEW_FIRST_BYTES = 48
_PYTHON_TAIL = 6  # below this many live tokens, a Python loop beats numpy call overhead
# Mask sharing between states (see TokenMaskWalker._shared_mask). Only states whose live first
# bytes are those of a state whose walk took at least _SHARE_MIN_SECONDS (not counting building
# DFA rows) are checked: cheaper walks cost about as much as a failed check.
_SHARE_MIN_SECONDS = 50e-6
_SHARE_ROW_SECONDS = 20e-6  # a check may build one DFA row (~5 µs) per 20 µs of walk
_SHARE_CANDIDATES = 2  # slow walks kept (and checked) per first-byte pattern; checks need 2
_SHARE_FREE_MISSES = 32  # failed checks allowed before sharing must also have hits
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
    """The vocabulary's tokens grouped into representatives for one byte-class partition.

    `TokenClasses.identity(vocab)` makes every token its own representative (no set-up cost
    beyond the trie); the constructor groups tokens by byte-class sequence.
    """

    __slots__ = (
        "_members",
        "columns",
        "counts",
        "first_order",
        "first_starts",
        "inverse",
        "lengths",
        "num_reps",
        "rep_of_id",
        "token_ids",
    )

    def __init__(self, vocab: Vocabulary, byte_classes: npt.NDArray[np.uint8] | None) -> None:
        trie = vocab.trie
        n = trie.num_tokens
        lengths = trie.lengths
        if byte_classes is None:
            reps = np.arange(n)
            inverse = np.arange(n)
            self.columns: npt.NDArray[np.uint8] = trie.columns
            self._members: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = (
                np.arange(n + 1, dtype=np.int64),
                np.arange(n, dtype=np.int64),
            )
        else:
            first, inverse = _dedupe(trie, byte_classes)
            # Representatives ordered longest first, so live ones at column k are a prefix.
            order = np.argsort(-lengths[first], kind="stable")
            reps = first[order]
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            inverse = rank[inverse]
            max_len = int(lengths[reps[0]]) if len(reps) else 0
            self.columns = np.ascontiguousarray(trie.columns[:max_len, reps])
            self._members = None
        self.inverse: npt.NDArray[np.intp] = inverse
        self.lengths: npt.NDArray[np.int32] = lengths[reps]
        max_len = self.columns.shape[0]
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
        # Representatives bucketed by first byte, for states that allow few first bytes.
        first_bytes = self.columns[0] if max_len else np.zeros(0, dtype=np.uint8)
        self.first_order: npt.NDArray[np.int64] = np.argsort(first_bytes, kind="stable")
        self.first_starts: npt.NDArray[np.int64] = np.searchsorted(
            first_bytes[self.first_order], np.arange(257)
        ).astype(np.int64)

    @classmethod
    def identity(cls, vocab: Vocabulary) -> TokenClasses:
        return cls(vocab, None)

    def members(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """CSR of each representative's tokens `members[starts[r]:starts[r+1]]`."""
        if self._members is None:
            order = np.argsort(self.inverse, kind="stable")
            starts = np.searchsorted(self.inverse[order], np.arange(self.num_reps + 1))
            self._members = (starts.astype(np.int64), order.astype(np.int64))
        return self._members


def _dedupe(
    trie: Any, byte_classes: npt.NDArray[np.uint8]
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """(first token of each class sequence, sequence index of every token), verified."""
    n = trie.num_tokens
    classes = byte_classes.astype(np.uint64) + np.uint64(1)
    h1 = np.zeros(n, dtype=np.uint64)
    h2 = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(trie.max_length):
            live = int(trie.counts[k])
            c = classes[trie.columns[k, :live]]
            h1[:live] = h1[:live] * _P1 + c
            h2[:live] = h2[:live] * _P2 + c
        h1 = h1 * _P1 + trie.lengths.astype(np.uint64)
    _, first, inverse = np.unique(h1, return_index=True, return_inverse=True)
    if not np.array_equal(h2[first][inverse], h2):  # a 64-bit collision: walk every token
        return np.arange(n), np.arange(n)
    return first, inverse


_CLASS_CACHE: LRU[tuple[str, bytes], TokenClasses] = LRU(64)
_NATIVE_LOCK = threading.Lock()


_FIRST_BYTE: dict[str, npt.NDArray[np.int32]] = {}
_FIRST_BYTE_LOCK = threading.Lock()


def first_byte_masks(vocab: Vocabulary) -> npt.NDArray[np.int32]:
    """Packed masks [257, words]: row b holds the text tokens whose first byte is b, row 256
    all text tokens. Built once per vocabulary (4 MB for Llama-3), so "tokens whose first byte
    is dead in this state" is an OR of a few rows instead of a pass over every token."""
    with _FIRST_BYTE_LOCK:
        hit = _FIRST_BYTE.get(vocab.fingerprint)
    if hit is not None:
        return hit
    first = vocab.trie.first_byte_of_id.astype(np.int64)
    words = (vocab.size + 31) // 32
    table = np.zeros((257, words), dtype=np.uint32)
    ids = np.flatnonzero(first < 256)
    bits = np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32))
    np.bitwise_or.at(table, (first[ids], ids >> 5), bits)
    table[256] = np.bitwise_or.reduce(table[:256], axis=0)
    out = table.view(np.int32)
    out.setflags(write=False)
    with _FIRST_BYTE_LOCK:
        out = _FIRST_BYTE.setdefault(vocab.fingerprint, out)
    return out


#: `first_byte_dead`'s packed mask in C (`_subset.c`), or None (numpy)
_FIRST_BYTE_DEAD = extension_function("first_byte_dead")

_NATIVE: dict[str, NativeWalk] = {}
_TOO_LARGE: set[str] = set()  # vocabularies whose trie the C walk cannot pack


def native_walk(vocab: Vocabulary) -> NativeWalk | None:
    """The C walk's token arrays for `vocab` (None when the extension is not available)."""
    if not native_available():
        return None
    hit = _NATIVE.get(vocab.fingerprint)  # (one dict read is atomic: no lock on the hot path)
    if hit is None:
        if vocab.fingerprint in _TOO_LARGE:
            return None
        try:
            hit = NativeWalk(vocab.trie, vocab.size)
        except TrieTooLarge:  # (no real vocabulary: the numpy walk, exact and slower)
            _TOO_LARGE.add(vocab.fingerprint)
            return None
        with _NATIVE_LOCK:
            _NATIVE[vocab.fingerprint] = hit
            while len(_NATIVE) > 8:
                _NATIVE.pop(next(iter(_NATIVE)))
    return hit


def identity_classes(vocab: Vocabulary) -> TokenClasses:
    """Every token its own representative (cached per vocabulary)."""
    return token_classes(vocab, None)


def token_classes(vocab: Vocabulary, byte_classes: npt.NDArray[np.uint8] | None) -> TokenClasses:
    """`TokenClasses` for a partition, cached per (vocabulary, partition) across automata."""
    raw = b"" if byte_classes is None else np.ascontiguousarray(byte_classes, np.uint8).tobytes()
    return _CLASS_CACHE.get_or_make(
        (vocab.fingerprint, raw), lambda: TokenClasses(vocab, byte_classes)
    )


def _array_bytes(value: Any) -> int:
    """The bytes of the arrays in a cached value (a mask, events, boundary positions). Asked
    at every store (first visits): exact type tests first, no generator of calls."""
    kind = type(value)
    if kind is np.ndarray or kind is Events or isinstance(value, (np.ndarray, Events)):
        return int(value.nbytes)
    if kind is not tuple and kind is not list and not isinstance(value, (tuple, list)):
        return 0
    total = 0
    for item in value:
        kind = type(item)
        if kind is np.ndarray or kind is Events:
            total += item.nbytes
        elif kind is bytes:  # (a continued walk's words set, as the C walk returns them)
            total += len(item)
        elif kind is not int:  # (boundary positions come with their cut and state)
            total += _array_bytes(item)
    return int(total)


def _frozen(words: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
    words.setflags(write=False)
    return words


#: walks of a counting automaton's states are shared per `ByteDFA.bounded_class` (tests turn
#: it off to compare)
SHARE_COUNTED_WALKS = True


class TokenMaskWalker:
    """Packed token masks of one automaton's states over one vocabulary, cached per state."""

    def __init__(self, vocab: Vocabulary, dfa: Any, *, max_cached_masks: int = 4096) -> None:
        self.vocab = vocab
        self.dfa = dfa
        self._classes: TokenClasses | None = None
        self._walks = 0
        self._cache: OrderedDict[int, npt.NDArray[np.int32]] = OrderedDict()
        self._max_cached = max_cached_masks
        self._boundaries: dict[int, list[tuple[int, int, npt.NDArray[np.int64]]]] = {}
        self._events: dict[int, tuple[npt.NDArray[np.uint32], Events]] = {}
        # the same, per class of states that behave alike over a token's length (automata that
        # count: a long string's states far from its length bounds share one walk)
        self._bounded_events: dict[Hashable, tuple[npt.NDArray[np.uint32], Events]] = {}
        self._counts = SHARE_COUNTED_WALKS and bool(
            getattr(getattr(dfa, "_source", None), "counts", False)
        )
        self._continued: dict[tuple[int, bytes], tuple[SparseWords, SparseWords, Events]] = {}
        self._extra_bytes = 0  # arrays held beside `_cache` (events, boundaries, first bytes)
        self._lock = threading.Lock()
        # Mask sharing: walked states by the pattern of their live first bytes, newest last.
        self._shared: OrderedDict[bytes, list[tuple[int, npt.NDArray[np.int32]]]] = OrderedDict()
        self._walk_seconds: dict[bytes, float] = {}  # the last walk per live-byte pattern
        self._share_hits = 0
        self._share_misses = 0
        self._share_ready = 0  # patterns in `_shared` with enough candidates to be checked
        self._sharing: SharingTables | None = None
        # Per-vocabulary tables (the C walk's token arrays: tens of milliseconds; the first-byte
        # masks) belong to the compile, not to the first masks: a serving engine's first batch
        # steps would pay them.
        native_walk(vocab)
        first_byte_masks(vocab)

    @property
    def classes(self) -> TokenClasses:
        """Identity classes for the first walks; byte-class groups once the automaton is reused.

        Grouping costs a few milliseconds per partition, so an automaton that is walked once or
        twice (a short regex, a one-off lexer state) never pays for it.
        """
        if self._classes is None:
            if self._walks < _DEDUPE_AFTER:
                self._walks += 1
                return identity_classes(self.vocab)
            self._classes = token_classes(self.vocab, self.dfa.byte_classes)
        return self._classes

    def memory_bytes(self) -> int:
        """The bytes of the arrays the caches hold (what their dicts and keys add is small)."""
        mask = ((self.vocab.size + 31) // 32) * 4
        with self._lock:
            return len(self._cache) * mask + self._extra_bytes

    def growth_stamp(self) -> tuple[int, int]:
        """Changes whenever `memory_bytes` does (cheaper: no lock; a racing read is only an
        older stamp)."""
        return (len(self._cache), self._extra_bytes)

    def mask(self, state: int) -> npt.NDArray[np.int32]:
        """Read-only packed mask [ceil(size/32)] of the tokens allowed in `state` (no EOS)."""
        with self._lock:
            hit = self._cache.get(state)
            if hit is not None:
                self._cache.move_to_end(state)
                return hit
            with paused_gc():  # (a first visit: see `paused_gc`)
                packed = _frozen(self._packed(state))
            self._cache[state] = packed
            while len(self._cache) > self._max_cached:
                self._cache.popitem(last=False)
            return packed

    def cached_mask(self, state: int) -> npt.NDArray[np.int32] | None:
        """`mask(state)` if it is in the cache, else None (nothing is computed)."""
        with self._lock:
            return self._cache.get(state)

    def allowed(self, state: int) -> npt.NDArray[np.bool_]:
        """Bool array [vocab.size]: tokens whose bytes all keep `state` alive."""
        classes = self.classes
        return self._walk(state, classes)[classes.rep_of_id]

    def _packed(self, state: int) -> npt.NDArray[np.int32]:
        native = native_walk(self.vocab)
        if native is not None:
            sharing = equality_available() and self._share_misses < _SHARE_FREE_MISSES + 8 * (
                self._share_hits
            )
            key = None
            if sharing and self._share_ready:  # (the key costs ~1 µs: only when it can hit)
                key = (self.dfa.row(state) >= 0).tobytes()
                shared = self._shared_mask(native, key, state)
                if shared is not None:
                    return shared
            started = time.perf_counter()
            words, _ = self._whole_walk(native, state, boundaries=False)
            packed = _frozen(words.view(np.int32))
            if sharing:
                seconds = time.perf_counter() - started - native.last_build_seconds()
                if seconds >= _SHARE_MIN_SECONDS:
                    if key is None:
                        key = (self.dfa.row(state) >= 0).tobytes()
                    self._remember(key, state, packed, seconds)
                elif key is not None and (dropped := self._shared.pop(key, None)) is not None:
                    del self._walk_seconds[key]  # these states walk fast: not worth a check
                    if len(dropped) >= _SHARE_CANDIDATES:
                        self._share_ready -= 1
            return packed
        classes = self.classes
        ok = self._walk(state, classes)
        reps = np.flatnonzero(ok)
        if len(reps) <= _SCATTER_REPS:
            starts, members = classes.members()
            sizes = starts[reps + 1] - starts[reps]
            total = int(sizes.sum())
            if total <= _SCATTER_TOKENS:
                offsets = np.repeat(starts[reps] - np.cumsum(sizes) + sizes, sizes)
                ids = classes.token_ids[members[offsets + np.arange(total)]].astype(np.int64)
                words = np.zeros((self.vocab.size + 31) // 32, dtype=np.uint32)
                np.bitwise_or.at(words, ids >> 5, np.left_shift(1, ids & 31).astype(np.uint32))
                return words.view(np.int32)
        return pack_bool_mask(ok[classes.rep_of_id])

    def _shared_mask(
        self, native: NativeWalk, key: bytes, state: int
    ) -> npt.NDArray[np.int32] | None:
        """The mask of an already walked state that provably has the same mask as `state`.

        A token of `n` bytes is allowed iff reading it never hits the dead state, so two states
        that keep the same byte strings alive up to the longest token's length have the same
        mask. That is common: the counter states of `.{0,500}` or `[a-z]{1,256}` (after 10 or
        11 characters) differ only in what happens hundreds of bytes ahead, and states that
        differ only in what they may accept (`\\S+,\\S+` before and after its comma) keep the
        same strings alive. Candidates are the last two slowly walked states with the same live
        first bytes (`key`); `NativeWalk.same_mask` decides exactly, or gives up (then we walk).
        """
        candidates = self._shared.get(key)
        if candidates is None or len(candidates) < _SHARE_CANDIDATES:
            return None  # one slow walk may have been a cold cache: wait for a second one
        self._shared.move_to_end(key)
        tables = self._sharing
        if tables is None:
            tables = self._sharing = native.class_positions(self.dfa.byte_classes)
        # Building rows the walk would not need can cost more than the walk: cap it.
        max_builds = 4 + int(self._walk_seconds[key] / _SHARE_ROW_SECONDS)
        for n in range(len(candidates) - 1, -1, -1):
            other, packed = candidates[n]
            if native.same_mask(self.dfa, tables, other, state, max_builds=max_builds):
                self._share_hits += 1
                candidates.append(candidates.pop(n))
                return packed
        self._share_misses += 1
        return None

    def _remember(
        self, key: bytes, state: int, packed: npt.NDArray[np.int32], seconds: float
    ) -> None:
        """Keep a walked state as a sharing candidate for states with the same live bytes."""
        self._walk_seconds[key] = seconds
        candidates = self._shared.setdefault(key, [])
        candidates.append((state, packed))
        if len(candidates) == _SHARE_CANDIDATES:
            self._share_ready += 1
        elif len(candidates) > _SHARE_CANDIDATES:
            del candidates[0]
        self._shared.move_to_end(key)
        while len(self._shared) > self._max_cached:
            old, evicted = self._shared.popitem(last=False)
            self._walk_seconds.pop(old, None)
            if len(evicted) >= _SHARE_CANDIDATES:
                self._share_ready -= 1

    def boundary_candidates(self, state: int) -> list[tuple[int, int, npt.NDArray[np.int64]]]:
        """Tokens whose walk from `state` dies at a byte where the automaton accepts.

        Grouped as `(bytes consumed k, state before the dying byte, trie positions)`: a grammar
        lexer can end its lexeme after `k` bytes and continue each token in the next lexeme.
        Cached per state.
        """
        with self._lock:
            hit = self._boundaries.get(state)
        if hit is not None:
            return hit
        out: list[tuple[int, int, npt.NDArray[np.int64]]] = []
        classes = self.classes
        found: list[tuple[npt.NDArray[np.int64], int, npt.NDArray[np.int32]]] = []
        self._walk(state, classes, found)
        if found:
            starts, members = classes.members()
            for reps, cut, befores in found:
                for before in np.unique(befores).tolist():
                    group = reps[befores == before]
                    sizes = starts[group + 1] - starts[group]
                    offsets = np.repeat(starts[group] - np.cumsum(sizes) + sizes, sizes)
                    positions = members[offsets + np.arange(int(sizes.sum()))]
                    out.append((cut, int(before), positions))
        self._store(self._boundaries, state, out)
        return out

    def _store(self, cache: dict[Any, Any], key: Any, value: Any, size: int = -1) -> None:
        """Cache `value` (counting its bytes: `size` when the caller knows them), then drop the
        oldest entries past `max_cached_masks`."""
        if size < 0:
            size = _array_bytes(value)  # (outside the lock; a new key has no old value to weigh)
        with self._lock:
            old = cache.pop(key, None)
            cache[key] = value
            self._extra_bytes += size if old is None else size - _array_bytes(old)
            while len(cache) > self._max_cached:
                self._extra_bytes -= _array_bytes(cache.pop(next(iter(cache))))

    def mask_and_events(self, state: int) -> tuple[npt.NDArray[np.uint32], Events] | None:
        """With the C walk: (inside mask, boundary events) of `state`, cached per state.

        Events say which runs of tokens (in the walk's lexicographic order) die at which byte in
        which accepting state. None without the C walk.
        """
        native = native_walk(self.vocab)
        if native is None:
            return None
        with self._lock:
            hit = self._events.get(state)
        if hit is not None:
            return hit
        bounded: Hashable = None
        if self._counts:
            # A state that behaves like one walked before on every token's bytes allows its
            # tokens and has its boundary runs. (The events name the first state's boundary
            # states; only what they accept is read, and that is alike: `ByteDFA.bounded_class`.)
            bounded = self.dfa.bounded_class(state, native.max_depth)
            with self._lock:
                hit = self._bounded_events.get(bounded)
        if hit is None:
            words, events = self._whole_walk(native, state, boundaries=True)
            words.setflags(write=False)
            hit = (words, events)
            if bounded is not None:
                self._store(self._bounded_events, bounded, hit, words.nbytes + events.nbytes)
        self._store(self._events, state, hit, hit[0].nbytes + hit[1].nbytes)
        return hit

    def _whole_walk(
        self, native: NativeWalk, state: int, *, boundaries: bool
    ) -> tuple[npt.NDArray[np.uint32], Events]:
        """The C walk of the whole vocabulary from `state`, minus the token slices it is proved
        to allow whole (see docs/design/token-slices.md)."""
        skip = native.contained_groups(self.dfa, state)
        return native.walk(self.dfa, state, boundaries=boundaries, skip=skip)

    def continue_walk(self, spans: Events, start: int) -> tuple[SparseWords, SparseWords, Events]:
        """With the C walk: the tokens of `spans` (subtrees whose tokens end the previous lexeme
        after `cut` bytes) that stay alive in a new lexeme of this automaton from `start`, as
        packed words (`indices`, `values`: OR them into a mask with `or_words`), and their own
        boundary events.

        The result depends on the spans and the automaton alone, not on the parse around them,
        so it is cached here: every parse state that ends a lexeme the same way and expects the
        same terminals next (one shared lexer) walks those subtrees once.
        """
        key = (start, spans.key)
        hit = self._continued.get(key)  # (no lock: one dict read is atomic; `_store` writes)
        if hit is None:
            native = native_walk(self.vocab)
            assert native is not None
            hit = native.walk_sparse(self.dfa, start, spans)
            self._store(self._continued, key, hit, len(hit[0]) + len(hit[1]) + hit[2].nbytes)
        return hit

    def first_byte_dead(self, state: int) -> npt.NDArray[np.int32]:
        """Packed mask of the text tokens whose first byte has no transition from `state`."""
        key = -1 - state
        with self._lock:
            hit = self._boundaries.get(key)
        if hit is not None:
            return hit  # type: ignore[return-value]
        row = self.dfa.row(state)
        by_byte = first_byte_masks(self.vocab)
        if _FIRST_BYTE_DEAD is not None:  # (one C call: numpy's set-up was most of the cost)
            packed = np.empty(by_byte.shape[1], dtype=np.int32)
            _FIRST_BYTE_DEAD(row, by_byte, packed)
        else:
            dead = row < 0
            alive = np.flatnonzero(~dead)
            if len(alive) < 128:  # usually a few bytes live: all text tokens minus their buckets
                packed = by_byte[256] & ~np.bitwise_or.reduce(by_byte[alive], axis=0)
            else:
                packed = np.bitwise_or.reduce(by_byte[np.flatnonzero(dead)], axis=0)
            packed = np.ascontiguousarray(packed, dtype=np.int32)
        packed.setflags(write=False)
        self._store(self._boundaries, key, packed)
        return packed

    def _walk(
        self,
        state: int,
        classes: TokenClasses,
        boundaries: list[tuple[npt.NDArray[np.int64], int, npt.NDArray[np.int32]]] | None = None,
    ) -> npt.NDArray[np.bool_]:
        """Bool per representative: its bytes keep `state` alive to the end.

        With `boundaries`, also collect `(reps, k, states before)` for representatives that die
        at byte `k >= 1` in a state the automaton accepts in (dying at byte 0 is the caller's
        business: it depends only on `state`).
        """
        dfa = self.dfa
        accepting = dfa.accepting if boundaries is not None else None
        ok = np.zeros(classes.num_reps + 1, dtype=bool)  # last slot: never allowed (specials)
        if classes.num_reps == 0:
            return ok
        columns = classes.columns
        counts = classes.counts
        row = dfa.row(state)
        first_ok = np.flatnonzero(row >= 0)
        if len(first_ok) <= _FEW_FIRST_BYTES:
            # Few first bytes survive: take their buckets instead of gathering every token.
            starts = classes.first_starts
            order = classes.first_order
            buckets = [order[starts[b] : starts[b + 1]] for b in first_ok.tolist()]
            idx = np.sort(np.concatenate(buckets)) if buckets else np.zeros(0, dtype=np.int64)
            states = row[columns[0, idx]]
        else:
            states = row[columns[0]]
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
            if boundaries is not None and not alive.all():
                accepting = dfa.accepting
                died = ~alive
                from_accepting = accepting[states[died]]
                if from_accepting.any():
                    boundaries.append((idx[died][from_accepting], k, states[died][from_accepting]))
            idx = idx[alive]
            states = nxt[alive]
            k += 1
        # The long tail: a handful of long tokens, walked one byte at a time.
        lengths = classes.lengths
        for rep, current in zip(idx.tolist(), states.tolist()):
            s = current
            for pos in range(k, int(lengths[rep])):
                nxt_s = int(dfa.next_state(s, int(columns[pos, rep])))
                if nxt_s < 0:
                    if boundaries is not None and dfa.is_accepting(s):
                        boundaries.append(
                            (np.array([rep], dtype=np.int64), pos, np.array([s], dtype=np.int32))
                        )
                    break
                s = nxt_s
            else:
                ok[rep] = True
        return ok
