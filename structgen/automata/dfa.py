"""``ByteDFA``: a deterministic automaton over bytes whose states are built on first visit.

A ``ByteDFA`` wraps a *source* that knows how to expand one state: subset construction over a
``ByteNFA`` (regexes), a sorted option list (``alternatives``/``literal``), or the product of two
``ByteDFA``s (``intersect``). Built rows live in one growing ``int32 [capacity, 256]`` table
(``-1`` dead, ``-2`` not built yet) with a parallel ``bool`` accepting array, so already-built
states cost one numpy lookup. Every state id handed out can reach an accepting state, except the
start state of an empty language (``is_live(start)`` is False there).

Thread safety: reads need no lock; building a row (and handing out new ids) holds a per-DFA
lock, and a row becomes visible only after it is complete.
"""

from __future__ import annotations

import heapq
import threading
import time
import weakref
from abc import ABC, abstractmethod
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from structgen._budget import check_budget
from structgen._lru import LRU
from structgen.automata import _native_subset
from structgen.automata._native_subset import _NativeStates
from structgen.automata.nfa import (
    CONSUME,
    SPLIT,
    AutomataLimits,
    ByteNFA,
    Program,
    build_nfa_started,
    extension_function,
)
from structgen.errors import LimitExceededError

__all__ = [
    "ByteDFA",
    "DeferredNFASource",
    "UnionSource",
    "byte_classes_from_ranges",
    "shortest_paths",
]

IntArray = npt.NDArray[np.int32]
_DEAD_ROW: IntArray = np.full(256, -1, dtype=np.int32)
_DEAD_ROW.flags.writeable = False
#: `build_all`'s bounds for `build_first`: every state, no deadline (the limits bound it)
_ALL_STATES = 2**31 - 1
_NO_DEADLINE = 1e9
_MATCH = -1  # the element standing for the NFA match state in a subset
#: build regex (``NFASource``) and lexer (``UnionSource``) rows in C when the extension is there
#: (tests switch them off)
NATIVE_SUBSET = True
NATIVE_UNION = True
#: build intersection (``ProductSource``) rows in C, liveness searches included up to a size
NATIVE_PRODUCT = True


def byte_classes_from_ranges(ranges: Iterable[tuple[int, int]]) -> npt.NDArray[np.uint8]:
    """The coarsest partition of 0..255 in which each range is a union of classes.

    Two bytes share a class iff every range contains both or neither. Class ids are numbered in
    order of their smallest byte, so byte 0 is always in class 0.
    """
    native = _native_subset.native_byte_classes
    if native is not None:  # (the same classes in C: ~1 µs where numpy's set-up costs ~50)
        return np.frombuffer(native(ranges), dtype=np.uint8).copy()
    return _python_byte_classes(ranges)


def _python_byte_classes(ranges: Iterable[tuple[int, int]]) -> npt.NDArray[np.uint8]:
    """`byte_classes_from_ranges` without the extension."""
    uniq = sorted(set(ranges))
    if not uniq:
        return np.zeros(256, dtype=np.uint8)
    if len(uniq) <= 16:
        # few ranges (the usual case): membership only changes where a range starts or ends,
        # so number the runs between those points by the ranges that hold them
        cuts = sorted({0, *(lo for lo, _ in uniq), *(hi + 1 for _, hi in uniq if hi < 255)})
        ids: dict[int, int] = {}
        run_ids = []
        for start in cuts:
            inside = sum(1 << i for i, (lo, hi) in enumerate(uniq) if lo <= start <= hi)
            run_ids.append(ids.setdefault(inside, len(ids)))
        return np.repeat(np.array(run_ids, dtype=np.uint8), np.diff([*cuts, 256]))
    # many ranges: the same runs, their membership as one table row each
    lo = np.array([r[0] for r in uniq], dtype=np.int32)
    hi = np.array([r[1] for r in uniq], dtype=np.int32)
    starts = np.unique(np.concatenate(([0], lo, hi[hi < 255] + 1)))
    member = np.packbits(
        (starts[:, None] >= lo[None, :]) & (starts[:, None] <= hi[None, :]), axis=1
    )
    rows: dict[bytes, int] = {}
    numbered = [rows.setdefault(row.tobytes(), len(rows)) for row in member]
    return np.repeat(np.array(numbered, dtype=np.uint8), np.diff(starts, append=256))


def _classes_of_ranges(ranges: frozenset[tuple[int, int]]) -> npt.NDArray[np.uint8]:
    """`byte_classes_from_ranges`, read-only and kept for recent sets: most terminals read
    one of a few sets of byte ranges (JSON string characters, digits, a key's letters)."""
    hit = _CLASSES.get(ranges)
    if hit is None:
        hit = byte_classes_from_ranges(ranges)
        hit.setflags(write=False)
        hit = _CLASSES.put(ranges, hit)
    return hit


_CLASSES: LRU[frozenset[tuple[int, int]], npt.NDArray[np.uint8]] = LRU(1024)


def classes_of_mask(used: int) -> npt.NDArray[np.uint8]:
    """Each byte of the bitset `used` its own class, the other bytes one (read-only, kept for
    recent masks): a literal chain's classes."""
    hit = _CLASSES_BY_MASK.get(used)
    if hit is None:
        if _JOINT_CLASSES_MASKED is not None:  # (made in C: no parts, only the mask)
            hit = np.frombuffer(_JOINT_CLASSES_MASKED((), used), dtype=np.uint8)
        else:
            hit = _classes_of_ranges(frozenset((b, b) for b in range(256) if used >> b & 1))
        hit = _CLASSES_BY_MASK.put(used, hit)
    return hit


_CLASSES_BY_MASK: LRU[int, npt.NDArray[np.uint8]] = LRU(1024)


def class_representatives(classes: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]:
    """The lowest byte of each byte class, by class id (ids are numbered from 0 without gaps)."""
    if _CLASS_FIRSTS is not None:
        return np.frombuffer(_CLASS_FIRSTS(classes), dtype=np.int64)
    return np.unique(classes, return_index=True)[1].astype(np.int64)


def class_count(classes: npt.NDArray[np.uint8]) -> int:
    """How many byte classes there are (ids from 0 without gaps): one C call where the
    extension is built (a compile counts a dozen automata's classes, and numpy's reduction,
    ~1.5 µs warm, cost several times that in a cold compile), else numpy's maximum."""
    if _CLASS_FIRSTS is not None:
        return len(_CLASS_FIRSTS(classes)) >> 3
    return int(classes.max()) + 1


def joint_classes(classes: Sequence[npt.NDArray[np.uint8]]) -> npt.NDArray[np.uint8]:
    """The byte classes of automata run together (a union, a product, a sequence): two bytes
    share a class iff they do in every part's `classes`; numbered by smallest byte. In C where
    the extension is built (`joint_classes` in `_subset.c`), else `_number_rows` of the stack."""
    if _JOINT_CLASSES is not None:
        return np.frombuffer(_JOINT_CLASSES(classes), dtype=np.uint8)
    return _number_rows(np.stack(classes, 1))


def union_classes(parts: Sequence[ByteDFA]) -> npt.NDArray[np.uint8]:
    """`joint_classes` of the parts' classes, the parts whose classes are a byte mask's (a
    literal chain's: `_Source.classes_mask`) joined as one mask first: bytes share a class in
    every such part iff neither is in any part's mask. A grammar's lexer over a hundred keys
    joins one array for them, not a hundred (the numbering, by smallest byte, is the same)."""
    used = 0
    masked = False
    arrays: list[npt.NDArray[np.uint8]] = []
    for part in parts:
        mask = part._source.classes_mask
        if mask is None:
            arrays.append(part.byte_classes)
        else:
            used |= mask
            masked = True
    if masked and _JOINT_CLASSES_MASKED is not None:  # (the mask's classes made in C)
        return np.frombuffer(_JOINT_CLASSES_MASKED(arrays, used), dtype=np.uint8)
    if masked:
        arrays.append(classes_of_mask(used))
    if len(arrays) == 1:
        return arrays[0]
    return joint_classes(arrays)


def _number_rows(rows: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
    """Number the distinct rows of `rows` (one per byte) in order of their first byte. Runs of
    equal neighbouring rows are found at once; only the first row of each run is looked up."""
    starts = np.flatnonzero(np.any(rows[1:] != rows[:-1], axis=1)) + 1
    firsts = [0, *starts.tolist()]
    ids: dict[bytes, int] = {}
    run_ids = [ids.setdefault(rows[b].tobytes(), len(ids)) for b in firsts]
    lengths = np.diff([*firsts, 256])
    return np.repeat(np.array(run_ids, dtype=np.uint8), lengths)


#: a table the C builder fills grows by this factor (its unused rows are never written, so
#: they cost address space only; each growth copies the rows so far)
GROWTH_NATIVE = 8


class _Source(ABC):
    """How to expand the states of one kind of automaton."""

    byte_classes: npt.NDArray[np.uint8]
    is_union = False  # a `UnionSource` (see `ByteDFA.parts_of`)
    counts = False  # keys hold a count (see `bounded_key`)
    deferred = False  # a `DeferredNFASource`: the real source comes with the first row
    laid_out = False  # the automaton's first rows come built with it (a literal chain's spine)
    #: the language is finite (a chain of spellings): no state allows a token slice whole,
    #: every string of word or JSON-string characters up to 16 bytes (`masks/_kernel.py`)
    finite = False
    growth = GROWTH_NATIVE  # the factor a table the C builder fills grows by
    #: not None: the byte classes are `classes_of_mask(classes_mask)` — each byte of the mask
    #: its own class, the others one (a literal chain's); `union_classes` joins such parts as
    #: one mask
    classes_mask: int | None = None
    #: a chain of one-byte blocks not laid out yet (`chains.DeferredChainSource`): its byte
    #: sets, which a union's C context lays out itself (`ByteDFA.chain_bytes`)
    byte_masks: tuple[int, ...] | None = None

    @abstractmethod
    def start_key(self) -> Hashable: ...

    @abstractmethod
    def is_accepting(self, key: Any) -> bool: ...

    @abstractmethod
    def start_is_live(self) -> bool: ...

    @abstractmethod
    def expand(self, key: Any, intern: Callable[[Hashable], int]) -> list[int]:
        """Target state id per byte class (-1 dead), interning new keys with ``intern``."""

    def make_native(self, max_states: int) -> _NativeStates | None:
        """A C context that builds this source's rows (None: Python builds them)."""
        return None

    def saved_rows(self) -> IntArray | None:
        """Rows of states `0..n-1` known up front, one entry per byte class (`-2`: a row not
        known), which the automaton copies into its table when it makes one of its own (a
        restored snapshot's); None: none."""
        return None

    def bounded_key(self, key: Any, depth: int) -> Hashable:
        """A key equal for every two keys that behave alike on the next `depth` bytes (same
        transitions alive, same acceptance), for sources that count (`counts`): the key
        itself otherwise."""
        same: Hashable = key
        return same

    def memory_bytes(self) -> int:
        """An estimate of what the source holds beyond the DFA's own tables."""
        return 0

    def alphabet(self) -> int:
        """Bytes that some transition may read, as a bitset (bit b: byte b), a superset: every
        other byte is dead in every state. All bytes unless the source knows better."""
        return ALL_BYTES


ALL_BYTES = (1 << 256) - 1


def _alphabet_of_ranges(ranges: Iterable[tuple[int, int]]) -> int:
    """The bytes some ``(lo, hi)`` range covers, as a bitset (in C where built: the slice checks
    ask a first mask's new terminals, and a JSON string has 28 ranges)."""
    if _ALPHABET_OF_RANGES is not None:
        found: int = _ALPHABET_OF_RANGES(ranges)
        return found
    out = 0
    for lo, hi in ranges:
        out |= ((1 << (hi - lo + 1)) - 1) << lo
    return out


#: the shared read-only tables of unbuilt rows (`unbuilt_rows`), by their number of rows
_UNBUILT_ROWS: dict[int, IntArray] = {}
_UNBUILT_ROWS_LOCK = threading.Lock()
#: tables up to this many rows are shared while unbuilt (1 MiB); larger ones are made each
UNBUILT_SHARED_ROWS = 1024


#: `{i: i for i in range(n)}` by `n`, copied for each automaton restored with `n` states (a
#: copy of a dict takes a tenth of building it; a load restores ~18 automata)
_IDENTITY_IDS: dict[int, dict[Hashable, int]] = {}


def _identity_ids(n: int) -> dict[Hashable, int]:
    """A new dict mapping each of `0..n-1` to itself (a restored automaton's key -> id map)."""
    known = _IDENTITY_IDS.get(n)
    if known is None:
        known = dict(zip(range(n), range(n)))
        if n > 4096:
            return known
        if len(_IDENTITY_IDS) >= 256:
            _IDENTITY_IDS.clear()
        _IDENTITY_IDS[n] = known
    return known.copy()


def unbuilt_rows(rows: int) -> IntArray | None:
    """A read-only ``int32 [rows, 256]`` table of unbuilt rows (-2) shared by every automaton
    restored with that capacity until it builds its first row (`ByteDFA._own_table`): a
    loaded grammar restores a table per terminal, most of which its next steps never read
    (np.full of each was most of a restore). None above `UNBUILT_SHARED_ROWS`."""
    if rows > UNBUILT_SHARED_ROWS:
        return None
    table = _UNBUILT_ROWS.get(rows)
    if table is None:
        with _UNBUILT_ROWS_LOCK:
            table = _UNBUILT_ROWS.get(rows)
            if table is None:
                table = np.full((rows, 256), -2, dtype=np.int32)
                table.setflags(write=False)
                _UNBUILT_ROWS[rows] = table
    return table


def _fresh_arrays() -> tuple[IntArray, npt.NDArray[np.bool_]]:
    """A new automaton's table (16 rows, none built: -2) and acceptance flags (none)."""
    return np.full((16, 256), -2, dtype=np.int32), np.zeros(16, dtype=np.bool_)


#: the estimated memory of one DFA state's key (its set of NFA positions, or a union's live
#: components) in Python or in the C context, measured on the MaskBench schemas
STATE_BYTES = 256


def table_capacity(states: int) -> int:
    """The rows of a table made for `states` states: a power of two, at least 16 (a new
    `ByteDFA`'s, doubled as it grows)."""
    return max(16, 1 << (states - 1).bit_length())


#: tables from this size on come from `_UNINITIALISED` (see `_table_memory`)
BIG_TABLE_BYTES = 4 << 20
_UNINITIALISED = extension_function("uninitialised", switchable=False)
_JOINT_CLASSES = extension_function("joint_classes")
_JOINT_CLASSES_MASKED = extension_function("joint_classes_masked")
_ALPHABET_OF_RANGES = extension_function("alphabet_of_ranges")
_CLASS_FIRSTS = extension_function("class_firsts")


def _table_memory(rows: int) -> IntArray:
    """An uninitialised ``int32 [rows, 256]`` table for a grown DFA. Big ones are plain malloc
    memory rather than numpy's: numpy asks the kernel for transparent huge pages on arrays of
    4 MiB and more, and where memory is fragmented the kernel then compacts it inside the first
    writes' page faults — a lexer's table doubling to 8 MiB stalled 10-40 ms (measured on
    MaskBench; under 4 ms without the advice, as malloc reuses freed memory)."""
    nbytes = rows * 1024
    if nbytes < BIG_TABLE_BYTES or _UNINITIALISED is None:
        return np.empty((rows, 256), dtype=np.int32)
    table: IntArray = np.frombuffer(_UNINITIALISED(nbytes), dtype=np.int32).reshape(rows, 256)
    return table


class ByteDFA:
    """A lazily built DFA over bytes (see the module docstring for the table layout).

    ``start``: the start state id. ``next_state(s, b)``/``row(s)``: transitions (-1 dead).
    ``is_accepting(s)``: full-match acceptance. ``byte_classes``/``num_byte_classes``: bytes with
    the same class behave identically in every state. ``fingerprint``: stable sha256 hex digest of
    the automaton's source. Picklable; safe to share between threads.
    """

    def __init__(self, source: _Source, *, fingerprint: str, limits: AutomataLimits) -> None:
        self._source = source
        self.fingerprint = fingerprint
        self.limits = limits
        classes = np.ascontiguousarray(source.byte_classes, dtype=np.uint8)
        classes.flags.writeable = False
        self.byte_classes: npt.NDArray[np.uint8] = classes
        self.num_byte_classes = class_count(classes)
        self._lock = threading.RLock()
        # Set once the rows are built in C (``NFASource``, ``UnionSource``): the C context then
        # owns the states (``_keys``/``_ids`` are emptied) and writes rows into ``_table``.
        self._native: _NativeStates | None = None
        self._retired: list[npt.NDArray[Any]] = []
        self._untouched_from = 16  # the table's rows from here on were never written
        self._ids: dict[Hashable, int] = {}
        self._keys: list[Hashable] = []
        self._table, self._accepting = _fresh_arrays()
        self._built = bytearray()
        self._refresh_views()
        if type(source) is NFASource and source.nfa.arrays is not None:
            # An NFA built in C (a product's or a difference's part, a terminal built now):
            # C makes the start from its arrays. In Python the start's closure read the NFA
            # as lists, made from its arrays for that alone (a `(?:\S+\s+){0,99}` pattern:
            # ~1 ms of a 4.5 ms compile). An empty start is left to Python.
            self.start = 0
            self._empty = False
            if self._native_start(source):
                return
        self.start = self._intern(source.start_key())
        self._empty = not source.start_is_live()

    # ------------------------------------------------------------------ public interface

    def memory_bytes(self) -> int:
        """An estimate of the memory this automaton holds: its tables, one state set per
        state (``STATE_BYTES`` each, Python or C), and its source (an NFA, a product's
        components). Cache budgets count it (see ``structgen.cache_usage``)."""
        if self._table is _UNBUILT._table:  # (`unbuilt`: the shared arrays are nobody's own)
            return STATE_BYTES + self._source.memory_bytes()
        # (a restored automaton's shared unbuilt table, `unbuilt_rows`, is nobody's own either)
        arrays = (self._table.nbytes if self._table.flags.writeable else 0) + self._accepting.nbytes
        arrays += sum(a.nbytes for a in self._retired)  # (full when they were retired)
        native = self._native
        if native is not None:
            arrays += native.extra_bytes()  # (a product's liveness memo, in C)
            # (a grown table's rows past the states are never written: no memory behind them)
            arrays -= (self._table.shape[0] - max(self._untouched_from, self.num_states)) * 1024
        return arrays + self.num_states * STATE_BYTES + self._source.memory_bytes()

    @property
    def num_states(self) -> int:
        """The number of states that have an id so far (built or not)."""
        native = self._native
        return len(self._keys) if native is None else native.num_states

    @property
    def table(self) -> IntArray:
        """Read-only ``int32 [num_states, 256]`` transitions; ``-2`` marks rows not built yet.

        The underlying buffer is replaced when the DFA grows: fetch it again after building.
        """
        return self._table_ro[: self.num_states]

    @property
    def accepting(self) -> npt.NDArray[np.bool_]:
        """Read-only ``bool [num_states]`` acceptance flags (known for every state with an id)."""
        return self._accepting_ro[: self.num_states]

    @property
    def is_empty(self) -> bool:
        """Whether the language is empty (then ``start`` is the only state and is not live)."""
        return self._empty

    def next_state(self, state: int, byte: int) -> int:
        """The state after reading ``byte`` in ``state`` (-1: dead)."""
        if state < 0:
            return -1
        v = int(self._table[state, byte])
        if v == -2:
            self._build_row(state)
            v = int(self._table[state, byte])
        return v

    def row(self, state: int) -> IntArray:
        """All 256 transitions of ``state`` (read-only int32 view, -1 dead), built if needed."""
        if state < 0:
            return _DEAD_ROW
        if self._native is None:
            if not (state < len(self._built) and self._built[state]):
                self._build_row(state)
        elif state >= self._table.shape[0] or self._table[state, 0] == -2:
            self._build_row(state)  # (C writes byte 0 of a row last)
        row: IntArray = self._table_ro[state]
        return row

    def is_accepting(self, state: int) -> bool:
        """Whether the input read so far is in the language."""
        return state >= 0 and bool(self._accepting[state])

    @property
    def native_states(self) -> _NativeStates | None:
        """The C context that builds the rows (None: Python builds them, or not yet)."""
        return self._native

    def key_of(self, state: int) -> Hashable:
        """The source's key of ``state`` (e.g. the component states of a union or product).

        Under the lock: another thread may be handing the states to the C context (between its
        switch and the last state interned there, neither side knows them all)."""
        with self._lock:
            native = self._native
            return self._keys[state] if native is None else native.key(state)

    def bounded_class(self, state: int, depth: int) -> Hashable:
        """`state`, or for an automaton that counts (a long counted repetition) a class of
        states that behave alike on the next `depth` bytes: far from its bounds a count no
        longer matters, so what was proved for one count holds for the others (token slices:
        structgen/masks/_kernel.py)."""
        source = self._source
        if not source.counts:
            return state
        # Memoised per state: a union's slice proofs ask for each component's class of every
        # union state the component is part of, and a sequence asks its parts in turn.
        memo: dict[tuple[int, int], Hashable] | None = getattr(self, "_bounded_memo", None)
        if memo is None:
            memo = {}
            self._bounded_memo = memo
        found = memo.get((state, depth))
        if found is None:
            found = memo[state, depth] = ("bounded", source.bounded_key(self.key_of(state), depth))
        return found

    @property
    def alphabet(self) -> int:
        """Bytes some transition may read, as a bitset (bit b: byte b); the others are dead in
        every state (a superset, computed once)."""
        out: int | None = getattr(self, "_alphabet", None)
        if out is None:
            out = self._alphabet = self._source.alphabet()
        return out

    @property
    def chain_bytes(self) -> tuple[int, ...] | None:
        """The byte sets of a chain of one-byte blocks (a keyword, a literal) whose rows are
        not laid out yet, else None: a union's C context lays such a component out itself when
        a row first needs it (`_subset.c`, `lay_out_chain`), the same rows as its own."""
        return self._source.byte_masks

    def parts_of(self, state: int, *, unbounded: bool = False) -> list[tuple[ByteDFA, int]] | None:
        """For a union's state, its live components as (component DFA, its state); else None.
        `unbounded`: only the components whose language is not `finite` (a string, a number;
        not a key in its spellings).

        A union state keeps every byte string alive that one of its components does, so what
        holds for a component (its token slices, see structgen/masks/_slices.py) holds for the
        union, and is much cheaper to prove there."""
        source = self._source
        if not source.is_union:  # (an attribute read: isinstance on an ABC costs microseconds)
            return None
        parts = source.parts  # type: ignore[attr-defined]
        if not unbounded:
            return [(parts[i], s) for i, s in self.key_of(state)]  # type: ignore[attr-defined]
        native = self._native
        if native is not None:  # (C picks them: a hundred keys' pairs are not made to be skipped)
            found = native.parts_in(state, source.unbounded_parts)  # type: ignore[attr-defined]
            if found is not None:
                return [(parts[i], s) for i, s in found]
        key = self.key_of(state)
        return [(parts[i], s) for i, s in key if not parts[i]._source.finite]  # type: ignore[attr-defined]

    def state_of(self, key: Hashable) -> int:
        """The id of the state with the source's ``key``, created if new: another entry point
        into the same automaton (a grammar lexer's start for one set of expected terminals).
        The key must be live (reach acceptance)."""
        with self._lock:
            native = self._native
            if native is None:
                return self._intern(key)
            while (sid := native.intern(key)) < 0:
                self._native_stop(-1 - sid)
            return sid

    def is_live(self, state: int) -> bool:
        """Whether some continuation from ``state`` is accepted (true for every id but an
        empty language's start)."""
        return 0 <= state < self.num_states and not (self._empty and state == self.start)

    def accepts(self, data: bytes) -> bool:
        """Whether the whole of ``data`` is in the language."""
        state = self.start
        table = self._table
        for byte in data:
            v = int(table[state, byte])
            if v == -2:
                v = self.next_state(state, byte)
                table = self._table
            if v < 0:
                return False
            state = v
        return bool(self._accepting[state])

    def build_first(self, limit: int, seconds: float) -> int:
        """Build the rows of the first `limit` states in id order (breadth first from the
        start) for about `seconds` at most; return how many states have their row. Regex rows
        go through the C builder in one call (a few times faster than row by row)."""
        deadline = time.perf_counter() + seconds
        state = 0
        if limit > 0 and self.num_states:
            self.row(0)  # (a regex DFA moves to its C builder here)
            state = 1
        native = self._native
        if isinstance(native, _native_subset.NativeSubset):
            with self._lock:
                while state < min(limit, self.num_states):
                    left = deadline - time.perf_counter()
                    if left <= 0:
                        break
                    code, state = native.build_range(state, limit, left)
                    if code != _native_subset.OK:
                        self._native_stop(code)  # then go on from the row that stopped
            return state
        while state < min(limit, self.num_states) and time.perf_counter() < deadline:
            self.row(state)
            state += 1
        return state

    def build_all(self) -> int:
        """Build every reachable state eagerly (bounded by ``max_dfa_states``); return the count.
        `build_first` with no bound but the limits: regex rows in C, one call per stop (a
        counted repetition's unit, built whole at every compile that counts it: 44 rows one by
        one through `row()` cost ~200 µs)."""
        self.build_first(_ALL_STATES, _NO_DEADLINE)
        return self.num_states

    def __repr__(self) -> str:
        return (
            f"ByteDFA(states={self.num_states}, classes={self.num_byte_classes},"
            f" fingerprint={self.fingerprint[:12]})"
        )

    # ------------------------------------------------------------------ pickling

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            state = {k: v for k, v in self.__dict__.items() if not k.startswith("_lock")}
            state.pop("_table_ro", None)
            state.pop("_accepting_ro", None)
            # memos of the mask layer, keyed by this process's vocabulary layouts
            state.pop("_slice_memos", None)
            state.pop("_slices_possible", None)
            state.pop("_bounded_memo", None)
            rows = table_capacity(max(self.num_states, 1))  # (not a grown table's spare rows)
            state["_table"] = self._table[:rows].copy()
            state["_accepting"] = self._accepting[:rows].copy()
            state["_built"] = bytes(self._built)
            state["_ids"] = dict(self._ids)
            state["_keys"] = list(self._keys)
            state["_retired"] = []
            native = state.pop("_native", None)
            if native is not None:
                # The C context does not pickle: ship its states as keys; the copy goes back
                # to C on its first new row.
                n = native.num_states
                keys = [native.key(i) for i in range(n)]
                state["_keys"] = keys
                state["_ids"] = {k: i for i, k in enumerate(keys)}
                state["_built"] = (self._table[:n, 0] != -2).astype(np.uint8).tobytes()
                state["_table"][n:] = -2  # (C leaves rows past its states unwritten)
            return state

    @classmethod
    def from_arrays(
        cls,
        source: _Source,
        *,
        fingerprint: str,
        limits: AutomataLimits,
        byte_classes: npt.NDArray[np.uint8],
        table: IntArray,
        accepting: npt.NDArray[np.bool_],
        states: int,
        built: bytes | bytearray,
        start: int = 0,
        empty: bool = False,
        alphabet: int | None = None,
        num_classes: int | None = None,
        ids_from_source: bool = False,
    ) -> ByteDFA:
        """A DFA over arrays made elsewhere (a literal's chain, a restored snapshot): states
        `0..states-1`, each keyed by its id; `built` marks the rows `table` holds already
        (at least `states` rows, the others `-2`); `byte_classes` read-only
        (`num_classes` of them, counted when not given). `ids_from_source`: the source hands
        out those states' ids itself, never interning their keys (`LiteralSource`), so they
        are left out of the key -> id map."""
        dfa = cls.__new__(cls)
        dfa._source = source
        dfa.fingerprint = fingerprint
        dfa.limits = limits
        dfa.byte_classes = byte_classes
        dfa.num_byte_classes = class_count(byte_classes) if num_classes is None else num_classes
        dfa._retired = []
        keys: list[Hashable] = list(range(states))
        dfa._ids = {} if ids_from_source else _identity_ids(states)
        dfa._keys = keys
        dfa._table = table
        dfa._accepting = accepting
        dfa.start = start
        dfa._empty = empty
        dfa._alphabet = source.alphabet() if alphabet is None else alphabet
        dfa._finish_restore(built)
        return dfa

    @classmethod
    def unbuilt(cls, source: _Source, *, fingerprint: str, limits: AutomataLimits) -> ByteDFA:
        """A DFA of a deferred source whose start is its only state, not built, and whose
        arrays are one read-only table all such DFAs share until their first row (a chain's
        source lays out its own: `chains.DeferredChainSource`). Its first row replaces them.
        A source whose start accepts gets arrays of its own at once (the shared flags accept
        nothing)."""
        key = source.start_key()
        if source.is_accepting(key):
            return cls(source, fingerprint=fingerprint, limits=limits)
        dfa = cls.__new__(cls)
        dfa._source = source
        dfa.fingerprint = fingerprint
        dfa.limits = limits
        dfa.byte_classes = classes = source.byte_classes
        count: int | None = getattr(source, "num_classes", None)
        dfa.num_byte_classes = class_count(classes) if count is None else count
        dfa._retired = []
        dfa._keys = [key]
        dfa._ids = {key: 0}
        dfa.start = 0
        dfa._empty = False
        dfa._native = None
        dfa._built = bytearray()
        dfa._lock = threading.RLock()
        unbuilt = _UNBUILT
        dfa._table = dfa._table_ro = unbuilt._table
        dfa._accepting = dfa._accepting_ro = unbuilt._accepting
        dfa._untouched_from = unbuilt._untouched_from
        dfa.table_address = unbuilt.table_address
        dfa.accepting_address = unbuilt.accepting_address
        dfa.capacity = unbuilt.capacity
        dfa.native_context = dfa.native_builder = 0
        dfa.part_fields = unbuilt.part_fields
        return dfa

    def _adopt_laid_out(
        self,
        source: _Source,
        table: IntArray,
        accepting: npt.NDArray[np.bool_],
        built: bytes | bytearray,
    ) -> None:
        """Take over `source` and its arrays, this deferred automaton's language laid out (the
        same byte classes, its start state 0; each laid-out state its own key, handed out by
        the source, as `from_arrays(..., ids_from_source=True)`). The shared unbuilt arrays
        are not retired: they live as long as the module."""
        self._source = source
        self._keys = list(range(len(built)))
        self._ids = {}
        self._built = bytearray(built)
        self._table, self._accepting = table, accepting
        self._untouched_from = table.shape[0]
        self._refresh_views()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._finish_restore(state["_built"])

    def _finish_restore(self, built: bytes | bytearray) -> None:
        """What a DFA made from saved or given arrays still needs: Python mode (no C context),
        its own built flags, a lock, the read-only views and addresses."""
        self._native = None
        self._untouched_from = self._table.shape[0]
        self._built = bytearray(built)
        self._lock = threading.RLock()
        self._refresh_views()

    # ------------------------------------------------------------------ construction

    def _refresh_views(self) -> None:
        ro = self._table.view()
        ro.setflags(write=False)
        self._table_ro = ro
        acc = self._accepting.view()
        acc.setflags(write=False)
        self._accepting_ro = acc
        # Raw addresses for the C walk, refreshed only when the buffers are replaced.
        addresses = _native_subset.addresses(self._table, self._accepting)
        self.table_address: int = addresses[0]
        self.accepting_address: int = addresses[1]
        self.capacity: int = int(self._table.shape[0])  # rows at table_address
        self._refresh_native_fields()

    def _refresh_native_fields(self) -> None:
        """The C context's fields the walk reads (after a hand-over to C: the table and its
        views are the same, only the builder is new)."""
        # The C row builder the walk may call directly (0: none, rows come from `row`).
        native = self._native
        self.native_context: int = 0 if native is None else native.ctx
        self.native_builder: int = 0 if native is None else native.walk_build
        # ... and the five as a union's C context reads them (one bytes object: a lexer over a
        # hundred terminals joins them, where reading five attributes of each cost ~25 µs)
        self.part_fields: bytes = _native_subset.PART_FIELDS.pack(
            self.table_address,
            self.accepting_address,
            self.capacity,
            self.native_builder,
            self.native_context,
        )

    def _intern(self, key: Hashable) -> int:
        sid = self._ids.get(key)
        if sid is not None:
            return sid
        sid = len(self._keys)
        if not sid & 0x3FF:
            check_budget()  # every 1024 states (a no-op outside a compile)
        if sid >= self.limits.max_dfa_states:
            raise self._limit_error()
        if sid >= self._table.shape[0]:
            self._grow()
        self._accepting[sid] = self._source.is_accepting(key)
        self._keys.append(key)
        self._ids[key] = sid
        return sid

    def _grown_rows(self, old: int, native: bool) -> int:
        """A grown table's rows: doubled, or by the source's `growth` where C fills it."""
        cap = old * (self._source.growth if native else 2)
        return max(old * 2, min(cap, table_capacity(self.limits.max_dfa_states)))

    def _grow(self) -> None:
        """Grow the table (under the lock): doubled, or by the source's `growth` where C fills
        it (its spare rows are never written there)."""
        old = self._table.shape[0]
        native = self._native
        cap = self._grown_rows(old, native is not None)
        if native is None:
            self._move_rows(cap, fill=True)
        else:
            # C copies its states' rows in under its lock and fills each later state's row
            # with -2 when it creates the state: the rest is never written (a grown table is
            # mostly unused capacity, and writing it was most of a first visit's growth)
            table = _table_memory(cap)
            accepting = np.zeros(cap, dtype=np.bool_)
            native.set_table(table, accepting, 0)
            self._install(table, accepting, old)
        self._refresh_views()

    def _move_rows(self, cap: int, *, fill: bool) -> None:
        """Move the rows so far into a table of `cap` rows: the rows past them -2 (`fill`), or
        left for C to fill as it creates their states. The views are refreshed by the caller."""
        old = self._table.shape[0]
        table = _table_memory(cap)
        table[:old] = self._table  # (each cell written once: np.full and a copy cost more)
        if fill:
            table[old:] = -2
        accepting = np.zeros(cap, dtype=np.bool_)
        accepting[:old] = self._accepting
        self._install(table, accepting, cap if fill else old)

    def _install(
        self, table: IntArray, accepting: npt.NDArray[np.bool_], untouched_from: int
    ) -> None:
        """Make `table` and `accepting` the automaton's arrays (rows from `untouched_from` on
        never written). A C walk on another thread (the GIL released) may still read the old
        arrays through its raw pointers: they are kept (together at most the size of the
        current ones)."""
        self._retired.append(self._table)
        self._retired.append(self._accepting)
        self._table, self._accepting = table, accepting
        self._untouched_from = untouched_from

    def _own_table(self) -> None:
        """A table of its own in place of the shared unbuilt one a restored automaton starts
        with (`unbuilt_rows`; under the lock): the same rows, writable."""
        table = _table_memory(self._table.shape[0])
        table.fill(-2)
        saved = self._source.saved_rows()
        if saved is not None:  # (all of them at once: C reads them without asking for each)
            count = saved.shape[0]
            saved.take(self.byte_classes, axis=1, out=table[:count])
            built = (saved[:, 0] != -2).view(np.uint8)
            self._built[:count] = built.tobytes()
        self._table = table  # (the shared one lives on: nothing to retire)
        self._untouched_from = table.shape[0]
        self._refresh_views()

    def _limit_error(self) -> LimitExceededError:
        return LimitExceededError(
            f"the lazy DFA needs more than {self.limits.max_dfa_states} states",
            limit="max_dfa_states",
            value=self.limits.max_dfa_states,
        )

    def _native_stop(self, code: int) -> None:
        """Act on a stop code of the C builder (then the caller retries)."""
        native = self._native
        assert native is not None
        if native.answer(code):  # (a row, a liveness verdict, distances)
            return
        if code == _native_subset.GROW:
            self._grow()
        elif code == _native_subset.BUDGET:
            check_budget()
            native.budget_checked()
        elif code == _native_subset.LIMIT:
            raise self._limit_error()
        elif code == _native_subset.BAD_STATE:
            raise IndexError("no such DFA state")
        else:
            raise MemoryError("the C subset construction ran out of memory")

    def _go_native(self) -> None:
        """Hand the states so far to a new C context, if the source has one (under the lock,
        Python mode)."""
        native = self._source.make_native(self.limits.max_dfa_states)
        if native is None:
            return
        rows = self._table.shape[0]
        grown = len(self._keys) >= rows
        if grown:
            # A full table (a chain's holds its laid-out states only) would stop C's first new
            # state for GROW at once: grown as it changes hands (one copy and one refresh of
            # the views, where the growth after the hand-over cost a second of each); C fills
            # the rows past the old ones as it creates their states
            self._move_rows(self._grown_rows(rows, True), fill=False)
        self._native = native
        # (the table, the budget checked for the states so far, Python's states made in C)
        native.take_over(self._table, self._accepting, rows, self._keys, self._native_stop)
        self._leave_python_mode(table_replaced=grown)

    def _leave_python_mode(self, *, table_replaced: bool = False) -> None:
        """After the C context holds every state: Python's keys and flags go. The views are
        refreshed where the table was replaced on the way, else only the C fields."""
        self._keys = []
        self._ids = {}
        self._built = bytearray()
        if table_replaced:
            self._refresh_views()
        else:
            self._refresh_native_fields()

    @property
    def is_deferred(self) -> bool:
        """Whether the automaton is still waiting for its first row to build its NFA
        (`DeferredNFASource`)."""
        return self._source.deferred

    def _materialize(self) -> None:
        """Replace a deferred source by the real one (under the lock, before the first row:
        the start is then the only state, and takes the real source's key)."""
        deferred = self._source
        assert len(self._keys) == 1
        if not isinstance(deferred, DeferredNFASource):  # (a chain: `DeferredChainSource`)
            if not self._chain_started(deferred):
                self._adopt_laid_out(*deferred.lay_out())  # type: ignore[attr-defined]
            return
        if self._table is _UNBUILT._table:  # (`unbuilt`: arrays of its own to build into)
            self._table, self._accepting = _fresh_arrays()
            self._refresh_views()
        started = deferred.materialize_started(
            self.limits.max_dfa_states, self._table, self._accepting
        )
        if started is not None:  # (one C call: the NFA, the context, its table and its start)
            source, native, sid = started
            if sid != -1:  # (-1, an empty start, is not what a deferred source promised)
                self._adopt_started(source, native, sid)
                return
        else:
            source = deferred.materialize()
            if self._native_start(source):
                return
        key = source.start_key()
        self._keys[self.start] = key
        self._ids = {key: self.start}
        self._source = source

    def _chain_started(self, deferred: Any) -> bool:
        """Lay a deferred chain of blocks (a key with escapes) out straight into a C context
        (`DeferredChainSource.lay_out_native`); False where it has none (then Python lays it
        out). A union of keys reads rows past their spine in the first masks that meet them
        (every token that starts an escape): laid out in Python, each was handed to C there,
        its table grown and copied on the way."""
        started = deferred.lay_out_native(self.limits.max_dfa_states, self._grown_rows)
        if started is None:
            return False
        source, native, table, accepting = started
        self._source = source
        self._native = native
        self._table, self._accepting = table, accepting
        self._untouched_from = 0  # (C fills each state's row as it makes the state)
        self._leave_python_mode(table_replaced=True)
        return True

    def _native_start(self, source: NFASource) -> bool:
        """Hand the automaton (materialized, or new: `__init__`) straight to a C context whose
        start C makes from the NFA (no closure in Python, no lists read from the NFA's
        arrays); False where there is no C context or the start is empty (then Python takes
        the start)."""
        if source.nfa.arrays is None:
            return False
        started = source.make_native_started(
            self.limits.max_dfa_states, self._table, self._accepting
        )
        if started is not None:  # (one C call: the context, its table and its start)
            native, sid = started
        else:
            made = source.make_native(self.limits.max_dfa_states)
            if not isinstance(made, _native_subset.NativeSubset):
                return False
            native = made
            # (the table, every row clean; no state to hand over: C makes the start)
            native.take_over(
                self._table, self._accepting, self._table.shape[0], [], self._native_stop
            )
            sid = native.start(source.nfa.start)
        if sid == -1:  # (an empty start: not what a deferred source promised; Python decides)
            return False
        self._adopt_started(source, native, sid)
        return True

    def _adopt_started(self, source: NFASource, native: _NativeStates, sid: int) -> None:
        """Take the materialized source and the C context that made its start `sid`."""
        if sid != self.start:
            raise MemoryError("the C subset construction could not make the start state")
        self._source = source
        self._native = native
        self._leave_python_mode()

    def _build_row(self, state: int) -> None:
        with self._lock:
            if self._source.deferred:
                self._materialize()
                if self._native is None and state < len(self._built) and self._built[state]:
                    return  # (a chain's laid-out rows come with it)
            # (under the lock: while another thread hands the states to the C context, the
            # count it reports grows from 1 back to all of them)
            if state >= self.num_states:
                raise IndexError(
                    f"state {state} has not been created (num_states={self.num_states})"
                )
            if self._native is None and not self._empty:
                self._go_native()
            native = self._native
            if native is not None:
                while (code := native.build(state)) != _native_subset.OK:
                    self._native_stop(code)
                return
            if state < len(self._built) and self._built[state]:
                return
            if not self._table.flags.writeable:  # (a restored automaton's first row)
                self._own_table()
                if state < len(self._built) and self._built[state]:
                    return  # (a saved row: copied with the others)
            if self._empty:  # (the start of an empty language, its only state: nothing moves)
                self._table[state] = -1
            else:
                targets = self._source.expand(self._keys[state], self._intern)
                np.asarray(targets, dtype=np.int32).take(self.byte_classes, out=self._table[state])
            if len(self._built) < len(self._keys):
                self._built.extend(bytes(len(self._keys) - len(self._built)))
            self._built[state] = 1


# ---------------------------------------------------------------------- regex (NFA) source


class DeferredNFASource(_Source):
    """A regex automaton's source before its NFA exists: what a grammar's lexer needs up front
    (the byte classes, the alphabet, whether the empty string matches) comes from the AST's
    program, and the NFA (`build`) is made when the automaton builds its first row, which
    replaces this source by the `NFASource` (`ByteDFA._materialize`). A schema's terminals are
    mostly never read by its first masks, many never at all: their NFAs wait for that.

    Made only for languages known to be non-empty whose NFA the C builder makes (so that the
    byte ranges read from the leaves are the NFA's) and whose size is within the limits (so
    that building it later cannot fail): see `compile_ast(..., defer=True)`."""

    deferred = True

    def __init__(
        self,
        build: Callable[[], ByteNFA],
        ranges: frozenset[tuple[int, int]],
        nullable: bool,
        program: Program | None = None,
    ) -> None:
        """`program`: the regex program `build` builds from (the one-call path reads it)."""
        self._build = build
        self.ranges = ranges
        self.byte_classes = _classes_of_ranges(ranges)
        self.num_classes = class_count(self.byte_classes)
        self._nullable = nullable
        self.program = program

    def start_key(self) -> Hashable:
        return _DEFERRED_START

    def start_is_live(self) -> bool:
        return True

    def is_accepting(self, key: Any) -> bool:
        return self._nullable  # (the start is the only key)

    def alphabet(self) -> int:
        return _alphabet_of_ranges(self.ranges)

    def expand(self, key: Any, intern: Callable[[Hashable], int]) -> list[int]:
        raise AssertionError("a deferred source is replaced before its first row")

    def materialize(self) -> NFASource:
        """The real source (its NFA built now, reading the byte ranges these classes came
        from: `leaf_pieces`)."""
        return NFASource(self._build(), byte_classes=self.byte_classes)

    def materialize_started(
        self, max_states: int, table: npt.NDArray[np.int32], accepting: npt.NDArray[np.bool_]
    ) -> tuple[NFASource, _native_subset.NativeSubset, int] | None:
        """`materialize`, then `NFASource.make_native_started`, in one C call: (the real
        source, its C context holding `table` and `accepting`, its start as
        `NativeSubset.start` returns it); None where there is no such call."""
        program = self.program
        if program is None or not (NATIVE_SUBSET and _native_subset.native_subset_available()):
            return None
        classes = np.ascontiguousarray(self.byte_classes, dtype=np.uint8)
        made = build_nfa_started(program, classes, max_states, table, accepting.view(np.uint8))
        if made is None:
            return None
        nfa, arrays, owner, ctx, sid = made
        native = _native_subset.NativeSubset.adopted(max_states, arrays, owner, ctx)
        return NFASource(nfa, byte_classes=classes), native, sid


_DEFERRED_START = "deferred-start"


class _Unbuilt:
    """The arrays every `ByteDFA.unbuilt` automaton shares until its first row: one table of
    unbuilt rows and no accepting state, read-only (nothing writes a deferred automaton's
    arrays: its first row replaces them)."""

    def __init__(self) -> None:
        self._table, self._accepting = _fresh_arrays()
        self._table.setflags(write=False)
        self._accepting.setflags(write=False)
        self._untouched_from = 16
        self.table_address, self.accepting_address = _native_subset.addresses(
            self._table, self._accepting
        )
        self.capacity = 16
        self.part_fields = _native_subset.PART_FIELDS.pack(
            self.table_address, self.accepting_address, self.capacity, 0, 0
        )


_UNBUILT = _Unbuilt()


def _byte_rank(byte: int) -> int:
    """Which bytes a completion path prefers: letters and digits, then other printable ASCII,
    then UTF-8 lead bytes and the rest (paths read like text and tokenize into fewer tokens)."""
    if 0x61 <= byte <= 0x7A or 0x30 <= byte <= 0x39:
        return 0
    if 0x41 <= byte <= 0x5A:
        return 1
    if 0x20 <= byte <= 0x7E:
        return 2
    if byte >= 0x80:
        return 3
    return 4


#: all bytes, the preferred first (`shortest_paths` takes the first byte that reaches a state)
_PREFERRED_BYTES = np.array(sorted(range(256), key=lambda b: (_byte_rank(b), b)), dtype=np.intp)


def shortest_paths(
    dfa: ByteDFA,
    state: int,
    is_goal: Callable[[int], bool],
    *,
    max_goals: int = 1,
    max_states: int = 4096,
) -> list[tuple[bytes, int]]:
    """Up to `max_goals` (path, goal state) pairs from `state`, shortest paths first.

    Breadth first over the lazily built rows, visiting at most `max_states` states; a state is
    reached by its preferred byte (readable text first). `state` itself counts when it is a goal.
    """
    if state < 0:
        return []
    parent: dict[int, tuple[int, int]] = {state: (-1, -1)}
    found: list[tuple[bytes, int]] = []

    def path_to(end: int) -> bytes:
        out = bytearray()
        node = end
        while True:
            prev, byte = parent[node]
            if prev < 0:
                break
            out.append(byte)
            node = prev
        out.reverse()
        return bytes(out)

    queue = deque([state])
    while queue:
        current = queue.popleft()
        if is_goal(current):
            found.append((path_to(current), current))
            if len(found) >= max_goals:
                break
        if len(parent) >= max_states:
            continue
        row = dfa.row(current)[_PREFERRED_BYTES]
        targets, first = np.unique(row, return_index=True)
        for target, index in zip(targets.tolist(), first.tolist()):
            if target < 0 or target in parent:
                continue
            parent[target] = (current, int(_PREFERRED_BYTES[index]))
            queue.append(target)
    return found


class NFASource(_Source):
    """Subset construction over a ``ByteNFA``.

    A DFA state is a frozenset of *elements*: ``next * P + node`` for "inside a character, at DAG
    node ``node``, continuing at NFA state ``next``" (``P`` = pool size), or ``-1`` for the match
    state. Elements only come from live NFA states, so a non-empty set is always live.
    """

    def __init__(self, nfa: ByteNFA, *, byte_classes: npt.NDArray[np.uint8] | None = None) -> None:
        """`byte_classes`: those of `nfa.byte_ranges()`, where the caller has them."""
        self.nfa = nfa
        self.p = max(len(nfa.pool), 1)
        if byte_classes is None:
            byte_classes = _classes_of_ranges(nfa.byte_ranges())
        self.byte_classes = byte_classes
        self.classes_of: dict[tuple[int, int], tuple[int, ...]] = {}

    # (the Python construction's tables, made when it first runs: a source whose rows C builds
    # never reads them, and a deferred terminal makes its source inside a first mask)

    @cached_property
    def moves(self) -> list[tuple[tuple[tuple[int, ...], int], ...] | None]:
        """Per pool node: ((class ids, child), ...), each computed on first use."""
        return [None] * len(self.nfa.pool)

    @cached_property
    def num_classes(self) -> int:
        return class_count(self.byte_classes)

    def alphabet(self) -> int:
        return _alphabet_of_ranges(self.nfa.byte_ranges())

    def memory_bytes(self) -> int:
        return len(self.nfa.pool) * 128  # DAG nodes and their moves

    def node_moves(self, node: int) -> tuple[tuple[tuple[int, ...], int], ...]:
        """DAG node ``node``'s transitions with byte ranges turned into class ids."""
        moves = self.moves[node]
        if moves is None:
            out = []
            for lo, hi, child in self.nfa.pool[node]:
                classes = self.classes_of.get((lo, hi))
                if classes is None:
                    classes = tuple(sorted(set(self.byte_classes[lo : hi + 1].tolist())))
                    self.classes_of[(lo, hi)] = classes
                out.append((classes, child))
            moves = self.moves[node] = tuple(out)
        return moves

    def closure(self, states: Iterable[int], out: set[int]) -> None:
        """Add the elements of the epsilon closure of ``states`` to ``out``."""
        nfa = self.nfa
        kind, eps, live, node, nxt = nfa.kind, nfa.eps, nfa.live, nfa.node, nfa.next
        p = self.p
        stack = [s for s in states if live[s]]
        seen: set[int] = set()
        while stack:
            s = stack.pop()
            if s in seen:
                continue
            seen.add(s)
            k = kind[s]
            if k == SPLIT:
                stack.extend(eps[s])
            elif k == CONSUME:
                out.add(nxt[s] * p + node[s])
            else:
                out.add(_MATCH)

    def start_key(self) -> frozenset[int]:
        out: set[int] = set()
        self.closure((self.nfa.start,), out)
        return frozenset(out)

    def start_is_live(self) -> bool:
        return bool(self.start_key())

    def is_accepting(self, key: frozenset[int]) -> bool:
        return _MATCH in key

    def make_native(self, max_states: int) -> _NativeStates | None:
        if not (NATIVE_SUBSET and _native_subset.native_subset_available()):
            return None
        return _native_subset.NativeSubset(self.nfa, self.p, self.byte_classes, max_states)

    def make_native_started(
        self, max_states: int, table: npt.NDArray[np.int32], accepting: npt.NDArray[np.bool_]
    ) -> tuple[_native_subset.NativeSubset, int] | None:
        """A C context holding `table` and `accepting` with its start made (the id, or what
        `NativeSubset.start` returns), in one call; None where there is no such call (or no
        C context: `make_native` says which)."""
        if not (NATIVE_SUBSET and _native_subset.native_subset_available()):
            return None
        return _native_subset.NativeSubset.started(
            self.nfa, self.p, self.byte_classes, max_states, table, accepting
        )

    def expand(self, key: frozenset[int], intern: Callable[[Hashable], int]) -> list[int]:
        p = self.p
        moves = self.moves
        if len(key) == 1:
            # One element (most states of most regexes): each move is one target, no buckets.
            (e,) = key
            out = [-1] * self.num_classes
            if e == _MATCH:
                return out
            nxt, node = divmod(e, p)
            node_moves = moves[node]
            if node_moves is None:
                node_moves = self.node_moves(node)
            for classes, child in node_moves:
                if child >= 0:
                    moved = intern(frozenset((nxt * p + child,)))
                else:
                    after: set[int] = set()
                    self.closure((nxt,), after)
                    moved = intern(frozenset(after)) if after else -1
                for c in classes:
                    out[c] = moved
            return out
        per_class: dict[int, list[int]] = {}
        for e in key:
            if e == _MATCH:
                continue
            nxt, node = divmod(e, p)
            base = nxt * p
            node_moves = moves[node]
            if node_moves is None:
                node_moves = self.node_moves(node)
            for classes, child in node_moves:
                item = base + child if child >= 0 else ~nxt
                for c in classes:
                    bucket = per_class.get(c)
                    if bucket is None:
                        per_class[c] = [item]
                    else:
                        bucket.append(item)
        out = [-1] * self.num_classes
        memo: dict[frozenset[int], int] = {}
        for c, items in per_class.items():
            fs = frozenset(items)
            sid = memo.get(fs)
            if sid is None:
                target: set[int] = set()
                pending: list[int] = []
                for item in fs:
                    if item >= 0:
                        target.add(item)
                    else:
                        pending.append(~item)
                if pending:
                    self.closure(pending, target)
                sid = intern(frozenset(target)) if target else -1
                memo[fs] = sid
            out[c] = sid
        return out


# ---------------------------------------------------------------------- finite sets of strings


class TrieSource(_Source):
    """A finite set of byte strings, as an implicit trie over the sorted options.

    A state is ``(lo, hi, depth)``: the options ``opts[lo:hi]`` share their first ``depth`` bytes
    (the input so far). Every state is live: it is a prefix of some option.
    """

    def __init__(self, options: Sequence[bytes]) -> None:
        self.opts = sorted(set(options))
        used = set(b"".join(self.opts))
        self._used = sum(1 << b for b in used)
        classes = np.zeros(256, dtype=np.uint8)
        next_id = 0
        unused_id = -1
        for byte in range(256):
            if byte in used:
                classes[byte] = next_id
                next_id += 1
            else:
                if unused_id < 0:
                    unused_id = next_id
                    next_id += 1
                classes[byte] = unused_id
        self.byte_classes = classes
        self.num_classes = next_id

    def alphabet(self) -> int:
        return self._used

    def start_key(self) -> tuple[int, int, int]:
        return (0, len(self.opts), 0)

    def start_is_live(self) -> bool:
        return bool(self.opts)

    def is_accepting(self, key: tuple[int, int, int]) -> bool:
        lo, hi, depth = key
        return lo < hi and len(self.opts[lo]) == depth

    def expand(self, key: tuple[int, int, int], intern: Callable[[Hashable], int]) -> list[int]:
        lo, hi, depth = key
        opts = self.opts
        cls = self.byte_classes
        out = [-1] * self.num_classes
        i = lo + 1 if self.is_accepting(key) else lo
        while i < hi:
            option = opts[i]
            byte = option[depth]
            # the options continuing with ``byte`` end where ``prefix + (byte + 1)`` would sort
            j = hi if byte == 255 else bisect_left(opts, option[:depth] + bytes((byte + 1,)), i, hi)
            out[cls[byte]] = intern((i, j, depth + 1))
            i = j
        return out


# ---------------------------------------------------------------------- intersection


class ProductSource(_Source):
    """The product of several ``ByteDFA``s; states are tuples of their states.

    A tuple gets an id only once it is known to reach a tuple of accepting states. Deciding it
    is a search over the product (memoised in ``live``/``dead``, at most ``max_dfa_states``
    tuples per search) guided by each component's distance to acceptance: the tuple that has
    least left to do is expanded first, so a live tuple is usually proved in about as many steps
    as its shortest witness is long (a breadth-first search visited every tuple up to that
    depth: intersections of several ``pattern``s and lengths took seconds). Nested products are
    flattened (``intersect``), so one search covers every component.
    """

    def __init__(self, parts: Sequence[ByteDFA], budget: int) -> None:
        self.parts = tuple(parts)
        self.budget = budget
        self.byte_classes = joint_classes([p.byte_classes for p in self.parts])
        self.num_classes = class_count(self.byte_classes)
        self.reps = class_representatives(self.byte_classes)
        self.live: set[tuple[int, ...]] = set()
        self.dead: set[tuple[int, ...]] = set()
        # per component, once a search needs them: its distances to acceptance (a None entry:
        # too big to measure, that component does not guide)
        self._distances: list[Distances | None] | None = None
        # per component, its rows read at the product's class representatives, and its states'
        # acceptance: a search reads each component state's row many times (in as many tuples)
        self._rows: list[dict[int, list[int]]] = [{} for _ in self.parts]
        self._accepts: list[dict[int, bool]] = [{} for _ in self.parts]
        # the C context made to decide the start's liveness, until the DFA takes it
        self._early_native: _native_subset.NativeUnion | None = None

    def alphabet(self) -> int:
        out = ALL_BYTES
        for part in self.parts:
            out &= part.alphabet
        return out

    def memory_bytes(self) -> int:
        tuples = (len(self.live) + len(self.dead)) * (60 + 8 * len(self.parts))
        rows = sum(len(r) for r in self._rows) * (100 + 8 * self.num_classes)
        return tuples + rows + sum(p.memory_bytes() for p in self.parts)

    def start_key(self) -> tuple[int, ...]:
        return tuple(p.start for p in self.parts)

    def make_native(self, max_states: int) -> _NativeStates | None:
        native = self._early_native
        if native is not None:
            self._early_native = None
            return native
        native = self._new_native(max_states)
        if native is not None:
            native.settle(self.live, True)  # (what Python's searches found so far)
            native.settle(self.dead, False)
        return native

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_early_native"] = None  # (a C context does not pickle: the copy makes its own)
        return state

    def _new_native(self, max_states: int | None = None) -> _native_subset.NativeUnion | None:
        if not (NATIVE_PRODUCT and _native_subset.native_subset_available()):
            return None
        return _native_subset.NativeUnion(
            list(self.parts),
            self.byte_classes,
            self.budget if max_states is None else max_states,
            mode=_native_subset.PRODUCT,
            decide=self.decide,
            distances=_distances_to_accept,
        )

    def start_is_live(self) -> bool:
        if not all(p.is_live(p.start) for p in self.parts):
            return False
        # (in C where it can be: the context made for it builds the rows later)
        native = self._early_native = self._new_native()
        if native is None:
            return self.is_live(self.start_key())
        return native.is_live(self.start_key())

    def is_accepting(self, key: tuple[int, ...]) -> bool:
        for part, accepts, state in zip(self.parts, self._accepts, key):
            found = accepts.get(state)
            if found is None:
                found = accepts[state] = part.is_accepting(state)
            if not found:
                return False
        return True

    def _columns(self, key: tuple[int, ...]) -> list[list[int]]:
        """Each component's row at the product's class representatives."""
        columns = []
        for part, rows, state in zip(self.parts, self._rows, key):
            row = rows.get(state)
            if row is None:
                row = rows[state] = part.row(state)[self.reps].tolist()
            columns.append(row)
        return columns

    def successors(self, key: tuple[int, ...]) -> list[tuple[int, tuple[int, ...]]]:
        """``(class, tuple)`` for every class on which every component moves."""
        columns = self._columns(key)
        return [(c, combo) for c, combo in enumerate(zip(*columns)) if -1 not in combo]

    def successor_tuples(self, key: tuple[int, ...]) -> list[tuple[int, ...]]:
        """The distinct tuples ``key`` moves to (many classes lead to one: a search needs each
        once, and no class)."""
        return [t for t in dict.fromkeys(zip(*self._columns(key))) if -1 not in t]

    def _guide(self, key: tuple[int, ...]) -> int:
        """How much is left to do from ``key``: the components' distances to acceptance summed
        (not a bound, a guide: any witness proves liveness, the shortest is not needed)."""
        total = 0
        for table, state in zip(self._distances or (), key):
            if table is not None:
                total += table.shortest.get(state, 0)
        return total

    def _guide_unless_hopeless(self, key: tuple[int, ...]) -> int:
        """`_guide(key)`, or -1 when the components' distances alone prove `key` dead: some
        component needs a longer continuation than another can still accept (a length bound
        against patterns that each need several more bytes), which spares exhausting the
        tuples behind it."""
        total = 0
        need = 0
        room = -1
        for table, state in zip(self._distances or (), key):
            if table is None:
                continue
            shortest = table.shortest.get(state, 0)
            total += shortest
            if shortest > need:
                need = shortest
            longest = table.longest.get(state)
            if longest is not None and (room < 0 or longest < room):
                room = longest
        return -1 if 0 <= room < need else total

    def is_live(self, key: tuple[int, ...]) -> bool:
        return self.decide(key)[0]

    def decide(self, key: tuple[int, ...]) -> tuple[bool, list[tuple[int, ...]]]:
        """Whether `key` is live, and the tuples this call newly found live (a path) or dead
        (the whole search): a C product hands them on to its own memo."""
        if key in self.live:
            return True, []
        if key in self.dead:
            return False, []
        if self.is_accepting(key):
            self.live.add(key)
            return True, [key]
        parent: dict[tuple[int, ...], tuple[int, ...] | None] = {key: None}
        # Breadth first (most searches end within a few tuples) until ``UNGUIDED_STEPS``; then
        # the components' distances are measured and the tuple with least left to do goes first
        # (newest first among equals: a plateau is walked depth first).
        guided = self._distances is not None
        step = -1 if guided else 1
        order = 0
        frontier = [(self._guide(key) if guided else 0, order, key)]
        steps = 0
        while frontier:
            cur = heapq.heappop(frontier)[2]
            steps += 1
            if not steps & 0xFF:
                check_budget()  # every 256 tuples expanded (a no-op outside a compile)
            if len(parent) > self.budget:
                raise _native_subset.search_limit_error(self.budget)
            if not guided and steps > UNGUIDED_STEPS:
                if self._distances is None:
                    self._distances = [_distances_to_accept(p) for p in self.parts]
                guided, step = True, -1
                frontier = [(self._guide(k), -o, k) for _, o, k in frontier]
                order = -order
                heapq.heapify(frontier)
            for nxt in self.successor_tuples(cur):
                if nxt in parent or nxt in self.dead:
                    continue
                parent[nxt] = cur
                if nxt in self.live or self.is_accepting(nxt):
                    node: tuple[int, ...] | None = nxt
                    path = []
                    while node is not None:
                        self.live.add(node)
                        path.append(node)
                        node = parent[node]
                    return True, path
                rank = 0
                if guided:
                    rank = self._guide_unless_hopeless(nxt)
                    if rank < 0:
                        continue  # dead (marked so with the rest if the search finds nothing)
                order += step
                heapq.heappush(frontier, (rank, order, nxt))
        self.dead.update(parent)
        return False, list(parent)

    def expand(self, key: tuple[int, ...], intern: Callable[[Hashable], int]) -> list[int]:
        out = [-1] * self.num_classes
        for c, state in self.successors(key):
            if self.is_live(state):
                out[c] = intern(state)
        return out


#: searches expand this many tuples breadth first before the components' distances guide them
UNGUIDED_STEPS = 256
#: a component with more states than this gets no distance table (the search is unguided there)
GUIDE_STATES = 1024


class Distances(NamedTuple):
    """A component's distances to acceptance, per state: the shortest continuation, and the
    longest where it is bounded (states missing from `longest` reach a cycle)."""

    shortest: dict[int, int]
    longest: dict[int, int]


def _distances_to_accept(dfa: ByteDFA) -> Distances | None:
    """Every reachable state's distance (in bytes) to an accepting state, by building the
    component whole (it is one pattern or length, usually small) and searching backwards from
    its accepting states; None when it has more than ``GUIDE_STATES`` states. Kept per
    automaton: the terminals of one schema share components (a length, a pattern)."""
    with _DISTANCES_LOCK:
        if dfa in _DISTANCES:
            return _DISTANCES[dfa]
    found = _measure_distances(dfa)
    with _DISTANCES_LOCK:
        _DISTANCES[dfa] = found
    return found


_DISTANCES: weakref.WeakKeyDictionary[ByteDFA, Distances | None] = weakref.WeakKeyDictionary()
_DISTANCES_LOCK = threading.Lock()


def _measure_distances(dfa: ByteDFA) -> Distances | None:
    reps = class_representatives(dfa.byte_classes)
    seen = {dfa.start}
    order = [dfa.start]
    preds: dict[int, list[int]] = {}
    for state in order:  # (grows while it is walked: breadth first)
        for target in set(dfa.row(state)[reps].tolist()):
            if target < 0:
                continue
            preds.setdefault(target, []).append(state)
            if target not in seen:
                if len(seen) >= GUIDE_STATES:
                    return None
                seen.add(target)
                order.append(target)
    distance = {s: 0 for s in order if dfa.is_accepting(s)}
    queue = deque(distance)
    while queue:
        state = queue.popleft()
        for prev in preds.get(state, ()):
            if prev not in distance:
                distance[prev] = distance[state] + 1
                queue.append(prev)
    # The longest continuation, where it is bounded: states that reach no cycle, taken from the
    # sinks backwards (every state is live, so a reachable cycle makes it unbounded).
    longest: dict[int, int] = {}
    out_degree = {s: 0 for s in order}
    for targets in preds.values():
        for prev in targets:
            out_degree[prev] += 1
    ready = [s for s in order if not out_degree[s]]
    for s in ready:
        longest[s] = 0
    while ready:
        state = ready.pop()
        for prev in preds.get(state, ()):
            longest[prev] = max(longest.get(prev, 0), longest[state] + 1)
            out_degree[prev] -= 1
            if not out_degree[prev]:
                ready.append(prev)
    return Distances(distance, {s: n for s, n in longest.items() if not out_degree[s]})


# ---------------------------------------------------------------------- tagged union source


class UnionSource(_Source):
    """The union of several ``ByteDFA``s run side by side; states are tuples of their states.

    A grammar's lexer needs to know *which* terminals accept a lexeme, not only that one does,
    so the key keeps every component's state (-1 once that component died). A tuple state is
    live whenever one component is, because each component's live states can reach acceptance.
    """

    is_union = True

    def __init__(self, parts: Sequence[ByteDFA]) -> None:
        self.parts = list(parts)
        if self.parts:
            # Two bytes share a class iff they do in every component: number the distinct
            # rows of component classes in order of smallest byte (so byte 0 is class 0).
            self.byte_classes = union_classes(self.parts)
        else:
            self.byte_classes = np.zeros(256, dtype=np.uint8)
        # A union counts when a component does: its states far from the bounds behave alike.
        self.counts = any([p._source.counts for p in self.parts])
        # each class's smallest byte (classes are numbered by it, so these come in order)
        self.reps = class_representatives(self.byte_classes)
        self.num_classes = len(self.reps)
        self._start_key: tuple[tuple[int, int], ...] | None = None
        self._unbounded: bytes | None = None

    @property
    def unbounded_parts(self) -> bytes:
        """One byte per component: 1 where its language is not `finite` (`ByteDFA.parts_of`).
        (A component's language never changes, nor does its finiteness.)"""
        found = self._unbounded
        if found is None:
            found = self._unbounded = bytes([not p._source.finite for p in self.parts])
        return found

    # Keys are sparse: ((component index, component state), ...) for the live components only,
    # so a lexer over 40 terminals of which 3 are still alive hashes 3 pairs, not 40 states.

    def alphabet(self) -> int:
        out = 0
        for part in self.parts:
            out |= part.alphabet
        return out

    def start_key(self) -> tuple[tuple[int, int], ...]:
        # (asked twice by ByteDFA.__init__; a grammar's union has hundreds of terminals)
        key = getattr(self, "_start_key", None)  # (None, or absent when unpickled)
        if key is None:
            key = self._start_key = tuple(
                [(i, p.start) for i, p in enumerate(self.parts) if not p._empty]
            )
        return key

    def start_is_live(self) -> bool:
        return bool(self.start_key())

    def is_accepting(self, key: tuple[tuple[int, int], ...]) -> bool:
        parts = self.parts  # (the flags read directly: a lexer's start key names every part)
        return any([parts[i]._accepting[s] for i, s in _laid_out(parts, key)])

    def bounded_key(self, key: tuple[tuple[int, int], ...], depth: int) -> Hashable:
        """Components run side by side: two tuples whose components behave alike on the next
        `depth` bytes do too (and accept the same terminals there)."""
        parts = self.parts
        return tuple((i, parts[i].bounded_class(s, depth)) for i, s in key)

    def make_native(self, max_states: int) -> _NativeStates | None:
        if not (NATIVE_UNION and self.parts and _native_subset.native_subset_available()):
            return None
        return _native_subset.NativeUnion(self.parts, self.byte_classes, max_states)

    def accepted(self, key: tuple[tuple[int, int], ...]) -> tuple[int, ...]:
        """Indices of the components that accept in ``key``."""
        parts = self.parts
        return tuple(i for i, s in _laid_out(parts, key) if parts[i].is_accepting(s))

    def expand(
        self, key: tuple[tuple[int, int], ...], intern: Callable[[Hashable], int]
    ) -> list[int]:
        if not key:
            return [-1] * self.num_classes
        index = [i for i, _ in key]
        moves = np.stack([self.parts[i].row(s)[self.reps] for i, s in key])  # [alive, classes]
        out = [-1] * self.num_classes
        # Many classes move every component the same way (most often: all dead), so build each
        # distinct column's target once.
        seen: dict[tuple[int, ...], int] = {}
        for c, column in enumerate(moves.T.tolist()):
            col = tuple(column)
            sid = seen.get(col)
            if sid is None:
                sid = seen[col] = self._target(index, col, intern)
            out[c] = sid
        return out

    def _target(
        self, index: list[int], col: tuple[int, ...], intern: Callable[[Hashable], int]
    ) -> int:
        """The id of the state the components `index` reach by the moves `col` (-1: none)."""
        target = tuple((i, t) for i, t in zip(index, col) if t >= 0)
        return intern(target) if target else -1


def _laid_out(
    parts: Sequence[ByteDFA], key: tuple[tuple[int, int], ...]
) -> tuple[tuple[int, int], ...]:
    """`key`, after laying out here every component it names past its start that is still
    deferred in Python: a chain of one-byte blocks that the union's C context laid out itself
    (`union_chains` in _subset.c; numbered the same as Python lays it out), whose states only
    C knew. Python reads a C union's key when C cannot answer (`NativeUnion.accepted`): the
    flags of such a component were the shared unbuilt arrays (none accepting, 16 states)."""
    for i, s in key:
        part = parts[i]
        if s != part.start and part._source.deferred:
            part.row(part.start)  # (its first row lays it out: `ByteDFA._materialize`)
    return key


class DifferenceSource(UnionSource):
    """The texts of ``parts[0]`` (the minuend) that no other part (a subtrahend) accepts — an
    object's "any other key": any quoted string but its declared names — run side by side as
    a union is, with no complement built.

    A key keeps the minuend's state first (without it the text is dead) and the subtrahends
    still alive; it accepts where the minuend does and no subtrahend. `difference` checks
    that every minuend state with a transition has infinitely many texts after it (so finitely
    many subtrahend texts cannot kill it) and that a state with none accepts: the only dead
    ends are then texts a subtrahend accepts where the minuend can go no further, and those
    moves lead to -1. Not a union for slice proofs (a subtrahend keeps nothing alive).
    """

    is_union = False

    def start_is_live(self) -> bool:
        key = self.start_key()
        return bool(key) and key[0][0] == 0

    def is_accepting(self, key: tuple[tuple[int, int], ...]) -> bool:
        if not key or key[0][0] != 0:
            return False
        parts = self.parts
        key = _laid_out(parts, key)
        if not parts[0].is_accepting(key[0][1]):
            return False
        return not any(parts[i].is_accepting(s) for i, s in key[1:])

    def make_native(self, max_states: int) -> _NativeStates | None:
        if not (NATIVE_UNION and _native_subset.native_subset_available()):
            return None
        return _native_subset.NativeUnion(
            self.parts, self.byte_classes, max_states, mode=_native_subset.DIFFERENCE
        )

    def expand(
        self, key: tuple[tuple[int, int], ...], intern: Callable[[Hashable], int]
    ) -> list[int]:
        if key and key[0][0] != 0:  # (the minuend is gone: nothing is alive)
            return [-1] * self.num_classes
        return super().expand(key, intern)

    def _target(
        self, index: list[int], col: tuple[int, ...], intern: Callable[[Hashable], int]
    ) -> int:
        if col[0] < 0:  # (the minuend's move: `index` starts with it)
            return -1
        parts = self.parts
        target = tuple((i, t) for i, t in zip(index, col) if t >= 0)
        taken = any(parts[i].is_accepting(t) for i, t in target[1:])
        if taken and bool((parts[0].row(col[0]) < 0).all()):  # (a name, and nothing after)
            return -1
        return intern(target)
