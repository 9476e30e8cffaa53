"""Counted repetitions (automata/counted.py) accept exactly what their expansion accepts."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from structgen.automata import compile_ast, parse_regex
from structgen.automata.counted import CountedSource, SequenceSource, compile_counted
from structgen.automata.nfa import AutomataLimits

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
