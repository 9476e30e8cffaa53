"""The same subschema written at several places (definitions inlined, as generators of
normalized schemas do) compiles once: its rule is shared by content and base URI. Checked
against jsonschema for the language, and for what must not be shared: equal text under
different base URIs, and lenient mode's per-place warnings."""

from __future__ import annotations

import warnings
from typing import Any

from structgen.automata import String
from structgen.schema import SchemaOptions, compile_schema
from tests.schema.test_regressions import check

ACCEPT = SchemaOptions(mode="accept")

ADDRESS = {
    "type": "object",
    "properties": {
        "street": {"type": "string", "maxLength": 20},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
        "tags": {"type": "array", "items": {"enum": ["home", "work"]}},
    },
    "required": ["street"],
    "additionalProperties": False,
}


def _twice(second: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"home": ADDRESS, "work": second}}


def test_an_inlined_copy_adds_no_rules() -> None:
    copy = compile_schema(_twice(dict(ADDRESS)), options=ACCEPT)
    alone = compile_schema({"type": "object", "properties": {"home": ADDRESS}}, options=ACCEPT)
    other = dict(ADDRESS, required=["zip"])  # (one keyword apart: compiled apart)
    different = compile_schema(_twice(other), options=ACCEPT)
    assert len(copy.rules) < len(different.rules)
    # the copy's member rules are the first's: only the "work" member's own rules are new
    assert len(copy.rules) - len(alone.rules) < 8


def test_shared_rules_keep_the_language() -> None:
    other = dict(ADDRESS, required=["zip"])
    for schema in (_twice(dict(ADDRESS)), _twice(other)):
        check(
            schema,
            [
                {"home": {"street": "a"}, "work": {"street": "b", "zip": "12345"}},
                {"home": {"street": "a", "tags": ["home"]}, "work": {"street": "b"}},
                {"home": {"street": "a"}, "work": {"street": "b", "tags": ["x"]}},
                {"home": {"street": "a", "zip": "1"}},
                {"work": {"street": "s", "zip": "12345"}},
                {"work": {"zip": "12345"}},
                {"work": {"street": "s", "extra": 1}},
            ],
        )


def test_equal_text_under_different_base_uris_is_not_shared() -> None:
    # `{"$ref": "t"}` is the same text in both members, but resolves against each one's $id
    schema = {
        "$id": "http://example.com/root",
        "$defs": {
            "ta": {"$id": "http://example.com/a/t", "type": "string"},
            "tb": {"$id": "http://example.com/b/t", "type": "integer"},
        },
        "type": "object",
        "properties": {
            "p": {"$id": "http://example.com/a/", "properties": {"v": {"$ref": "t"}}},
            "q": {"$id": "http://example.com/b/", "properties": {"v": {"$ref": "t"}}},
            "r": {"$id": "http://example.com/a/", "allOf": [{"$ref": "t"}], "maxLength": 3},
            "s": {"$id": "http://example.com/b/", "allOf": [{"$ref": "t"}], "maxLength": 3},
        },
    }
    check(
        schema,
        [
            {"p": {"v": "x"}, "q": {"v": 1}},
            {"p": {"v": 1}},
            {"q": {"v": "x"}},
            {"r": "abc", "s": 12345},
            {"r": "abcd"},
            {"s": "a"},
        ],
        want_valid=2,
    )


def test_lenient_mode_warns_at_each_place() -> None:
    relaxed = {
        "allOf": [
            {"patternProperties": {"^a": {"type": "string"}}},
            {"patternProperties": {"^b": {"type": "integer"}}},
        ]
    }
    schema = {"type": "object", "properties": {"x": relaxed, "y": dict(relaxed)}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compile_schema(schema, options=SchemaOptions(mode="accept", lenient=True))
    where = {str(w.message).split(":")[0] for w in caught}
    assert any("/properties/x" in w for w in where), where
    assert any("/properties/y" in w for w in where), where


def test_python_values_json_cannot_hold_do_not_break_the_content_key() -> None:
    # a Python caller's annotations may hold tuples of dicts or sets: keyed, never hashed raw
    odd = {"type": "string", "examples": ({"x": 1},), "x-tags": {1, 2}}
    schema = {"type": "object", "properties": {"a": odd, "b": dict(odd), "c": dict(odd)}}
    grammar = compile_schema(schema, options=ACCEPT)
    plain = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert len(grammar.rules) > len(compile_schema(plain, options=ACCEPT).rules)


def test_numbers_equal_in_value_but_spelled_apart_are_not_shared() -> None:
    # generate mode writes each const as json.dumps does: 0.0 and -0.0, 1 and 1.0, stay apart
    schema = {
        "type": "object",
        "properties": {
            "a": {"const": 0.0},
            "b": {"const": -0.0},
            "c": {"const": 1},
            "d": {"const": 1.0},
        },
        "required": ["a", "b", "c", "d"],
    }
    grammar = compile_schema(schema, options=SchemaOptions(mode="generate"))
    texts = {d.pattern for d in grammar.terminals}
    for spelled in ("0.0", "-0.0", "1", "1.0"):
        assert String(spelled) in texts, spelled
