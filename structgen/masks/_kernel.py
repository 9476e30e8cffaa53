"""Python side of the C trie walk (`_native.c`), with a clean fallback when it is missing.

The extension is optional: `pip install` builds it when a C compiler is present; without it (or
with `STRUCTGEN_NATIVE=0`) the numpy walker in `_walker.py` does the same work, more slowly.
"""

from __future__ import annotations

import ctypes
import importlib
import itertools
import os
import threading
from collections.abc import Hashable, Iterator
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from structgen.automata._native_subset import addresses
from structgen.masks._slices import DEFAULT_SLICES, SlicePlan, TokenSlice, forest_order, plan_slices

__all__ = ["Events", "NativeWalk", "SparseWords", "equality_available", "native_available"]

#: a continued walk's words set: int64 indices or uint32 values, as bytes (`or_words` reads them)
SparseWords = bytes


class _NodeView(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in ("node", "tok_lo", "tok_hi", "ids")]


#: `packed_node` in _native.c: a trie node as the walk reads it (two words, not five arrays)
PACKED_NODE = np.dtype([("a", "<u4"), ("b", "<u4")])
_NODE_LOW = 0xFFFFFF  # the low 24 bits of each word
_NODE_NO_TOKEN = 0xFFFFFF
_NODE_TOKENS = 0xFFFFFE


class TrieTooLarge(ValueError):
    """The vocabulary's trie does not fit the C walk's packed nodes (the numpy walk is used)."""


class _EventsOut(ctypes.Structure):
    _fields_ = [
        ("lo", ctypes.c_void_p),
        ("hi", ctypes.c_void_p),
        ("cut", ctypes.c_void_p),
        ("state", ctypes.c_void_p),
        ("cap", ctypes.c_int64),
    ]


def _load() -> tuple[Any, Any]:
    """The extension (its entry points: `walk`, `contained`, `bounded_equal`, `take_words`) and
    `sg_subtree_ends` (through ctypes: once per vocabulary), or None each."""
    if os.environ.get("STRUCTGEN_NATIVE", "1") == "0":
        return None, None
    try:
        _native = importlib.import_module("structgen.masks._native")
    except ImportError:
        return None, None
    if not hasattr(_native, "walk"):
        return None, None  # (an old build: the numpy walker)
    try:
        ends = ctypes.CDLL(_native.__file__).sg_subtree_ends
    except (OSError, AttributeError):
        return None, None
    ends.restype = None
    ends.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]
    return _native, ends


class _SliceView(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in ("start", "byte", "next")]


class _SliceChecks(ctypes.Structure):
    """`slice_checks` in _native.c: a vocabulary's slice checks and one thread's buffers."""

    _fields_ = [
        ("sl", _SliceView),
        ("n_checks", ctypes.c_int32),
        ("u0", ctypes.c_void_p),
        ("len", ctypes.c_void_p),
        ("implies", ctypes.c_void_p),
        ("group", ctypes.c_void_p),
        ("floor", ctypes.c_int32),
        ("max_pairs", ctypes.c_int64),
        ("max_builds", ctypes.c_int64),
        ("n_slots", ctypes.c_int64),
        ("max_build_ns", ctypes.c_int64),
        ("slots", ctypes.c_void_p),
        ("pa", ctypes.c_void_p),
        ("pb", ctypes.c_void_p),
        ("pd", ctypes.c_void_p),
        ("ps", ctypes.c_void_p),
        ("probe_above", ctypes.c_int32),
    ]


def _needed_bytes(plan: SlicePlan) -> tuple[int, ...]:
    """For each check that runs first or where the floor failed (the floor, and those that do
    not imply it): the bytes its slice's strings read in their first two places (bitsets). An
    automaton whose transitions read none of these sets whole allows no slice in any state."""
    floor = int(plan.check_group[0]) if plan.floor else -1
    out: list[int] = []
    for i, u0 in enumerate(plan.check_u0.tolist()):
        if i and floor >= 0 and int(plan.check_implies[i]) >> floor & 1:
            continue
        mask, states = 0, [u0]
        for _ in range(2):
            following = []
            for u in states:
                lo, hi = int(plan.u_start[u]), int(plan.u_start[u + 1])
                for b in plan.u_byte[lo:hi].tolist():
                    mask |= 1 << b
                following.extend(plan.u_next[lo:hi].tolist())
            states = sorted(set(following))
        if mask not in out:
            out.append(mask)
    return tuple(out) or (0,)


_EXT, _ENDS = _load()
#: a continued walk, its words and packed events as new bytes in one C call (None: an extension
#: built before it, then `walk_spans` and `pack_events`)
_CONTINUE_SPANS: Any = getattr(_EXT, "continue_spans", None)
#: pairs of states an equality check may visit before it gives up ("not known equal")
MAX_EQUAL_PAIRS = 4096
_EQUAL_SLOTS = 8192  # a power of two above MAX_EQUAL_PAIRS: the visited set's open addressing
#: DFA rows the slice checks of one state may build before they give up. Rows cost ~2-25 µs and
#: a skipped slice saves a walk of up to ~1 ms; most rows a proof builds, the walks of the
#: states it passes through would build anyway (a budget of 64 left MaskBench's mask p99 at
#: 1.4 ms, 1,024 brought it to 0.46 ms).
MAX_SLICE_BUILDS = 1024
#: ... and the time they may spend building rows: a row costs µs in C, ~100 µs for a product
#: built in Python, ~10 ms for a huge NFA subset, so the count alone does not bound a mask. (At
#: 20 ms the MaskBench sample never reaches it; 2 ms cut proofs short: p99 0.50 -> 0.81 ms.)
MAX_SLICE_BUILD_SECONDS = 0.02
#: checks of slices whose tokens run longer than this many bytes first follow one path of the
#: slice's first bytes as deep as the check goes (`slice_contained`): a counted string fails
#: them at its bound, which the search reaches only with every UTF-8 state of every count
#: built (a `maxLength: 40` string's first proof 220 -> 146 µs, each later count's 50 -> 25)
SLICE_PROBE_ABOVE = 16
_LAYOUT_TOKENS = itertools.count()
_GAVE_UP = 1 << 62  # flag in `sg_contained_groups`' result: some check gave up
_SLICE_RETRIES = 4  # checks of a terminal state that gave up, before its partial answer stands
_SMALL_EVENTS = 64  # events split by state with Python lists up to this many


class Events:
    """Boundary events of a walk: the trie subtrees (preorder nodes `[lo, hi)`) whose tokens
    die after `cut` bytes in DFA state `state`, where the automaton accepts. Also used as walk
    ranges (nodes `[lo, hi)` whose parent is at depth `cut`).

    Made from four arrays, or (a C walk's) `packed`: events `[first, end)` of one bytes object
    of `total` events laid out as lo, hi (int64), cut, state (int32), ordered by state, which
    the next walk reads directly (`NativeWalk.walk_sparse`); the arrays are then views made
    only when asked."""

    __slots__ = (
        "_bounds",
        "_cut",
        "_first",
        "_groups",
        "_hi",
        "_key",
        "_lo",
        "_n",
        "_one_state",
        "_state",
        "_total",
        "packed",
    )

    def __init__(
        self,
        lo: npt.NDArray[np.int64],
        hi: npt.NDArray[np.int64],
        cut: npt.NDArray[np.int32],
        state: npt.NDArray[np.int32],
    ) -> None:
        self._lo: npt.NDArray[np.int64] | None = lo
        self._hi: npt.NDArray[np.int64] | None = hi
        self._cut: npt.NDArray[np.int32] | None = cut
        self._state: npt.NDArray[np.int32] | None = state
        self._n = len(lo)
        #: the C walk's packed events (None: made from arrays), of `_total`, from `_first`
        self.packed: bytes | None = None
        self._total = self._first = 0
        self._groups: list[tuple[int, Events]] | None = None
        self._one_state: int | None = None  # (all events in one state: the group is self)
        self._key: bytes | None = None
        # (state, end, ...) when the events are ordered by state already (`from_packed`)
        self._bounds: tuple[int, ...] | None = None

    @classmethod
    def from_packed(cls, packed: bytes, total: int, bounds: tuple[int, ...]) -> Events:
        """All `total` events of `pack_events`' bytes, `bounds` their groups as (state, end,
        state, end, ...) with ascending states: the groups are slices, made when first
        asked."""
        events = cls._slice(packed, total, 0, total)
        if len(bounds) == 2:
            events._one_state = bounds[0]
        else:
            events._bounds = bounds
        return events

    @classmethod
    def _slice(cls, packed: bytes, total: int, first: int, end: int) -> Events:
        events = cls.__new__(cls)
        events._lo = events._hi = events._cut = events._state = None
        events._n = end - first
        events.packed = packed
        events._total = total
        events._first = first
        events._groups = events._bounds = events._key = events._one_state = None
        return events

    def _view(self, offset: int, dtype: type[np.generic]) -> Any:
        assert self.packed is not None
        size = np.dtype(dtype).itemsize
        return np.frombuffer(
            self.packed, dtype=dtype, count=self._n, offset=offset + size * self._first
        )

    @property
    def lo(self) -> npt.NDArray[np.int64]:
        found = self._lo
        if found is None:
            found = self._lo = self._view(0, np.int64)
        return found

    @property
    def hi(self) -> npt.NDArray[np.int64]:
        found = self._hi
        if found is None:
            found = self._hi = self._view(8 * self._total, np.int64)
        return found

    @property
    def cut(self) -> npt.NDArray[np.int32]:
        found = self._cut
        if found is None:
            found = self._cut = self._view(16 * self._total, np.int32)
        return found

    @property
    def state(self) -> npt.NDArray[np.int32]:
        found = self._state
        if found is None:
            found = self._state = self._view(20 * self._total, np.int32)
        return found

    @property
    def span(self) -> tuple[int, int, int]:
        """(total, first, end) of packed events (`walk_spans` reads them there)."""
        return self._total, self._first, self._first + self._n

    @property
    def key(self) -> bytes:
        """The subtrees as bytes (`lo`, `hi`, `cut`): a cache key, made once (a group of cached
        events is continued from every parse state that reaches it)."""
        key = self._key
        if key is None:
            packed = self.packed
            if packed is None:
                key = self.lo.tobytes() + self.hi.tobytes() + self.cut.tobytes()
            else:
                a, b, t = self._first, self._first + self._n, self._total
                key = packed[8 * a : 8 * b] + packed[8 * (t + a) : 8 * (t + b)]
                key += packed[16 * t + 4 * a : 16 * t + 4 * b]
            self._key = key
        return key

    def __len__(self) -> int:
        return self._n

    @property
    def nbytes(self) -> int:
        """The bytes of the four arrays (cache budgets)."""
        return 24 * self._n

    def __iter__(self) -> Iterator[npt.NDArray[Any]]:
        return iter((self.lo, self.hi, self.cut, self.state))

    def groups(self) -> list[tuple[int, Events]]:
        """The events split by `state`: `(state, events)` pairs (computed once: walk results
        are cached, and the mask of every parse state that reaches them asks again). When all
        are in one state the group is these events: only the state is kept (a list holding
        `self` in `self` is a reference cycle, left to the cyclic collector when evicted)."""
        if self._one_state is not None:
            return [(self._one_state, self)]
        groups = self._groups
        if groups is None and self._bounds is not None:
            assert self.packed is not None
            bounds, packed, total = self._bounds, self.packed, self._total
            start, groups = 0, []
            for i in range(0, len(bounds), 2):
                end = bounds[i + 1]
                group = Events._slice(packed, total, start, end)
                group._one_state = bounds[i]
                groups.append((bounds[i], group))
                start = end
            self._groups = groups
        elif groups is None:
            groups = self._split()
            if len(groups) == 1 and groups[0][1] is self:
                self._one_state = groups[0][0]
            else:
                self._groups = groups
        return groups

    def _split(self) -> list[tuple[int, Events]]:
        n = len(self.lo)
        if not n:
            return []
        if n <= _SMALL_EVENTS:  # (most: a list's count and a dict beat numpy's calls here)
            states = self.state.tolist()
            first = states[0]
            if states.count(first) == n:  # the common case: one state
                return [(first, self)]
            members: dict[int, list[int]] = {}
            for i, s in enumerate(states):
                found = members.get(s)
                if found is None:
                    members[s] = [i]
                else:
                    found.append(i)
            out = []
            for s in sorted(members):  # (ascending states, each in walk order: as below)
                part = np.array(members[s], dtype=np.intp)
                out.append(
                    (s, Events(self.lo[part], self.hi[part], self.cut[part], self.state[part]))
                )
            return out
        first = int(self.state[0])
        if (self.state == first).all():  # the common case: one state
            return [(first, self)]
        order = np.argsort(self.state, kind="stable")
        states = self.state[order]
        bounds = [0, *(np.flatnonzero(np.diff(states)) + 1).tolist(), n]
        out = []
        for a, b in itertools.pairwise(bounds):
            part = order[a:b]
            out.append(
                (
                    int(states[a]),
                    Events(self.lo[part], self.hi[part], self.cut[part], self.state[part]),
                )
            )
        return out


def trie_nodes(lex: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    """The preorder node arrays of the trie of lexicographically sorted tokens.

    Token `i` adds the nodes for its bytes after the prefix it shares with token `i-1`
    (`lengths[i] - lcp[i]` of them, in order): that is exactly preorder. A token equal to the
    previous one (two ids, same bytes) adds none and ends at the same node.
    """
    lengths = lex["lengths"].astype(np.int64)
    lcp = lex["lcp"].astype(np.int64)
    offsets = lex["offsets"].astype(np.int64)
    blob = lex["blob"]
    new = np.maximum(lengths - lcp, 0)
    n = int(new.sum())
    starts = np.zeros(len(new), dtype=np.int64)
    if len(new):
        starts[1:] = np.cumsum(new[:-1])
    owner_start = np.repeat(starts, new)
    depth = (np.repeat(lcp, new) + (np.arange(n, dtype=np.int64) - owner_start) + 1).astype(
        np.int32
    )
    byte = np.ascontiguousarray(blob[np.repeat(offsets, new) + depth.astype(np.int64) - 1])
    # The node each token ends at; a duplicate (no new nodes) shares its predecessor's.
    # (Empty tokens sort first and keep -1: they end at no node and are never allowed.)
    token_node = np.where(new > 0, starts + new - 1, -1)
    filled = np.maximum.accumulate(token_node) if len(token_node) else token_node
    nodes = np.arange(n, dtype=np.int64)
    tok_lo = np.searchsorted(filled, nodes, side="left").astype(np.int32)
    tok_hi = np.searchsorted(filled, nodes, side="right").astype(np.int32)
    end = np.empty(n, dtype=np.int32)
    if n:
        assert _ENDS is not None
        scratch = np.empty(n, dtype=np.int32)
        depth_c = np.ascontiguousarray(depth)
        _ENDS(depth_c.ctypes.data, n, end.ctypes.data, scratch.ctypes.data)
    return {"byte": byte, "depth": depth, "end": end, "tok_lo": tok_lo, "tok_hi": tok_hi}


def pack_nodes(
    byte: npt.NDArray[np.uint8],
    depth: npt.NDArray[np.int32],
    end: npt.NDArray[np.int32],
    tok_lo: npt.NDArray[np.int32],
    tok_hi: npt.NDArray[np.int32],
    ids: npt.NDArray[np.int32],
) -> npt.NDArray[Any]:
    """The node arrays as `PACKED_NODE` records: `a` = end | byte << 24, `b` = token | depth
    << 24, where a node where one token ends holds its id (no indirection through `ids`) and one
    where several end says so (`tok_lo`, `tok_hi`). Raises `TrieTooLarge` past 2**24 - 1 nodes,
    token ids of 2**24 - 2 and more, or tokens over 255 bytes (real vocabularies: 1.3 M nodes,
    262 k ids and 128 bytes at most)."""
    n = len(byte)
    count = tok_hi - tok_lo
    largest_id = int(ids.max()) if len(ids) else 0
    if n > _NODE_LOW or largest_id >= _NODE_TOKENS or (n and int(depth.max()) > 255):
        raise TrieTooLarge(
            f"{n} trie nodes, token ids up to {largest_id}: over the C walk's packed limits"
        )
    token = np.full(n, _NODE_NO_TOKEN, dtype=np.uint32)
    one = count == 1
    token[one] = ids[tok_lo[one]]
    token[count > 1] = _NODE_TOKENS
    packed = np.empty(n, dtype=PACKED_NODE)
    packed["a"] = end.astype(np.uint32) | (byte.astype(np.uint32) << np.uint32(24))
    packed["b"] = token | (depth.astype(np.uint32) << np.uint32(24))
    return packed


def native_available() -> bool:
    """Whether the compiled trie walk is in use."""
    return _EXT is not None


class SharingTables(NamedTuple):
    """Per byte-class partition: one representative byte per class (`reps`, uint8) and
    `relevant[d, c]` (uint8): some token has a byte of class `c` at position `d`."""

    reps: npt.NDArray[np.uint8]
    relevant: npt.NDArray[np.uint8]


_NO_EVENTS = Events(
    np.zeros(0, dtype=np.int64),
    np.zeros(0, dtype=np.int64),
    np.zeros(0, dtype=np.int32),
    np.zeros(0, dtype=np.int32),
)
for _array in (_NO_EVENTS.lo, _NO_EVENTS.hi, _NO_EVENTS.cut, _NO_EVENTS.state):
    _array.setflags(write=False)


class _Scratch:
    """One thread's walk buffers: the DFA state stack and the boundary event arrays, with the
    events descriptor the C walk writes through (addresses kept: they are passed every call)."""

    __slots__ = (
        "addresses",
        "busy",
        "cut",
        "events",
        "hi",
        "lo",
        "p_events",
        "p_stack",
        "stack",
        "state",
    )

    def __init__(self, depth: int, size: int, cap: int) -> None:
        self.stack = np.empty(depth, dtype=np.int32)
        self.lo = np.empty(size, dtype=np.int64)
        self.hi = np.empty(size, dtype=np.int64)
        self.cut = np.empty(size, dtype=np.int32)
        self.state = np.empty(size, dtype=np.int32)
        self.addresses = addresses(self.lo, self.hi, self.cut, self.state)
        self.events = _EventsOut(*self.addresses, cap)
        self.p_events = ctypes.addressof(self.events)
        (self.p_stack,) = addresses(self.stack)
        self.busy = False


def _collected_events(bufs: _Scratch, k: int) -> Events:
    """The `k` boundary events a walk left in `bufs`, copied out ordered by state with the
    groups every mask reaching them asks for (`pack_events`)."""
    if not k:
        return _NO_EVENTS
    assert _EXT is not None
    packed, bounds = _EXT.pack_events(*bufs.addresses, k)
    return Events.from_packed(packed, k, bounds)


class NativeWalk:
    """The vocabulary's trie as preorder node arrays, ready for `sg_walk_nodes`."""

    def __init__(
        self, trie: Any, vocab_size: int, slices: tuple[TokenSlice, ...] | None = DEFAULT_SLICES
    ) -> None:
        lex = trie.lexicographic_arrays()
        self.plan: SlicePlan | None = None
        # The plain trie first; with slices, the forest (one trie per slice) after it, in the
        # same node arrays: a walk that skips no slice takes the plain trie (fewer nodes: the
        # forest repeats the prefixes its tries share), and boundary events and their sub-walks
        # name nodes of either.
        layouts = [(lex, np.array([0, len(lex["ids"])], dtype=np.int64))]
        if slices and _EXT is not None and len(lex["ids"]):
            self.plan = plan_slices(lex, slices)
            layouts.append(forest_order(lex, self.plan.group))
        parts = [trie_nodes(layout) for layout, _ in layouts]
        sizes = [len(part["byte"]) for part in parts]
        node_base = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        id_base = [0, len(lex["ids"])]
        self.byte: npt.NDArray[np.uint8] = np.concatenate([p["byte"] for p in parts])
        self.depth: npt.NDArray[np.int32] = np.concatenate([p["depth"] for p in parts])
        self.end: npt.NDArray[np.int32] = np.concatenate(
            [p["end"] + np.int32(node_base[k]) for k, p in enumerate(parts)]
        )
        self.tok_lo: npt.NDArray[np.int32] = np.concatenate(
            [p["tok_lo"] + np.int32(id_base[k]) for k, p in enumerate(parts)]
        )
        self.tok_hi: npt.NDArray[np.int32] = np.concatenate(
            [p["tok_hi"] + np.int32(id_base[k]) for k, p in enumerate(parts)]
        )
        self.ids: npt.NDArray[np.int32] = np.ascontiguousarray(
            np.concatenate([layout["ids"] for layout, _ in layouts]), dtype=np.int32
        )
        self.n = len(self.byte)
        #: the plain trie's nodes are [0, plain_nodes); the forest's follow
        self.plain_nodes = sizes[0]
        #: the longest token's length in bytes (the trie's depth)
        self.max_depth = int(self.depth.max()) if self.n else 0
        self.words = (vocab_size + 31) // 32
        self.packed = pack_nodes(
            self.byte, self.depth, self.end, self.tok_lo, self.tok_hi, self.ids
        )
        self._view = _NodeView(
            self.packed.ctypes.data,
            self.tok_lo.ctypes.data,
            self.tok_hi.ctypes.data,
            self.ids.ctypes.data,
        )
        self._view_address = ctypes.addressof(self._view)
        self._scratch = threading.local()
        # Per trie (row 0: the plain one, then the slices' and the rest's), the node of each
        # byte at depth 1 (-1: no token starts with it).
        top = np.flatnonzero(self.depth == 1)
        first_node = [0]
        for (layout, bounds), base in zip(layouts, node_base.tolist(), strict=False):
            new_nodes = np.maximum(layout["lengths"].astype(np.int64) - layout["lcp"], 0)
            first_node += (base + np.concatenate([[0], np.cumsum(new_nodes)])[bounds[1:]]).tolist()
        self.n_groups = len(first_node) - 2  # the forest's tries (0 without slices)
        self.group_roots = np.full((self.n_groups + 1, 256), -1, dtype=np.int32)
        for g in range(self.n_groups + 1):
            in_group = top[(top >= first_node[g]) & (top < first_node[g + 1])]
            self.group_roots[g, self.byte[in_group]] = in_group.astype(np.int32)
        # the tokens of each slice as packed mask words, ORed in when a walk skips the slice
        self.group_words = np.zeros((self.n_groups, self.words), dtype=np.uint32)
        if self.n_groups:
            forest, bounds = layouts[1]
            for g in range(self.n_groups):
                ids = forest["ids"][bounds[g] : bounds[g + 1]].astype(np.int64)
                np.bitwise_or.at(
                    self.group_words[g], ids >> 5, np.left_shift(1, ids & 31).astype(np.uint32)
                )
        self._group_words_address = self.group_words.ctypes.data if self.n_groups else 0
        self._plain_roots_address = self.group_roots.ctypes.data
        self._forest_roots_address = self.group_roots[1:].ctypes.data if self.n_groups else 0
        self._slice_template: _SliceChecks | None = None
        # names this layout in the terminal DFAs' memos of contained groups (never reused)
        self._memo_token = next(_LAYOUT_TOKENS)
        # the bytes an automaton's transitions must read for some check to hold (`_possible`)
        self._needed: tuple[int, ...] = (0,)
        plan = self.plan
        if plan is not None:
            self._needed = _needed_bytes(plan)
            arrays = (
                plan.u_start,
                plan.u_byte,
                plan.u_next,
                plan.check_u0,
                plan.check_len,
                plan.check_implies,
                plan.check_group,
            )
            template = _SliceChecks()
            template.sl = _SliceView(*(a.ctypes.data for a in arrays[:3]))
            template.n_checks = len(plan.check_u0)
            template.u0, template.len, template.implies, template.group = (
                a.ctypes.data for a in arrays[3:]
            )
            template.floor = int(plan.floor)
            template.max_pairs = MAX_EQUAL_PAIRS
            template.n_slots = _EQUAL_SLOTS
            self._slice_template = template
            # (this thread's copy now, with the vocabulary's tables: made on a grammar's first
            # mask it cost ~25 µs there, where every other per-vocabulary table is ready)
            self._slice_checks()

    def _buffers(self) -> _Scratch:
        """This thread's scratch: the stack and event buffers (a fresh set for a walk nested in
        this thread's walk, from a row build, so the outer one's stack is left alone)."""
        bufs: _Scratch | None = getattr(self._scratch, "bufs", None)
        if bufs is not None and not bufs.busy:
            return bufs
        fresh = _Scratch(self.max_depth + 2, max(self.n, 1), self.n)
        if bufs is None:
            self._scratch.bufs = fresh
        return fresh

    def walk(
        self,
        dfa: Any,
        state: int,
        *,
        words: npt.NDArray[np.uint32] | None = None,
        ranges: Events | None = None,
        boundaries: bool = False,
        skip: int = 0,
    ) -> tuple[npt.NDArray[np.uint32], Events]:
        """Set in `words` the bits of the tokens that stay alive from `state`.

        `ranges` is `Events` whose `lo`, `hi`, `cut` say: walk the nodes `[lo, hi)` (subtrees
        whose parent is at depth `cut`) reading from byte `cut`; default: the whole vocabulary
        from byte 0, where `skip` (from `contained_groups`) names token groups known to be
        allowed whole: their tokens are set without a walk. Returns `words` and the boundary
        events (none unless `boundaries`).
        """
        assert _EXT is not None
        zero = words is None  # (C zeroes the new mask: np.zeros cost more, on cold caches)
        if words is None:
            words = np.empty(self.words, dtype=np.uint32)
        bufs = self._buffers()
        # (no `dfa.row(state)` first: the C walk builds the start's row, in C where it can)
        if ranges is None:  # the whole vocabulary (`sg_walk_forest`), skipping `skip`'s groups
            roots = self._forest_roots_address if skip else self._plain_roots_address
            n_groups = self.n_groups if skip else 1
            (p_words,) = addresses(words)
            a_lo = a_hi = a_base = n_ranges = 0
        else:  # the ranges' subtrees (`sg_walk_nodes`)
            roots = n_groups = 0
            r_lo = np.ascontiguousarray(ranges.lo, dtype=np.int64)
            r_hi = np.ascontiguousarray(ranges.hi, dtype=np.int64)
            r_base = np.ascontiguousarray(ranges.cut, dtype=np.int32)
            p_words, a_lo, a_hi, a_base = addresses(words, r_lo, r_hi, r_base)
            n_ranges = len(r_lo)
        bufs.busy = True
        try:
            n_events, build_ns = _EXT.walk(
                self._view_address,
                roots,
                n_groups,
                skip,
                a_lo,
                a_hi,
                a_base,
                n_ranges,
                state,
                dfa,
                bufs.p_stack,
                p_words,
                bufs.p_events,
                boundaries,
                self._group_words_address,  # (the groups in `skip` set whole, in C)
                self.words,
                zero,
            )
        finally:
            bufs.busy = False
        self._scratch.build_seconds = build_ns * 1e-9
        return words, _collected_events(bufs, n_events)

    def walk_sparse(
        self, dfa: Any, state: int, ranges: Events
    ) -> tuple[SparseWords, SparseWords, Events]:
        """`walk(dfa, state, ranges=ranges, boundaries=True)` with the mask as its non-zero
        words (`indices` int64, `values` uint32, as bytes: OR them in with `or_words`): a
        continued walk sets a few tokens, and a zeroed buffer per thread, taken back word by
        word in C, spares a fresh mask and a scan of it. Packed events (a C walk's) are walked
        in one call from their bytes (`continue_spans`, which returns the words as bytes: a
        first visit continues a dozen walks, and numpy views of them were a third of the Python
        around each)."""
        assert _EXT is not None
        scratch = self._scratch
        buffers = getattr(scratch, "sparse", None)
        scratch.sparse = None  # (in use: a nested call makes its own)
        if buffers is None:
            words = np.zeros(self.words, dtype=np.uint32)
            idx = np.empty(self.words, dtype=np.int64)
            val = np.empty(self.words, dtype=np.uint32)
            buffers = (words, idx, val, *addresses(words, idx, val))
        words, idx, val, p_words, p_idx, p_val = buffers
        try:
            packed = ranges.packed
            if packed is None:
                _, events = self.walk(dfa, state, words=words, ranges=ranges, boundaries=True)
                k = _EXT.take_words(p_words, self.words, p_idx, p_val)
            else:
                bufs = self._buffers()  # (the walk builds the start's row when it reads it)
                one_call = _CONTINUE_SPANS is not None  # (else an extension built before it)
                bufs.busy = True
                try:
                    out = (_CONTINUE_SPANS if one_call else _EXT.walk_spans)(
                        self._view_address,
                        packed,
                        *ranges.span,
                        state,
                        dfa,
                        bufs.p_stack,
                        p_words,
                        bufs.p_events,
                        self.words,
                        p_idx,
                        p_val,
                    )
                finally:
                    bufs.busy = False
                scratch.build_seconds = out[-1] * 1e-9
                if one_call:  # (the words set and the packed events as new bytes)
                    indices, values, packed, bounds, _ = out
                    if packed is None:
                        return indices, values, _NO_EVENTS
                    return indices, values, Events.from_packed(packed, len(packed) // 24, bounds)
                k, n_events, _ = out
                events = _collected_events(bufs, n_events)
        except BaseException:
            words[:] = 0  # (clean for the next walk)
            raise
        finally:
            scratch.sparse = buffers
        return idx[:k].tobytes(), val[:k].tobytes(), events

    def contained_groups(self, dfa: Any, state: int) -> int:
        """Bitmask of the token groups (slices) all of whose tokens `state` allows: every
        string of the slice's characters, up to its longest token, keeps `dfa` alive from
        `state` (`sg_contained_groups`). 0 without slices.

        A grammar lexer's state is a union of terminal states; it is proved on each component
        (what one keeps alive, the union does), memoised per component state: the search over
        the union itself would meet every prefix of every key literal still alive, while the
        generic string terminal alone decides in a few steps — for every union it is part of.
        """
        if self._slice_template is None:
            return 0
        # (a key's spellings never allow a slice: most parts of a key union are left out)
        parts = dfa.parts_of(state, unbounded=True) if hasattr(dfa, "parts_of") else None
        if parts is None:
            return self._contained(dfa, state) & ~_GAVE_UP
        found = 0
        everything = (1 << (self.n_groups - 1)) - 1
        token = self._memo_token
        for part, s in parts:
            # Kept on the terminal DFA, per vocabulary layout (a weak-keyed table here cost a
            # weak reference per lookup, dozens per lexer state).
            memos: dict[int, dict[Hashable, int]] | None = getattr(part, "_slice_memos", None)
            if memos is None:
                memos = part._slice_memos = {}
            known = memos.get(token)
            if known is None:
                known = memos[token] = {}
            # (a counted repetition's states far from its bounds share one answer)
            cls = part.bounded_class(s, self.max_depth)
            hit = known.get(cls)
            if hit is None or hit < 0:
                # A check that gave up is tried again a few times (negative: tries left), each
                # time with more of the DFA built, then its partial answer stands.
                result = self._contained(part, s)
                if result & _GAVE_UP and (hit is None or hit < -1):
                    known[cls] = -_SLICE_RETRIES if hit is None else hit + 1
                else:
                    known[cls] = result & ~_GAVE_UP
                hit = result & ~_GAVE_UP
            found |= hit
            if found == everything:
                break
        return found

    def _possible(self, dfa: Any) -> bool:
        """Whether any state of `dfa` could pass a check: not when, for every root check (the
        floor, and those that run where it failed), a byte its slice's strings read in their
        first two places has no transition anywhere in the automaton (a UUID or a number regex
        never allows a lowercase or space-led slice). Saves the checks on every new state.
        Kept on the DFA (an attribute read is cheaper than a weak-keyed lookup)."""
        memo: dict[tuple[int, ...], bool] | None = getattr(dfa, "_slices_possible", None)
        needed = self._needed
        hit = None if memo is None else memo.get(needed)
        if hit is None:
            alphabet = getattr(dfa, "alphabet", None)
            hit = alphabet is None or any(alphabet & m == m for m in needed)
            try:
                if memo is None:
                    memo = dfa._slices_possible = {}
                memo[needed] = hit
            except AttributeError:  # (an automaton without a __dict__: ask again next time)
                pass
        return hit

    def _contained(self, dfa: Any, state: int) -> int:
        if not self._possible(dfa):
            return 0
        checks = self._slice_checks()
        checks[0].max_builds = MAX_SLICE_BUILDS
        checks[0].max_build_ns = int(MAX_SLICE_BUILD_SECONDS * 1e9)
        checks[0].probe_above = SLICE_PROBE_ABOVE
        dfa.row(state)
        assert _EXT is not None
        result = _EXT.contained(dfa, state, checks[1])
        return int(result)

    def _slice_checks(self) -> tuple[_SliceChecks, int]:
        """This thread's copy of the slice checks' template, with its own buffers (and its
        address)."""
        checks: tuple[_SliceChecks, int] | None = getattr(self._scratch, "checks", None)
        if checks is None:
            assert self._slice_template is not None
            made = _SliceChecks.from_buffer_copy(self._slice_template)
            _, made.slots, made.pa, made.pb, made.pd, made.ps = self._equal_buffers()
            checks = self._scratch.checks = (made, ctypes.addressof(made))
        return checks

    def last_build_seconds(self) -> float:
        """Seconds this thread's last `walk` spent building DFA rows (in Python)."""
        return float(getattr(self._scratch, "build_seconds", 0.0))

    def _equal_buffers(self) -> tuple[Any, ...]:
        bufs = getattr(self._scratch, "equal", None)
        if bufs is None:
            slots = np.full(_EQUAL_SLOTS, -1, dtype=np.int64)
            pairs = [np.empty(MAX_EQUAL_PAIRS, dtype=np.int32) for _ in range(3)]
            positions = np.empty(MAX_EQUAL_PAIRS, dtype=np.int64)
            arrays: tuple[npt.NDArray[Any], ...] = (slots, *pairs, positions)
            bufs = (arrays, *addresses(*arrays))  # (`.ctypes.data` costs ~2 µs an array)
            self._scratch.equal = bufs
        return bufs  # type: ignore[no-any-return]

    def byte_positions(self) -> npt.NDArray[np.bool_]:
        """bool [max_depth, 256]: some token has byte `b` at position `d` (0-based)."""
        present: npt.NDArray[np.bool_] | None = getattr(self, "_positions", None)
        if present is None:
            present = np.zeros((max(self.max_depth, 1), 256), dtype=np.bool_)
            present[self.depth.astype(np.int64) - 1, self.byte] = True
            present.setflags(write=False)
            self._positions = present
        return present

    def class_positions(self, byte_classes: npt.NDArray[np.uint8]) -> SharingTables:
        """The tables `same_mask` needs for one byte-class partition."""
        order = np.argsort(byte_classes, kind="stable")  # bytes grouped by class, smallest first
        starts = np.flatnonzero(np.diff(byte_classes[order].astype(np.int32), prepend=-1))
        reps = np.ascontiguousarray(order[starts], dtype=np.uint8)
        relevant = np.logical_or.reduceat(self.byte_positions()[:, order], starts, axis=1)
        return SharingTables(reps, np.ascontiguousarray(relevant, dtype=np.uint8))

    def same_mask(
        self, dfa: Any, tables: SharingTables, p: int, q: int, *, max_builds: int
    ) -> bool:
        """True when `p` and `q` are known to have the same token mask: they keep the same
        token prefixes alive (`sg_bounded_equal`; `tables` from `class_positions`). False when
        they differ, or when the check gave up (too many pairs, or more than `max_builds`
        DFA rows to build)."""
        assert _EXT is not None
        _, *addresses = self._equal_buffers()
        result = _EXT.bounded_equal(
            dfa,
            tables.reps.ctypes.data,
            len(tables.reps),
            tables.relevant.ctypes.data,
            p,
            q,
            self.max_depth,
            MAX_EQUAL_PAIRS,
            max_builds,
            _EQUAL_SLOTS,
            *addresses,
        )
        return bool(result == 1)


def equality_available() -> bool:
    """Whether the compiled bounded-equality check (`NativeWalk.same_mask`) is in use."""
    return _EXT is not None
