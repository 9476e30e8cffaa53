"""ctypes binding of the C subset construction (`_subset.c`), with a clean fallback.

The extension is optional like the C trie walk: without it (or with `STRUCTGEN_NATIVE=0`, or an
older build that lacks these functions) `NFASource.expand` builds the rows in Python. Both give
the same DFA: the states are the same element sets (see `NFASource`), only the ids may differ.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt

from structgen.automata.nfa import ByteNFA

__all__ = ["BUDGET", "GROW", "LIMIT", "NativeSubset", "native_subset_available"]

OK, GROW, LIMIT, BUDGET, NOMEM, BAD_STATE = range(6)


class _Header(ctypes.Structure):
    """The first fields of the C context (`sg_subset`)."""

    _fields_ = [("n_states", ctypes.c_int64), ("capacity", ctypes.c_int64)]


_P = ctypes.c_void_p


def _load() -> Any:
    if os.environ.get("STRUCTGEN_NATIVE", "1") == "0":
        return None
    spec = importlib.util.find_spec("structgen.automata._subset")
    if spec is None or spec.origin is None or not spec.origin.endswith((".so", ".pyd")):
        return None
    try:
        lib = ctypes.CDLL(spec.origin)
        lib.sg_subset_walk_build  # noqa: B018 - present in this build?
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
    lib.sg_subset_set_table.restype = None
    lib.sg_subset_set_table.argtypes = [_P, _P, _P, ctypes.c_int64]
    lib.sg_subset_budget_checked.restype = None
    lib.sg_subset_budget_checked.argtypes = [_P]
    lib.sg_subset_key.restype = ctypes.c_int64
    lib.sg_subset_key.argtypes = [_P, ctypes.c_int32, _P, ctypes.c_int64]
    return lib


_LIB = _load()
#: the address of `sg_subset_walk_build`, for the C trie walk (0: unavailable)
WALK_BUILD: int = (
    ctypes.cast(_LIB.sg_subset_walk_build, ctypes.c_void_p).value or 0 if _LIB is not None else 0
)


def native_subset_available() -> bool:
    """Whether regex DFA rows are built in C."""
    return _LIB is not None


class NativeSubset:
    """One regex DFA's C context: the NFA's arrays, the interned element sets, the builder.

    The DFA's table and accepting arrays are owned by ``ByteDFA`` and installed with
    ``set_table``; the C side writes rows and new states' acceptance into them.
    """

    def __init__(
        self, nfa: ByteNFA, p: int, byte_classes: npt.NDArray[np.uint8], max_states: int
    ) -> None:
        assert _LIB is not None
        n = len(nfa.kind)
        pool = nfa.pool
        moves = np.zeros(max(len(pool), 1) + 1, dtype=np.int32)
        if pool:
            np.cumsum(np.fromiter(map(len, pool), np.int32, count=len(pool)), out=moves[1:])
        total = int(moves[-1])
        flat = np.fromiter(chain.from_iterable(chain.from_iterable(pool)), np.int32, 3 * total)
        flat = flat.reshape(total, 3)
        eps_off = np.zeros(n + 1, dtype=np.int32)
        if n:
            np.cumsum(np.fromiter(map(len, nfa.eps), np.int32, count=n), out=eps_off[1:])
        eps = np.fromiter(chain.from_iterable(nfa.eps), np.int32, int(eps_off[-1]))
        self._arrays: tuple[npt.NDArray[Any], ...] = (
            np.array(nfa.kind, dtype=np.int8),
            np.array(nfa.live, dtype=np.uint8),
            np.array(nfa.node, dtype=np.int32),
            np.array(nfa.next, dtype=np.int32),
            eps_off,
            eps if len(eps) else np.zeros(1, dtype=np.int32),
            moves,
            np.ascontiguousarray(flat[:, 0]) if total else np.zeros(1, dtype=np.int32),
            np.ascontiguousarray(flat[:, 1]) if total else np.zeros(1, dtype=np.int32),
            np.ascontiguousarray(flat[:, 2]) if total else np.zeros(1, dtype=np.int32),
            np.ascontiguousarray(byte_classes, dtype=np.uint8),
        )
        a = [x.ctypes.data for x in self._arrays]
        ctx = _LIB.sg_subset_new(n, *a[:6], p, *a[6:], max_states)
        if not ctx:
            raise MemoryError("could not allocate the C subset construction")
        self.ctx: int = ctx
        self._lib = _LIB  # keep the library for __del__ at interpreter exit
        self._header = _Header.from_address(ctx)

    def __del__(self) -> None:
        ctx = getattr(self, "ctx", 0)
        if ctx:
            self.ctx = 0
            self._lib.sg_subset_free(ctx)

    @property
    def num_states(self) -> int:
        return int(self._header.n_states)

    def set_table(self, table: npt.NDArray[np.int32], accepting: npt.NDArray[np.bool_]) -> None:
        """Install new (``-2``/False filled) arrays; the states so far are copied into them."""
        assert table.shape[0] == accepting.shape[0]
        _LIB.sg_subset_set_table(self.ctx, table.ctypes.data, accepting.ctypes.data, table.shape[0])

    def start(self, nfa_state: int) -> int:
        """Create the start state: its id, -1 for an empty language, or ``-1 - code``."""
        return int(_LIB.sg_subset_start(self.ctx, nfa_state))

    def build(self, state: int) -> int:
        """Build ``state``'s row: OK or a stop code (see `_subset.c`)."""
        return int(_LIB.sg_subset_build(self.ctx, state))

    def budget_checked(self) -> None:
        _LIB.sg_subset_budget_checked(self.ctx)

    def intern(self, elements: frozenset[int]) -> int:
        """The id of a (non-empty) element set, created if new: id or ``-1 - code``."""
        arr = np.array(sorted(elements), dtype=np.int64)
        return int(_LIB.sg_subset_intern(self.ctx, arr.ctypes.data, len(arr)))

    def key(self, state: int) -> frozenset[int]:
        """The element set of ``state`` (as ``NFASource`` writes it)."""
        buf = np.empty(64, dtype=np.int64)
        n = int(_LIB.sg_subset_key(self.ctx, state, buf.ctypes.data, len(buf)))
        if n < 0:
            raise IndexError(f"state {state} has not been created")
        if n > len(buf):
            buf = np.empty(n, dtype=np.int64)
            n = int(_LIB.sg_subset_key(self.ctx, state, buf.ctypes.data, len(buf)))
        return frozenset(buf[:n].tolist())
