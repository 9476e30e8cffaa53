"""ctypes binding of the C trie walk (`_native.c`), with a clean fallback when it is missing.

The extension is optional: `pip install` builds it when a C compiler is present; without it (or
with `STRUCTGEN_NATIVE=0`) the numpy walker in `_walker.py` does the same work, more slowly.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import threading
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["NativeWalk", "native_available"]


class _WalkState(ctypes.Structure):
    _fields_ = [
        ("range", ctypes.c_int64),
        ("next", ctypes.c_int64),
        ("valid", ctypes.c_int64),
        ("n_events", ctypes.c_int64),
        ("dead_event", ctypes.c_int64),
    ]


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
        ctypes.c_void_p,  # blob
        ctypes.c_void_p,  # offsets
        ctypes.c_void_p,  # lengths
        ctypes.c_void_p,  # lcp
        ctypes.c_void_p,  # ids
        ctypes.c_void_p,  # skip0
        ctypes.c_void_p,  # range lo
        ctypes.c_void_p,  # range hi
        ctypes.c_void_p,  # range base
        ctypes.c_int64,  # ranges
        ctypes.c_int32,  # start state
        ctypes.c_void_p,  # table
        ctypes.c_void_p,  # accepting (nullable)
        ctypes.c_void_p,  # stack
        ctypes.POINTER(_WalkState),
        ctypes.c_void_p,  # mask words
        ctypes.c_void_p,  # event lo
        ctypes.c_void_p,  # event hi
        ctypes.c_void_p,  # event cut
        ctypes.c_void_p,  # event state
        ctypes.c_int64,  # event capacity
        ctypes.POINTER(ctypes.c_int32),  # need
    ]
    return fn


_FN = _load()


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
        self._static = (
            self.blob.ctypes.data,
            self.offsets.ctypes.data,
            self.lengths.ctypes.data,
            self.lcp.ctypes.data,
            self.ids.ctypes.data,
            self.skip0.ctypes.data,
        )
        self._scratch = threading.local()

    def _buffers(self) -> tuple[Any, ...]:
        """Per-thread scratch arrays (stack and event buffers) and their addresses."""
        bufs = getattr(self._scratch, "bufs", None)
        if bufs is None:
            size = max(self.n, 1)
            stack = np.empty(self.max_length + 2, dtype=np.int32)
            ev_lo = np.empty(size, dtype=np.int64)
            ev_hi = np.empty(size, dtype=np.int64)
            ev_cut = np.empty(size, dtype=np.int32)
            ev_state = np.empty(size, dtype=np.int32)
            arrays = (stack, ev_lo, ev_hi, ev_cut, ev_state)
            bufs = (*arrays, *(a.ctypes.data for a in arrays))
            self._scratch.bufs = bufs
        return bufs  # type: ignore[no-any-return]

    def walk(
        self,
        dfa: Any,
        state: int,
        *,
        words: npt.NDArray[np.uint32] | None = None,
        ranges: list[tuple[int, int, int]] | None = None,
        boundaries: bool = False,
    ) -> tuple[npt.NDArray[np.uint32], list[tuple[int, int, int, int]]]:
        """Set in `words` the bits of the tokens that stay alive from `state`.

        `ranges` lists `(lo, hi, base)`: walk the tokens `[lo, hi)` (which share their first
        `base` bytes) reading from byte `base`; default: the whole vocabulary from byte 0.
        Returns `words` and the boundary events `(lo, hi, cut, state before)`.
        """
        assert _FN is not None
        if words is None:
            words = np.zeros(self.words, dtype=np.uint32)
        spans = ranges if ranges is not None else [(0, self.n, 0)]
        r = np.array(spans, dtype=np.int64).reshape(-1, 3)
        r_lo = np.ascontiguousarray(r[:, 0])
        r_hi = np.ascontiguousarray(r[:, 1])
        r_base = r[:, 2].astype(np.int32)
        _, ev_lo, ev_hi, ev_cut, ev_state, p_stack, p_lo, p_hi, p_cut, p_state = self._buffers()
        ws = _WalkState(0, -1, 0, 0, -1)
        need = ctypes.c_int32(0)
        cap = self.n if boundaries else 0
        words_ptr = words.ctypes.data
        dfa.row(state)
        while True:
            table = dfa.table
            accepting = dfa.accepting if boundaries else None
            result = _FN(
                *self._static,
                r_lo.ctypes.data,
                r_hi.ctypes.data,
                r_base.ctypes.data,
                len(r),
                state,
                table.ctypes.data,
                accepting.ctypes.data if accepting is not None else None,
                p_stack,
                ctypes.byref(ws),
                words_ptr,
                p_lo,
                p_hi,
                p_cut,
                p_state,
                cap,
                ctypes.byref(need),
            )
            if result < 0:
                break
            dfa.row(int(need.value))
        k = ws.n_events
        events = list(
            zip(
                ev_lo[:k].tolist(),
                ev_hi[:k].tolist(),
                ev_cut[:k].tolist(),
                ev_state[:k].tolist(),
            )
        )
        return words, events
