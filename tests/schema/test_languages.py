"""The regular languages behind schemas, against brute-force oracles (json, jsonschema, re)."""

from __future__ import annotations

import itertools
import json
import random
import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from structgen.automata import Node, Pattern, codepoint_dfa, compile_ast, intersect, search_language
from structgen.automata.codepoint_dfa import complement
from structgen.schema._emitter import strings_except
from structgen.schema._formats import format_nodes
from structgen.schema._numbers import NumRange, number_node
from structgen.schema._strings import encode, length_body, literal_body
from tests.conftest import shared_dir

CHECKER = Draft202012Validator.FORMAT_CHECKER


def _search_node(pattern: str) -> Node:
    """`re.search(pattern, s)` as a language (Python's `re`: the oracle here)."""
    return search_language(pattern, dialect="python").node


def matcher(*nodes: Pattern) -> Callable[[str], bool]:
    dfa = compile_ast(nodes[0])
    for n in nodes[1:]:
        dfa = intersect(dfa, compile_ast(n))

    def run(text: str) -> bool:
        state = dfa.start
        for byte in text.encode("utf-8", "surrogatepass"):
            state = dfa.next_state(state, byte)
            if state < 0:
                return False
        return bool(dfa.is_accepting(state))

    return run


def number_texts(rng: random.Random) -> list[str]:
    out = [str(i) for i in range(-60, 61)] + ["-0", "-0.0", "0.0", "1.0", "10.00"]
    for _ in range(600):
        a = rng.randint(-60, 60)
        out.append(f"{a}.{rng.randint(0, 10 ** rng.randint(1, 3))}")
    return out


BOUNDS = [None, 0, 1, -1, 2.5, -2.5, 10, 0.1, -0.75, 50]


@pytest.mark.parametrize("seed", range(6))
def test_numeric_ranges_match_jsonschema(seed: int) -> None:
    rng = random.Random(seed)
    texts = number_texts(rng)
    for _ in range(12):
        lo, hi = rng.choice(BOUNDS), rng.choice(BOUNDS)
        lo_x, hi_x, integer = rng.random() < 0.5, rng.random() < 0.5, rng.random() < 0.3
        schema: dict[str, object] = {"type": "integer" if integer else "number"}
        if lo is not None:
            schema["exclusiveMinimum" if lo_x else "minimum"] = lo
        if hi is not None:
            schema["exclusiveMaximum" if hi_x else "maximum"] = hi
        accepts = matcher(
            number_node(NumRange(lo, hi, lo_excl=lo_x, hi_excl=hi_x), integer=integer)
        )
        validator = Draft202012Validator(schema)
        for text in texts:
            assert accepts(text) == validator.is_valid(json.loads(text)), (schema, text)


def test_float_rounding_at_exclusive_bounds() -> None:
    accepts = matcher(number_node(NumRange(None, 1, hi_excl=True), integer=False))
    assert accepts("0.9999999")
    assert not accepts("0.99999999999999999999")  # parses to 1.0, which is not < 1
    at_least = matcher(number_node(NumRange(0.1, None), integer=False))
    assert at_least("0.1") and at_least("0.10") and not at_least("0.09999")


def test_string_encodings_decode_to_the_language() -> None:
    body = encode(_search_node("^[a-z\u00e9]+$"))
    accepts = matcher(body)
    # "a\\n" decodes to "a" + newline, which Python's `$` matches before (re.search finds it)
    for text in ["abc", "\u00e9t\u00e9", "\\u00e9", "\\u00E9", "\\u0061b", "a\\n"]:
        assert accepts(text), text
    for text in ["", "A", "\\u0041", "a\\n\\n", "a\\t", '\\"']:
        assert not accepts(text), text
    exact = matcher(literal_body('a"\n\u00e9'))
    assert exact('a\\"\\n\u00e9') and exact("a\\u0022\\u000a\\u00e9") and not exact('a"\n\u00e9')


def test_length_counts_code_points_not_bytes() -> None:
    accepts = matcher(length_body(2, 3))
    for text, ok in [
        ("ab", True),
        ("\u00e9\u00e9", True),
        ("\\n\\t\\u00e9", True),
        ("a", False),
        ("\\ud83d\\ude00a", True),
        ("\\ud83d\\ude00", False),
        ("abcd", False),
        ("\U0001f600\U0001f600", True),
    ]:
        assert accepts(text) == ok, text


def test_strings_except_excludes_every_encoding_of_the_words() -> None:
    words = ["a", "ab", "", 'q"']
    accepts = matcher(strings_except(words))  # (quoted strings)
    for text in ["a", "ab", "", 'q\\"', "\\u0061", "\\u0061\\u0062", "q\\u0022"]:
        assert not accepts(f'"{text}"'), text
    for text in ["b", "abc", "aa", "q", "q\\n", "\\u0062", "\\u0061\\u0061"]:
        assert accepts(f'"{text}"'), text


_NOT_IN_SET_ALPHABET = 'ab"/\né'
_NOT_IN_SET_TEXTS = [
    "".join(chars) for n in range(4) for chars in itertools.product(_NOT_IN_SET_ALPHABET, repeat=n)
]


@settings(max_examples=40, deadline=None)
@given(
    st.frozensets(st.text(_NOT_IN_SET_ALPHABET, max_size=4), max_size=5),
    st.booleans(),
)
def test_strings_except_is_every_other_string(words: frozenset[str], canonical: bool) -> None:
    """Brute force over short strings, spelled as json.dumps writes them: accepted exactly when
    the decoded string is none of the words (shared prefixes, words ending inside others, the
    empty word, escaped characters); the same set asked again is the same node."""
    node = strings_except(words, canonical=canonical)
    accepts = matcher(node)
    for text in _NOT_IN_SET_TEXTS:
        spelled = json.dumps(text, ensure_ascii=False)
        assert accepts(spelled) == (text not in words), (sorted(words), text)
    assert strings_except(set(words), canonical=canonical) is node


@pytest.mark.parametrize("pattern", ["^x-", "f.*o", "^[a-z]+$", "^\\d{2}$", "a|b$", "^(foo|bar)_"])
def test_complement_of_search_patterns(pattern: str) -> None:
    accepts = matcher(complement(_search_node(pattern)))
    for n in range(5):
        for chars in itertools.product("abfox-_1", repeat=n):
            text = "".join(chars)
            assert accepts(text) == (re.search(pattern, text) is None), text


FORMAT_SAMPLES = {
    "date": ["2020-02-29", "2021-02-29", "1900-02-29", "2000-02-29", "0000-01-01", "2020-04-31"],
    "date-time": ["2020-02-29T10:00:00Z", "2020-02-29t10:00:00.5+01:00", "2020-01-01T24:00:00Z"],
    "time": ["08:30:06Z", "08:30:06.1+23:59", "25:00:00Z", "08:30:06"],
    "ipv4": ["1.2.3.4", "01.2.3.4", "255.255.255.255", "256.1.1.1", "1.2.3"],
    "ipv6": ["::1", "::", "1:2:3:4:5:6:7:8", "1::2::3", "::ffff:1.2.3.4", "12345::", "fe80::1%x"],
    "uuid": ["2eb8aa08-aa98-11ea-b4aa-73b441d16380", "2eb8aa08aa9811eab4aa73b441d16380"],
    "email": ["a@b.com", "joe.bloggs@example.com"],
}


@pytest.mark.parametrize("name", sorted(FORMAT_SAMPLES))
def test_formats_never_accept_what_the_checker_rejects(name: str) -> None:
    nodes = format_nodes(name)
    assert nodes is not None
    accepts = matcher(*nodes)
    for text in FORMAT_SAMPLES[name]:
        if accepts(text):
            assert CHECKER.conforms(text, name), text
    exact = name not in ("email",)
    if exact:
        for text in FORMAT_SAMPLES[name]:
            assert accepts(text) == CHECKER.conforms(text, name), text


# The formats whose automaton agrees with every string instance of the official suite's optional
# format tests (the others are tighter: leap seconds, quoted e-mail local parts, IDNA labels).
SUITE_EXACT_FORMATS = [
    "date", "duration", "ipv4", "ipv6", "iri", "iri-reference", "json-pointer",
    "relative-json-pointer", "uri", "uri-reference", "uri-template", "uuid",
]  # fmt: skip


@pytest.mark.parametrize("name", SUITE_EXACT_FORMATS)
def test_formats_agree_with_the_official_suite(name: str) -> None:
    path = shared_dir("json-schema-test-suite") / "tests/draft2020-12/optional/format"
    accepts = matcher(*format_nodes(name))  # type: ignore[misc]
    for group in json.loads((path / f"{name}.json").read_text()):
        for test in group["tests"]:
            if isinstance(test["data"], str):
                assert accepts(test["data"]) == test["valid"], (test["description"], test["data"])


def test_every_date_of_four_centuries() -> None:
    accepts = matcher(*format_nodes("date"))  # type: ignore[misc]
    for year in (1, 4, 100, 400, 1900, 1999, 2000, 2024, 2100, 9999):
        for month in range(0, 14):
            for day in range(0, 33):
                text = f"{year:04d}-{month:02d}-{day:02d}"
                assert accepts(text) == CHECKER.conforms(text, "date"), text


@settings(max_examples=60, deadline=None)
@given(
    states=st.integers(1, 40),
    symbols=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_numpy_moore_refinement_numbers_blocks_as_the_loop(
    states: int, symbols: int, seed: int
) -> None:
    """`_moore_blocks` (numpy rounds, for big complements) gives the blocks the Python loop of
    `_minimise` gives, numbered alike: the regex built from them is the same text."""
    rng = random.Random(seed)
    table = [[rng.randrange(states) for _ in range(symbols)] for _ in range(states)]
    accepting = [rng.random() < 0.3 for _ in range(states)]
    old = codepoint_dfa._NUMPY_MOORE_CELLS
    try:
        codepoint_dfa._NUMPY_MOORE_CELLS = 1 << 60
        by_loop = codepoint_dfa._minimise(table, accepting)
        codepoint_dfa._NUMPY_MOORE_CELLS = 0
        by_numpy = codepoint_dfa._minimise(table, accepting)
    finally:
        codepoint_dfa._NUMPY_MOORE_CELLS = old
    assert by_numpy == by_loop
