"""Property: for random patterns and strings, the DFA agrees with ``re.fullmatch``."""

from __future__ import annotations

import re
import warnings

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from structgen.automata import compile_regex, intersect

# Characters the strings are drawn from: ASCII-heavy, plus accents, CJK, emoji and the
# characters with surprising case folding.
TEXT_CHARS = list("abcABC019 _-.\n\t") + list("éÉüß中文😀🎉\u00a0") + list("kK\u212asſıİσςΣ")

LITERALS = st.sampled_from(
    [*"abcAB01 _-é中😀kKsſß", r"\.", r"\*", r"\\", r"\(", r"\[", r"\{", r"\n", r"\t"]
)
ESCAPES = st.sampled_from(
    [r"\d", r"\w", r"\s", r"\D", r"\W", r"\S", ".", r"\x41", r"\u00e9", r"\U0001F600", r"\-"]
)
CLASS_ITEMS = st.sampled_from(
    ["a", "b", "z", "A", "0", "_", " ", "é", "中", "😀", "k", "σ", r"\]", r"\\", r"\-", r"\^",
     "a-c", "A-Z", "0-9", "à-ÿ", "一-龥", "Σ-ω", r"\d", r"\w", r"\s", r"\W", r"\x00-\x1f"]
)  # fmt: skip
QUANTIFIERS = st.sampled_from(
    ["*", "+", "?", "{2}", "{0,2}", "{1,3}", "{2,}", "{,2}", "*?", "+?", "??", "{1,2}?"]
)


@st.composite
def char_classes(draw: st.DrawFn) -> str:
    negate = draw(st.booleans())
    items = draw(st.lists(CLASS_ITEMS, min_size=1, max_size=4))
    return "[" + ("^" if negate else "") + "".join(items) + "]"


ATOMS = st.one_of(LITERALS, LITERALS, ESCAPES, char_classes())


def _extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(inner, QUANTIFIERS).map(lambda t: f"(?:{t[0]}){t[1]}"),
        st.tuples(LITERALS | ESCAPES, QUANTIFIERS).map("".join),
        st.lists(inner, min_size=2, max_size=4).map("".join),
        st.lists(inner, min_size=2, max_size=3).map(lambda xs: "(" + "|".join(xs) + ")"),
        inner.map(lambda x: f"({x})"),
        st.tuples(st.sampled_from(["i", "s", "-i", "a", "is", "-s"]), inner).map(
            lambda t: f"(?{t[0]}:{t[1]})"
        ),
    )


PATTERNS = st.recursive(ATOMS, _extend, max_leaves=8)
ANCHORED = st.tuples(
    st.sampled_from(["", "^", r"\A"]),
    PATTERNS | PATTERNS.map(lambda x: f"(?P<name>{x})"),
    st.sampled_from(["", "$", r"\Z"]),
)
TEXT = st.text(alphabet=st.sampled_from(TEXT_CHARS), max_size=10)
ANY_TEXT = st.text(st.characters(codec="utf-8"), max_size=6)  # any code point but surrogates


def _no_surrogates(s: str) -> bool:
    return not any(0xD800 <= ord(c) <= 0xDFFF for c in s)


def _matching(data: st.DataObject, compiled: re.Pattern[str]) -> list[str]:
    """A few strings ``compiled`` fully matches (none when it has a class matching nothing)."""
    matching = st.from_regex(compiled, fullmatch=True).filter(_no_surrogates)
    try:
        return data.draw(st.lists(matching, max_size=3), label="matching")
    except InvalidArgument:  # e.g. [^\w\W]: from_regex cannot generate from an empty class
        return []


def _check(data: st.DataObject, pattern: str, flags: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        compiled = re.compile(pattern, flags)
    dfa = compile_regex(
        pattern, ignore_case=bool(flags & re.IGNORECASE), dotall=bool(flags & re.DOTALL)
    )
    samples = data.draw(st.lists(TEXT, max_size=6), label="text")
    samples += data.draw(st.lists(ANY_TEXT, max_size=2), label="any text")
    samples += _matching(data, compiled)
    for s in samples:
        expected = compiled.fullmatch(s) is not None
        assert dfa.accepts(s.encode()) == expected, (pattern, s, expected)


SETTINGS = settings(
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@SETTINGS
@given(st.data(), ANCHORED)
def test_agrees_with_re(data: st.DataObject, parts: tuple[str, str, str]) -> None:
    _check(data, "".join(parts), 0)


@SETTINGS
@given(st.data(), PATTERNS)
def test_agrees_with_re_ignore_case(data: st.DataObject, pattern: str) -> None:
    _check(data, pattern, re.IGNORECASE)


@settings(max_examples=200, deadline=None)
@given(st.data(), PATTERNS)
def test_agrees_with_re_dotall(data: st.DataObject, pattern: str) -> None:
    _check(data, pattern, re.DOTALL)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(st.data(), PATTERNS, PATTERNS)
def test_intersection_agrees_with_re(data: st.DataObject, p: str, q: str) -> None:
    rp, rq = re.compile(p), re.compile(q)
    dfa = intersect(compile_regex(p), compile_regex(q))
    samples = data.draw(st.lists(TEXT, max_size=6))
    samples += _matching(data, rp) + _matching(data, rq)
    assume(samples)
    for s in samples:
        expected = rp.fullmatch(s) is not None and rq.fullmatch(s) is not None
        assert dfa.accepts(s.encode()) == expected, (p, q, s)
