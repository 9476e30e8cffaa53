"""Random sentences of an IR grammar, for tests and fuzzing (not used at decode time).

Derivations choose rule alternatives at random (near the root, alternatives with deeper minimal
derivations are favoured so sentences are not mostly trivial); past ``max_depth`` (or once
``max_terminals`` terminals are out) only alternatives of minimal derivation depth are taken,
which always terminates. A terminal becomes a random string of its regular language (a walk
over its regex AST with bounded repetition counts, preferring printable ASCII code points), and
strings of the ``ignore`` terminals are sprinkled between terminals and around the sentence.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from structgen.automata import (
    Alternation,
    ByteDFA,
    CharClass,
    Concat,
    Difference,
    Empty,
    Node,
    Pattern,
    Repeat,
    String,
    compile_ast,
)
from structgen.errors import GrammarError
from structgen.grammar.ir import Grammar, Rule

__all__ = ["random_string", "sample_sentences"]

_INFINITE = 1 << 60
_PRINTABLE = (0x20, 0x7E)
_ASCII = (0x00, 0x7F)
_BMP = (0x80, 0xFFFF)
_SURROGATES = (0xD800, 0xDFFF)
_MAX_CODE_POINT = 0x10FFFF


@dataclass(frozen=True, slots=True)
class _Alternative:
    rhs: tuple[str, ...]
    depth: int  # minimal depth of a derivation tree starting with this alternative


def sample_sentences(
    grammar: Grammar,
    *,
    count: int,
    seed: int,
    max_depth: int = 12,
    max_terminals: int = 200,
    ignore_rate: float = 0.25,
    plain: bool = False,
) -> list[str]:
    """``count`` random sentences of ``grammar`` (reproducible for a given ``seed``).

    ``max_depth`` bounds the derivation depth of free choices and ``max_terminals`` the number
    of terminals before the sampler only finishes what is open (both soft: the minimal
    completion of an open derivation is still added). ``ignore_rate`` is the chance of an
    ``ignore`` terminal's string in each gap between terminals (and before/after the sentence).
    ``plain``: terminals drawn the way a writer writes them (`random_string`).
    Raises ``GrammarError`` when a symbol is undefined or the start rule derives no sentence.
    """
    table = _alternatives(grammar)
    terminals = {t.name: t.pattern for t in grammar.terminals}
    ignores = [terminals[name] for name in grammar.ignore if name in terminals]
    rng = random.Random(seed)
    limits = (max_depth, max_terminals, ignore_rate, plain)
    return [_sentence(grammar.start, table, terminals, ignores, rng, *limits) for _ in range(count)]


def random_string(
    node: Pattern, rng: random.Random, *, max_extra_repeats: int = 4, plain: bool = False
) -> str:
    """A random string of the regex AST's language (``re.fullmatch`` would accept it).

    Unbounded or wide repetitions take their minimum plus a geometric number of extra rounds
    (at most ``max_extra_repeats``); a character class yields printable ASCII when it can (most
    of the time), otherwise other ASCII, BMP or any code point (never a surrogate). A
    `Difference` draws from its minuend until the text is none of its subtrahends'.

    ``plain``: the way a writer writes — an alternation takes one of its shortest items 19
    times in 20 (a character, not its escape), and a repetition goes on nine times in ten,
    up to 24 extra rounds (a few words, not a letter or two).
    """
    if isinstance(node, Difference):
        inside = _automaton(node)
        for _ in range(1000):
            text = random_string(
                node.minuend, rng, max_extra_repeats=max_extra_repeats, plain=plain
            )
            if inside.accepts(text.encode("utf-8", "surrogatepass")):
                return text
        raise ValueError("no text outside the subtrahends was drawn in 1,000 tries")
    go_on = 0.9 if plain else 0.5
    if plain:
        max_extra_repeats = max(max_extra_repeats, 24)
    out: list[str] = []
    stack: list[Node] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, String):
            out.append(item.text)
        elif isinstance(item, CharClass):
            out.append(chr(_random_code_point(item.ranges, rng)))
        elif isinstance(item, Concat):
            stack.extend(reversed(item.items))
        elif isinstance(item, Alternation):
            if plain and rng.random() < 0.95:
                shortest = min(_min_length(i) for i in item.items)
                stack.append(rng.choice([i for i in item.items if _min_length(i) == shortest]))
            else:
                stack.append(rng.choice(item.items))
        elif isinstance(item, Repeat):
            times = item.min
            extra = 0
            while extra < max_extra_repeats and rng.random() < go_on:
                extra += 1
            times += extra
            if item.max is not None:
                times = min(times, item.max)
            stack.extend([item.item] * times)
        elif isinstance(item, Difference):
            out.append(random_string(item, rng, max_extra_repeats=max_extra_repeats, plain=plain))
        elif not isinstance(item, Empty):
            raise TypeError(f"unknown regex node {item!r}")
    return "".join(out)


@lru_cache(maxsize=4096)
def _min_length(node: Node) -> int:
    """The fewest characters of a text of `node` (`random_string`'s plain alternations)."""
    if isinstance(node, String):
        return len(node.text)
    if isinstance(node, CharClass):
        return 1
    if isinstance(node, Concat):
        return sum(_min_length(i) for i in node.items)
    if isinstance(node, Alternation):
        return min((_min_length(i) for i in node.items), default=0)
    if isinstance(node, Repeat):
        return node.min * _min_length(node.item)
    if isinstance(node, Difference):
        return _min_length(node.minuend)
    return 0


@lru_cache(maxsize=64)
def _automaton(node: Difference) -> ByteDFA:
    """The difference's automaton, built once per pattern (a sentence draws it again and
    again)."""
    return compile_ast(node)


# ----------------------------------------------------------------------------- derivations


def _alternatives(grammar: Grammar) -> dict[str, list[_Alternative]]:
    """Each rule's alternatives with their minimal derivation depth (a fixpoint)."""
    by_lhs: dict[str, list[tuple[str, ...]]] = {}
    for rule in grammar.rules:
        by_lhs.setdefault(rule.lhs, []).append(rule.rhs)
    terminal_names = {t.name for t in grammar.terminals}
    for rule in grammar.rules:
        for symbol in rule.rhs:
            if symbol not in by_lhs and symbol not in terminal_names:
                raise GrammarError(f"symbol {symbol!r} in rule {rule.lhs!r} is not defined")
    if grammar.start not in by_lhs:
        raise GrammarError(f"the start rule {grammar.start!r} is not defined")
    depth = _min_depths(by_lhs, grammar.rules)
    if depth[grammar.start] >= _INFINITE:
        raise GrammarError(f"the start rule {grammar.start!r} derives no finite sentence")
    return {
        lhs: [_Alternative(rhs, d) for rhs in options if (d := _alt_depth(rhs, depth)) < _INFINITE]
        for lhs, options in by_lhs.items()
    }


def _min_depths(by_lhs: dict[str, list[tuple[str, ...]]], rules: Sequence[Rule]) -> dict[str, int]:
    """Each nonterminal's minimal derivation depth (1 + the deepest symbol of its best rule;
    terminals 0; `_INFINITE`: none finite), smallest first as in Knuth's generalisation of
    Dijkstra's algorithm: a rule's depth is known once its last nonterminal's is, and the
    first depth popped for a symbol is its least (a rule's depth never falls as its symbols'
    are found). Linear in the grammar's size, up to the heap: going over every rule until
    nothing changed took half a second on a schema of 5,000 rules."""
    depth = dict.fromkeys(by_lhs, _INFINITE)
    waiting: list[int] = []  # per rule: its nonterminal occurrences not yet known
    deepest: list[int] = []  # per rule: the deepest known of them
    users: dict[str, list[int]] = {}  # nonterminal -> the rules it occurs in, once per occurrence
    heap: list[tuple[int, str]] = []
    for r, rule in enumerate(rules):
        count = 0
        for symbol in rule.rhs:
            if symbol in by_lhs:
                users.setdefault(symbol, []).append(r)
                count += 1
        waiting.append(count)
        deepest.append(0)
        if not count:
            heap.append((1, rule.lhs))
    heapq.heapify(heap)
    while heap:
        d, symbol = heapq.heappop(heap)
        if depth[symbol] < _INFINITE:
            continue
        depth[symbol] = d
        for r in users.get(symbol, ()):
            deepest[r] = max(deepest[r], d)
            waiting[r] -= 1
            if not waiting[r]:
                lhs = rules[r].lhs
                if depth[lhs] >= _INFINITE:
                    heapq.heappush(heap, (deepest[r] + 1, lhs))
    return depth


def _alt_depth(rhs: tuple[str, ...], depth: dict[str, int]) -> int:
    deepest = max((depth.get(symbol, 0) for symbol in rhs), default=0)
    return _INFINITE if deepest >= _INFINITE else deepest + 1


def _sentence(
    start: str,
    table: dict[str, list[_Alternative]],
    terminals: dict[str, Pattern],
    ignores: list[Pattern],
    rng: random.Random,
    max_depth: int,
    max_terminals: int,
    ignore_rate: float,
    plain: bool,
) -> str:
    pieces: list[str] = []
    emitted = 0
    stack: list[tuple[str, int]] = [(start, 0)]
    while stack:
        symbol, level = stack.pop()
        options = table.get(symbol)
        if options is None:  # a terminal
            if ignores and rng.random() < ignore_rate:  # the gap before this terminal
                pieces.append(random_string(rng.choice(ignores), rng, plain=plain))
            pieces.append(random_string(terminals[symbol], rng, plain=plain))
            emitted += 1
            continue
        least = min(option.depth for option in options)
        if level >= max_depth or emitted >= max_terminals:
            chosen = rng.choice([option for option in options if option.depth == least])
        elif level < max_depth // 2:  # near the root, favour the richer (deeper) alternatives
            weights = [1 + option.depth - least for option in options]
            chosen = rng.choices(options, weights)[0]
        else:
            chosen = rng.choice(options)
        stack.extend((child, level + 1) for child in reversed(chosen.rhs))
    if emitted and ignores and rng.random() < ignore_rate:
        pieces.append(random_string(rng.choice(ignores), rng, plain=plain))
    return "".join(pieces)


# ----------------------------------------------------------------------------- code points


def _random_code_point(ranges: tuple[tuple[int, int], ...], rng: random.Random) -> int:
    if not ranges:
        raise ValueError("an empty character class has no strings")
    roll = rng.random()
    preferences = [_PRINTABLE, _ASCII, _BMP] if roll < 0.85 else [_ASCII, _BMP]
    if roll >= 0.95:
        preferences = [_BMP] if roll < 0.98 else []
    for window in [*preferences, (0, _MAX_CODE_POINT)]:
        clipped = _clip(ranges, window)
        if clipped:
            return _uniform(clipped, rng)
    raise ValueError("the character class holds only surrogates")


def _clip(ranges: tuple[tuple[int, int], ...], window: tuple[int, int]) -> list[tuple[int, int]]:
    """``ranges ∩ window`` without the surrogates (which UTF-8 cannot encode)."""
    out: list[tuple[int, int]] = []
    for lo, hi in ranges:
        lo, hi = max(lo, window[0]), min(hi, window[1])
        for a, b in ((lo, min(hi, _SURROGATES[0] - 1)), (max(lo, _SURROGATES[1] + 1), hi)):
            if a <= b:
                out.append((a, b))
    return out


def _uniform(ranges: list[tuple[int, int]], rng: random.Random) -> int:
    total = sum(hi - lo + 1 for lo, hi in ranges)
    pick = rng.randrange(total)
    for lo, hi in ranges:
        width = hi - lo + 1
        if pick < width:
            return lo + pick
        pick -= width
    raise AssertionError("unreachable")
