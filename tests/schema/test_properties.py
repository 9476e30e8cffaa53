"""Properties with Hypothesis: generated instances are accepted, and whatever the matcher
accepts is valid (jsonschema, Draft 2020-12, with the format checker; and ajv, tests/oracles/)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from structgen import Compiler, Matcher
from structgen.grammar.sampler import sample_sentences
from structgen.schema import SchemaOptions, compile_schema
from tests.conftest import load_tokenizer, load_vocab
from tests.oracles.checks import assert_ajv_accepts

SCHEMAS: dict[str, Any] = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "email": {"type": "string", "format": "email"},
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
            "score": {"type": "number", "exclusiveMinimum": -1.5, "maximum": 99.5},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    },
    "tree": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "v": {"type": ["integer", "null"]},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["v"],
            }
        },
        "$ref": "#/$defs/node",
    },
    "mixed": {
        "anyOf": [
            {"type": "string", "pattern": "^[a-z]{2,4}$"},
            {"type": "integer", "multipleOf": 3, "minimum": -30, "maximum": 30},
            {
                "type": "object",
                "patternProperties": {"^x-": {"type": "boolean"}},
                "additionalProperties": {"type": "null"},
                "maxProperties": 2,
            },
        ]
    },
    "json": {},
    "tagged": {
        "oneOf": [
            {
                "type": "object",
                "properties": {"kind": {"const": "a"}, "n": {"type": "integer"}},
                "required": ["kind"],
            },
            {
                "type": "object",
                "properties": {"kind": {"const": "b"}, "s": {"type": "string"}},
                "required": ["kind"],
            },
        ]
    },
}


ACCEPT = SchemaOptions(mode="accept")
GENERATE = SchemaOptions(mode="generate")


def accepts(name: str, text: str, options: SchemaOptions = ACCEPT) -> bool:
    compiled = Compiler(load_vocab("llama3_1")).json_schema(SCHEMAS[name], options=options)
    matcher = Matcher(compiled)
    for token in load_tokenizer("llama3_1").encode(text, add_special_tokens=False):
        if not matcher.accept_token(token):
            return False
    return matcher.can_terminate()


@pytest.mark.parametrize("options", [ACCEPT, GENERATE], ids=["accept", "generate"])
@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31))
def test_grammar_samples_that_are_accepted_validate(
    name: str, options: SchemaOptions, seed: int
) -> None:
    grammar = compile_schema(SCHEMAS[name], options=options)
    validator = Draft202012Validator(
        SCHEMAS[name], format_checker=Draft202012Validator.FORMAT_CHECKER
    )
    has_intersections = any(t.intersect for t in grammar.terminals)
    accepted = []
    for text in sample_sentences(grammar, count=3, seed=seed, max_depth=6, max_terminals=60):
        if accepts(name, text, options):
            value = json.loads(text)
            assert validator.is_valid(value), text
            accepted.append(text)
        else:
            # the sampler ignores intersections; everything else it draws must be accepted
            assert has_intersections, text
    assert_ajv_accepts(SCHEMAS[name], accepted, where=f"{name}, seed {seed}")


person = st.fixed_dictionaries(
    {
        "name": st.text(min_size=1, max_size=12),
        "age": st.integers(0, 150),
    },
    optional={
        "email": st.from_regex(r"[a-z]{1,8}@[a-z]{1,8}\.com", fullmatch=True),
        "tags": st.lists(st.sampled_from(["a", "b", "c"]), max_size=3),
        "score": st.floats(-1.4, 99.5, allow_nan=False),
    },
)


def in_schema_order(value: dict[str, Any], order: list[str]) -> dict[str, Any]:
    return {k: value[k] for k in order if k in value}


@settings(max_examples=60, deadline=None)
@given(value=person, ascii_only=st.booleans(), indent=st.sampled_from([None, 2]))
def test_generated_instances_are_accepted(
    value: dict[str, Any], ascii_only: bool, indent: int | None
) -> None:
    value = in_schema_order(value, list(SCHEMAS["person"]["properties"]))
    if "score" in value and "e" in repr(value["score"]):
        value["score"] = 1.5  # exponent forms are not generated for bounded numbers
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent)
    assert accepts("person", text), text


@settings(max_examples=40, deadline=None)
@given(
    value=st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=8),
        lambda kids: (
            st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3)
        ),
        max_leaves=12,
    )
)
def test_json_mode_accepts_any_json(value: Any) -> None:
    assert accepts("json", json.dumps(value))
    assert accepts("json", json.dumps(value, separators=(",", ":"), ensure_ascii=False))
    # generate mode: json.dumps' own spelling and separators, nothing else
    assert accepts("json", json.dumps(value, ensure_ascii=False), GENERATE)
    compact = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    assert accepts("json", compact, GENERATE) == (compact == json.dumps(value, ensure_ascii=False))


@settings(max_examples=60, deadline=None)
@given(value=person)
def test_generate_mode_accepts_exactly_the_writers_spelling(value: dict[str, Any]) -> None:
    value = in_schema_order(value, list(SCHEMAS["person"]["properties"]))
    if "score" in value and "e" in repr(value["score"]):
        value["score"] = 1.5  # exponent forms are not generated for bounded numbers
    assert accepts("person", json.dumps(value, ensure_ascii=False), GENERATE)
    escaped = json.dumps(value, ensure_ascii=True)
    if escaped != json.dumps(value, ensure_ascii=False):
        assert not accepts("person", escaped, GENERATE)  # `\u00e9` is not how a writer spells é
    compact = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    assert not accepts("person", compact, GENERATE)
    assert accepts("person", compact, SchemaOptions(whitespace="compact"))


_ENUM_VALUES = st.lists(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 3),
        st.sampled_from([1.0, 2.5, -0.0, 1e3]),
        st.text(alphabet='ab"\\é', max_size=3),
        st.lists(st.integers(0, 2), max_size=2),
        # (one key: objects are read in their declared key order, docs/json-schema-keywords.md)
        st.dictionaries(st.sampled_from("xy"), st.integers(0, 2), max_size=1),
    ),
    min_size=1,
    max_size=6,
)
_TYPES = ["null", "boolean", "integer", "number", "string", "array", "object"]


@settings(max_examples=80, deadline=None)
@given(
    values=_ENUM_VALUES,
    kinds=st.lists(st.sampled_from(_TYPES), min_size=1, max_size=3, unique=True),
    as_list=st.booleans(),
    extra=st.sampled_from([{}, {"title": "t"}, {"weight": 3}, {"readOnly": True}]),
    draft4=st.booleans(),
)
@example(values=[1.0, 2], kinds=["integer"], as_list=False, extra={}, draft4=True)
@example(values=[0, -0.0], kinds=["integer"], as_list=False, extra={}, draft4=True)
@example(values=[True, 1, 1.5], kinds=["number"], as_list=True, extra={"weight": 3}, draft4=False)
def test_an_enum_under_a_type_keeps_exactly_the_members_jsonschema_keeps(
    values: list[Any], kinds: list[str], as_list: bool, extra: dict[str, Any], draft4: bool
) -> None:
    """An enum's members are judged against the rest of its schema (by its `type` alone when
    that is all it asks): the same verdicts as jsonschema's, under draft 2020-12 and draft 4
    (where 1.0 is not an integer)."""
    from jsonschema.validators import validator_for

    from structgen.errors import SchemaError

    schema: dict[str, Any] = {"type": kinds if as_list else kinds[0], "enum": values, **extra}
    if draft4:
        schema["$schema"] = "http://json-schema.org/draft-04/schema#"
    validator = validator_for(schema)(schema)
    vocab, tokenizer = load_vocab("llama3_1"), load_tokenizer("llama3_1")
    try:
        compiled = Compiler(vocab).json_schema(schema, options=ACCEPT)
    except SchemaError:  # unsatisfiable: no member is valid
        assert not any(validator.is_valid(v) for v in values)
        return
    for value in values:
        matcher = Matcher(compiled)
        tokens = tokenizer.encode(json.dumps(value), add_special_tokens=False)
        ok = all(matcher.accept_token(t) for t in tokens) and matcher.can_terminate()
        assert ok == validator.is_valid(value), value
