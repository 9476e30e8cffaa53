"""Regression tests for schema-compiler bugs found on MaskBench-dev, each against jsonschema.

Every case compiles a schema and feeds instances (`json.dumps`) token by token with Llama-3.1;
the oracle is jsonschema's own verdict (the validator of the schema's draft, with the format
checker): a valid instance must be accepted, an invalid one rejected.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for

from structgen import Compiler, UnsupportedSchemaError
from structgen.automata import repeat
from structgen.errors import SchemaError
from structgen.schema import SchemaOptions
from structgen.schema._strings import _unit, length_body
from tests.conftest import load_tokenizer, load_vocab
from tests.oracles.checks import ajv
from tests.schema._runner import accepts, compile_or_reason
from tests.schema.test_languages import matcher

ACCEPT = SchemaOptions(mode="accept")
DRAFT_2020 = "https://json-schema.org/draft/2020-12/schema"
GENERATE = SchemaOptions(mode="generate")


def is_valid(schema: Any, instance: Any) -> bool:
    cls = validator_for(schema, default=Draft202012Validator)
    return bool(cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(instance))


def check(
    schema: Any,
    instances: list[Any],
    *,
    want_valid: int | None = None,
    options: SchemaOptions = ACCEPT,
) -> None:
    """Every instance gets jsonschema's verdict (in accept mode, which must accept every valid
    text); `want_valid`: how many must be valid (so a case cannot silently test only one side)."""
    vocab, tokenizer = load_vocab("llama3_1"), load_tokenizer("llama3_1")
    compiled, reason = compile_or_reason(vocab, schema, options)
    assert compiled is not None, reason
    wrong = []
    valid = 0
    for instance in instances:
        expected = is_valid(schema, instance)
        valid += expected
        text = json.dumps(instance, ensure_ascii=False)
        if accepts(compiled, tokenizer, text) != expected:
            wrong.append(f"{text!r}: valid={expected}")
    assert not wrong, wrong
    if want_valid is not None:
        assert valid == want_valid, valid


# ---------------------------------------------------------------- long strings keep escapes


def test_long_max_length_allows_short_escapes() -> None:
    # maxLength 32767 (MaskBench: Github_hard---o9767, Github_medium---o9770) used to allow raw
    # characters only, so a string holding a quote or a newline could not be written
    schema = {"type": "string", "minLength": 5, "maxLength": 32767}
    instances = ['{"example": "value"}', "-----BEGIN\nMIIDdTCC\n-----END", "back\\slash", "abc"]
    check(schema, instances, want_valid=3)


def test_long_length_counter_still_counts_escapes() -> None:
    # the unit counted for bounds up to 32,768: raw characters and short escapes, one each
    unit = _unit(32767)
    five = matcher(repeat(unit, 0, 5))
    assert five('\\"\\n\\\\ab') and five("\u00e9\U0001f600abc")
    assert not five("\\n" * 6) and not five("abcd\\t\\t") and not five("\\u0041")
    # the lazy DFA of a long counter grows with the text (max_dfa_states): a few thousand here
    long = matcher(length_body(0, 30000))
    assert long("\\n" * 2000 + "a" * 1000) and long('\\"' * 3000)


# ---------------------------------------------------------------- pattern: `$`, flags, groups
# JSON Schema reads `pattern` as ECMA-262 with the `u` flag: ajv is the oracle here.


def check_ecma(
    schema: Any, instances: list[Any], *, want_valid: int | None = None, options: Any = None
) -> None:
    """`check`, with ajv's verdicts (ECMA-262 patterns) and accept mode by default."""
    vocab, tokenizer = load_vocab("llama3_1"), load_tokenizer("llama3_1")
    compiled, reason = compile_or_reason(vocab, schema, options or ACCEPT)
    assert compiled is not None, reason
    verdicts = ajv().validate_many(schema, instances)
    wrong = []
    for instance, expected in zip(instances, verdicts, strict=True):
        text = json.dumps(instance, ensure_ascii=False)
        if accepts(compiled, tokenizer, text) != expected:
            wrong.append(f"{text!r}: valid={expected}")
    assert not wrong, wrong
    if want_valid is not None:
        assert sum(verdicts) == want_valid, verdicts


def test_dollar_matches_only_at_the_very_end() -> None:
    # ECMA-262's `$` (no `m` flag) is the end of the string; Python's also matches before a
    # final newline (the reading structgen had, which ajv and Pydantic reject)
    check_ecma(
        {"type": "string", "pattern": "^a$"}, ["a", "a\n", "a\n\n", "ba", "\na"], want_valid=1
    )
    check_ecma({"not": {"pattern": "^a$"}}, ["a", "a\n", "a\n\n", "b", 1], want_valid=3)
    schema = {
        "type": "object",
        "patternProperties": {"^a$": {"type": "integer"}},
        "additionalProperties": {"type": "string"},
    }
    check_ecma(schema, [{"a\n": 1}, {"a\n": "x"}, {"a": "x"}, {"a": 1}, {"b\n": 1}], want_valid=2)
    # generate mode: also what Python's `re` accepts (no final newline either)
    check_ecma({"type": "string", "pattern": "^a$"}, ["a", "a\n"], options=GENERATE)


def test_python_only_syntax_is_an_invalid_pattern() -> None:
    # ECMA-262 has no inline flags and no \Z: ajv cannot compile these schemas
    for pattern in ["(?i)^x$|^y$", "^a\\Z", "(?P<n>a)", "\\%"]:
        with pytest.raises(SchemaError) as info:
            Compiler(load_vocab("llama3_1")).json_schema(
                {"type": "string", "pattern": pattern}, options=ACCEPT
            )
        assert not isinstance(info.value, UnsupportedSchemaError)
        assert info.value.pointer == "/pattern"
        assert "ECMA-262" in info.value.reason


def test_generate_mode_reads_python_syntax_when_ecma_cannot() -> None:
    # every validator that can parse the pattern accepts the output: here Python re and Rust,
    # and `(?i)` at the start applies to every alternative
    vocab, tokenizer = load_vocab("llama3_1"), load_tokenizer("llama3_1")
    compiled, reason = compile_or_reason(
        vocab, {"type": "string", "pattern": "(?i)^x$|^y$"}, GENERATE
    )
    assert compiled is not None, reason
    for text, ok in [('"Y"', True), ('"X"', True), ('"Z"', False), ('"y\\n"', False)]:
        assert accepts(compiled, tokenizer, text) == ok, text


@pytest.mark.parametrize(
    ("pattern", "samples"),
    [
        # MaskBench-dev patterns with anchors inside a group spanning the alternative
        ("^$|(^(?:\\S+\\s+){0,99}\\S+$)", ["", "one", "one two", " one", "one ", "a  b"]),
        ("^([^,]|$)", ["", "a", ",", "a,b", ",a"]),
        ("(^[a-zA-Z0-9_.()-]+$)", ["a.b", "a b", "", "(x)"]),
        ("^([0-9x]+\\.[0-9x]+\\.*[0-9x]*$|%VERSION%)", ["1.2", "1.2.x", "%VERSION%-1", "1"]),
        ("^(\\d{4}(-\\d{2})?$)|(^\\d{4}-\\d{2}T$)", ["2020", "2020-01", "2020-01T", "20201"]),
        # anchors anywhere: distributed over the alternatives they sit in
        ("(^a|b)c", ["ac", "xac", "bc", "xbc", "c"]),
        ("a(b$|c)", ["ab", "abx", "acx", "ab\n"]),
    ],
)
def test_anchors_inside_groups(pattern: str, samples: list[str]) -> None:
    check_ecma({"type": "string", "pattern": pattern}, samples)
    if "{0,99}" not in pattern:  # (its complement is over the size limit)
        check_ecma({"not": {"pattern": pattern}}, samples)


@pytest.mark.parametrize(
    ("pattern", "samples"),
    [
        # MaskBench-dev patterns with lookaheads right after the leading `^`
        (
            "^(?!org\\.bukkit\\.)([a-zA-Z_$][a-zA-Z\\d_$]*\\.)*[a-zA-Z_$][a-zA-Z\\d_$]*$",
            ["com.x.Main", "org.bukkit.X", "org.bukkitx.Y", "org.bukkit", "a..b", "Org.bukkit.a"],
        ),
        ("^(?!@@)[@a-zA-Z0-9_-]+$", ["@a", "@@a", "a@@", "@", ""]),
        ("^(?!pattern$).*$", ["pattern", "patterns", "xpattern", "", "pattern\n"]),
        ("^(?!tag|category)$", ["", "tag", "x", "\n"]),
        ("^(?=.{2,4}$)(?!.*--)[a-z-]+", ["ab", "a-b", "a--b", "abcde", "a", "ab-"]),
        ("^(?!ab)[a-zA-Z]+$", ["AB", "Ac", "aBc", "xab", "ab"]),
    ],
)
def test_lookaheads_after_the_leading_caret(pattern: str, samples: list[str]) -> None:
    # each lookahead is its own language at the start of the string (negative: complemented)
    check_ecma({"type": "string", "pattern": pattern}, samples)
    verdicts = ajv().validate_many({"pattern": pattern}, samples)
    assert any(verdicts) and not all(verdicts)


@pytest.mark.parametrize(
    "pattern",
    [
        "^a(?!b)c",  # not right after `^`
        "(?!a)b",  # unanchored: the lookahead applies at every search position
        "^(?!a)b|c",  # top-level alternatives: it would bind to the first one only
        "^(?=a)b(?<=c)",  # lookbehind
    ],
)
def test_other_lookarounds_are_refused(pattern: str) -> None:
    with pytest.raises(UnsupportedSchemaError, match="look") as info:
        Compiler(load_vocab("llama3_1")).json_schema(
            {"type": "string", "pattern": pattern}, options=ACCEPT
        )
    assert info.value.pointer == "/pattern"


# ---------------------------------------------------------------- negations


OBJECTS = [
    dict(zip(keys, values))
    for n in range(3)
    for keys in itertools.combinations(["a", "b", "xa"], n)
    for values in itertools.product([1, "s", None], repeat=n)
]


@pytest.mark.parametrize(
    "schema",
    [
        # oneOf whose branches overlap and forbid extra keys (MaskBench: Github_hard---o27348)
        {
            "type": "object",
            "oneOf": [
                {"properties": {"a": {"type": "integer"}}, "additionalProperties": False},
                {"required": ["a"]},
            ],
        },
        {"not": {"additionalProperties": {"type": "integer"}, "properties": {"a": {}}}},
        {"not": {"additionalProperties": False, "patternProperties": {"^x": {}}}},
        {"not": {"patternProperties": {"^x": {"type": "integer"}, "b": {"type": "string"}}}},
        {
            "properties": {"a": {"type": ["integer", "string"]}, "b": {}, "xa": {}},
            "oneOf": [
                {"additionalProperties": False, "properties": {"a": {}}},
                {"minProperties": 2},
            ],
        },
        {"not": {"additionalProperties": True, "type": "object"}},
    ],
)
def test_negated_object_keywords(schema: Any) -> None:
    check(schema, [*OBJECTS, 1, "s"])


@pytest.mark.parametrize(
    "schema",
    [
        {"not": {"oneOf": [{"type": "integer"}, {"minimum": 2}]}},
        {"not": {"oneOf": [{"type": "string"}, {"type": "integer"}]}},
        # a oneOf branch holding a oneOf (MaskBench: Github_easy---o2231's nesting)
        {"oneOf": [{"type": "string"}, {"oneOf": [{"maxLength": 2}, {"minLength": 1}]}]},
    ],
)
def test_negated_one_of(schema: Any) -> None:
    check(schema, [1, 2, 3, 1.5, 2.5, "", "a", "abc", None, [], {}])


def test_enum_members_are_checked_against_nested_negations() -> None:
    # the negation of `properties` nests internal keywords, which jsonschema used to ignore
    schema = {"enum": [{"a": 1}, {"a": "x"}], "not": {"properties": {"a": {"type": "integer"}}}}
    check(schema, [{"a": 1}, {"a": "x"}], want_valid=1)
    schema = {
        "enum": [{"k": 1}, {"k": 1, "z": 2}],
        "not": {"properties": {"k": {}}, "additionalProperties": False},
    }
    check(schema, [{"k": 1}, {"k": 1, "z": 2}], want_valid=1)


# ---------------------------------------------------------------- smaller gaps (issue 18 part 5)


def test_multiple_of_a_huge_power_of_ten_compiles() -> None:
    # 1e30 as written: a multiple of k * 10**z is 0, or a multiple of k followed by z zeros
    schema = {"type": "integer", "multipleOf": 1e30}
    big = [0, 10**30, 10**31, -2 * 10**30, 15 * 10**30, 10**29, 15 * 10**29, 7]
    check(schema, big, want_valid=5)
    check(schema, big, want_valid=5, options=GENERATE)


def test_draft_04_integers_have_no_fraction() -> None:
    # drafts 3 and 4 define an integer as a number written without a fraction or exponent;
    # draft 6 made 1.0 an integer (jsonschema's Draft4Validator agrees)
    old = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"}
    vocab, tokenizer = load_vocab("llama3_1"), load_tokenizer("llama3_1")
    for schema, fraction in ((old, False), ({**old, "$schema": DRAFT_2020}, True)):
        compiled, reason = compile_or_reason(vocab, schema, ACCEPT)
        assert compiled is not None, reason
        assert accepts(compiled, tokenizer, "12345")
        assert accepts(compiled, tokenizer, "-0")
        assert accepts(compiled, tokenizer, "12345.0") is fraction
        validator = validator_for(schema)(schema)
        assert validator.is_valid(json.loads("12345.0")) is fraction


def test_not_integer_follows_the_draft() -> None:
    # draft 4: 1.0 is no integer, so `not: {type: integer}` takes it; draft 2020: it is one.
    # Trailing zeros of a fraction do not make a number an integer in any draft.
    vocab, tokenizer = load_vocab("llama3_1"), load_tokenizer("llama3_1")
    texts = ["1.0", "1e2", "-0.0", "2.50", "0.10", "1.5", "1", "2.5e0"]
    for draft in ("http://json-schema.org/draft-04/schema#", DRAFT_2020):
        schema = {"$schema": draft, "type": "number", "not": {"type": "integer"}}
        validator = validator_for(schema)(schema)
        compiled, reason = compile_or_reason(vocab, schema, ACCEPT)
        assert compiled is not None, reason
        for text in texts[:-1]:
            want = validator.is_valid(json.loads(text))
            assert accepts(compiled, tokenizer, text) == want, (draft, text)
        # generating: only what ajv (Number.isInteger) and jsonschema both call a non-integer
        generated, reason = compile_or_reason(vocab, schema, GENERATE)
        assert generated is not None, reason
        offered = [t for t in texts if accepts(generated, tokenizer, t)]
        assert offered == ["1.5"], offered  # a writer's layout: no trailing zeros either


def test_draft_04_integer_enum_members_have_no_fraction() -> None:
    # draft 4: `0.0`, `-0.0` and `2.0` are floats, not integers, even where the enum lists 0 and 2
    vocab, tokenizer = load_vocab("llama3_1"), load_tokenizer("llama3_1")
    texts = ["0", "-0", "0.0", "-0.0", "2", "2.0", "2.00", "3"]
    for draft in ("http://json-schema.org/draft-04/schema#", DRAFT_2020):
        for schema in (
            {"$schema": draft, "type": "integer", "enum": [0, -0.0, 2.0, 2]},
            {"$schema": draft, "type": "integer", "enum": [0]},
            {"$schema": draft, "enum": [0, 2]},  # (no type: 0.0 equals 0, so it is valid)
        ):
            validator = validator_for(schema)(schema)
            compiled, reason = compile_or_reason(vocab, schema, ACCEPT)
            assert compiled is not None, reason
            for text in texts:
                want = validator.is_valid(json.loads(text))
                assert accepts(compiled, tokenizer, text) == want, (schema, text)
