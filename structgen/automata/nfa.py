"""Regex AST -> a trimmed byte-level NFA.

The NFA has three kinds of states: *split* (epsilon moves to a list of states), *consume* (read
one character of a code point set, or one literal string, then go to ``next``) and the single
*match* state. A consume state does not own byte transitions: it points at the root of a shared
UTF-8 ``ByteDag`` for its set (see ``utf8.py``) or at a chain of single-byte nodes spelling its
string. All DAGs of one NFA live in one node *pool*; the subset construction in ``dfa.py``
tracks positions as ``(pool node, next NFA state)`` pairs. So ``\\w{1,100}`` needs 100
consume states plus one copy of the ~300-node ``\\w`` DAG, not 100 copies of it.

Counted repetitions are expanded by copying (``x{2,4}`` = ``x x (x (x)?)?``), with the optional
copies nested so each epsilon closure stays small. The state count is computed from the AST
before anything is built, so an oversized pattern fails at once with ``RegexError`` naming
``max_nfa_states``. After building, states that cannot reach the match state are trimmed, so
every non-empty set of NFA states the DFA builds can still reach acceptance.
"""

from __future__ import annotations

import hashlib
import struct
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from structgen._budget import check_budget
from structgen._lru import LRU
from structgen.automata import intervals as iv
from structgen.automata.regex_syntax import (
    Alternation,
    CharClass,
    Concat,
    Empty,
    Node,
    Repeat,
    String,
)
from structgen.automata.utf8 import byte_dag
from structgen.errors import RegexError

__all__ = ["CONSUME", "MATCH", "SPLIT", "AutomataLimits", "ByteNFA", "build_nfa", "nfa_size"]

SPLIT, CONSUME, MATCH = 0, 1, 2


@dataclass(frozen=True, slots=True)
class AutomataLimits:
    """Resource limits for automaton construction.

    ``max_nfa_states``: NFA states plus UTF-8 DAG nodes (for ``alternatives``: total option bytes);
    exceeding it raises ``RegexError`` (``LimitExceededError`` where there is no pattern).
    ``max_dfa_states``: DFA states built lazily, and product states an intersection's liveness
    search may visit; exceeding it raises ``LimitExceededError(limit="max_dfa_states")``.
    """

    max_nfa_states: int = 200_000
    max_dfa_states: int = 50_000
    #: the hash, computed once: the limits are part of every shared automaton's cache keys,
    #: hashed a few hundred times per schema compile (the generated hash is Python code)
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_nfa_states < 1 or self.max_dfa_states < 1:
            raise ValueError("AutomataLimits values must be positive")
        object.__setattr__(self, "_hash", hash((self.max_nfa_states, self.max_dfa_states)))

    def __hash__(self) -> int:
        return self._hash


class ByteNFA:
    """A trimmed NFA over bytes (see the module docstring).

    ``kind[s]`` is SPLIT, CONSUME or MATCH; ``eps[s]`` the targets of a split (only live ones);
    ``node[s]``/``next[s]`` a consume state's DAG root in ``pool`` and successor. ``pool[k]`` lists
    DAG node ``k``'s transitions ``(lo, hi, child)``, ``child == -1`` meaning the character is
    complete. ``live[s]``: state ``s`` can reach the match state.
    """

    __slots__ = (
        "_arrays", "_eps", "_kind", "_live", "_next", "_node", "_raw", "match", "pool", "ranges",
        "start",
    )  # fmt: skip

    def __init__(
        self,
        kind: list[int] | None,
        eps: Sequence[tuple[int, ...]] | list[list[int]] | None,
        node: list[int] | None,
        nxt: list[int] | None,
        pool: Sequence[tuple[tuple[int, int, int], ...]],
        start: int,
        match: int,
        ranges: frozenset[tuple[int, int]],
        *,
        live: list[bool] | None = None,
        arrays: tuple[Any, ...] | None = None,
        raw: tuple[bytes, ...] | None = None,
    ) -> None:
        """With `arrays` (built in C) the lists may be None: they are read from the arrays
        when first asked for (the C subset construction reads the arrays, and a deferred
        terminal's start comes from C: most NFAs built in C never need them). `raw`: the
        arrays as C wrote them (bytes, in `arrays`' order), made arrays only if asked for."""
        self.ranges = ranges
        self._kind = kind
        self._eps: Any = eps
        self._node = node
        self._next = nxt
        self.pool = pool
        self.start = start
        self.match = match
        self._arrays = arrays
        self._raw = raw
        if live is None and arrays is None and raw is None:
            live = self._trim()
        self._live = live

    @property
    def arrays(self) -> tuple[Any, ...] | None:
        """(kind, live, node, next, eps offsets, eps) as numpy arrays when built in C."""
        found = self._arrays
        if found is None and self._raw is not None:
            found = self._arrays = tuple(
                np.frombuffer(data, dtype=t)
                for data, t in zip(self._raw, _ARRAY_TYPES, strict=True)
            )
        return found

    # (lists for the Python subset construction and the closure of a start in Python)

    @property
    def kind(self) -> list[int]:
        found = self._kind
        if found is None:
            found = self._kind = self.arrays[0].tolist()  # type: ignore[index]
        return found

    @property
    def live(self) -> list[bool]:
        found = self._live
        if found is None:
            found = self._live = self.arrays[1].astype(bool).tolist()  # type: ignore[index]
        return found

    @property
    def node(self) -> list[int]:
        found = self._node
        if found is None:
            found = self._node = self.arrays[2].tolist()  # type: ignore[index]
        return found

    @property
    def next(self) -> list[int]:
        found = self._next
        if found is None:
            found = self._next = self.arrays[3].tolist()  # type: ignore[index]
        return found

    @property
    def eps(self) -> Any:
        found = self._eps
        if found is None:
            assert self.arrays is not None
            off, flat = self.arrays[4], self.arrays[5]
            found = self._eps = _Splits(off.tolist(), flat[: int(off[-1])].tolist())
        return found

    def __len__(self) -> int:
        if self._raw is not None:
            return len(self._raw[0])  # (kind: one byte a state)
        return len(self.kind) if self.arrays is None else len(self.arrays[0])

    def _trim(self) -> list[bool]:
        n = len(self.kind)
        rev: list[list[int]] = [[] for _ in range(n)]
        for s in range(n):
            k = self.kind[s]
            if k == SPLIT:
                for t in self.eps[s]:
                    rev[t].append(s)
            elif k == CONSUME and self.pool[self.node[s]]:
                rev[self.next[s]].append(s)
        live = [False] * n
        live[self.match] = True
        stack = [self.match]
        while stack:
            t = stack.pop()
            for s in rev[t]:
                if not live[s]:
                    live[s] = True
                    stack.append(s)
        for s in range(n):
            if self.kind[s] == SPLIT:
                self.eps[s] = tuple(t for t in self.eps[s] if live[t])
        return live

    def byte_ranges(self) -> frozenset[tuple[int, int]]:
        """The distinct byte ranges on any DAG transition (input to byte classes)."""
        return self.ranges


@lru_cache(maxsize=4096)
def _dag_ranges(ranges: iv.Ranges) -> frozenset[tuple[int, int]]:
    return frozenset((lo, hi) for moves in byte_dag(ranges).nodes for lo, hi, _ in moves)


@lru_cache(maxsize=1 << 16)
def nfa_size(node: Node) -> int:
    """The number of NFA states ``build_nfa`` creates for ``node`` (without the match state).

    Memoised: nodes share subtrees and cache their hashes, and both the compile's planning
    (counted repetitions) and the builder's limit check ask."""
    if isinstance(node, Empty):
        return 0
    if isinstance(node, (String, CharClass)):
        return 1
    if isinstance(node, Concat):
        return sum(nfa_size(x) for x in node.items)
    if isinstance(node, Alternation):
        return sum(nfa_size(x) for x in node.items) + 1
    if isinstance(node, Repeat):
        e = nfa_size(node.item)
        if node.max is None:
            return max(node.min, 1) * e + 1
        return node.min * e + (node.max - node.min) * (e + 1)
    raise TypeError(f"not a regex AST node: {node!r}")


class _Piece:
    """A byte DAG (a code point set's, or a string's chain of bytes) with child ids relative to
    its first node: an NFA's pool is made of pieces, placed at offsets, and the same piece
    serves every NFA that reads the same set.

    Held as it was made — a string's bytes (`spelled`) or the DAG's node tuples (`dag`) —
    which the C join reads directly (`join_pieces`); the arrays (`counts`, `table`, `lo`) are
    made only where Python joins the pool. A compile makes the pieces of every deferred
    terminal (their sizes and bytes decide its byte classes and limits), and a dozen small
    numpy calls each, on cold caches, were a tenth of a small grammar's compile."""

    __slots__ = ("_arrays", "dag", "size", "spelled")

    def __init__(self, nodes: tuple[tuple[tuple[int, int, int], ...], ...]) -> None:
        #: the nodes as tuples of (lo, hi, child) moves (None: a string's, see `spelled`)
        self.dag: tuple[tuple[tuple[int, int, int], ...], ...] | None = nodes
        #: a string's UTF-8 bytes, one node each, the last completing the character
        self.spelled: bytes | None = None
        self.size = len(nodes)
        self._arrays: tuple[npt.NDArray[np.int32], ...] | None = None

    @classmethod
    def chain(cls, data: bytes) -> _Piece:
        """A string's bytes, one node each (the last completes the character)."""
        piece = cls.__new__(cls)
        piece.dag = None
        piece.spelled = data
        piece.size = len(data)
        piece._arrays = None
        return piece

    @property
    def counts(self) -> npt.NDArray[np.int32]:
        """int32 [nodes]: moves per node."""
        return self.arrays()[0]

    @property
    def table(self) -> npt.NDArray[np.int32]:
        """int32 [moves, 3]: lo, hi, child of each move."""
        return self.arrays()[1]

    @property
    def lo(self) -> npt.NDArray[np.int32]:
        """int32 [moves]: each move's first byte."""
        return self.arrays()[2]

    def arrays(self) -> tuple[npt.NDArray[np.int32], ...]:
        """(counts, table, lo), made on the first ask."""
        made = self._arrays
        if made is not None:
            return made
        data = self.spelled
        if data is not None:
            n = len(data)
            lo = np.frombuffer(data, dtype=np.uint8).astype(np.int32)
            counts = np.ones(n, dtype=np.int32)
            table = np.empty((n, 3), dtype=np.int32)
            table[:, 0] = lo
            table[:, 1] = lo
            table[:, 2] = np.arange(1, n + 1, dtype=np.int32)
            if n:
                table[n - 1, 2] = -1
        else:
            nodes = self.nodes
            counts = np.fromiter(map(len, nodes), np.int32, len(nodes))
            flat = [x for moves in nodes for move in moves for x in move]
            table = np.array(flat, dtype=np.int32).reshape(-1, 3)
            lo = np.ascontiguousarray(table[:, 0])
        made = self._arrays = (counts, table, lo)
        return made

    @property
    def nodes(self) -> tuple[tuple[tuple[int, int, int], ...], ...]:
        """The nodes as tuples of (lo, hi, child) moves."""
        if self.dag is None:
            data = self.spelled or b""
            last = len(data) - 1
            self.dag = tuple(((b, b, -1 if i == last else i + 1),) for i, b in enumerate(data))
        return self.dag

    def placed(self, base: int) -> list[tuple[tuple[int, int, int], ...]]:
        """The nodes with child ids moved by `base` (-1, a complete character, stays)."""
        return [tuple((lo, hi, c + base if c >= 0 else -1) for lo, hi, c in m) for m in self.nodes]


@lru_cache(maxsize=4096)
def _dag_piece(ranges: iv.Ranges) -> _Piece:
    return _Piece(byte_dag(ranges).nodes)


@lru_cache(maxsize=4096)
def _dag_leaf(ranges: iv.Ranges) -> tuple[_Piece, frozenset[tuple[int, int]]]:
    """A code point set's piece and its byte ranges in one lookup (a set's ranges are hashed
    afresh by each cache, and a class like `\\w` has hundreds)."""
    return _dag_piece(ranges), _dag_ranges(ranges)


@lru_cache(maxsize=4096)
def _string_piece(text: str) -> _Piece:
    return _spelled_piece(text)


def _spelled_piece(text: str) -> _Piece:
    """A string's piece (uncached: a large alternation's thousand words are made at once)."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a surrogate: no UTF-8 string can match
        return _Piece(((),))
    return _Piece.chain(data)


#: from this many strings on, a program's string pieces are not cached one by one (the
#: program keeps its pieces)
_BATCH_FROM = 8


_EXTEND_IN_NUMPY = 64  # leaves placed with numpy from this many on (`Pool.extend`)


class Pool(Sequence[tuple[tuple[int, int, int], ...]]):
    """An NFA's DAG nodes: pieces placed one after another. C reads it as arrays (`arrays`),
    joined from the pieces' own; the nodes as tuples are made only when Python asks."""

    __slots__ = ("_joined", "_nodes", "bases", "pieces", "size")

    def __init__(self) -> None:
        self.pieces: list[_Piece] = []
        self.bases: list[int] = []
        self.size = 0
        self._nodes: list[tuple[tuple[int, int, int], ...]] | None = None
        self._joined: tuple[npt.NDArray[Any], ...] | None = None

    def add(self, piece: _Piece) -> int:
        """Place `piece` at the end; its first node's id."""
        base = self.size
        self.pieces.append(piece)
        self.bases.append(base)
        self.size += piece.size
        self._nodes = None
        self._joined = None
        return base

    def extend(self, pieces: Sequence[_Piece], sizes: Sequence[int]) -> list[int]:
        """Place `pieces` (of `sizes` nodes) at the end; their first nodes' ids."""
        if len(sizes) > _EXTEND_IN_NUMPY:
            counts = np.asarray(sizes, dtype=np.int64)
            bases: list[int] = (np.cumsum(counts) - counts + self.size).tolist()
            self.size += int(counts.sum())
        else:  # (a regex's few leaves: four numpy calls cost more than the loop)
            bases, size = [], self.size
            for n in sizes:
                bases.append(size)
                size += n
            self.size = size
        self.pieces.extend(pieces)
        self.bases.extend(bases)
        self._nodes = None
        self._joined = None
        return bases

    def _join(self) -> tuple[npt.NDArray[Any], ...] | None:
        """(offsets, lo, hi, child, nonempty) joined in C (`join_pieces`), once per pool; None
        without the extension. lo/hi/child have at least one entry, nonempty too."""
        joined = self._joined
        if joined is None and _JOIN_PIECES is not None:
            parts = _JOIN_PIECES(self.pieces, self.bases, self.size)
            types = (np.int32, np.int32, np.int32, np.int32, np.uint8)
            joined = self._joined = tuple(
                np.frombuffer(b, dtype=t) for b, t in zip(parts, types, strict=True)
            )
        return joined

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: Any) -> Any:
        nodes = self._nodes
        if nodes is None:
            nodes = []
            for piece, base in zip(self.pieces, self.bases, strict=True):
                nodes.extend(piece.placed(base))
            self._nodes = nodes
        return nodes[index]

    def nonempty(self) -> npt.NDArray[np.uint8]:
        """Per node: whether it has a transition (at least one entry where the extension
        joins the pool)."""
        joined = self._join()
        if joined is not None:
            return joined[4]
        if not self.pieces:
            return np.zeros(0, dtype=np.uint8)
        return (np.concatenate([p.counts for p in self.pieces]) > 0).view(np.uint8)

    def arrays(self) -> tuple[npt.NDArray[np.int32], ...]:
        """(moves offsets per node, then lo, hi, child per move), child ids placed: a few
        joins whatever the number of pieces, or one C pass (then lo, hi and child have at
        least one entry: the total is ``offsets[-1]``)."""
        joined = self._join()
        if joined is not None:
            return joined[0], joined[1], joined[2], joined[3]
        offsets = np.zeros(max(self.size, 1) + 1, dtype=np.int32)
        if not self.pieces:
            empty = np.zeros(0, dtype=np.int32)
            return offsets, empty, empty, empty
        pieces = self.pieces
        np.cumsum(np.concatenate([p.counts for p in pieces]), out=offsets[1 : self.size + 1])
        table = np.concatenate([p.table for p in pieces])
        lo, hi, child = (np.ascontiguousarray(table[:, k]) for k in range(3))
        moves = np.fromiter((len(p.table) for p in pieces), np.int64, len(pieces))
        base = np.repeat(np.array(self.bases, dtype=np.int32), moves)
        np.add(child, base, out=child, where=child >= 0)
        return offsets, lo, hi, child


class _Builder:
    def __init__(self, max_states: int | None = None, pattern: str = "") -> None:
        self.max_states = max_states
        self.pattern = pattern
        self.kind: list[int] = []
        self.eps: list[list[int]] = []
        self.node: list[int] = []
        self.next: list[int] = []
        self.pool = Pool()
        self.roots: dict[iv.Ranges, int] = {}
        self.string_roots: dict[str, int] = {}
        self.ranges: set[tuple[int, int]] = set()
        self.string_bytes: set[int] = set()

    def new(self, kind: int, node: int = -1, nxt: int = -1) -> int:
        if not len(self.kind) & 0xFFF:
            check_budget()  # every 4096 states: big expansions stay within the compile budget
            self._check_size()
        self.kind.append(kind)
        self.eps.append([])
        self.node.append(node)
        self.next.append(nxt)
        return len(self.kind) - 1

    def _check_size(self) -> None:
        """Stop as soon as states plus UTF-8 nodes pass the limit, not after building them all."""
        if self.max_states is not None and len(self.kind) + len(self.pool) > self.max_states:
            raise RegexError(
                f"the regex needs more than max_nfa_states={self.max_states} NFA states plus"
                " UTF-8 nodes; use smaller character classes or repetition counts, or raise"
                " AutomataLimits.max_nfa_states",
                pattern=self.pattern,
            )

    def dag_root(self, ranges: iv.Ranges) -> int:
        root = self.roots.get(ranges)
        if root is None:
            root = self.pool.add(_dag_piece(ranges))
            self.roots[ranges] = root
            self.ranges.update(_dag_ranges(ranges))
        return root

    def string_root(self, text: str) -> int:
        """A chain of single-byte nodes spelling ``text`` in UTF-8 (no node if unencodable)."""
        root = self.string_roots.get(text)
        if root is None:
            piece = _string_piece(text)
            root = self.pool.add(piece)
            self.string_bytes.update(piece.spelled or b"")
            self.string_roots[text] = root
        return root

    def consume(self, ranges: iv.Ranges, nxt: int) -> int:
        return self.new(CONSUME, self.dag_root(ranges), nxt)

    def split(self, targets: list[int]) -> int:
        s = self.new(SPLIT)
        self.eps[s] = targets
        return s

    def compile(self, node: Node, nxt: int) -> int:
        """Emit states for ``node`` followed by state ``nxt``; return the entry state."""
        if isinstance(node, Empty):
            return nxt
        if isinstance(node, String):
            return self.new(CONSUME, self.string_root(node.text), nxt)
        if isinstance(node, CharClass):
            return self.consume(node.ranges, nxt)
        if isinstance(node, Concat):
            for item in reversed(node.items):
                nxt = self.compile(item, nxt)
            return nxt
        if isinstance(node, Alternation):
            return self.split([self.compile(x, nxt) for x in node.items])
        if isinstance(node, Repeat):
            x, lo, hi = node.item, node.min, node.max
            if hi is None:
                loop = self.split([])
                body = self.compile(x, loop)
                self.eps[loop] = [body, nxt] if body != loop else [nxt]
                entry = loop if lo == 0 else body
                for _ in range(max(lo - 1, 0)):
                    entry = self.compile(x, entry)
                return entry
            entry = nxt
            for _ in range(hi - lo):
                entry = self.split([self.compile(x, entry), nxt])
            for _ in range(lo):
                entry = self.compile(x, entry)
            return entry
        raise TypeError(f"not a regex AST node: {node!r}")


def _check_total(states: int, pool: int, max_states: int, pattern: str) -> None:
    if states + pool > max_states:
        raise RegexError(
            f"the regex needs {states} NFA states plus {pool} UTF-8 nodes, more than"
            f" max_nfa_states={max_states}; use smaller character classes or raise"
            " AutomataLimits.max_nfa_states",
            pattern=pattern,
        )


def build_nfa(
    node: Node, *, max_states: int, pattern: str, program: Program | None = None
) -> ByteNFA:
    """Build the trimmed byte NFA of ``node``; ``pattern`` is only used in error messages.
    ``program``: the node's `Program` where the caller holds it (not walked again)."""
    needed = (nfa_size(node) if program is None else program.nfa_size) + 1
    if needed > max_states:
        raise RegexError(
            f"the regex needs {needed} NFA states, more than max_nfa_states={max_states}"
            " (counted repetitions are expanded by copying); reduce the repetition counts or"
            " raise AutomataLimits.max_nfa_states",
            pattern=pattern,
        )
    b = _Builder(max_states, pattern)
    if needed > NATIVE_ABOVE and (_NFA_ARRAYS is not None or (lib := _thompson()) is not None):
        return _build_native(lib if _NFA_ARRAYS is None else None, b, node, needed, max_states,
                             pattern, program)  # fmt: skip
    match = b.new(MATCH)
    start = b.compile(node, match)
    _check_total(len(b.kind), len(b.pool), max_states, pattern)
    eps = [tuple(t) for t in b.eps]
    ranges = frozenset(b.ranges | {(x, x) for x in b.string_bytes})
    return ByteNFA(b.kind, eps, b.node, b.next, b.pool, start, match, ranges)


#: NFAs of more states than this are built in C when the extension is there. Once 32 (below
#: it the ctypes call cost more than Python's loop); at 0 every terminal's build also waits for
#: its automaton's first row (`DeferredNFASource`, only for NFAs built in C): the JSON and SQL
#: grammars' compile -20%, compile + first mask -7% and -9%; MaskBench unchanged within the
#: host's noise (compile p90 0.88-1.11x in four rounds side by side).
NATIVE_ABOVE = 0


class _Splits(Sequence[tuple[int, ...]]):
    """A split's live targets read from C's offsets and targets (lists, for fast slicing)."""

    __slots__ = ("flat", "off")

    def __init__(self, off: list[int], flat: list[int]) -> None:
        self.off = off
        self.flat = flat

    def __len__(self) -> int:
        return len(self.off) - 1

    def __getitem__(self, s: Any) -> Any:
        return tuple(self.flat[self.off[s] : self.off[s + 1]])


def _thompson() -> Any:
    """The C library with `sg_nfa_build`, or None (no extension, or STRUCTGEN_NATIVE=0)."""
    from structgen.automata import _native_subset

    lib = _native_subset._LIB
    return lib if lib is not None and hasattr(lib, "sg_nfa_build") else None


class Program:
    """A regex AST as a flat program: one entry per distinct node (type, a, b, children), in
    post-order, equal subtrees one entry (the same states, built once). Leaves (type 1) keep
    their text or code point ranges in `leaves`, in entry order; the builder gives them pool
    roots. The program is the AST's stable digest too (`digest`), so one walk serves both the
    fingerprint and the NFA. The walk runs in C where the extension is built (`program_tables`
    in `_subset.c`): the integer tables are then the bytes of int64 arrays it made, which the C
    builders read as they are (`column` views them); else Python's lists."""

    __slots__ = ("arg_a", "arg_b", "children", "digest", "empty_alternation", "leaf_at",
                 "leaves", "nfa_size", "nullable", "offsets", "pieces", "top", "typ")  # fmt: skip

    def __init__(self, root: Node) -> None:
        tables = None
        if _PROGRAM_TABLES is not None:
            try:
                tables = _PROGRAM_TABLES(root, _NODE_TYPES)
            except OverflowError:  # (a count past 64 bits: the Python walk spells it out)
                tables = None
        native = tables is not None
        if tables is None:
            tables = _python_program(root)
        top, typ, arg_a, arg_b, offsets, children, leaves, leaf_at, *facts, leaf_bytes = tables
        # The integer tables as raw 64-bit arrays (lengths first), then the leaves' bytes.
        digest = hashlib.blake2b(digest_size=16, person=b"sg-regex-ast-2")
        if native:  # (the integer tables come as bytes of int64: digested as they are)
            raw = (typ, arg_a, arg_b, offsets, children)
            digest.update(_THREE_INT64.pack(top, len(typ) >> 3, len(children) >> 3))
            for data in raw:
                digest.update(data)
        else:
            digest.update(array("q", [top, len(typ), len(children)]).tobytes())
            for numbers in (typ, arg_a, arg_b, offsets, children):
                try:
                    digest.update(array("q", numbers).tobytes())
                except OverflowError:  # (a count past 64 bits: spelled out instead)
                    digest.update(repr(numbers).encode())
        self.top, self.leaves, self.leaf_at = top, leaves, leaf_at
        self.pieces: LeafPieces | None = None  # (`leaf_pieces`)
        self.nullable: bool = facts[0]  # the AST matches the empty string
        self.nfa_size: int = facts[1]  # `nfa_size(root)` (saturated at 2**62)
        self.empty_alternation: bool = facts[2]  # an alternation of no items (empty language)
        self.typ, self.arg_a, self.arg_b = typ, arg_a, arg_b
        self.offsets, self.children = offsets, children
        digest.update(leaf_bytes)
        self.digest = digest.digest()


_THREE_INT64 = struct.Struct("=qqq")  # (native order, as `array("q")` writes)


def column(values: bytes | npt.NDArray[np.int64] | list[int]) -> npt.NDArray[np.int64]:
    """A program table as a contiguous int64 array (a view of C's bytes, or Python's list)."""
    if isinstance(values, bytes):
        return np.frombuffer(values, dtype=np.int64)
    return np.ascontiguousarray(values, dtype=np.int64)


def _leaf_bytes(leaves: list[str | iv.Ranges]) -> bytes:
    """The leaves as the digest reads them (as `program_tables` writes them): per leaf, b"s",
    its length and its code points (uint32), or b"r", its range count and the bounds (int64);
    native byte order, as the integer tables."""
    out = bytearray()
    text_codec = "utf-32-le" if sys.byteorder == "little" else "utf-32-be"
    for leaf in leaves:
        if isinstance(leaf, str):
            out += b"s" + array("q", [len(leaf)]).tobytes()
            out += leaf.encode(text_codec, "surrogatepass")
        else:
            out += b"r" + array("q", [len(leaf)]).tobytes()
            out += array("q", [bound for pair in leaf for bound in pair]).tobytes()
    return bytes(out)


def _python_program(root: Node) -> tuple[Any, ...]:
    """`Program`'s tables by a Python walk (lists of ints): (top, typ, arg_a, arg_b, offsets,
    children, leaves, leaf_at, nullable, NFA size, empty alternation, leaf bytes)."""
    index: dict[Node, int] = {}
    typ: list[int] = []
    arg_a: list[int] = []
    arg_b: list[int] = []
    kids: list[list[int] | tuple[int, ...]] = []
    leaves: list[str | iv.Ranges] = []
    leaf_at: list[int] = []
    none: tuple[int, ...] = ()

    def visit(n: Node) -> int:
        found = index.get(n)
        if found is not None:
            return found
        kind = type(n)
        if kind is Concat or kind is Alternation:
            children = [visit(x) for x in n.items]  # type: ignore[union-attr]
            typ.append(2 if kind is Concat else 3)
            arg_a.append(0)
            arg_b.append(0)
            kids.append(children)
        elif kind is CharClass or kind is String:
            leaf_at.append(len(typ))
            leaves.append(n.ranges if kind is CharClass else n.text)  # type: ignore[union-attr]
            typ.append(1)
            arg_a.append(0)
            arg_b.append(0)
            kids.append(none)
        elif kind is Repeat:
            child = visit(n.item)  # type: ignore[union-attr]
            typ.append(4)
            arg_a.append(n.min)  # type: ignore[union-attr]
            arg_b.append(-1 if n.max is None else n.max)  # type: ignore[union-attr]
            kids.append((child,))
        elif kind is Empty:
            typ.append(0)
            arg_a.append(0)
            arg_b.append(0)
            kids.append(none)
        else:
            raise TypeError(f"not a regex AST node: {n!r}")
        i = len(typ) - 1
        index[n] = i
        return i

    top = visit(root)
    offsets = [0]
    for c in kids:
        offsets.append(offsets[-1] + len(c))
    children = [x for c in kids for x in c]
    empty: list[bool] = []  # per entry (post-order: children first)
    for t, a, c in zip(typ, arg_a, kids, strict=True):
        if t == 2:
            empty.append(all(empty[k] for k in c))
        elif t == 3:
            empty.append(any(empty[k] for k in c))
        elif t == 4:
            empty.append(a == 0 or empty[c[0]])
        else:
            empty.append(t == 0)
    size = min(nfa_size(root), 1 << 62)
    empty_alternation = any(t == 3 and not c for t, c in zip(typ, kids, strict=True))
    tables = (top, typ, arg_a, arg_b, offsets, children, leaves, leaf_at)
    return (*tables, empty[top], size, empty_alternation, _leaf_bytes(leaves))


def extension_module(name: str = "structgen.automata._subset", *, switchable: bool = True) -> Any:
    """The C extension module `name`, or None: not built, or (`switchable`) switched off with
    STRUCTGEN_NATIVE=0 (then the Python paths run)."""
    import importlib
    import os

    if switchable and os.environ.get("STRUCTGEN_NATIVE", "1") == "0":
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def extension_function(name: str, *, switchable: bool = True) -> Any:
    """The `_subset` extension's function `name`, or None: not built, built before it had the
    function, or (`switchable`) switched off with STRUCTGEN_NATIVE=0."""
    module = extension_module(switchable=switchable)
    return None if module is None else getattr(module, name, None)


_PROGRAM_TABLES = extension_function("program_tables")
_JOIN_PIECES = extension_function("join_pieces")
_NODE_TYPES = (Empty, String, CharClass, Concat, Alternation, Repeat)


@dataclass(frozen=True, slots=True)
class LeafPieces:
    """A program's leaves as pool pieces (in leaf order) with their node counts, the byte
    ranges they read (the NFA's, hence its byte classes), and whether a leaf has no UTF-8
    spelling (a string with a lone surrogate, a set of surrogates: an empty language there)."""

    pieces: tuple[_Piece, ...]
    sizes: tuple[int, ...]
    ranges: frozenset[tuple[int, int]]
    has_empty_leaf: bool


def leaf_pieces(program: Program) -> LeafPieces:
    """The program's `LeafPieces`, made once per program (a deferred terminal's check at
    compile and its NFA's build later read the same)."""
    found = program.pieces
    if found is None:
        pieces: list[_Piece] = []
        range_sets: list[frozenset[tuple[int, int]]] = []
        spelled: list[bytes] = []
        empty = False
        many = sum(isinstance(leaf, str) for leaf in program.leaves) >= _BATCH_FROM
        make_string = _spelled_piece if many else _string_piece
        for leaf in program.leaves:
            if isinstance(leaf, str):
                piece = make_string(leaf)
                data = piece.spelled
                if data:
                    spelled.append(data)
                else:  # (no UTF-8 spelling: an empty language)
                    empty = True
            else:
                piece, leaf_ranges = _dag_leaf(leaf)
                range_sets.append(leaf_ranges)
                empty = empty or not leaf_ranges
            pieces.append(piece)
        ranges = frozenset().union(*range_sets)
        if spelled:  # (each byte read once, as a one-byte range)
            ranges |= {(x, x) for x in set(b"".join(spelled))}
        sizes = tuple([p.size for p in pieces])
        found = program.pieces = LeafPieces(tuple(pieces), sizes, ranges, empty)
    return found


def node_program(node: Node) -> Program:
    """The node's `Program`, kept for recent nodes (a terminal's digest, then its NFA)."""
    return _PROGRAMS.get_or_make(node, lambda: Program(node))


_PROGRAMS: LRU[Node, Program] = LRU(256)


#: `_build_native` in one C call (`nfa_arrays` in `_subset.c`), or None (ctypes, as before)
_NFA_ARRAYS = extension_function("nfa_arrays")
_NFA_TYPES = (np.int8, np.int32, np.int32, np.uint8, np.int32, np.int32)
#: `build_nfa_started`'s one C call (`nfa_started` in `_subset.c`), or None
_NFA_STARTED = extension_function("nfa_started")
#: the dtypes of the NFA's arrays as `ByteNFA.arrays` holds them (kind, live, node, next, eps
#: offsets, eps)
_ARRAY_TYPES = (np.int8, np.uint8, np.int32, np.int32, np.int32, np.int32)


def build_nfa_started(
    program: Program,
    byte_classes: npt.NDArray[np.uint8],
    max_states: int,
    table: npt.NDArray[np.int32],
    accepting: npt.NDArray[np.uint8],
) -> tuple[ByteNFA, tuple[Any, ...], Any, int, int] | None:
    """A deferred terminal's NFA (as `build_nfa` makes it) and a C subset context over it,
    its table installed and its start made, in one C call: (NFA, the eleven arrays the context
    reads, the capsule that owns it, its address, the start as `NativeSubset.start` returns
    it). None without that call, or for a program whose tables Python made.

    The program is within the limits (a deferred source is made only then), so the checks
    `build_nfa` makes cannot fail here; the budget is checked as there."""
    if _NFA_STARTED is None or not isinstance(program.typ, bytes):  # (tables C made)
        return None
    check_budget()
    leaves = leaf_pieces(program)
    bases, start, arrays, owner, ctx, sid = _NFA_STARTED(
        program.typ,
        program.arg_a,
        program.arg_b,
        program.offsets,
        program.children,
        program.top,
        program.leaf_at,
        leaves.pieces,
        byte_classes,
        max_states,
        table,
        accepting,
    )
    # (the pool's joined arrays are joined again if Python ever asks: C has its own copy)
    pool = Pool()
    pool.pieces = list(leaves.pieces)
    pool.bases = bases
    pool.size = bases[-1] + leaves.pieces[-1].size if bases else 0
    nfa = ByteNFA(None, None, None, None, pool, start, 0, leaves.ranges, raw=arrays[:6])
    return nfa, arrays, owner, ctx, sid


def _build_native(
    lib: Any,
    b: _Builder,
    node: Node,
    states: int,
    max_states: int,
    pattern: str,
    program: Program | None = None,
) -> ByteNFA:
    """`build_nfa` with the `states` states (match included) built and trimmed in C
    (`_thompson.c`): the same NFA. `lib`: the ctypes library, where the extension has no
    `nfa_arrays` (None: it has)."""
    check_budget()
    flat = node_program(node) if program is None else program
    arg_a = column(flat.arg_a).copy()
    # Pool roots, in entry order: the leaves' pieces placed one after another (a program holds
    # each distinct leaf once, so the builder's per-NFA dedupe would never hit here).
    leaves = leaf_pieces(flat)
    if len(flat.leaf_at):
        arg_a[np.asarray(flat.leaf_at)] = b.pool.extend(leaves.pieces, leaves.sizes)
    top = flat.top
    _check_total(states, len(b.pool), max_states, pattern)  # (`states`: what C will build)
    nonempty = b.pool.nonempty()
    if not len(nonempty):
        nonempty = np.zeros(1, dtype=np.uint8)
    if _NFA_ARRAYS is not None:  # (one call: the tables in, the NFA's arrays out)
        start, *made = _NFA_ARRAYS(
            column(flat.typ),
            arg_a,
            column(flat.arg_b),
            column(flat.offsets),
            column(flat.children),
            top,
            nonempty,
        )
        kind, node_ids, nxt, live, eps_off, eps = (
            np.frombuffer(data, dtype=t) for data, t in zip(made, _NFA_TYPES, strict=True)
        )
        # (the build is one uninterruptible call, tens of ms for a big NFA: the budget is
        # checked after it as well, so a compile that it took past its limit stops here)
        check_budget()
        return ByteNFA(
            None, None, None, None, b.pool, start, 0, leaves.ranges,
            arrays=(kind, live, node_ids, nxt, eps_off, eps),
        )  # fmt: skip
    from structgen.automata import _native_subset

    tables = (
        column(flat.typ).astype(np.int8),
        arg_a,
        column(flat.arg_b),
        column(flat.offsets).astype(np.int32),
        np.array(column(flat.children) if len(flat.children) else [0], dtype=np.int32),
    )
    out = np.zeros(3, dtype=np.int64)
    *where, nonempty_at, out_at = _native_subset.addresses(*tables, nonempty, out)
    handle = lib.sg_nfa_build(*where, top, nonempty_at, out_at)
    if not handle:
        raise MemoryError("building the NFA ran out of memory")
    try:
        n, n_eps, start = (int(x) for x in out)
        kind = np.empty(n, dtype=np.int8)
        node_ids = np.empty(n, dtype=np.int32)
        nxt = np.empty(n, dtype=np.int32)
        live = np.empty(n, dtype=np.uint8)
        eps_off = np.empty(n + 1, dtype=np.int32)
        eps = np.empty(max(n_eps, 1), dtype=np.int32)
        lib.sg_nfa_copy(handle, *_native_subset.addresses(kind, node_ids, nxt, live, eps_off, eps))
    finally:
        lib.sg_nfa_free(handle)
    check_budget()  # (after the uninterruptible build too, as above)
    ranges = leaves.ranges
    # (the lists are made from the arrays only if Python asks: `ByteNFA`)
    return ByteNFA(
        None, None, None, None, b.pool, start, 0, ranges,
        arrays=(kind, live, node_ids, nxt, eps_off, eps),
    )  # fmt: skip
