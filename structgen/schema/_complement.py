"""The complement of a regular language, as a regex AST (for keys *not* matching a pattern).

The IR can intersect languages but not complement them, so `patternProperties` with
`additionalProperties` (keys matching no pattern) and `not: {pattern}` need the complement
written out: a small subset construction over code-point intervals, flip acceptance, minimise,
then state elimination back to an AST. Patterns in schemas are short, so their automata are
tiny; anything bigger than `MAX_STATES` raises `RegexError` (the caller reports it as
unsupported).
"""

from __future__ import annotations

from bisect import bisect_right

from structgen.automata import (
    Alternation,
    CharClass,
    Concat,
    Empty,
    Node,
    Repeat,
    String,
    alternation,
    concat,
)
from structgen.automata import intervals as iv
from structgen.errors import RegexError

__all__ = ["complement"]

MAX_NFA = 20_000
MAX_STATES = 200


class _NFA:
    def __init__(self) -> None:
        self.eps: list[list[int]] = []
        self.moves: list[list[tuple[int, int, int]]] = []

    def state(self) -> int:
        if len(self.eps) >= MAX_NFA:
            raise RegexError("pattern too large to complement", pattern="<complement>")
        self.eps.append([])
        self.moves.append([])
        return len(self.eps) - 1

    def build(self, node: Node, start: int) -> int:
        if isinstance(node, Empty):
            return start
        if isinstance(node, String):
            cur = start
            for ch in node.text:
                nxt = self.state()
                self.moves[cur].append((ord(ch), ord(ch), nxt))
                cur = nxt
            return cur
        if isinstance(node, CharClass):
            end = self.state()
            for lo, hi in node.ranges:
                self.moves[start].append((lo, hi, end))
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

    def closure(self, states: set[int]) -> frozenset[int]:
        stack = list(states)
        seen = set(states)
        while stack:
            s = stack.pop()
            for t in self.eps[s]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        return frozenset(seen)


def complement(node: Node) -> Node:
    """The AST of every string (code points) that `node` does not match."""
    nfa = _NFA()
    start = nfa.state()
    final = nfa.build(node, start)
    cuts = {0, iv.MAX_CODE_POINT + 1}
    for moves in nfa.moves:
        for lo, hi, _ in moves:
            cuts.add(lo)
            cuts.add(hi + 1)
    bounds = sorted(cuts)  # interval k = [bounds[k], bounds[k+1])
    n_int = len(bounds) - 1
    init = nfa.closure({start})
    ids = {init: 0}
    order = [init]
    table: list[list[int]] = []
    i = 0
    while i < len(order):
        cur = order[i]
        i += 1
        targets: list[set[int]] = [set() for _ in range(n_int)]
        for s in cur:
            for lo, hi, t in nfa.moves[s]:
                for k in range(bisect_right(bounds, lo) - 1, bisect_right(bounds, hi)):
                    targets[k].add(t)
        row = []
        for k in range(n_int):
            nxt = nfa.closure(targets[k]) if targets[k] else frozenset()
            if nxt not in ids:
                if len(ids) >= MAX_STATES:
                    raise RegexError("pattern too large to complement", pattern="<complement>")
                ids[nxt] = len(order)
                order.append(nxt)
            row.append(ids[nxt])
        table.append(row)
    accepting = [final not in s for s in order]  # flipped: the empty set is the accepting sink
    table, accepting = _minimise(table, accepting)
    ranges = [(bounds[k], bounds[k + 1] - 1) for k in range(n_int)]
    return _to_regex(table, accepting, ranges)


def _minimise(table: list[list[int]], accepting: list[bool]) -> tuple[list[list[int]], list[bool]]:
    """Moore partition refinement; also drops states that cannot reach acceptance."""
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
    count = max(block) + 1
    rep: dict[int, int] = {}
    for s, b in enumerate(block):
        rep.setdefault(b, s)
    start_block = block[0]
    order = [start_block] + [b for b in range(count) if b != start_block]
    index = {b: i for i, b in enumerate(order)}
    out_table = [[index[block[t]] for t in table[rep[b]]] for b in order]
    out_acc = [accepting[rep[b]] for b in order]
    return out_table, out_acc


def _to_regex(table: list[list[int]], accepting: list[bool], ranges: list[tuple[int, int]]) -> Node:
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

    def add(p: int, q: int, node: Node) -> None:
        old = edges.get((p, q))
        edges[(p, q)] = node if old is None else alternation([old, node])

    for s in live:
        by_target: dict[int, list[tuple[int, int]]] = {}
        for k, t in enumerate(table[s]):
            if t in live:
                by_target.setdefault(t, []).append(ranges[k])
        for t, rs in by_target.items():
            add(s, t, CharClass(iv.normalize(rs)))
        if accepting[s]:
            add(s, final, Empty())
    add(start, 0, Empty())
    remaining = set(live)
    while remaining:

        def cost(k: int) -> int:
            ins = sum(1 for (p, q) in edges if q == k and p != k)
            outs = sum(1 for (p, q) in edges if p == k and q != k)
            return ins * outs

        k = min(remaining, key=cost)
        remaining.discard(k)
        loop = edges.pop((k, k), None)
        ins = [(p, edges.pop((p, q))) for (p, q) in list(edges) if q == k]
        outs = [(q, edges.pop((p, q))) for (p, q) in list(edges) if p == k]
        mid: list[Node] = [Repeat(loop, 0, None)] if loop is not None else []
        for p, a in ins:
            for q, b in outs:
                add(p, q, concat([a, *mid, b]))
    return edges.get((start, final), CharClass(()))
