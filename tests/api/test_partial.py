"""`parse_partial`: the value a prefix of a JSON text shows so far (no model needed)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structgen.api.partial import parse_partial

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**12), max_value=10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


def is_structural_prefix(a: Any, b: Any) -> bool:
    """`a` can grow into `b`: strings extend, containers gain entries, the rest is equal."""
    if isinstance(a, str):
        return isinstance(b, str) and b.startswith(a)
    if isinstance(a, dict):
        return isinstance(b, dict) and all(
            k in b and is_structural_prefix(v, b[k]) for k, v in a.items()
        )
    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) <= len(b)
            and all(is_structural_prefix(x, y) for x, y in zip(a, b))
        )
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b and type(a) is type(b))


class TestPrefixes:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("", None),
            ("  ", None),
            ("{", {}),
            ('{"na', {}),  # an incomplete key is left out
            ('{"name"', {}),
            ('{"name": ', {}),  # a key without a value yet too
            ('{"name": "Ad', {"name": "Ad"}),  # an open string is closed
            ('{"name": "Ada", "age": 3', {"name": "Ada"}),  # a number at the end may grow
            ('{"name": "Ada", "age": 36 ', {"name": "Ada", "age": 36}),
            ('{"name": "Ada", "age": 36,', {"name": "Ada", "age": 36}),
            ('{"a": [1, 2', {"a": [1]}),
            ('{"a": [1, 2]', {"a": [1, 2]}),
            ('{"a": [{"b": [', {"a": [{"b": []}]}),
            ('{"a": tr', {}),  # a literal being typed
            ('{"a": true', {"a": True}),
            ('{"a": nul', {}),
            ('{"a": null}', {"a": None}),
            ('{"a": -1.5e3}', {"a": -1500.0}),
            ('{"a": "x\\', {"a": "x"}),  # a cut escape is left out
            ('{"a": "x\\u00', {"a": "x"}),
            ('{"a": "x\\u00e9', {"a": "xé"}),
            ('{"a": "\\ud83d', {"a": ""}),  # a high surrogate waits for its partner
            ('{"a": "\\ud83d\\ude00', {"a": "😀"}),
            ('{"a": "q\\"t\\n', {"a": 'q"t\n'}),
            ('"abc', "abc"),
            ("[", []),
            ("12", None),  # a top-level number is never shown
            ("null", None),
            ("false", False),
        ],
    )
    def test_prefix_value(self, text: str, expected: Any) -> None:
        assert parse_partial(text) == expected

    def test_default_before_any_value(self) -> None:
        assert parse_partial("", default={}) == {}
        assert parse_partial('{"a"', default=0) == {}

    def test_text_after_a_complete_value_is_ignored(self) -> None:
        assert parse_partial('{"a": 1} and more') == {"a": 1}

    def test_not_json_stops_at_the_first_bad_character(self) -> None:
        assert parse_partial('{"a": 1, oops: 2}') == {"a": 1}
        assert parse_partial('{"a": [1, @]}') == {"a": [1]}
        assert parse_partial("{'a': 1}") == {}

    def test_deep_nesting_does_not_recurse(self) -> None:
        assert parse_partial("[" * 50_000) is not None


class TestProperties:
    @settings(max_examples=300, deadline=None)
    @given(JSON_VALUES, st.booleans())
    def test_every_prefix_parses_and_grows_into_the_value(self, value: Any, indent: bool) -> None:
        text = json.dumps(value, indent=2 if indent else None)
        previous: Any = None
        for end in range(len(text) + 1):
            shown = parse_partial(text[:end])
            if previous is not None:
                assert is_structural_prefix(previous, shown), (text[:end], previous, shown)
            previous = shown if shown is not None else previous
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            assert parse_partial(text) == value  # the whole text: the value itself

    @settings(max_examples=100, deadline=None)
    @given(JSON_VALUES)
    def test_ascii_escaped_prefixes_too(self, value: Any) -> None:
        text = json.dumps(value, ensure_ascii=True)
        for end in range(len(text) + 1):
            parse_partial(text[:end])
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            assert parse_partial(text) == value

    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet='{}[]":,\\ u0123456789abcdeftrnl.-+E', max_size=40))
    def test_any_text_returns_without_raising(self, text: str) -> None:
        parse_partial(text)
