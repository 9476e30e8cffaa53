"""Schema patterns in the validator's dialect: ECMA-262 for JSON Schema (ajv is the oracle),
Rust `regex` or Python `re` for a Pydantic model (its own validation is the oracle), and the
generation reading that every one of them accepts."""

from __future__ import annotations

import json
import warnings
from typing import Annotated, Any

import pytest

from structgen import Compiler, Matcher
from structgen.errors import SchemaError, UnsupportedSchemaError
from structgen.schema import SchemaOptions
from structgen.schema._patterns import DIALECT_KEYWORD, PatternReader
from tests.oracles.checks import ajv
from tests.reliability.fuzzing import byte_vocab

ACCEPT = SchemaOptions(mode="accept")
GENERATE = SchemaOptions(mode="generate")


def accepts(schema: Any, value: Any, options: SchemaOptions = ACCEPT) -> bool:
    compiled = Compiler(byte_vocab()).json_schema(schema, options=options)
    matcher = Matcher(compiled)
    text = json.dumps(value, ensure_ascii=False).encode()
    return bool(matcher.accept_bytes(text) and matcher.can_terminate())


STRING_CASES: list[tuple[str, list[str]]] = [
    ("^SKU-[0-9]{3}$", ["SKU-881", "SKU-881\n"]),
    (r"^\d{5}$", ["٩7🯱99", "12345"]),
    (r"^\s+$", ["\ufeff", "\x1c", "\x85", " \t"]),
    (r"^a.b$", ["a\rb", "a\u2028b", "a-b"]),
    (r"^\w+$", ["é", "abc"]),
    (r"^\D+$", ["٣", "x"]),
    (r"^[^\s]+$", ["\ufeff", "\x85", "x"]),
    (r"^\p{Lu}\p{Ll}+$", ["Émile", "émile"]),
    (r"(^a|b)c", ["ac", "xac", "xbc", "c"]),
]


class TestJsonSchemaIsEcma:
    def test_strings_agree_with_ajv(self) -> None:
        checked = 0
        for pattern, texts in STRING_CASES:
            schema = {"type": "string", "pattern": pattern}
            verdicts = ajv().validate_many(schema, texts)
            for text, valid in zip(texts, verdicts, strict=True):
                assert accepts(schema, text) == valid, (pattern, text)
                checked += 1
        assert checked == sum(len(t) for _, t in STRING_CASES) == 24

    def test_generated_strings_validate_everywhere(self) -> None:
        # generate mode accepts only what ajv, jsonschema (re) and Pydantic (Rust) accept
        import re

        from tests.automata.rust_oracle import rust_search

        for pattern, texts in STRING_CASES:
            schema = {"type": "string", "pattern": pattern}
            rust = rust_search(pattern)
            ajv_says = ajv().validate_many(schema, texts)
            for text, valid in zip(texts, ajv_says, strict=True):
                if accepts(schema, text, GENERATE):
                    assert valid, (pattern, text)
                    if "\\p" not in pattern:  # Python's re has no \p{...}
                        assert re.search(pattern, text), (pattern, text)
                    assert rust is None or rust(text), (pattern, text)

    def test_property_keys_are_matched_as_ecma(self) -> None:
        # `\d` in Python's re matches `٣`: a declared key "٣" is not under ^\d$ in ECMA-262, so
        # its value need not be an integer (jsonschema would say it must)
        schema = {
            "type": "object",
            "properties": {"٣": {}, "1": {}},
            "patternProperties": {r"^\d$": {"type": "integer"}},
            "additionalProperties": {"type": "string"},
        }
        instances = [{"٣": "x"}, {"٣": 1}, {"1": 1}, {"1": "x"}, {"7": 1}, {"7": "x"}, {"x\n": "s"}]
        verdicts = ajv().validate_many(schema, instances)
        assert verdicts == [True, True, True, False, True, False, True]
        for instance, valid in zip(instances, verdicts, strict=True):
            assert accepts(schema, instance) == valid, instance

    def test_property_names_and_negations(self) -> None:
        cases: list[tuple[Any, list[Any]]] = [
            ({"propertyNames": {"pattern": "^[a-z]+$"}}, [{"ab": 1}, {"ab\n": 1}, {"é": 1}]),
            ({"not": {"pattern": "^a$"}}, ["a", "a\n", "b"]),
            (
                {"not": {"patternProperties": {"^k$": {"type": "integer"}}}},
                [{"k": 1}, {"k": "s"}, {"k\n": "s"}],
            ),
        ]
        for schema, instances in cases:
            verdicts = ajv().validate_many(schema, instances)
            for instance, valid in zip(instances, verdicts, strict=True):
                assert accepts(schema, instance) == valid, (schema, instance)

    def test_enum_members_are_judged_as_ecma(self) -> None:
        schema = {"type": "string", "pattern": "^a$", "enum": ["a", "a\n", "b"]}
        assert accepts(schema, "a")
        assert not accepts(schema, "a\n")  # jsonschema (re) would keep it; ajv does not
        assert ajv().validate_many(schema, ["a", "a\n"]) == [True, False]

    def test_invalid_ecma_is_a_schema_error_with_its_pointer(self) -> None:
        schema = {"properties": {"d": {"type": "string", "pattern": r"^\d{4}|\%TODAY\%$"}}}
        with pytest.raises(SchemaError) as info:
            Compiler(byte_vocab()).json_schema(schema, options=ACCEPT)
        assert not isinstance(info.value, UnsupportedSchemaError)
        assert info.value.pointer == "/properties/d/pattern"
        assert "offset 7" in info.value.reason
        # lenient: read as Python re, with a warning
        lenient = SchemaOptions(mode="accept", lenient=True)
        with pytest.warns(UserWarning, match="read as Python re"):
            compiled = Compiler(byte_vocab()).json_schema(schema, options=lenient)
        matcher = Matcher(compiled)
        assert matcher.accept_bytes(b'{"d": "%TODAY%"}') and matcher.can_terminate()
        # generate mode reads what ECMA cannot parse in Python's syntax (Rust agrees here)
        assert accepts({"type": "string", "pattern": r"^\%T\%$"}, "%T%", GENERATE)


class TestPydanticModels:
    def models(self) -> tuple[type, type]:
        from pydantic import BaseModel, ConfigDict, Field, StringConstraints

        class Rust(BaseModel):
            sku: str = Field(pattern=r"^SKU-\d{3}$")
            code: Annotated[str, StringConstraints(pattern=r"(?i)^x\w$")] = "xa"

        class Python(BaseModel):
            model_config = ConfigDict(regex_engine="python-re")
            sku: str = Field(pattern=r"^SKU-\d{3}$")
            code: Annotated[str, StringConstraints(pattern=r"(?i)^x\w\Z")] = "xa"

        return Rust, Python

    def test_dialect_travels_with_the_schema(self) -> None:
        from structgen.schema import schema_data

        rust, python = self.models()
        assert schema_data(rust)[DIALECT_KEYWORD] == "rust"
        assert schema_data(python)[DIALECT_KEYWORD] == "python"

    def test_accepting_agrees_with_the_models_own_validation(self) -> None:
        from pydantic import ValidationError

        rust, python = self.models()
        values = [
            {"sku": "SKU-123"},
            {"sku": "SKU-123\n"},
            {"sku": "SKU-٣٣٣"},
            {"sku": "SKU-123", "code": "XÉ"},
            {"sku": "SKU-123", "code": "x_"},
            {"sku": "SKU-123", "code": "xa\n"},
        ]
        agreed = 0
        for model in (rust, python):
            for value in values:
                try:
                    model.model_validate_json(json.dumps(value))
                    valid = True
                except ValidationError:
                    valid = False
                assert accepts(model, value) == valid, (model.__name__, value)
                agreed += 1
        assert agreed == 12

    def test_generating_only_offers_what_every_engine_accepts(self) -> None:
        rust, python = self.models()
        for model in (rust, python):
            assert accepts(model, {"sku": "SKU-123"}, GENERATE)
            assert not accepts(model, {"sku": "SKU-123\n"}, GENERATE)
            assert not accepts(model, {"sku": "SKU-٣٣٣"}, GENERATE)


def test_reader_verdicts_on_keys() -> None:
    accept = PatternReader("ecma")
    generate = PatternReader("ecma", generate=True)
    assert not accept.matches(r"^\d$", "٣", "", every=False)
    assert generate.matches(r"^\d$", "٣", "", every=False)  # Python and Rust say so
    assert not generate.matches(r"^\d$", "٣", "", every=True)
    assert generate.matches("^a$", "a\n", "", every=False)  # Python's `$`
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert generate.matches(r"\%", "%", "", every=True)  # ECMA cannot parse it: skipped
