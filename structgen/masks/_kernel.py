"""ctypes binding of the C trie walk (`_native.c`), with a clean fallback when it is missing.

The extension is optional: `pip install` builds it when a C compiler is present; without it (or
with `STRUCTGEN_NATIVE=0`) the numpy walker in `_walker.py` does the same work, more slowly.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import threading
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = ["Events", "NativeWalk", "native_available"]


class _WalkState(ctypes.Structure):
    _fields_ = [
        ("range", ctypes.c_int64),
        ("next", ctypes.c_int64),
        ("valid", ctypes.c_int64),
        ("n_events", ctypes.c_int64),
        ("dead_event", ctypes.c_int64),
    ]


class _VocabView(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_void_p) for name in ("blob", "offsets", "lengths", "lcp", "ids", "skip0")
    ]


class _DfaView(ctypes.Structure):
    _fields_ = [("table", ctypes.c_void_p), ("accepting", ctypes.c_void_p)]


class _EventsOut(ctypes.Structure):
    _fields_ = [
        ("lo", ctypes.c_void_p),
        ("hi", ctypes.c_void_p),
        ("cut", ctypes.c_void_p),
        ("state", ctypes.c_void_p),
        ("cap", ctypes.c_int64),
    ]


_ROW_BUILDER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32)
# Rows built per call back from C beyond the one needed (breadth first from it).
_ROWS_PER_CALLBACK = 0


def _load() -> Any:
    if os.environ.get("STRUCTGEN_NATIVE", "1") == "0":
        return None
    spec = importlib.util.find_spec("structgen.masks._native")
    if spec is None or spec.origin is None or not spec.origin.endswith((".so", ".pyd")):
        return None
    try:
        lib = ctypes.CDLL(spec.origin)
    except OSError:
        return None
    fn = lib.sg_walk
    fn.restype = ctypes.c_int64
    fn.argtypes = [
        ctypes.POINTER(_VocabView),
        ctypes.c_void_p,  # range lo
        ctypes.c_void_p,  # range hi
        ctypes.c_void_p,  # range base
        ctypes.c_int64,  # number of ranges
        ctypes.c_int32,  # start state
        ctypes.POINTER(_DfaView),
        _ROW_BUILDER,
        ctypes.c_void_p,  # stack
        ctypes.POINTER(_WalkState),
        ctypes.c_void_p,  # mask words
        ctypes.POINTER(_EventsOut),
    ]
    return fn


_FN = _load()


class Events(NamedTuple):
    """Boundary events of a walk, as arrays: tokens `[lo, hi)` (walk order) die at byte `cut`
    in DFA state `state`, where the automaton accepts. Also used as walk ranges."""

    lo: npt.NDArray[np.int64]
    hi: npt.NDArray[np.int64]
    cut: npt.NDArray[np.int32]
    state: npt.NDArray[np.int32]

    def __len__(self) -> int:  # type: ignore[override]
        return len(self.lo)

    def groups(self) -> list[tuple[int, Events]]:
        """The events split by `state`: `(state, events)` pairs."""
        if not len(self.lo):
            return []
        order = np.argsort(self.state, kind="stable")
        states = self.state[order]
        cuts = np.flatnonzero(np.diff(states)) + 1
        out = []
        for part in np.split(order, cuts):
            out.append(
                (
                    int(self.state[part[0]]),
                    Events(self.lo[part], self.hi[part], self.cut[part], self.state[part]),
                )
            )
        return out


def native_available() -> bool:
    """Whether the compiled trie walk is in use."""
    return _FN is not None


class NativeWalk:
    """The lexicographic token arrays of one vocabulary, ready for `sg_walk`."""

    def __init__(self, trie: Any, vocab_size: int) -> None:
        lex = trie.lexicographic_arrays()
        self.blob: npt.NDArray[np.uint8] = lex["blob"]
        self.offsets: npt.NDArray[np.int64] = lex["offsets"]
        self.lengths: npt.NDArray[np.int32] = lex["lengths"]
        self.lcp: npt.NDArray[np.int32] = lex["lcp"]
        self.ids: npt.NDArray[np.int32] = lex["ids"]
        self.skip0: npt.NDArray[np.int64] = lex["skip0"]
        self.n = len(self.ids)
        self.max_length = int(self.lengths.max()) if self.n else 0
        self.words = (vocab_size + 31) // 32
        self._view = _VocabView(
            self.blob.ctypes.data,
            self.offsets.ctypes.data,
            self.lengths.ctypes.data,
            self.lcp.ctypes.data,
            self.ids.ctypes.data,
            self.skip0.ctypes.data,
        )
        self._scratch = threading.local()
        self._whole = (
            np.zeros(1, dtype=np.int64),
            np.full(1, self.n, dtype=np.int64),
            np.zeros(1, dtype=np.int32),
        )

    def _buffers(self) -> tuple[Any, ...]:
        """Per-thread scratch: the stack, event buffers and the events descriptor."""
        bufs = getattr(self._scratch, "bufs", None)
        if bufs is None:
            size = max(self.n, 1)
            stack = np.empty(self.max_length + 2, dtype=np.int32)
            ev_lo = np.empty(size, dtype=np.int64)
            ev_hi = np.empty(size, dtype=np.int64)
            ev_cut = np.empty(size, dtype=np.int32)
            ev_state = np.empty(size, dtype=np.int32)
            out = _EventsOut(
                ev_lo.ctypes.data, ev_hi.ctypes.data, ev_cut.ctypes.data, ev_state.ctypes.data, 0
            )
            bufs = (stack, ev_lo, ev_hi, ev_cut, ev_state, out, stack.ctypes.data)
            self._scratch.bufs = bufs
        return bufs  # type: ignore[no-any-return]

    def walk(
        self,
        dfa: Any,
        state: int,
        *,
        words: npt.NDArray[np.uint32] | None = None,
        ranges: Events | None = None,
        boundaries: bool = False,
    ) -> tuple[npt.NDArray[np.uint32], Events]:
        """Set in `words` the bits of the tokens that stay alive from `state`.

        `ranges` is `Events` whose `lo`, `hi`, `cut` say: walk the tokens `[lo, hi)` (which
        share their first `cut` bytes) reading from byte `cut`; default: the whole vocabulary
        from byte 0. Returns `words` and the boundary events.
        """
        assert _FN is not None
        if words is None:
            words = np.zeros(self.words, dtype=np.uint32)
        if ranges is None:
            r_lo, r_hi, r_base = self._whole
        else:
            r_lo = np.ascontiguousarray(ranges.lo, dtype=np.int64)
            r_hi = np.ascontiguousarray(ranges.hi, dtype=np.int64)
            r_base = np.ascontiguousarray(ranges.cut, dtype=np.int32)
        _, ev_lo, ev_hi, ev_cut, ev_state, out, p_stack = self._buffers()
        out.cap = self.n if boundaries else 0
        ws = _WalkState(0, -1, 0, 0, -1)
        dfa.row(state)
        view = _DfaView(dfa.table_address, dfa.accepting_address)
        failure: list[BaseException] = []

        def build(need: int) -> int:
            try:
                dfa.build_around(int(need), _ROWS_PER_CALLBACK)
                view.table = dfa.table_address
                view.accepting = dfa.accepting_address
                return 0
            except BaseException as exc:  # re-raised below, outside the C frame
                failure.append(exc)
                return -1

        callback = _ROW_BUILDER(build)
        result = _FN(
            ctypes.byref(self._view),
            r_lo.ctypes.data,
            r_hi.ctypes.data,
            r_base.ctypes.data,
            len(r_lo),
            state,
            ctypes.byref(view),
            callback,
            p_stack,
            ctypes.byref(ws),
            words.ctypes.data,
            ctypes.byref(out),
        )
        if result != 0:
            raise failure[0] if failure else RuntimeError("the C trie walk failed")
        k = ws.n_events
        events = Events(ev_lo[:k].copy(), ev_hi[:k].copy(), ev_cut[:k].copy(), ev_state[:k].copy())
        return words, events
