"""Which terminals of a grammar could make the engine's greedy lexer lose a parse.

The engine lexes greedily: a lexeme ends only when the next byte cannot extend it in any
expected terminal (docs/design/context-free.md). For a grammar whose meaning is the exact
context-free language (EBNF), that is exact unless some word `w` of a terminal `A` is followed,
in the text, by a byte `b` that may follow `A` in the grammar while `w·b` is still a live prefix
of a terminal `B` expected at the same time: the lexer then reads on into `B` and the parse that
ends `A` at `w` is lost (`name " "? "("` against `SELECT email FROM`: `B` is the call, `A` the
column name).

`greedy_conflicts` finds every such pair, soundly over-approximating both what the parser may
expect at once (`_together`, over occurrences of terminals in rule bodies) and the bytes that may
follow an occurrence (its FOLLOW set, in bytes). No conflict means the greedy lexer accepts
exactly the grammar's language. See docs/design/grammars.md (lexeme inference).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from structgen._budget import check_budget
from structgen.automata import AutomataLimits, ByteDFA
from structgen.grammar.ir import Grammar, Rule

__all__ = ["follow_sets", "greedy_conflicts"]


def _bits(row: np.ndarray) -> int:
    """The live bytes of a DFA row as a 256-bit set."""
    out = 0
    for b in np.flatnonzero(row >= 0).tolist():
        out |= 1 << b
    return out


def follow_sets(grammar: Grammar, first: dict[str, int]) -> dict[str, int]:
    """For each terminal, the union of `first` over what may come right after one of its
    lexemes.

    `first[t]` is any set (as an int bitset) per terminal: its first bytes, or itself as one
    bit. The classic FIRST / FOLLOW fixpoint: a terminal never derives the empty string, rules
    may; the end of the text adds nothing.
    """
    rules_of: dict[str, list[tuple[str, ...]]] = {}
    for rule in grammar.rules:
        rules_of.setdefault(rule.lhs, []).append(rule.rhs)
    nullable: set[str] = set()
    changed = True
    while changed:
        changed = False
        for lhs, alternatives in rules_of.items():
            if lhs not in nullable and any(all(s in nullable for s in rhs) for rhs in alternatives):
                nullable.add(lhs)
                changed = True
    first_of: dict[str, int] = dict(first)
    for lhs in rules_of:
        first_of.setdefault(lhs, 0)

    def seq_first(symbols: Sequence[str]) -> tuple[int, bool]:
        out = 0
        for s in symbols:
            out |= first_of.get(s, 0)
            if s not in nullable:
                return out, False
        return out, True

    changed = True
    while changed:
        changed = False
        for lhs, alternatives in rules_of.items():
            acc = first_of[lhs]
            for rhs in alternatives:
                acc |= seq_first(rhs)[0]
            if acc != first_of[lhs]:
                first_of[lhs] = acc
                changed = True
    follow: dict[str, int] = {s: 0 for s in first_of}
    changed = True
    while changed:
        changed = False
        for lhs, alternatives in rules_of.items():
            for rhs in alternatives:
                for i, symbol in enumerate(rhs):
                    after, through = seq_first(rhs[i + 1 :])
                    if through:
                        after |= follow[lhs]
                    if after & ~follow[symbol]:
                        follow[symbol] |= after
                        changed = True
    return {t: follow.get(t, 0) for t in first} | {"": first_of.get(grammar.start, 0)}


def _extensions(a: ByteDFA, b: ByteDFA, max_pairs: int) -> int:
    """The bytes that extend some word of `a` into a live prefix of `b` (a 256-bit set)."""
    out = 0

    def collect(qa: int, qb: int) -> bool:
        nonlocal out
        if a.is_accepting(qa):
            out |= _bits(b.row(qb))
        return False  # visit every pair

    _search(a, b, collect, max_pairs)
    return out


def _intersects(a: ByteDFA, b: ByteDFA, max_pairs: int) -> bool:
    """Whether the two automata accept a common word."""
    return _search(a, b, lambda qa, qb: a.is_accepting(qa) and b.is_accepting(qb), max_pairs)


def _search(a: ByteDFA, b: ByteDFA, found: Callable[[int, int], bool], max_pairs: int) -> bool:
    """Whether some pair of states that `a` and `b` reach on the same bytes is `found`.

    Depth-first over the pairs; raises `_TooBig` past `max_pairs` of them."""
    start = (a.start, b.start)
    seen = {start}
    stack = [start]
    steps = 0
    while stack:
        qa, qb = stack.pop()
        steps += 1
        if not steps & 0xFF:
            check_budget()  # the compile's time limit (a no-op outside a compile)
        if found(qa, qb):
            return True
        row_a, row_b = a.row(qa), b.row(qb)
        both = (row_a >= 0) & (row_b >= 0)
        if not both.any():
            continue
        for pair in set(zip(row_a[both].tolist(), row_b[both].tolist())):
            if pair not in seen:
                if len(seen) >= max_pairs:
                    raise _TooBig
                seen.add(pair)
                stack.append(pair)
    return False


class _TooBig(Exception):
    pass


def greedy_conflicts(
    grammar: Grammar,
    dfas: Sequence[ByteDFA],
    limits: AutomataLimits,
    memo: dict[tuple[object, ...], Any] | None = None,
    deadline: float | None = None,
) -> list[tuple[str, str]] | None:
    """Pairs `(A, B)` of terminal names where the greedy lexer may read past the end of an `A`
    lexeme into `B` although the grammar lets the text go on after `A` (see the module
    docstring). `dfas[i]` is the automaton of `grammar.terminals[i]`.

    The analysis runs over *occurrences* of terminals in rule bodies (one terminal, such as a
    quote that opens and closes strings, occurs in unrelated places). `_together` says which
    occurrences an Earley set may expect at once; the bytes after `A` are those that may follow
    its occurrence. A pair whose search grows past `limits.max_dfa_states` product states counts
    as a conflict. `memo` keeps what is found per pair of automata (whether they share a word,
    the bytes that extend one into the other; by id: the caller keeps them alive) across calls.
    None: `deadline` (a `time.perf_counter()` value) passed first."""
    if memo is None:
        memo = {}
    names = [t.name for t in grammar.terminals]
    dfa_of = dict(zip(names, dfas))
    first_bytes = {n: _bits(d.row(d.start)) for n, d in zip(names, dfas)}
    occurrences: list[str] = []  # occurrence i is of terminal occurrences[i]
    rules = []
    for rule in grammar.rules:
        rhs = []
        for symbol in rule.rhs:
            if symbol in dfa_of:
                rhs.append(f"\\0{len(occurrences)}")
                occurrences.append(symbol)
            else:
                rhs.append(symbol)
        rules.append(Rule(rule.lhs, tuple(rhs)))
    spread = Grammar(start=grammar.start, rules=tuple(rules), terminals=())
    keys = [f"\\0{i}" for i in range(len(occurrences))]
    # one fixpoint for both: an occurrence's first bytes in the low 256 bits, itself above them
    both = follow_sets(
        spread,
        {k: first_bytes[t] | 1 << (256 + i) for i, (k, t) in enumerate(zip(keys, occurrences))},
    )
    low = (1 << 256) - 1
    follow = {k: v & low for k, v in both.items()}
    after = {k: v >> 256 for k, v in both.items()}
    together = _together(
        [after[k] for k in keys],
        after[""],
        [dfa_of[t] for t in occurrences],
        limits,
        memo,
        deadline,
    )
    if together is None:
        return None
    # occurrences of one terminal with the same bytes after them: one check per terminal beside
    wanted: dict[tuple[str, int], int] = {}
    for i, name_a in enumerate(occurrences):
        follows = follow[keys[i]]
        if follows:
            key_a = (name_a, follows)
            wanted[key_a] = wanted.get(key_a, 0) | together[i]
    out: set[tuple[str, str]] = set()
    for (name_a, follows), beside in wanted.items():
        if deadline is not None and time.perf_counter() > deadline:
            return None
        dfa_a = dfa_of[name_a]
        if dfa_a.is_empty:
            continue
        for name_b in {occurrences[j] for j in _members(beside)}:
            if (name_a, name_b) in out:
                continue
            dfa_b = dfa_of[name_b]
            if dfa_b.is_empty or not first_bytes[name_a] & first_bytes[name_b]:
                continue  # the two never start a lexeme on the same byte
            key = ("ext", id(dfa_a), id(dfa_b))
            extensions = memo.get(key)
            if extensions is None:
                try:
                    extensions = _extensions(dfa_a, dfa_b, limits.max_dfa_states)
                except _TooBig:
                    extensions = (1 << 256) - 1  # too big to tell: every byte may extend
                memo[key] = extensions
            if extensions & follows:
                out.add((name_a, name_b))
    return sorted(out)


def _together(
    after: list[int],
    first: int,
    dfas: list[ByteDFA],
    limits: AutomataLimits,
    memo: dict[tuple[object, ...], Any],
    deadline: float | None,
) -> list[int] | None:
    """For each occurrence, the occurrences an Earley set may expect together with it.

    The first set expects `first`. After a lexeme, the parser advances every expected
    occurrence whose terminal accepts that lexeme, and the next set expects what may follow
    any of them: so if `p` and `q` are expected together and their terminals share a word, what
    may follow `p` and what may follow `q` are expected together (`after[p]`: the occurrences
    that may follow `p`). The least fixpoint, a sound over-approximation."""
    n = len(after)
    # occurrences whose terminal shares a word with occurrence p's, as one bitset per automaton
    of_dfa: dict[int, int] = {}
    for p, dfa in enumerate(dfas):
        of_dfa[id(dfa)] = of_dfa.get(id(dfa), 0) | 1 << p
    distinct = {id(d): d for d in dfas}
    firsts = {k: _bits(d.row(d.start)) for k, d in distinct.items()}
    sharing: dict[int, int] = {}
    for ka, a in distinct.items():
        mask = of_dfa[ka]
        for kb, b in distinct.items():
            if kb == ka or not firsts[ka] & firsts[kb]:
                continue
            key = ("meet", min(ka, kb), max(ka, kb))
            hit = memo.get(key)
            if hit is None:
                try:
                    hit = _intersects(a, b, limits.max_dfa_states)
                except _TooBig:
                    hit = True
                memo[key] = hit
            if hit:
                mask |= of_dfa[kb]
        sharing[ka] = mask
    together = [0] * n
    for p in _members(first):
        together[p] |= first
    follows = [_members(bits) for bits in after]
    unions: dict[int, int] = {}
    pending = set(_members(first))
    while pending:  # a worklist: p's followers change only when together[p] does
        if deadline is not None and time.perf_counter() > deadline:
            return None
        p = pending.pop()
        bits = together[p] & sharing[id(dfas[p])]
        union = unions.get(bits)
        if union is None:  # many occurrences share one set: OR their followers once
            union = 0
            for q in _members(bits):
                union |= after[q]
            unions[bits] = union
        for o in follows[p]:
            if union & ~together[o]:
                together[o] |= union
                pending.add(o)
    return together


def _members(bits: int) -> list[int]:
    """The positions of the set bits (through the binary text: faster than bit tricks in
    Python for the dense sets here)."""
    text = bin(bits)[:1:-1]
    return [i for i, c in enumerate(text) if c == "1"]
