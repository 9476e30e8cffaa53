"""Counted repetitions (automata/counted.py) accept exactly what their expansion accepts."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import structgen.automata.counted as counted_module
from structgen.automata import ByteDFA, alternatives, compile_ast, parse_regex
from structgen.automata._native_subset import native_subset_available
from structgen.automata.counted import CountedSource, SequenceSource, compile_counted
from structgen.automata.nfa import AutomataLimits
from tests.automata.test_native_subset import _assert_isomorphic

LIMITS = AutomataLimits()

#: prefix-free units (one character or one escape) and units that are not (expanded instead)
UNITS = [r"[ab]", r"(?:a|\\[nt])", r'(?:[^\\"]|\\u[0-9a-f]{2})', r"é|b"]
NOT_PREFIX_FREE = [r"a+", r"(?:a|ab)", r"a?"]


def counted_dfa(pattern: str) -> object:
    """`pattern`'s DFA with every repetition counted that qualifies (None: none does)."""
    node = parse_regex(pattern)
    return compile_counted(
        node,
        lambda part: compile_ast(part, limits=LIMITS),
        fingerprint="test",
        limits=LIMITS,
        count_above=0,
    )


@settings(max_examples=60, deadline=None)
@given(
    unit=st.sampled_from(UNITS),
    lo=st.integers(0, 4),
    extra=st.one_of(st.none(), st.integers(0, 4)),
    texts=st.lists(st.text(alphabet='ab\\ntu0f"é', max_size=12), min_size=1, max_size=25),
)
def test_counted_repetition_matches_python_re(
    unit: str, lo: int, extra: int | None, texts: list[str]
) -> None:
    bound = f"{{{lo},}}" if extra is None else f"{{{lo},{lo + extra}}}"
    pattern = f'"(?:{unit}){bound}"'
    dfa = counted_dfa(pattern)
    assume(dfa is not None)  # (`{0,0}` and `{1,1}` parse to no repetition)
    assert isinstance(dfa._source, SequenceSource)  # type: ignore[attr-defined]
    expanded = compile_ast(parse_regex(pattern), limits=LIMITS)
    for text in [*texts, '""', '"' + "a" * lo + '"']:
        quoted = text if text.startswith('"') else f'"{text}"'
        data = quoted.encode()
        want = re.fullmatch(pattern, quoted) is not None
        assert dfa.accepts(data) == want == expanded.accepts(data), quoted  # type: ignore[attr-defined]


@pytest.mark.parametrize("unit", NOT_PREFIX_FREE)
def test_items_that_are_not_prefix_free_are_expanded(unit: str) -> None:
    assert counted_dfa(f"(?:{unit}){{2,9}}") is None


def test_a_long_string_body_compiles_without_expansion() -> None:
    """maxLength 5,000: counted, so the NFA of 10,000 states is not built; states appear as
    the input reaches them, and the count holds at the bound."""
    node = parse_regex(r'"[^"\\]{0,5000}"')
    dfa = compile_ast(node)
    source = dfa._source  # type: ignore[attr-defined]
    assert isinstance(source, SequenceSource)
    assert any(isinstance(p._source, CountedSource) for p in source.parts)  # type: ignore[attr-defined]
    assert dfa.accepts(b'"ab"') and dfa.num_states < 100
    assert dfa.accepts(b'"' + b"x" * 5000 + b'"')
    assert not dfa.accepts(b'"' + b"x" * 5001 + b'"')


def test_empty_and_crossed_bounds() -> None:
    assert compile_ast(parse_regex(r"a{0,0}")).accepts(b"")
    dfa = compile_ast(parse_regex(r"(?:[ab]){3000,3000}"))
    assert dfa.accepts(b"a" * 3000) and not dfa.accepts(b"a" * 2999)


#: counted repetitions and sequences whose rows C builds (`_subset.c`, the union context's
#: counted and sequence modes): bounded, unbounded, several counted parts, nullable parts
NATIVE_PATTERNS = [
    r'"(?:[ab]|\\[nt]){2,7}"',
    r'"(?:[^"\\]|\\u[0-9a-f]{2}){0,5}"',
    r"(?:é|b){3,}x",
    r"(?:[ab]){0,4}(?:c|d){1,3}",
    r"x?(?:[ab]){2,3}y?(?:[cd]){0,2}z?",
    r"(?:a|\\[nt]){5,5}",
]


def _counted(pattern: str, native: bool) -> ByteDFA:
    old = counted_module.NATIVE_ROWS
    counted_module.NATIVE_ROWS = native
    try:
        dfa = counted_dfa(pattern)
        assert isinstance(dfa, ByteDFA)
        if native:
            dfa.build_all()  # (every part goes native while the switch is on)
        else:
            dfa.row(dfa.start)
        return dfa
    finally:
        counted_module.NATIVE_ROWS = old


@pytest.mark.skipif(not native_subset_available(), reason="the C row builders are not built")
@pytest.mark.parametrize("pattern", NATIVE_PATTERNS)
def test_native_rows_same_dfa_as_python(pattern: str) -> None:
    """Every state, key and row of the C-built automaton (and of its counted parts) is the
    Python one's: the whole automaton is explored from the start."""
    native = _counted(pattern, True)
    assert native._native is not None
    python = _counted(pattern, False)
    old = counted_module.NATIVE_ROWS
    try:
        counted_module.NATIVE_ROWS = False  # (the Python automaton keeps building in Python)
        assert python._native is None
        n = _assert_isomorphic(native, python)
        assert n == native.num_states == python.num_states
        source = native._source
        parts = source.parts if isinstance(source, SequenceSource) else [native]
        for part in parts:
            if isinstance(part._source, CountedSource):
                assert part._native is not None  # (the counted part went native too)
    finally:
        counted_module.NATIVE_ROWS = old
    rng = random.Random(pattern)
    for _ in range(300):
        text = "".join(rng.choice('ab\\ntu0f"écdxyz') for _ in range(rng.randint(0, 10)))
        want = re.fullmatch(pattern, text) is not None
        assert native.accepts(text.encode()) == want, text


@pytest.mark.skipif(not native_subset_available(), reason="the C row builders are not built")
def test_native_counted_rows_with_a_python_built_unit() -> None:
    """A unit whose rows Python builds (a choice of words) and that grew behind the C side's
    back: C asks Python for its rows and fresh arrays, and still counts exactly."""
    unit = alternatives([b"ab", b"cd", b"e"])
    unit.build_all()
    source = CountedSource(unit, 2, 40)
    dfa = ByteDFA(source, fingerprint="test-counted-python-unit", limits=LIMITS)
    assert dfa.accepts(b"abe") and dfa.accepts(b"e" * 40) and not dfa.accepts(b"e" * 41)
    assert dfa._native is not None
    assert not dfa.accepts(b"e") and not dfa.accepts(b"abc")
    assert dfa.key_of(dfa.next_state(dfa.start, ord("a"))) == (0, unit.next_state(unit.start, 97))


def _prefix_free_by_rows(dfa: ByteDFA) -> bool:
    """The definition, state by state: no empty text, and no accepting state moves on."""
    if dfa.is_empty or dfa.is_accepting(dfa.start):
        return False
    return all(
        not dfa.is_accepting(s) or bool((dfa.row(s) < 0).all()) for s in range(dfa.num_states)
    )


@pytest.mark.parametrize("pattern", [*UNITS, *NOT_PREFIX_FREE, r"ab|cd", r"a(?:b|c)d", r"x*y"])
def test_prefix_free_check_reads_the_table_whole(pattern: str) -> None:
    """`is_prefix_free_unit` reads the built table at once; the answer is the row-by-row one."""
    fast = compile_ast(parse_regex(pattern), limits=LIMITS)
    slow = compile_ast(parse_regex(pattern), limits=LIMITS)
    slow.build_all()
    assert counted_module.is_prefix_free_unit(fast) == _prefix_free_by_rows(slow)
    assert counted_module.is_prefix_free_unit(fast) == (pattern not in NOT_PREFIX_FREE)
