"""Bad schemas: every failure is a typed error with the JSON pointer of the culprit."""

from __future__ import annotations

import json
import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from structgen.errors import LimitExceededError, SchemaError, UnsupportedSchemaError
from structgen.schema import SchemaOptions, compile_schema, data_fingerprint, schema_fingerprint

STRICT = SchemaOptions()
# what ECMA-262 rejects is invalid when accepting; generate mode reads such a pattern in
# Python's (then Rust's) syntax instead (tests/schema/test_regressions.py)
ACCEPT = SchemaOptions(mode="accept")

INVALID = [
    ({"type": "strnig"}, "/type"),
    ({"type": []}, "/type"),
    ({"properties": {"a": {"minLength": -1}}}, "/properties/a/minLength"),
    ({"maxItems": "3"}, "/maxItems"),
    ({"required": "a"}, "/required"),
    ({"enum": 3}, "/enum"),
    ({"multipleOf": 0}, "/multipleOf"),
    ({"pattern": 5}, "/pattern"),
    # ECMA-262 (u flag) rejects these patterns: the schema is invalid
    ({"pattern": "a\\1"}, "/pattern"),
    ({"pattern": "\\d{2,1}"}, "/pattern"),
    ({"properties": {"a": {"pattern": "(?i)x"}}}, "/properties/a/pattern"),
    ({"patternProperties": {"x{": {"type": "string"}}}, "/patternProperties/x{"),
    ({"anyOf": []}, "/anyOf"),
    ({"items": 3}, "/items"),
    ({"properties": []}, "/properties"),
    ({"$ref": "#/$defs/missing"}, "/$ref"),
    ({"properties": {"a": {"$ref": "#/nope"}}}, "/properties/a/$ref"),
    ({"$ref": "#missing-anchor"}, "/$ref"),
    ({"$ref": 3}, "/$ref"),
    ({"properties": {"a": 3}}, "/properties/a"),
]

UNSATISFIABLE = [
    (False, "/"),
    ({"enum": []}, "/enum"),
    ({"type": "string", "minLength": 3, "maxLength": 2}, ""),
    ({"type": "integer", "minimum": 5, "maximum": 4}, ""),
    ({"type": "array", "minItems": 3, "maxItems": 1}, ""),
    ({"type": "object", "properties": {"a": False}, "required": ["a"]}, "/required"),
    ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "/allOf/0"),
    ({"type": "integer", "const": "x"}, "/const"),
    ({"type": "array", "prefixItems": [True, False], "minItems": 2}, ""),
    ({"not": {}}, "/not"),
    (
        {
            "$defs": {
                "n": {
                    "type": "object",
                    "properties": {"n": {"$ref": "#/$defs/n"}},
                    "required": ["n"],
                }
            },
            "$ref": "#/$defs/n",
        },
        None,
    ),
]

UNSUPPORTED = [
    ({"type": "array", "uniqueItems": True}, "/uniqueItems"),
    ({"type": "string", "pattern": "(?=a)b"}, "/pattern"),
    ({"type": "string", "pattern": "(a)\\1"}, "/pattern"),
    ({"properties": {"a": {"type": "string", "format": "regex"}}}, "/properties/a/format"),
    ({"multipleOf": 0.1}, "/multipleOf"),
    ({"$ref": "https://example.com/schema.json"}, "/$ref"),
    ({"unevaluatedProperties": False}, "/unevaluatedProperties"),
    ({"oneOf": [{"type": "array", "uniqueItems": True}, {"type": "array"}]}, "/oneOf"),
    ({"not": {"type": "string", "format": "email"}}, "/not/format"),
    ({"not": {"propertyNames": {"maxLength": 3}}}, "/not/propertyNames"),
]


@pytest.mark.parametrize(("schema", "pointer"), INVALID)
def test_invalid_schema_names_its_pointer(schema: object, pointer: str) -> None:
    with pytest.raises(SchemaError) as info:
        compile_schema(schema, options=ACCEPT)  # type: ignore[arg-type]
    assert not isinstance(info.value, UnsupportedSchemaError)
    assert info.value.pointer == pointer


@pytest.mark.parametrize(("schema", "pointer"), UNSATISFIABLE)
def test_unsatisfiable_schema_is_a_schema_error(schema: object, pointer: str | None) -> None:
    with pytest.raises(SchemaError) as info:
        compile_schema(schema, options=STRICT)  # type: ignore[arg-type]
    assert "unsatisfiable" in str(info.value)
    if pointer is not None:
        assert info.value.pointer in (pointer, "" if pointer == "/" else pointer)


@pytest.mark.parametrize(("schema", "pointer"), UNSUPPORTED)
def test_unsupported_keyword_raises_with_pointer(schema: object, pointer: str) -> None:
    with pytest.raises(UnsupportedSchemaError) as info:
        compile_schema(schema, options=STRICT)  # type: ignore[arg-type]
    assert info.value.pointer == pointer


def test_lenient_mode_warns_and_names_the_keyword() -> None:
    with pytest.warns(UserWarning, match="/uniqueItems"):
        compile_schema({"type": "array", "uniqueItems": True}, options=SchemaOptions(lenient=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compile_schema({"type": "array"}, options=SchemaOptions(lenient=True))


def test_limits_end_in_a_clear_error() -> None:
    with pytest.raises(LimitExceededError) as info:
        compile_schema(
            {
                "type": "array",
                "maxItems": 10**6,
                "contains": {"type": "integer"},
                "maxContains": 10**6,
            },
            options=SchemaOptions(max_rules=1000),
        )
    assert "max_rules" in str(info.value)
    many = {
        "allOf": [
            {"anyOf": [{"type": "integer", "minimum": i}, {"type": "string"}]} for i in range(30)
        ]
    }
    with pytest.raises(LimitExceededError):
        compile_schema(many, options=SchemaOptions(max_branches=100))


def test_bad_inputs_and_options() -> None:
    with pytest.raises(SchemaError):
        compile_schema("{not json", options=STRICT)
    with pytest.raises(SchemaError):
        compile_schema([1, 2], options=STRICT)  # type: ignore[arg-type]
    with pytest.raises(SchemaError):
        compile_schema(int, options=STRICT)
    with pytest.raises(ValueError):
        SchemaOptions(whitespace="loose")  # type: ignore[arg-type]


def test_fingerprint_keeps_the_key_order() -> None:
    """The same schema as data or as text, spaced or not, is one key; the key order is part of
    it (properties are generated in it: tests/schema/test_cache_order.py)."""
    a = schema_fingerprint({"type": "object", "required": ["a"]})
    assert a == schema_fingerprint('{"type": "object",\n "required": ["a"]}')
    assert a != schema_fingerprint('{"required": ["a"], "type": "object"}')
    assert a != schema_fingerprint({"type": "object"})


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        (
            {"properties": {"a/b": {"enum": [1, {"x": [float("nan")]}]}}},
            "/properties/a~1b/enum/1/x/0",
        ),
        ({"properties": {"a": {"properties": {2: {}}}}}, "/properties/a/properties"),
        ({"maximum": float("-inf")}, "/maximum"),
    ],
)
def test_values_json_cannot_hold_say_where(schema: dict[str, object], where: str) -> None:
    with pytest.raises(SchemaError) as info:
        compile_schema(schema, options=STRICT)
    assert info.value.pointer == where


def test_the_schema_is_copied_once_checked() -> None:
    """`schema_data` checks and copies in one pass: the copy is equal and shares no container,
    other values are deep-copied as before, and deep input neither recurses nor is copied."""
    from structgen.schema import schema_data

    inner = {"enum": [[1, {"a": None}], ("t", [2])], "title": "x"}
    schema = {"properties": {"p": inner, "q": inner}, "minimum": 1.5}
    data = schema_data(schema)
    assert data == schema and list(data) == list(schema)
    assert (
        data["properties"]["p"] is not inner
        and data["properties"]["p"]["enum"][0] is not (inner["enum"][0])
    )
    assert data["properties"]["p"]["enum"][1] == ("t", [2])
    assert data["properties"]["p"]["enum"][1][1] is not inner["enum"][1][1]
    deep: dict[str, object] = {}
    node = deep
    for _ in range(5000):
        node["not"] = node = {}
    with pytest.raises(LimitExceededError):
        schema_data(deep)


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(_JSON_VALUES, _JSON_VALUES)
def test_fingerprints_differ_exactly_when_the_data_differs(a: object, b: object) -> None:
    """The tagged bytes digested in C are one-to-one: the same fingerprint exactly when the
    data are the same JSON values of the same types, members in the same order (as the JSON
    text was: `1` and `1.0`, `true` and `1` differ)."""
    text_a, text_b = (json.dumps(x, ensure_ascii=False) for x in (a, b))
    same = text_a == text_b
    assert (data_fingerprint(a) == data_fingerprint(b)) == same


def test_fingerprints_of_odd_data_fall_back_to_the_text() -> None:
    """Data the C walk does not take (a lone surrogate is fine; a subclass is not) still get a
    fingerprint, the same one each time."""

    class Mapping(dict):  # type: ignore[type-arg]
        pass

    odd = Mapping({"type": "string"})
    assert data_fingerprint(odd) == data_fingerprint(Mapping({"type": "string"}))
    assert data_fingerprint({"a": "\ud800"}) != data_fingerprint({"a": "\ud801"})


def test_fingerprints_are_the_same_on_every_machine() -> None:
    """A fingerprint keys the persistent compile cache: its bytes are fixed (lengths written
    little-endian), so this value is the same on every machine and in every process."""
    from structgen.schema import _FINGERPRINT_BYTES

    if _FINGERPRINT_BYTES is None:
        pytest.skip("the C extension is not built")
    data = {
        "type": "object",
        "properties": {"a": {"type": "integer", "maximum": 1.5}},
        "required": ["a"],
        "x": [None, True, False, "é"],
    }
    assert _FINGERPRINT_BYTES({"t": 1}).hex() == (
        "7b0100000000000000" + "6b0100000000000000" + "74" + "690100000000000000" + "31"
    )
    expected = "330aa13a44e17843a995f15c182321de33a037748a59859e7d2911437024063a"
    assert data_fingerprint(data) == expected
