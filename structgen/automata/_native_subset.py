"""ctypes binding of the C row builders (`_subset.c`), with a clean fallback.

The extension is optional like the C trie walk: without it (or with `STRUCTGEN_NATIVE=0`, or an
older build that lacks these functions) `NFASource.expand` and `UnionSource.expand` build the rows
in Python. Both give the same DFA: the states are the same keys (see `NFASource`, `UnionSource`),
only the ids may differ.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import struct
import threading
import types
import weakref
from collections.abc import Callable, Collection, Sequence
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt

from structgen.automata.nfa import ByteNFA, Pool, extension_function
from structgen.errors import LimitExceededError

__all__ = [
    "BUDGET",
    "COUNTED",
    "GROW",
    "LIMIT",
    "NEED_GUIDE",
    "NEED_LIVE",
    "NEED_ROW",
    "PRODUCT",
    "SEARCH_LIMIT",
    "SEQUENCE",
    "UNION",
    "NativeSubset",
    "NativeUnion",
    "native_subset_available",
]

OK, GROW, LIMIT, BUDGET, NOMEM, BAD_STATE, NEED_ROW, NEED_LIVE, NEED_GUIDE, SEARCH_LIMIT = range(10)


class _Header(ctypes.Structure):
    """The first fields of the C context (`sg_subset`)."""

    _fields_ = [("n_states", ctypes.c_int64), ("capacity", ctypes.c_int64)]


_P = ctypes.c_void_p


_ADDRESSES = extension_function("addresses", switchable=False)
#: ``byte_classes(ranges) -> bytes(256)`` in C (`dfa.byte_classes_from_ranges`), or None
native_byte_classes: Any = extension_function("byte_classes")


def addresses(*arrays: npt.NDArray[Any]) -> tuple[int, ...]:
    """The data address of each (C-contiguous) array, for ctypes calls: the extension's
    ``addresses`` where it is built (``array.ctypes.data`` makes a helper object per call,
    ~1 µs, and a compile asks hundreds of times)."""
    if _ADDRESSES is not None:
        found: tuple[int, ...] = _ADDRESSES(*arrays)
        return found
    return tuple(int(a.ctypes.data) for a in arrays)


def _load() -> Any:
    if os.environ.get("STRUCTGEN_NATIVE", "1") == "0":
        return None
    spec = importlib.util.find_spec("structgen.automata._subset")
    if spec is None or spec.origin is None or not spec.origin.endswith((".so", ".pyd")):
        return None
    try:
        lib = ctypes.CDLL(spec.origin)
        lib.sg_union_set_distances  # noqa: B018 - present in this build?
    except (OSError, AttributeError):
        return None
    lib.sg_subset_new.restype = _P
    lib.sg_subset_new.argtypes = [
        ctypes.c_int32,  # NFA states
        *[_P] * 6,  # kind, live, node, next, eps_off, eps
        ctypes.c_int64,  # pool size P
        *[_P] * 5,  # mv_off, mv_lo, mv_hi, mv_child, byte classes
        ctypes.c_int64,  # max_states
    ]
    lib.sg_subset_free.restype = None
    lib.sg_subset_free.argtypes = [_P]
    lib.sg_subset_start.restype = ctypes.c_int64
    lib.sg_subset_start.argtypes = [_P, ctypes.c_int32]
    lib.sg_subset_intern.restype = ctypes.c_int64
    lib.sg_subset_intern.argtypes = [_P, _P, ctypes.c_int64]
    lib.sg_subset_build.restype = ctypes.c_int
    lib.sg_subset_build.argtypes = [_P, ctypes.c_int32]
    lib.sg_subset_build_range.restype = ctypes.c_int
    lib.sg_subset_build_range.argtypes = [_P, ctypes.c_int32, ctypes.c_int32, ctypes.c_int64, _P]
    lib.sg_states_set_table.restype = None
    lib.sg_states_set_table.argtypes = [_P, _P, _P, ctypes.c_int64, ctypes.c_int64]
    lib.sg_states_budget_checked.restype = None
    lib.sg_states_budget_checked.argtypes = [_P]
    lib.sg_states_key.restype = ctypes.c_int64
    lib.sg_states_key.argtypes = [_P, ctypes.c_int32, _P, ctypes.c_int64]
    lib.sg_union_new.restype = _P
    lib.sg_union_new.argtypes = [ctypes.c_int32, _P, ctypes.c_int64]
    lib.sg_union_free.restype = None
    lib.sg_union_free.argtypes = [_P]
    lib.sg_union_set_part.restype = None
    lib.sg_union_set_part.argtypes = [_P, ctypes.c_int32, _P, _P, ctypes.c_int64, _P, _P]
    lib.sg_union_set_parts.restype = None
    lib.sg_union_set_parts.argtypes = [_P, ctypes.c_int32, _P]
    lib.sg_union_need.restype = None
    lib.sg_union_need.argtypes = [_P, _P]
    lib.sg_union_accepted.restype = ctypes.c_int64
    lib.sg_union_accepted.argtypes = [_P, ctypes.c_int32, _P, ctypes.c_int64]
    lib.sg_chain_free.restype = None
    lib.sg_chain_free.argtypes = [_P]
    lib.sg_chain_lay_out.restype = ctypes.c_int64
    lib.sg_chain_lay_out.argtypes = [_P, ctypes.c_int64]
    lib.sg_chain_intern.restype = ctypes.c_int64
    lib.sg_chain_intern.argtypes = [_P, ctypes.c_int64]
    lib.sg_chain_build.restype = ctypes.c_int
    lib.sg_chain_build.argtypes = [_P, ctypes.c_int32]
    lib.sg_union_intern.restype = ctypes.c_int64
    lib.sg_union_intern.argtypes = [_P, _P, ctypes.c_int64]
    lib.sg_union_build.restype = ctypes.c_int
    lib.sg_union_build.argtypes = [_P, ctypes.c_int32]
    lib.sg_union_set_mode.restype = ctypes.c_int
    lib.sg_union_set_mode.argtypes = [_P, ctypes.c_int32, _P, ctypes.c_int64, ctypes.c_int64]
    lib.sg_union_need_tuple.restype = None
    lib.sg_union_need_tuple.argtypes = [_P, _P]
    lib.sg_union_live.restype = ctypes.c_int
    lib.sg_union_live.argtypes = [_P, _P]
    lib.sg_union_search_bytes.restype = ctypes.c_int64
    lib.sg_union_search_bytes.argtypes = [_P]
    lib.sg_union_set_distances.restype = ctypes.c_int
    lib.sg_union_set_distances.argtypes = [_P, ctypes.c_int32, _P, _P, ctypes.c_int64]
    lib.sg_union_set_live.restype = ctypes.c_int
    lib.sg_union_set_live.argtypes = [_P, _P, ctypes.c_int64, ctypes.c_int32]
    if hasattr(lib, "sg_nfa_build"):  # (Thompson's construction: `_thompson.c`)
        lib.sg_nfa_build.restype = _P
        lib.sg_nfa_build.argtypes = [*[_P] * 5, ctypes.c_int32, _P, _P]
        lib.sg_nfa_copy.restype = None
        lib.sg_nfa_copy.argtypes = [_P] * 7
        lib.sg_nfa_free.restype = None
        lib.sg_nfa_free.argtypes = [_P]
    return lib


_LIB = _load()
_KEY_SCRATCH = threading.local()  # a buffer per thread for the keys C hands back


def _key_buffer() -> tuple[npt.NDArray[np.int64], int]:
    """This thread's buffer for what C hands back per state (keys, accepting components) and
    its address (asked per lexer state: made once per thread)."""
    scratch = getattr(_KEY_SCRATCH, "buf", None)
    if scratch is None:
        buf = np.empty(64, dtype=np.int64)
        scratch = _KEY_SCRATCH.buf = (buf, buf.ctypes.data)
    return scratch  # type: ignore[no-any-return]


def _address(name: str) -> int:
    return ctypes.cast(getattr(_LIB, name), ctypes.c_void_p).value or 0 if _LIB is not None else 0


#: the addresses of `sg_subset_walk_build` and `sg_union_walk_build`, for the C trie walk (0:
#: unavailable)
WALK_BUILD: int = _address("sg_subset_walk_build")
UNION_WALK_BUILD: int = _address("sg_union_walk_build")
CHAIN_WALK_BUILD: int = _address("sg_chain_walk_build")
#: `chain_context` (the extension's function that makes an `sg_chain`), or None
_CHAIN_CONTEXT = extension_function("chain_context") if _LIB is not None else None
#: a state's element set as a tuple in one call (None: ctypes, `_NativeStates._elements`)
_STATES_KEY = extension_function("states_key") if _LIB is not None else None
#: a union state's accepting components as a frozenset in one call (None: ctypes, below)
_UNION_ACCEPTED = extension_function("union_accepted") if _LIB is not None else None
#: a union state's (component, state) pairs of some components (`union_parts_in`), or None
_UNION_PARTS_IN = extension_function("union_parts_in") if _LIB is not None else None
#: a subset construction's context made, given its table and started in one call, or None
_SUBSET_STARTED = extension_function("subset_started") if _LIB is not None else None
#: a union context made, its mode set and its components told, in one call, or None
_UNION_CONTEXT = extension_function("union_context") if _LIB is not None else None
#: every component row a union's row build lacked (`union_needs`), and one component pointed
#: at its arrays from its packed fields (`union_set_part`), or None (ctypes, below)
_UNION_NEEDS = extension_function("union_needs") if _LIB is not None else None
_UNION_SET_PART = extension_function("union_set_part") if _LIB is not None else None
#: a union state interned from its elements as Python ints (`union_intern`), or None (ctypes)
_UNION_INTERN = extension_function("union_intern") if _LIB is not None else None
#: a context takes a DFA's arrays (and a chain lays out its states) in one call, or None
_ADOPT_TABLE = extension_function("adopt_table") if _LIB is not None else None


def search_limit_error(budget: int) -> LimitExceededError:
    """What an intersection's liveness search raises past its budget."""
    return LimitExceededError(
        f"deciding whether an intersection state can still match visited more than"
        f" {budget} product states",
        limit="max_dfa_states",
        value=budget,
    )


def native_subset_available() -> bool:
    """Whether regex and union DFA rows are built in C."""
    return _LIB is not None


class _NativeStates:
    """What both C contexts share: the interned states and the arrays rows go into.

    The DFA's table and accepting arrays are owned by ``ByteDFA`` and installed with
    ``set_table``; the C side writes rows and new states' acceptance into them.
    """

    ctx: int
    #: the C builder the trie walk calls directly
    walk_build: int
    #: the states (and a product's liveness search) allowed
    max_states: int

    def _adopt(self, ctx: int | None, free: Any, what: str, kind: int) -> None:
        """Own the new context `ctx` (of `kind`: `_SUBSET`, `_UNION` or `_CHAIN`), freed when
        this object goes: by a capsule whose destructor is C (`context_capsule`), else by a
        small owner whose `__del__` calls `free` (ctypes)."""
        if not ctx:
            raise MemoryError(f"could not allocate the C {what}")
        try:
            self._owner: object = (
                _ContextOwner(ctx, free)
                if _CONTEXT_CAPSULE is None
                else _CONTEXT_CAPSULE(kind, ctx)
            )
        except BaseException:
            free(ctx)
            raise
        self.ctx = ctx
        self._header = _Header.from_address(ctx)

    def _own(self, owner: Any, ctx: int, max_states: int) -> None:
        """Take a context a C call made and handed back with `owner`, which frees it."""
        self.max_states = max_states
        self._owner = owner
        self.ctx = ctx
        self._header = _Header.from_address(ctx)

    @property
    def num_states(self) -> int:
        return int(self._header.n_states)

    def set_table(
        self, table: npt.NDArray[np.int32], accepting: npt.NDArray[np.bool_], clean: int
    ) -> None:
        """Install new arrays; the states so far are copied into them. Rows from `clean` on
        may hold anything: C fills each with -2 when its state is created."""
        assert table.shape[0] == accepting.shape[0]
        _LIB.sg_states_set_table(self.ctx, *addresses(table, accepting), table.shape[0], clean)

    def budget_checked(self) -> None:
        _LIB.sg_states_budget_checked(self.ctx)

    def take_over(
        self,
        table: npt.NDArray[np.int32],
        accepting: npt.NDArray[np.bool_],
        clean: int,
        keys: Sequence[Any],
        stop: Callable[[int], None],
    ) -> None:
        """The hand-over from Python: install the DFA's arrays (`set_table`, rows from `clean`
        on filled by C), mark the budget checked, and create the states Python made
        (`take_keys`); the first two in one call where the extension has `adopt_table`."""
        if _ADOPT_TABLE is not None:
            _ADOPT_TABLE(self.ctx, table, accepting.view(np.uint8), clean, -1)
        else:
            self.set_table(table, accepting, clean)
            self.budget_checked()
        self.take_keys(keys, stop)

    def build(self, state: int) -> int:
        """Build ``state``'s row: OK or a stop code (see `_subset.c`)."""
        raise NotImplementedError

    def intern(self, key: Any) -> int:
        """The id of a (non-empty) key, created if new: id or ``-1 - code``."""
        raise NotImplementedError

    def key(self, state: int) -> Any:
        """The key of ``state``, as the Python source writes it."""
        raise NotImplementedError

    def provide_row(self) -> None:
        """After NEED_ROW: build (in Python) the row the C side asked for."""
        raise NotImplementedError

    def provide_live(self) -> None:
        """After NEED_LIVE: decide (in Python) whether the tuple the C side names is live."""
        raise AssertionError("only a product asks whether a tuple is live")

    def provide_guide(self) -> None:
        """After NEED_GUIDE: hand C the components' distances to acceptance."""
        raise AssertionError("only a product asks for distances")

    def answer(self, code: int) -> bool:
        """Act on a stop that asks for something of the components (a row, a liveness
        verdict, distances) or reports a product's search limit; False for the other codes
        (the table and budget stops: the owning `ByteDFA` acts on those)."""
        if code == NEED_ROW:
            self.provide_row()
        elif code == NEED_LIVE:
            self.provide_live()
        elif code == NEED_GUIDE:
            self.provide_guide()
        elif code == SEARCH_LIMIT:
            raise search_limit_error(self.max_states)
        else:
            return False
        return True

    def extra_bytes(self) -> int:
        """Bytes the context holds beyond the states (a product's liveness memo)."""
        return 0

    def parts_in(self, state: int, wanted: bytes) -> tuple[tuple[int, int], ...] | None:
        """A union state's wanted (component, state) pairs (`NativeUnion`); None: ask the key."""
        return None

    def accepted(self, state: int) -> Collection[int] | None:
        """A union state's accepting components (`NativeUnion`); None: ask the key."""
        return None

    def take_keys(self, keys: Sequence[Any], stop: Callable[[int], None]) -> None:
        """Create the states a Python-built DFA has so far, in order (the hand-over to C:
        each gets its id again); `stop` acts on a stop code before the retry."""
        self._intern_each(keys, stop, 0)

    def _intern_each(self, keys: Sequence[Any], stop: Callable[[int], None], first: int) -> None:
        """`take_keys` from `keys[first]` on (the states before it are created already)."""
        for i in range(first, len(keys)):
            while (sid := self.intern(keys[i])) < 0:
                stop(-1 - sid)
            assert sid == i

    def _elements(self, state: int) -> Sequence[int]:
        if _STATES_KEY is not None:
            found: tuple[int, ...] | None = _STATES_KEY(self.ctx, state)
            if found is None:
                raise IndexError(f"state {state} has not been created")
            return found
        buf, address = _key_buffer()
        n = int(_LIB.sg_states_key(self.ctx, state, address, len(buf)))
        if n < 0:
            raise IndexError(f"state {state} has not been created")
        if n > len(buf):
            buf = np.empty(n, dtype=np.int64)
            n = int(_LIB.sg_states_key(self.ctx, state, buf.ctypes.data, len(buf)))
        return buf[:n].tolist()  # type: ignore[no-any-return]


def _subset_arrays(nfa: ByteNFA, byte_classes: npt.NDArray[np.uint8]) -> tuple[Any, ...]:
    """The arrays a subset construction's C context reads (kept alive by its owner): the
    NFA's (kind, live, node, next, eps offsets, eps), the pool's moves (offsets, lo, hi,
    child), the byte classes."""
    n = len(nfa)
    pool = nfa.pool
    if isinstance(pool, Pool):  # (its pieces' arrays, joined)
        moves, lo, hi, child = pool.arrays()
    else:
        moves = np.zeros(max(len(pool), 1) + 1, dtype=np.int32)
        if pool:
            np.cumsum(np.fromiter(map(len, pool), np.int32, count=len(pool)), out=moves[1:])
        count = int(moves[-1])
        flat = np.fromiter(chain.from_iterable(chain.from_iterable(pool)), np.int32, 3 * count)
        lo, hi, child = (np.ascontiguousarray(flat[k::3]) for k in range(3))
    total = int(moves[-1])
    if nfa.arrays is not None:  # built in C: the arrays are there already
        kind, live, node, nxt, eps_off, eps = nfa.arrays
    else:
        eps_off = np.zeros(n + 1, dtype=np.int32)
        if n:
            np.cumsum(np.fromiter(map(len, nfa.eps), np.int32, count=n), out=eps_off[1:])
        eps = np.fromiter(chain.from_iterable(nfa.eps), np.int32, int(eps_off[-1]))
        kind = np.array(nfa.kind, dtype=np.int8)
        live = np.array(nfa.live, dtype=np.uint8)
        node = np.array(nfa.node, dtype=np.int32)
        nxt = np.array(nfa.next, dtype=np.int32)
    no_moves = np.zeros(1, dtype=np.int32)
    return (
        kind,
        live,
        node,
        nxt,
        eps_off,
        eps if len(eps) else no_moves,
        moves,
        lo if total else no_moves,
        hi if total else no_moves,
        child if total else no_moves,
        np.ascontiguousarray(byte_classes, dtype=np.uint8),
    )


class NativeSubset(_NativeStates):
    """One regex DFA's C context: the NFA's arrays, the interned element sets, the builder."""

    walk_build = WALK_BUILD

    def __init__(
        self, nfa: ByteNFA, p: int, byte_classes: npt.NDArray[np.uint8], max_states: int
    ) -> None:
        assert _LIB is not None
        self.max_states = max_states
        self._arrays = _subset_arrays(nfa, byte_classes)
        a = addresses(*self._arrays)
        ctx = _LIB.sg_subset_new(len(nfa), *a[:6], p, *a[6:], max_states)
        self._adopt(ctx, _LIB.sg_subset_free, "subset construction", _SUBSET)

    @classmethod
    def started(
        cls,
        nfa: ByteNFA,
        p: int,
        byte_classes: npt.NDArray[np.uint8],
        max_states: int,
        table: npt.NDArray[np.int32],
        accepting: npt.NDArray[np.bool_],
    ) -> tuple[NativeSubset, int] | None:
        """A context with `table` and `accepting` installed (every row clean, the budget
        checked) and the start made from the NFA's: (context, what `start` returns), in one
        call (`subset_started`); None without that call (then `__init__`, `set_table`,
        `budget_checked` and `start`)."""
        if _SUBSET_STARTED is None:
            return None
        arrays = _subset_arrays(nfa, byte_classes)
        owner, ctx, start = _SUBSET_STARTED(
            arrays, p, max_states, table, accepting.view(np.uint8), nfa.start
        )
        return cls.adopted(max_states, arrays, owner, ctx), start

    @classmethod
    def adopted(
        cls, max_states: int, arrays: tuple[Any, ...], owner: Any, ctx: int
    ) -> NativeSubset:
        """The context a C call made (`subset_started`, `nfa_started`): `owner` frees it,
        `arrays` (what it reads) are kept alive with it."""
        native = cls.__new__(cls)
        native._arrays = arrays
        native._own(owner, ctx, max_states)
        return native

    def start(self, nfa_state: int) -> int:
        """Create the start state: its id, -1 for an empty language, or ``-1 - code``."""
        return int(_LIB.sg_subset_start(self.ctx, nfa_state))

    def build(self, state: int) -> int:
        """Build ``state``'s row: OK or a stop code (see `_subset.c`)."""
        return int(_LIB.sg_subset_build(self.ctx, state))

    def build_range(self, first: int, last: int, seconds: float) -> tuple[int, int]:
        """Build the rows of states `first..last-1` (those that exist, in id order) for at most
        `seconds`: (OK or the stop code, the first state not built)."""
        nxt = ctypes.c_int32(first)
        code = _LIB.sg_subset_build_range(
            self.ctx, first, last, int(seconds * 1e9), ctypes.byref(nxt)
        )
        return int(code), int(nxt.value)

    def intern(self, key: frozenset[int]) -> int:
        """The id of a (non-empty) element set, created if new: id or ``-1 - code``."""
        arr = np.array(sorted(key), dtype=np.int64)
        return int(_LIB.sg_subset_intern(self.ctx, addresses(arr)[0], len(arr)))

    def key(self, state: int) -> frozenset[int]:
        """The element set of ``state`` (as ``NFASource`` writes it)."""
        return frozenset(self._elements(state))

    def provide_row(self) -> None:
        raise AssertionError("the subset construction never asks for a component row")


UnionKey = tuple[tuple[int, int], ...]
SequenceKey = frozenset[tuple[int, int]]
CountedKey = tuple[int, int]

#: the kinds of composed DFA the C union context builds (`sg_union_set_mode`)
UNION, SEQUENCE, COUNTED, PRODUCT, DIFFERENCE = range(5)
_BETWEEN_UNITS = 0xFFFFFFFF  # a counted key's unit state -1, as C keeps it


#: a C context's owner whose destructor frees it (`_subset.c`), or None (`_ContextOwner`)
_CONTEXT_CAPSULE = extension_function("context_capsule", switchable=False)
_SUBSET, _UNION, _CHAIN = 0, 1, 2  # (the kinds `context_capsule` frees)


class _ContextOwner:
    """Frees a C context when collected, through ctypes (an extension built before
    `context_capsule`)."""

    __slots__ = ("ctx", "free")

    def __init__(self, ctx: int, free: Any) -> None:
        self.ctx = ctx
        self.free = free  # (kept: the library may be gone by __del__ at interpreter exit)

    def __del__(self) -> None:
        ctx, self.ctx = self.ctx, 0
        if ctx:
            self.free(ctx)


#: what the C side reads of a component (`sg_union_set_part`, `sg_union_set_parts`; 0: none):
#: its table's and acceptance flags' addresses, capacity, C builder and context, as int64 in the
#: machine's order (`ByteDFA.part_fields`, packed whenever its arrays change)
PART_FIELDS = struct.Struct("=5q")


class NativeChain(_NativeStates):
    """A chain of blocks' C context (`LiteralSource`, chains.py): rows past the spine built
    in C — from the walk and from a union of terminals directly, never through Python."""

    walk_build = CHAIN_WALK_BUILD

    def __init__(self, blocks: Sequence[Any], laid_out: int, max_states: int) -> None:
        """`blocks`: the chain's `Block`s (C reads their `c_data`: kept alive here);
        `laid_out`: the states with an id from the start (spine, first and final states)."""
        assert _LIB is not None and _CHAIN_CONTEXT is not None
        self.max_states = max_states
        self._blocks = blocks
        self._laid_out = laid_out
        self._adopt(_CHAIN_CONTEXT(blocks, max_states), _LIB.sg_chain_free, "chain", _CHAIN)

    @classmethod
    def adopted(
        cls, blocks: Sequence[Any], laid_out: int, max_states: int, owner: Any, ctx: int
    ) -> NativeChain:
        """The context a C call made with its states laid out (`chain_started`): `owner`
        frees it; the blocks (whose data it reads) are kept alive with it."""
        native = cls.__new__(cls)
        native._blocks = blocks
        native._laid_out = laid_out
        native._own(owner, ctx, max_states)
        return native

    def build(self, state: int) -> int:
        return int(_LIB.sg_chain_build(self.ctx, state))

    def intern(self, key: Any) -> int:
        """The id of a key as `LiteralSource` writes it (a laid-out id, or (block, local)):
        id or ``-1 - code``."""
        if type(key) is int:
            found = int(_LIB.sg_chain_lay_out(self.ctx, key + 1))
            if found < 0:
                return -1 + found
            return key if key < found else -1 - BAD_STATE
        block, local = key
        return int(_LIB.sg_chain_intern(self.ctx, (block + 1) << 32 | local))

    def take_over(
        self,
        table: npt.NDArray[np.int32],
        accepting: npt.NDArray[np.bool_],
        clean: int,
        keys: Sequence[Any],
        stop: Callable[[int], None],
    ) -> None:
        """`_NativeStates.take_over`, the laid-out states made in the same call."""
        if _ADOPT_TABLE is None:
            super().take_over(table, accepting, clean, keys, stop)
            return
        n = self._laid_out_of(keys)
        found = _ADOPT_TABLE(self.ctx, table, accepting.view(np.uint8), clean, n)
        self._take_the_rest(keys, stop, n, found)

    def take_keys(self, keys: Sequence[Any], stop: Callable[[int], None]) -> None:
        """The laid-out states in one call (ids 0.., their keys themselves), then the deeper
        ones Python met (keyed (block, local), after them)."""
        n = self._laid_out_of(keys)
        self._take_the_rest(keys, stop, n, int(_LIB.sg_chain_lay_out(self.ctx, n)))

    def _laid_out_of(self, keys: Sequence[Any]) -> int:
        """How many of `keys` are laid-out states (their own keys, first)."""
        n = min(self._laid_out, len(keys))
        assert not n or keys[n - 1] == n - 1
        return n

    def _take_the_rest(
        self, keys: Sequence[Any], stop: Callable[[int], None], n: int, found: int
    ) -> None:
        """After laying out `n` states answered `found` (their count, or a stop): the stops
        acted on and the lay-out retried, then the deeper states interned."""
        while found < 0:
            stop(-found)
            found = int(_LIB.sg_chain_lay_out(self.ctx, n))
        assert found == n
        self._intern_each(keys, stop, n)

    def key(self, state: int) -> Any:
        (element,) = self._elements(state)
        if element < 1 << 32:
            return element
        return ((element >> 32) - 1, element & 0xFFFFFFFF)


class NativeUnion(_NativeStates):
    """One composed DFA's C context: a union (a grammar lexer), a sequence or a counted
    repetition (`counted.py`) or a product (an intersection) over the components ``parts``
    (``ByteDFA``s), with the interned keys of component states. A counted repetition has one
    part (the unit) and the bounds ``lo``, ``hi`` (None: unbounded); a product asks ``decide``
    whether a tuple is live when its own search is too long (`ProductSource.is_live`)."""

    walk_build = UNION_WALK_BUILD

    def __init__(
        self,
        parts: list[Any],
        byte_classes: npt.NDArray[np.uint8],
        max_states: int,
        *,
        mode: int = UNION,
        lo: int = 0,
        hi: int | None = None,
        decide: Callable[[tuple[int, ...]], tuple[bool, list[tuple[int, ...]]]] | None = None,
        distances: Callable[[Any], Any] | None = None,
    ) -> None:
        assert _LIB is not None
        self.parts = parts
        self.mode = mode
        # (weakly when a method: a product's source keeps the context it made for its start,
        # and a strong reference back to the source would make the two a cycle)
        self._decide = (
            weakref.WeakMethod(decide) if isinstance(decide, types.MethodType) else lambda: decide
        )
        self._distances = distances
        self.max_states = max_states
        self._classes = np.ascontiguousarray(byte_classes, dtype=np.uint8)
        self._need = np.zeros(2, dtype=np.int64)
        # every component's arrays and C builder in one call (a ctypes call per component,
        # seven arguments converted each, cost more than the rest of the set-up)
        given: list[bytes] = [p.part_fields for p in parts]
        self._given = given  # what C was told of each component (see `refresh_part`)
        if _UNION_CONTEXT is not None:  # (context, mode and components in one call)
            given_starts = None if mode == UNION else [p.start for p in parts]
            bound = -1 if hi is None else hi
            # The byte sets of each chain of one-byte blocks with no rows yet: C lays it out
            # when a row first needs it (each laid out in Python cost a dozen calls, and a
            # lexer's first row needs every literal terminal expected there).
            chains = [p.chain_bytes for p in parts]
            self._owner, ctx = _UNION_CONTEXT(
                given, self._classes, max_states, mode, given_starts, lo, bound, chains
            )
            self.ctx = ctx
            self._header = _Header.from_address(ctx)
            self._need_address = 0  # (taken when C first asks for a row)
            return
        fields = np.frombuffer(b"".join(given), dtype=np.int64)
        # (the addresses in one call: `array.ctypes.data` costs ~1.5 us each)
        classes_at, self._need_address, fields_at = addresses(self._classes, self._need, fields)
        ctx = _LIB.sg_union_new(len(parts), classes_at, max_states)
        self._adopt(ctx, _LIB.sg_union_free, "union", _UNION)
        if mode != UNION:
            starts = np.array([p.start for p in parts], dtype=np.int32)
            bound = -1 if hi is None else hi
            (starts_at,) = addresses(starts)
            if _LIB.sg_union_set_mode(self.ctx, mode, starts_at, lo, bound) != 0:
                raise ValueError(f"bad composed DFA mode {mode} over {len(parts)} parts")
        _LIB.sg_union_set_parts(self.ctx, len(parts), fields_at)

    def refresh_part(self, i: int) -> None:
        """Point the C side at component ``i``'s current arrays and C builder (when they
        changed: a row built in place needs nothing, as C reads it there)."""
        fields = self.parts[i].part_fields
        if fields != self._given[i]:
            if _UNION_SET_PART is not None:
                _UNION_SET_PART(self.ctx, i, fields)
            else:
                _LIB.sg_union_set_part(self.ctx, i, *PART_FIELDS.unpack(fields))
            self._given[i] = fields

    def build(self, state: int) -> int:
        """Build ``state``'s row: OK or a stop code (see `_subset.c`)."""
        return int(_LIB.sg_union_build(self.ctx, state))

    def provide_row(self) -> None:
        """After NEED_ROW: build the component rows the C side asked for (in Python): every
        one the row's key lacked, where C lists them (a lexer's first row lacks one per
        terminal, each a materialization: asked for one at a time, each cost a build tried
        again and two more calls)."""
        if _UNION_NEEDS is not None:
            needs = _UNION_NEEDS(self.ctx)
            parts = self.parts
            for k in range(0, len(needs), 2):
                i = needs[k]
                parts[i].row(needs[k + 1])
                self.refresh_part(i)
            return
        if not self._need_address:
            (self._need_address,) = addresses(self._need)
        _LIB.sg_union_need(self.ctx, self._need_address)
        i, state = self._need.tolist()
        self.parts[i].row(state)
        self.refresh_part(i)

    def parts_in(self, state: int, wanted: bytes) -> tuple[tuple[int, int], ...] | None:
        """A union state's (component, its state) pairs of the components with a non-zero byte
        in `wanted`; None where C cannot say (not a union, an unknown state, an extension
        built before `union_parts_in`): ask the key."""
        if self.mode != UNION or _UNION_PARTS_IN is None:
            return None
        found: tuple[tuple[int, int], ...] | None = _UNION_PARTS_IN(self.ctx, state, wanted)
        return found

    def accepted(self, state: int) -> Collection[int] | None:
        """A union state's accepting components (C reads the components' flags; a frozenset,
        or a list, ascending, from an extension built before `union_accepted`); None when C
        cannot tell (not a union, or a component's arrays it holds are stale): ask the key."""
        if self.mode != UNION:
            return None
        if _UNION_ACCEPTED is not None:
            found: frozenset[int] | None = _UNION_ACCEPTED(self.ctx, state)
            return found
        buf, address = _key_buffer()
        n = int(_LIB.sg_union_accepted(self.ctx, state, address, len(buf)))
        return None if n < 0 else buf[:n].tolist()  # type: ignore[no-any-return]

    def provide_live(self) -> None:
        """After NEED_LIVE: decide (in Python) the product tuple the C search gave up on."""
        decide = self._decide()
        assert decide is not None  # (its source is alive while a DFA builds from this context)
        buf = np.zeros(len(self.parts), dtype=np.int32)
        _LIB.sg_union_need_tuple(self.ctx, buf.ctypes.data)
        key = tuple(buf.tolist())
        live, found = decide(key)
        # every tuple the search settled (the path to acceptance, or all it visited): the C
        # searches that follow stop at them
        self.settle([key, *found], live)

    def provide_guide(self) -> None:
        """After NEED_GUIDE: hand C each component's distances to acceptance (`Distances`,
        or None for a component too big to measure), which prune a product's searches."""
        assert self._distances is not None
        for i, part in enumerate(self.parts):
            found = self._distances(part)
            n = 0 if found is None or not found.shortest else max(found.shortest) + 1
            shortest = np.full(max(n, 1), -1, dtype=np.int32)
            longest = np.full(max(n, 1), -1, dtype=np.int32)
            if n:
                shortest[list(found.shortest)] = list(found.shortest.values())
                if found.longest:
                    longest[list(found.longest)] = list(found.longest.values())
            p_short, p_long = addresses(shortest, longest)
            if _LIB.sg_union_set_distances(self.ctx, i, p_short, p_long, n) != 0:
                raise MemoryError("the C product ran out of memory")

    def extra_bytes(self) -> int:
        """Bytes the context holds beyond the states: a product's liveness memo and search
        scratch (tuples known live or dead, the frontier, the distances)."""
        return int(_LIB.sg_union_search_bytes(self.ctx)) if self.mode == PRODUCT else 0

    def is_live(self, key: tuple[int, ...]) -> bool:
        """Whether a product tuple is live, decided as the C rows decide their targets."""
        arr = np.array(key, dtype=np.int32)
        while (found := int(_LIB.sg_union_live(self.ctx, arr.ctypes.data))) < 0:
            if not self.answer(-found):
                raise MemoryError("the C product ran out of memory")
        return found == 1

    def settle(self, tuples: Collection[tuple[int, ...]], live: bool) -> None:
        """Tell a product's C side that `tuples` are live (or dead)."""
        if not tuples:
            return
        arr = np.array(list(tuples), dtype=np.int32).reshape(len(tuples), len(self.parts))
        if _LIB.sg_union_set_live(self.ctx, arr.ctypes.data, len(arr), int(live)) != 0:
            raise MemoryError("the C product ran out of memory")

    def intern(self, key: Any) -> int:
        """The id of a (non-empty) key, created if new: id or ``-1 - code``."""
        if self.mode == PRODUCT:
            elements = [i << 32 | s for i, s in enumerate(key)]
        elif self.mode == COUNTED:
            k, q = key
            elements = [k << 32 | (q & _BETWEEN_UNITS)]
        else:
            elements = sorted([i << 32 | s for i, s in key])
        if _UNION_INTERN is not None:  # (no array, no ctypes call)
            found: int = _UNION_INTERN(self.ctx, elements)
            return found
        arr = np.fromiter(elements, np.int64, len(elements))
        return int(_LIB.sg_union_intern(self.ctx, addresses(arr)[0], len(arr)))

    def key(self, state: int) -> UnionKey | SequenceKey | CountedKey | tuple[int, ...]:
        """The key of ``state`` (as ``UnionSource``, ``SequenceSource``, ``CountedSource`` or
        ``ProductSource`` writes it)."""
        elements = self._elements(state)
        if self.mode == COUNTED:
            k, q = elements[0] >> 32, elements[0] & _BETWEEN_UNITS
            return (k, -1 if q == _BETWEEN_UNITS else q)
        if self.mode == PRODUCT:
            return tuple(e & 0xFFFFFFFF for e in elements)
        pairs = ((e >> 32, e & 0xFFFFFFFF) for e in elements)
        return frozenset(pairs) if self.mode == SEQUENCE else tuple(pairs)
