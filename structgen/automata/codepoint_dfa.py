"""Small automata over code points, written back as regex ASTs: complements and word boundaries.

The byte-level pipeline (``nfa.py``, ``dfa.py``) can intersect languages but not complement them,
and its AST has no zero-width assertions. Two jobs need both, on short patterns:

- ``complement(node)``: every string ``node`` does not match (JSON Schema keys matching no
  pattern, ``not: {pattern}``, negative lookaheads).
- ``eliminate_boundaries(node, boundaries)``: a pattern with word-boundary assertions (``\\b``,
  ``\\B``, Rust's ``\\<`` ...) as a plain AST. The parser writes each assertion as a *marker*, a
  code point above U+10FFFF that no character class contains; here the marker becomes a
  conditional epsilon move. The subset construction tracks the class of the previous character
  (which every thread shares, since all have read the same text) and, per thread, the classes
  the next character may have, so an assertion is decided when the neighbouring characters are
  known. The start and the end of the text are their own class, "edge" (Python's ``\\B`` fails
  on the empty string, so edge-edge differs from non-word-non-word).

Both determinise over code-point intervals, minimise (Moore) and convert back by state
elimination. Anything larger than the caller's state limit raises ``RegexError``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from structgen.automata import intervals as iv
from structgen.automata.regex_syntax import (
    EDGE,
    EITHER,
    MARKER_BASE,
    NONWORD,
    WORD,
    Alternation,
    Boundary,
    CharClass,
    Concat,
    Empty,
    Node,
    Repeat,
    String,
    alternation,
    concat,
)
from structgen.errors import RegexError

__all__ = ["complement", "eliminate_boundaries"]

MAX_NFA = 20_000
COMPLEMENT_STATES = 200
BOUNDARY_STATES = 400


class _NFA:
    """Code-point NFA: epsilon moves, set moves (an index into ``sets``) and assertion moves
    (markers)."""

    def __init__(self, too_large: str) -> None:
        self.too_large = too_large
        self.eps: list[list[int]] = []
        self.moves: list[list[tuple[int, int]]] = []  # (set index, target)
        self.asserts: list[list[tuple[int, int]]] = []  # (marker index, target)
        self.sets: dict[iv.Ranges, int] = {}

    def state(self) -> int:
        if len(self.eps) >= MAX_NFA:
            raise RegexError(self.too_large, pattern="<nfa>")
        self.eps.append([])
        self.moves.append([])
        self.asserts.append([])
        return len(self.eps) - 1

    def move(self, state: int, ranges: iv.Ranges, target: int) -> None:
        self.moves[state].append((self.sets.setdefault(ranges, len(self.sets)), target))

    def build(self, node: Node, start: int) -> int:
        if isinstance(node, Empty):
            return start
        if isinstance(node, String):
            cur = start
            for ch in node.text:
                nxt = self.state()
                self.move(cur, ((ord(ch), ord(ch)),), nxt)
                cur = nxt
            return cur
        if isinstance(node, CharClass):
            end = self.state()
            chars = iv.intersect(node.ranges, ((0, iv.MAX_CODE_POINT),))
            if chars:
                self.move(start, chars, end)
            for lo, hi in node.ranges:
                for m in range(max(lo, MARKER_BASE), hi + 1):
                    self.asserts[start].append((m - MARKER_BASE, end))
            return end
        if isinstance(node, Concat):
            cur = start
            for item in node.items:
                cur = self.build(item, cur)
            return cur
        if isinstance(node, Alternation):
            end = self.state()
            for item in node.items:
                self.eps[self.build(item, start)].append(end)
            return end
        if isinstance(node, Repeat):
            cur = start
            for _ in range(node.min):
                cur = self.build(node.item, cur)
            if node.max is None:
                loop = self.state()
                self.eps[cur].append(loop)
                self.eps[self.build(node.item, loop)].append(loop)
                return loop
            end = self.state()
            for _ in range(node.max - node.min):
                self.eps[cur].append(end)
                cur = self.build(node.item, cur)
            self.eps[cur].append(end)
            return end
        raise TypeError(f"unknown node {node!r}")


class _Determiniser:
    """Subset construction with assertion context (module docstring).

    The alphabet is compressed first: code points that every set of the NFA and every
    assertion treat alike form one *symbol* (``symbol_ranges[c]``), so a step costs the
    number of symbols (a handful), not the thousands of intervals Unicode's ``\\w`` cuts.
    A DFA state is (symbol of the previous character, frozenset of threads); a thread is an
    NFA state and a bit mask of the *cells* (assertion-relevant classes of symbols) the next
    character may be in, plus one bit for the end of the text."""

    def __init__(
        self, node: Node, boundaries: Sequence[Boundary], max_states: int, too_large: str
    ) -> None:
        self.too_large = too_large
        nfa = _NFA(too_large)
        self.nfa = nfa
        self.start = nfa.state()
        self.final = nfa.build(node, self.start)
        self.boundaries = list(boundaries)
        self.max_states = max_states
        sets = list(nfa.sets)
        cuts = {0, MARKER_BASE}
        for ranges in sets + [r for b in self.boundaries for r in (b.word, b.nonword)]:
            for lo, hi in ranges:
                cuts.add(lo)
                cuts.add(hi + 1)
        bounds = sorted(cuts)
        symbol_of: dict[tuple[object, ...], int] = {}
        symbol_ranges: list[list[tuple[int, int]]] = []
        cell_of: dict[tuple[str, ...], int] = {}
        self.symbol_cell: list[int] = []
        self.set_symbols: list[list[int]] = [[] for _ in sets]
        for k in range(len(bounds) - 1):
            lo = bounds[k]
            members = tuple(i for i, ranges in enumerate(sets) if iv.contains(ranges, lo))
            types = tuple(b.kind(lo) for b in self.boundaries)
            key = (members, types)
            if key not in symbol_of:
                symbol_of[key] = len(symbol_ranges)
                symbol_ranges.append([])
                self.symbol_cell.append(cell_of.setdefault(types, len(cell_of)))
                for i in members:
                    self.set_symbols[i].append(symbol_of[key])
            symbol_ranges[symbol_of[key]].append((lo, bounds[k + 1] - 1))
        self.symbol_ranges = [iv.normalize(rs) for rs in symbol_ranges]
        self.cell_types = list(cell_of)  # [cell][boundary] -> type
        self.end_bit = 1 << len(self.cell_types)
        self.full = (self.end_bit << 1) - 1
        self._masks: dict[tuple[int, frozenset[str]], int] = {}

    def allowed_mask(self, b: int, after: frozenset[str]) -> int:
        key = (b, after)
        if key not in self._masks:
            mask = self.end_bit if EDGE in after else 0
            both = WORD in after and NONWORD in after
            for cell, types in enumerate(self.cell_types):
                if types[b] in after or (types[b] == EITHER and both):
                    mask |= 1 << cell
            self._masks[key] = mask
        return self._masks[key]

    def closure(self, prev: int, seeds: list[tuple[int, int]]) -> frozenset[tuple[int, int]]:
        """``prev``: the previous character's symbol, or -1 at the start of the text."""
        nfa = self.nfa
        seen = set(seeds)
        stack = list(seeds)
        while stack:
            s, mask = stack.pop()
            for t in nfa.eps[s]:
                if (t, mask) not in seen:
                    seen.add((t, mask))
                    stack.append((t, mask))
            for m, t in nfa.asserts[s]:
                before = EDGE if prev < 0 else self.cell_types[self.symbol_cell[prev]][m]
                narrowed = mask & self.allowed_mask(m, self.boundaries[m].after(before))
                if narrowed and (t, narrowed) not in seen:
                    seen.add((t, narrowed))
                    stack.append((t, narrowed))
        # only threads that can still move or accept tell states apart
        return frozenset(
            (s, mask)
            for s, mask in seen
            if nfa.moves[s] or (s == self.final and mask & self.end_bit)
        )

    def run(self) -> tuple[list[list[int]], list[bool]]:
        nfa = self.nfa
        context = bool(self.boundaries)
        init = (-1, self.closure(-1, [(self.start, self.full)]))
        ids = {init: 0}
        order = [init]
        table: list[list[int]] = []
        i = 0
        while i < len(order):
            _, threads = order[i]
            i += 1
            targets: list[list[tuple[int, int]]] = [[] for _ in self.symbol_ranges]
            for s, mask in threads:
                for set_index, t in nfa.moves[s]:
                    for c in self.set_symbols[set_index]:
                        if mask >> self.symbol_cell[c] & 1:
                            targets[c].append((t, self.full))
            row = []
            for c, seeds in enumerate(targets):
                prev = c if context else 0
                key = (prev, self.closure(prev, seeds)) if seeds else (0, frozenset())
                if key not in ids:
                    if len(ids) >= self.max_states:
                        raise RegexError(self.too_large, pattern="<dfa>")
                    ids[key] = len(order)
                    order.append(key)
                row.append(ids[key])
            table.append(row)
        accepting = [
            any(s == self.final and mask & self.end_bit for s, mask in threads)
            for _, threads in order
        ]
        return table, accepting


def complement(node: Node) -> Node:
    """The AST of every string (code points) that ``node`` does not match."""
    det = _Determiniser(node, (), COMPLEMENT_STATES, "pattern too large to complement")
    table, accepting = det.run()
    table, flipped = _minimise(table, [not a for a in accepting])
    return _to_regex(table, flipped, det.symbol_ranges)


def eliminate_boundaries(node: Node, boundaries: Sequence[Boundary]) -> Node:
    """``node`` with its assertion markers (code point ``MARKER_BASE + k`` for
    ``boundaries[k]``) resolved: the same language of whole texts, without markers."""
    det = _Determiniser(
        node, boundaries, BOUNDARY_STATES, "pattern too large to resolve its word boundaries"
    )
    table, accepting = det.run()
    table, accepting = _minimise(table, accepting)
    return _to_regex(table, accepting, det.symbol_ranges)


def _minimise(table: list[list[int]], accepting: list[bool]) -> tuple[list[list[int]], list[bool]]:
    """Moore partition refinement; also drops states that cannot reach acceptance."""
    if len(table) * (1 + len(table[0]) if table else 0) >= _NUMPY_MOORE_CELLS:
        block = _moore_blocks(table, accepting)
    else:
        block = [1 if a else 0 for a in accepting]
        while True:
            sigs: dict[tuple[int, ...], int] = {}
            new = [
                sigs.setdefault((block[s], *(block[t] for t in table[s])), len(sigs))
                for s in range(len(table))
            ]
            if len(sigs) == len(set(block)):
                break
            block = new
    rep: dict[int, int] = {}
    for s, b in enumerate(block):
        rep.setdefault(b, s)
    start_block = block[0]
    # (the blocks in order: 0..count-1, or the one block 1 when every state accepts)
    order = [start_block] + [b for b in sorted(rep) if b != start_block]
    index = {b: i for i, b in enumerate(order)}
    out_table = [[index[block[t]] for t in table[rep[b]]] for b in order]
    out_acc = [accepting[rep[b]] for b in order]
    return out_table, out_acc


#: tables of at least this many cells (states x (symbols + 1)) are refined with numpy
_NUMPY_MOORE_CELLS = 4096


def _moore_blocks(table: list[list[int]], accepting: list[bool]) -> list[int]:
    """The blocks of Moore's refinement, numbered exactly as the loop in `_minimise` numbers
    them (each round: by first occurrence of a signature), with numpy rounds."""
    targets = np.asarray(table, dtype=np.int64)
    block = np.asarray(accepting, dtype=np.int64)
    count = len(np.unique(block))
    while True:
        signatures = np.concatenate([block[:, None], block[targets]], axis=1)
        _, first, inverse = np.unique(signatures, axis=0, return_index=True, return_inverse=True)
        if len(first) == count:
            break
        rank = np.empty(len(first), dtype=np.int64)
        rank[np.argsort(first)] = np.arange(len(first))
        block = rank[inverse.reshape(-1)]
        count = len(first)
    return block.tolist()  # type: ignore[no-any-return]


def _to_regex(table: list[list[int]], accepting: list[bool], symbols: list[iv.Ranges]) -> Node:
    n = len(table)
    # live states: those that reach an accepting one
    live = {s for s in range(n) if accepting[s]}
    changed = True
    while changed:
        changed = False
        for s in range(n):
            if s not in live and any(t in live for t in table[s]):
                live.add(s)
                changed = True
    if 0 not in live:
        return CharClass(())
    start, final = n, n + 1
    edges: dict[tuple[int, int], Node] = {}
    # each state's edges in from and out to other states (self-loops apart): the elimination
    # order's cost, kept up to date (counting them per step was quadratic in the edges)
    ins_of = [0] * (n + 2)
    outs_of = [0] * (n + 2)

    def add(p: int, q: int, node: Node) -> None:
        old = edges.get((p, q))
        if old is None:
            edges[(p, q)] = node
            if p != q:
                outs_of[p] += 1
                ins_of[q] += 1
        else:
            edges[(p, q)] = alternation([old, node])

    for s in live:
        by_target: dict[int, list[tuple[int, int]]] = {}
        for k, t in enumerate(table[s]):
            if t in live:
                by_target.setdefault(t, []).extend(symbols[k])
        for t, rs in by_target.items():
            add(s, t, CharClass(iv.normalize(rs)))
        if accepting[s]:
            add(s, final, Empty())
    add(start, 0, Empty())
    remaining = set(live)
    while remaining:

        def cost(k: int) -> int:
            return ins_of[k] * outs_of[k]

        k = min(remaining, key=cost)
        remaining.discard(k)
        loop = edges.pop((k, k), None)
        ins = [(p, edges.pop((p, q))) for (p, q) in list(edges) if q == k]
        outs = [(q, edges.pop((p, q))) for (p, q) in list(edges) if p == k]
        for p, _ in ins:
            outs_of[p] -= 1
        for q, _ in outs:
            ins_of[q] -= 1
        ins_of[k] = outs_of[k] = 0
        mid: list[Node] = [Repeat(loop, 0, None)] if loop is not None else []
        for p, a in ins:
            for q, b in outs:
                add(p, q, concat([a, *mid, b]))
    return edges.get((start, final), CharClass(()))
