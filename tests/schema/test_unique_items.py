"""`uniqueItems` beside the grammar (`structgen/schema/_unique.py`), against jsonschema.

Texts go through a `Matcher` token by token with Llama-3.1 (every token's mask bit must agree
with `accept_token`); the oracle is jsonschema. Random walks along the masks check the other
half of exactness: the mask never runs dry, and whatever ends is valid.
"""

from __future__ import annotations

import json
import random
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from structgen import Compiler, Matcher, SchemaOptions, UnsupportedSchemaError
from structgen.engines.unique_items import JsonTracker, UniqueArray
from structgen.schema import compile_schema
from tests.conftest import load_tokenizer, load_vocab
from tests.oracles.checks import assert_ajv_accepts

STRINGS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
INTEGERS = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
NUMBERS = {"type": "array", "items": {"type": "number"}, "uniqueItems": True}
COUNTS = {"type": "array", "items": {"type": "integer", "minimum": 0}, "uniqueItems": True}
WEIGHTS = {
    "type": "array",
    "items": {"type": "number", "exclusiveMinimum": 0.5},
    "uniqueItems": True,
}
COLOURS = ["red", "green", "greenish", "blue", "\U0001f600"]
ENUM = {"type": "array", "items": {"enum": COLOURS}, "uniqueItems": True}
ALL_OF_THEM = {"type": "array", "items": {"$ref": "#/$defs/c"}, "uniqueItems": True, "minItems": 5}
ALL_OF_THEM["$defs"] = {"c": {"type": "string", "enum": COLOURS}}
SCHEMA = {
    "type": "object",
    "properties": {
        "tags": STRINGS,
        "ids": INTEGERS,
        "scores": {"$ref": "#/$defs/numbers"},
        "groups": {"type": "array", "items": {"type": "object", "properties": {"names": STRINGS}}},
        "plain": {"type": "array", "items": {"type": "string"}},
        "colours": ENUM,
    },
    "additionalProperties": {"type": "object", "properties": {"codes": STRINGS}},
    "$defs": {"numbers": NUMBERS},
}


def compiled(schema: Any, mode: str = "accept") -> Any:
    """Accept mode by default: the tests below write items in every JSON spelling."""
    options = SchemaOptions(mode=mode)  # type: ignore[arg-type]
    return Compiler(load_vocab("llama3_1")).json_schema(schema, options=options)


def run(grammar: Any, text: str) -> bool:
    """Feed `text` token by token; every mask bit must agree with `accept_token`."""
    matcher = Matcher(grammar)
    for token in load_tokenizer("llama3_1").encode(text, add_special_tokens=False):
        mask = matcher.allowed_mask()
        allowed = bool((int(mask[token >> 5]) >> (token & 31)) & 1)
        accepted = matcher.accept_token(token)
        assert allowed == accepted, (text, token)
        if not accepted:
            return False
    return matcher.can_terminate()


def valid(schema: Any, instance: Any) -> bool:
    return bool(Draft202012Validator(schema).is_valid(instance))


CASES: list[Any] = [
    {"tags": ["a", "b", "ab"]},
    {"tags": ["a", "a"]},
    {"tags": ["a", "ab", "a"]},
    {"tags": ["é", "\u00e9"]},
    {"tags": ["x", "y"], "plain": ["x", "x"]},
    {"ids": [1, 10, 0, -1]},
    {"ids": [0, 0]},
    {"ids": [1, 2, 1]},
    {"ids": [5, -5]},
    {"scores": [1, 1.0]},
    {"scores": [0.5, 0.25, 1e2, 100]},
    {"scores": [-0.0, 0]},
    {"groups": [{"names": ["a", "b"]}, {"names": ["a", "b"]}]},
    {"groups": [{"names": ["a", "a"]}]},
    {"other": {"codes": ["x", "x"]}},
    {"colours": ["red", "green", "greenish"]},
    {"colours": ["red", "blue", "red"]},
    {"colours": COLOURS},
    {"colours": [*COLOURS, "red"]},
    {"tags": [], "other": {"codes": ["x", "y"]}},
]


@pytest.mark.parametrize("instance", CASES, ids=[json.dumps(c)[:40] for c in CASES])
def test_repeats_are_refused_and_the_rest_accepted(instance: Any) -> None:
    grammar = compiled(SCHEMA)
    assert run(grammar, json.dumps(instance)) == valid(SCHEMA, instance)


def test_escaped_and_literal_spellings_of_one_string_are_one_item() -> None:
    grammar = compiled(STRINGS)
    assert not run(grammar, '["\\u0061", "a"]')
    assert not run(grammar, '["a\\"", "a\\u0022"]')
    assert run(grammar, '["a\\\\", "a"]')


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.text(alphabet="ab é", max_size=3), max_size=5),
    st.lists(st.integers(-3, 12), max_size=5),
)
def test_lists_with_and_without_repeats(strings: list[str], numbers: list[int]) -> None:
    instance = {"tags": strings, "ids": numbers}
    grammar = compiled(SCHEMA)
    assert run(grammar, json.dumps(instance)) == valid(SCHEMA, instance)


@pytest.mark.parametrize(
    "schema",
    [STRINGS, INTEGERS, NUMBERS, ENUM, ALL_OF_THEM, COUNTS, WEIGHTS],
    ids=["str", "int", "num", "enum", "all", "counts", "weights"],
)
@pytest.mark.parametrize("mode", ["accept", "generate"])
def test_random_walks_along_the_masks_never_run_dry_and_end_valid(schema: Any, mode: str) -> None:
    vocab = load_vocab("llama3_1")
    grammar = compiled(schema, mode)
    rng = random.Random(0)
    eos = set(vocab.eos_token_ids)
    finished = []
    for _ in range(12):
        matcher = Matcher(grammar)
        text = b""
        for step in range(40):
            mask = matcher.allowed_mask()
            bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[: vocab.size]
            allowed = np.flatnonzero(bits)
            assert len(allowed), text  # the mask never runs dry
            ending = [t for t in allowed.tolist() if t in eos]
            # short texts: prefer separators, closing the array once it has a few items
            if ending and (step > 25 or rng.random() < 0.2):
                break
            token = int(rng.choice(allowed.tolist()))
            if token in eos:
                break
            assert matcher.accept_token(token)
            text += vocab.token_bytes(token)
        if matcher.can_terminate():
            assert valid(schema, json.loads(text)), text
            finished.append(text.decode())
    assert_ajv_accepts(schema, finished)


def test_bounded_below_numbers_stay_open() -> None:
    counts = Matcher(compiled(COUNTS))
    assert counts.accept_bytes(b"[0, 5, ")
    assert not counts.copy().accept_bytes(b"0")
    assert not counts.copy().accept_bytes(b"5]")
    assert counts.accept_bytes(b"50]")
    weights = Matcher(compiled(WEIGHTS))
    assert weights.accept_bytes(b"[1, ")
    assert not weights.copy().accept_bytes(b"1.0]")
    assert weights.accept_bytes(b"1.0") and weights.accept_bytes(b"1]")  # 1.01


def test_zero_cannot_grow_so_a_second_zero_is_refused_when_it_starts() -> None:
    grammar = compiled(INTEGERS)
    matcher = Matcher(grammar)
    assert matcher.accept_bytes(b"[0, ")
    assert not matcher.accept_bytes(b"0")  # "0" could only end as a repeat
    assert matcher.accept_bytes(b"-")  # "-0" too, but "-" may still become "-7"
    assert not matcher.accept_bytes(b"0")
    assert matcher.accept_bytes(b"7]")


def test_a_set_of_strings_never_leaves_only_taken_values() -> None:
    grammar = compiled(ENUM)
    matcher = Matcher(grammar)
    assert matcher.accept_bytes(b'["greenish", "green", ')
    assert not matcher.accept_bytes(b'"g')  # "g" could only end as a value already there
    assert not matcher.accept_bytes(b'"\\u0067')  # the same "g", escaped
    assert matcher.copy().accept_bytes(b'"\\u006')  # may still become "\\u0062": blue
    assert matcher.accept_bytes(b'"\\u0072')  # "r": red is free
    assert matcher.accept_bytes(b'ed", "blue", "\\ud83d\\ude00"')
    assert not matcher.accept_bytes(b",")  # every value is taken: no item can follow
    assert matcher.accept_bytes(b"]")
    assert not Matcher(grammar).accept_bytes(b'["red", "\\u0072ed"')
    walk = Matcher(compiled(ALL_OF_THEM))
    assert walk.accept_bytes(b'["red", "green", "blue", "greenish", ')
    assert not walk.accept_bytes(b'"gr')
    assert walk.accept_bytes(b'"\\ud83d')  # the first half of the last value
    assert not walk.copy().accept_bytes(b"\\ude01")
    assert walk.accept_bytes(b'\\ude00"]') and walk.can_terminate()


def test_a_long_enum_is_spelled_compactly_and_judged_so() -> None:
    # Above 64 strings the grammar spells printable ASCII raw only: after the taken "éx", an
    # unfinished `\\u00` could only become "é" (not "\\u0061"), so it is refused at once.
    words = [f"a{i}" for i in range(70)] + ["éx"]
    grammar = compiled({"type": "array", "items": {"enum": words}, "uniqueItems": True})
    matcher = Matcher(grammar)
    assert matcher.accept_bytes(b'["\\u00e9x", ')
    assert not matcher.copy().accept_bytes(b'"\\u00')
    assert not matcher.copy().accept_bytes(b'"\\u0061')  # the grammar's own refusal
    assert matcher.accept_bytes(b'"a1", "a10"]') and matcher.can_terminate()


def test_rollback_and_copy_keep_their_own_items() -> None:
    matcher = Matcher(compiled(STRINGS))
    assert matcher.accept_bytes(b'["a", ')
    clone = matcher.copy()
    assert clone.accept_bytes(b'"b", ')
    assert not clone.accept_bytes(b'"b"')
    assert matcher.accept_bytes(b'"b"]')  # the original never saw "b"
    matcher.rollback(1)
    assert not matcher.accept_bytes(b'"a"')


def test_the_tracker_follows_paths_and_values() -> None:
    arrays = (UniqueArray((("k", "a"), ("i",)), "number"),)
    tracker = JsonTracker().feed(b'{"a": [[1, 2], [1.0, ', arrays)
    assert tracker is not None
    assert tracker.feed(b"1e0", arrays) is not None  # the number may go on: "1e05"
    assert tracker.feed(b"1e0]", arrays) is None
    assert tracker.feed(b"3]]}", arrays) is not None
    # values compare without expanding exponents (a model may write any exponent)
    huge = JsonTracker().feed(b'{"a": [[1e-99999999, ', arrays)
    assert huge is not None and huge.feed(b"10e-100000000]", arrays) is None


UNSUPPORTED = [
    {"type": "array", "items": {"type": "integer", "maximum": 9}, "uniqueItems": True},
    {"type": "array", "items": {"type": "number", "minimum": -1}, "uniqueItems": True},
    {"type": "array", "items": {"type": "integer", "multipleOf": 2}, "uniqueItems": True},
    {"type": "array", "items": {"enum": ["a", 1]}, "uniqueItems": True},
    {"type": "array", "items": {"enum": ["a", "b"]}, "uniqueItems": True, "minItems": 3},
    {"type": "array", "items": {"enum": ["a", "b"], "maxLength": 1}, "uniqueItems": True},
    {"type": "array", "items": {"type": "string", "maxLength": 3}, "uniqueItems": True},
    {"type": "array", "items": {"type": "object"}, "uniqueItems": True},
    {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True},
    {"anyOf": [STRINGS, {"type": "null"}]},
    {"allOf": [STRINGS, {"items": {"pattern": "^a"}}]},
    {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "contains": {"const": "a"}},
    {"$ref": "#/$defs/t", "$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}}}}
    | {"$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}, "uniqueItems": True}}},
    {"type": "object", "patternProperties": {"^x": STRINGS}},
]


@pytest.mark.parametrize("schema", UNSUPPORTED, ids=range(len(UNSUPPORTED)))
def test_what_could_run_out_of_new_items_is_still_refused(schema: Any) -> None:
    with pytest.raises(UnsupportedSchemaError, match="uniqueItems") as info:
        compiled(schema)
    assert info.value.pointer is not None and info.value.pointer.endswith("/uniqueItems")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Compiler(load_vocab("llama3_1")).json_schema(schema, options=SchemaOptions(lenient=True))
    assert any("uniqueItems" in str(w.message) for w in caught)


def test_a_bare_grammar_still_refuses_unique_items() -> None:
    # Tool-call and other grammars embed schema grammars without the guard.
    with pytest.raises(UnsupportedSchemaError, match="uniqueItems"):
        compile_schema(STRINGS, options=SchemaOptions())


def test_unique_grammars_pickle_by_recipe() -> None:
    import pickle

    grammar = compiled(SCHEMA)
    clone = pickle.loads(pickle.dumps(grammar))
    assert clone == grammar
    assert not run(clone, '{"tags": ["a", "a"]}')


@pytest.mark.parametrize("name", ["gpt2", "mistral"])
def test_token_groups_match_their_definitions_token_by_token(name: str) -> None:
    """The guard's per-vocabulary token groups (computed over the concatenated bytes) equal
    their definitions applied to each token's bytes."""
    import re

    from structgen.engines.unique_items import _NUMBER_BYTES, _TokenGroups
    from structgen.masks._bitmask import pack_bool_mask

    vocab = load_vocab(name)
    groups = _TokenGroups(vocab)
    finishes = re.compile(rb"[0-9].*[^0-9+\-.eE]", re.DOTALL)
    number = bytes(sorted(_NUMBER_BYTES))
    texts = [vocab.token_bytes(t) for t in range(vocab.size)]
    quote = np.array([d.count(b'"') > 0 for d in texts])
    item_start = np.array(
        [d.count(b'"') > 1 or finishes.search(d) is not None for d in texts], dtype=bool
    )
    ends_number = np.array([bool(d.translate(None, number)) for d in texts])
    zero = np.array([b"0" in d for d in texts])
    assert np.array_equal(groups.quote, pack_bool_mask(quote))
    assert np.array_equal(groups.item_start, pack_bool_mask(item_start))
    assert np.array_equal(groups.ends_number, pack_bool_mask(ends_number))
    assert np.array_equal(groups.zero, pack_bool_mask(zero))
