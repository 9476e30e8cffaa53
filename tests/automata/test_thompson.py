"""Thompson's construction in C (`_thompson.c`) builds the same NFA as the Python builder."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

from structgen.automata import nfa, parse_regex
from structgen.automata.dfa import ByteDFA, NFASource
from structgen.automata.nfa import MATCH, AutomataLimits, ByteNFA

LIB = nfa._thompson()
pytestmark = pytest.mark.skipif(LIB is None, reason="the C extension is not built")

PATTERNS = [
    r"a{3,7}",
    r"(?:ab|c)*d{2,}",
    r"[\w.-]{1,50}@x",
    r"(?:é|b|)+",
    r"x{0,0}y",
    r"(a|)*",
    r'"(?:[^"\\]|\\["\\/bfnrtu]){0,300}"',
    r"(?:(?:a{2}){3}|b?){2,5}",
    r"(?:-?(?:0|[1-9][0-9]{0,5})(?:\.[0-9]{1,4})?){1,3}",
    r"[^\x00-\x7f]{2,40}|\d+",
]


def python_nfa(pattern: str) -> ByteNFA:
    node = parse_regex(pattern)
    b = nfa._Builder(10**6, pattern)
    match = b.new(MATCH)
    start = b.compile(node, match)
    ranges = frozenset(b.ranges | {(x, x) for x in b.string_bytes})
    return ByteNFA(b.kind, [tuple(t) for t in b.eps], b.node, b.next, b.pool, start, match, ranges)


def native_nfa(pattern: str) -> ByteNFA:
    node = parse_regex(pattern)
    states = nfa.nfa_size(node) + 1
    return nfa._build_native(LIB, nfa._Builder(10**6, pattern), node, states, 10**6, pattern)


def dag(pool: list[Any], root: int) -> Any:
    """A pool DAG as nested tuples (pool offsets differ between the builders)."""
    return tuple((lo, hi, None if c < 0 else dag(pool, c)) for lo, hi, c in pool[root])


@pytest.mark.parametrize("pattern", PATTERNS)
def test_same_states_in_the_same_order(pattern: str) -> None:
    py, c = python_nfa(pattern), native_nfa(pattern)
    assert (c.kind, c.next, c.live, c.start, c.match) == (py.kind, py.next, py.live, py.start, 0)
    assert [c.eps[s] for s in range(len(c))] == [tuple(py.eps[s]) for s in range(len(py))]
    consume = [s for s in range(len(py)) if py.kind[s] == nfa.CONSUME]
    assert [dag(c.pool, c.node[s]) for s in consume] == [dag(py.pool, py.node[s]) for s in consume]
    assert c.ranges == py.ranges


@pytest.mark.parametrize("pattern", PATTERNS)
def test_same_language_as_python_re(pattern: str) -> None:
    limits = AutomataLimits()
    dfa = ByteDFA(NFASource(native_nfa(pattern)), fingerprint="t", limits=limits)
    rng = random.Random(pattern)
    alphabet = 'abcdxy@.-é"\\/u0129-'
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert dfa.accepts(text.encode()) == (re.fullmatch(pattern, text) is not None), text


def test_build_nfa_uses_c_above_a_few_states_and_keeps_its_limits() -> None:
    big = nfa.build_nfa(parse_regex(r"[ab]{0,100}"), max_states=10**6, pattern="p")
    assert big.arrays is not None  # built in C
    small = nfa.build_nfa(parse_regex(r"ab"), max_states=10**6, pattern="p")
    assert small.arrays is None
    with pytest.raises(nfa.RegexError, match="UTF-8 nodes"):
        nfa.build_nfa(parse_regex(r"[^a]{0,60}"), max_states=125, pattern="p")
