"""The ajv oracle itself: ECMA-262 verdicts where Python's `re` differs, drafts, formats, speed,
failures that give no verdict, and the known disagreements listed in `checks.KNOWN`."""

from __future__ import annotations

import json
import time
import warnings
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for

from structgen import Compiler, Matcher, SchemaOptions, StructgenError
from tests.conftest import shared_dir
from tests.oracles.ajv import (
    AjvError,
    AjvOracle,
    AjvSchemaError,
    AjvTimeout,
    draft_of,
    install,
)
from tests.oracles.checks import KNOWN, Known, ajv, assert_ajv_accepts, check_ajv
from tests.reliability.fuzzing import byte_vocab


def jsonschema_valid(schema: Any, instance: Any) -> bool:
    cls = validator_for(schema, default=Draft202012Validator)
    return bool(cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(instance))


def fresh(timeout: float = 30.0) -> AjvOracle:
    """An oracle of its own (a test that kills its process leaves the shared one alone)."""
    ajv()  # skips (fails under CI) when not installed
    return AjvOracle(install(fetch=False), timeout=timeout)


# ---------------------------------------------------------------------- ECMA-262 vs Python re

# (schema, instance, ajv's verdict); jsonschema (Python `re`) says the opposite of each
DIALECT_CASES = [
    ({"pattern": "^SKU-[0-9]{3}$"}, "SKU-881\n", False),  # `$`: the very end only
    ({"pattern": "^\\d{5}$"}, "٩7🯱99", False),  # `\d`: ASCII digits only
    ({"pattern": "^\\w+$"}, "é", False),  # `\w`: [A-Za-z0-9_]
    ({"pattern": "^a.b$"}, "a\u2028b", False),  # `.` excludes U+2028
    ({"pattern": "^\\s$"}, "\ufeff", True),  # `\s` has U+FEFF
    ({"pattern": "^\\s$"}, "\x1c", False),  # ... and not U+001C
]


@pytest.mark.parametrize(("schema", "instance", "verdict"), DIALECT_CASES)
def test_patterns_are_ecma_262(schema: Any, instance: str, verdict: bool) -> None:
    assert ajv().validate(schema, instance) is verdict
    assert jsonschema_valid(schema, instance) is not verdict


@pytest.mark.parametrize("name", ["ecmascript-regex", "non-bmp-regex"])
def test_agrees_with_the_official_suite_on_ecma_regexes(name: str) -> None:
    path = shared_dir("json-schema-test-suite") / f"tests/draft2020-12/optional/{name}.json"
    wrong = []
    for group in json.loads(path.read_text()):
        tests = group["tests"]
        got = ajv().validate_many(group["schema"], [t["data"] for t in tests])
        wrong += [
            (group["description"], t["description"])
            for t, ok in zip(tests, got)
            if ok != t["valid"]
        ]
    assert not wrong, wrong


def test_python_syntax_that_ecma_rejects_does_not_compile() -> None:
    for pattern in ["(?i)^a$", "^(?P<x>a)$", "\\Z", "[[:alpha:]]"]:
        with pytest.raises(AjvSchemaError, match="Invalid regular expression"):
            ajv().validate({"pattern": pattern}, "a")


# ---------------------------------------------------------------------- drafts and formats


def test_the_draft_follows_dollar_schema() -> None:
    o = ajv()
    d04 = "http://json-schema.org/draft-04/schema#"
    d06 = "http://json-schema.org/draft-06/schema#"
    d07 = "http://json-schema.org/draft-07/schema"  # no "#": read all the same
    d2019 = "https://json-schema.org/draft/2019-09/schema"
    assert [draft_of({"$schema": u}) for u in (d04, d06, d07, d2019)] == [
        "draft-04", "draft-06", "draft-07", "2019-09",
    ]  # fmt: skip
    assert draft_of({}) == draft_of(True) == draft_of({"$schema": "urn:x"}) == "2020-12"
    # draft 4: exclusiveMinimum is a boolean beside minimum
    assert not o.validate({"$schema": d04, "minimum": 1, "exclusiveMinimum": True}, 1)
    assert o.validate({"$schema": d04, "minimum": 1, "exclusiveMinimum": False}, 1)
    # draft 6/7: a number
    assert not o.validate({"$schema": d06, "exclusiveMinimum": 1}, 1)
    assert o.validate({"$schema": d07, "exclusiveMinimum": 1}, 2)
    # an array `items` is draft 7's tuple form; 2020-12 has prefixItems instead
    assert not o.validate({"$schema": d07, "items": [{"type": "string"}]}, [1])
    assert o.validate({"$schema": d07, "items": [{"type": "string"}]}, ["a", 1])
    assert not o.validate({"prefixItems": [{"type": "string"}], "items": False}, ["a", 1])
    assert not o.validate({"$schema": d2019, "dependentRequired": {"a": ["b"]}}, {"a": 1})
    with pytest.raises(AjvSchemaError, match="draft-03"):
        o.validate({"$schema": "http://json-schema.org/draft-03/schema#"}, 1)


def test_formats_in_full_mode_and_unknown_formats_ignored() -> None:
    o = ajv()
    assert o.validate_many({"format": "date"}, ["2020-02-29", "2021-02-29", 5]) == [
        True, False, True,
    ]  # fmt: skip
    assert not o.validate({"format": "ipv4"}, "256.1.1.1")
    assert o.validate({"format": "no-such-format"}, "anything")  # strict mode is off


# ---------------------------------------------------------------------- robustness and speed


def test_a_schema_ajv_cannot_compile_raises_and_the_oracle_goes_on() -> None:
    o = ajv()
    for schema in [{"type": "strnig"}, {"$ref": "https://example.com/nowhere"}]:
        with pytest.raises(AjvSchemaError):
            o.validate(schema, 1)
        with pytest.raises(AjvSchemaError):  # remembered, not compiled again
            o.validate_many(schema, [1, 2])
        assert not o.compiles(schema)
    assert o.validate({"type": "integer"}, 1)


def test_schemas_are_compiled_once_and_ids_do_not_collide() -> None:
    o = fresh()
    a = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    b = {"required": ["x"], "properties": {"x": {"type": "integer"}}, "type": "object"}
    assert o.validate(a, {"x": 1}) and not o.validate(b, {"x": "1"})
    assert o.schemas == 1  # the same canonical JSON
    # two different schemas with one `$id` (real-world schemas reuse them)
    assert o.validate({"$id": "https://example.com/s", "type": "string"}, "x")
    assert not o.validate({"$id": "https://example.com/s", "type": "integer"}, "x")
    o.close()


def test_texts_are_parsed_as_javascript_does() -> None:
    o = ajv()
    # 1e400 is Infinity in JavaScript (and in Python); 2**53 + 1 rounds to 2**53
    assert o.validate_texts({"type": "number"}, ["1e400", "1.0", "-0"]) == [True] * 3
    assert o.validate_texts({"maximum": 2**53}, [str(2**53 + 1)]) == [True]
    assert o.validate_texts({"type": "integer"}, ["1.0"]) == [True]
    assert o.validate_texts({"const": "\ud83d"}, ['"\\ud83d"']) == [True]  # a lone surrogate
    with pytest.raises(AjvError, match="not JSON") as info:
        o.validate_texts({}, ["{"])
    assert not isinstance(info.value, AjvSchemaError)


def test_a_pattern_that_backtracks_for_ever_times_out_and_the_next_call_works() -> None:
    o = fresh(timeout=1.0)
    with pytest.raises(AjvTimeout):
        o.validate({"pattern": "^(a+)+$"}, "a" * 40 + "b")
    assert o.validate({"pattern": "^(a+)+$"}, "aaa")  # a fresh process, the schema sent again
    o.close()


def test_a_crashed_process_is_restarted() -> None:
    o = fresh()
    assert o.validate({"minimum": 3}, 4)
    assert o._proc is not None
    o._proc.kill()
    o._proc.wait()
    assert o.validate({"minimum": 3}, 4) and not o.validate({"minimum": 3}, 2)
    # a process that dies before it answers: an error now, a working process next time
    good, o._cmd = o._cmd, [o._cmd[0], "-e", "process.stderr.write('boom'); process.exit(3)"]
    o._proc.kill()
    o._proc.wait()
    with pytest.raises(AjvError, match=r"exited.*boom"):
        o.validate({"minimum": 3}, 5)
    o._cmd = good
    assert o.validate({"minimum": 3}, 4)
    o.close()


def test_thousands_of_validations_per_second() -> None:
    o = ajv()
    schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 10**6}}}
    instances = [{"n": i} for i in range(20_000)]
    start = time.perf_counter()
    assert all(o.validate_many(schema, instances))
    batched = time.perf_counter() - start
    start = time.perf_counter()
    assert all(o.validate(schema, {"n": i}) for i in range(1000))
    single = time.perf_counter() - start
    # measured about 0.15 s and 0.2 s; generous for a loaded 2-core machine
    assert batched < 5 and single < 5, (batched, single)


# ---------------------------------------------------------------------- the known disagreements


def structgen_accepts(schema: Any, instance: Any) -> bool | None:
    """structgen's verdict on `json.dumps(instance)` (None: the schema does not compile)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = Compiler(byte_vocab()).json_schema(schema)
    except StructgenError:
        return None
    matcher = Matcher(compiled)
    text = json.dumps(instance, ensure_ascii=False).encode()
    return bool(matcher.accept_bytes(text) and matcher.can_terminate())


def ajv_verdict(schema: Any, instance: Any) -> bool | None:
    try:
        return ajv().validate(schema, instance)
    except AjvSchemaError:
        return None


@pytest.mark.parametrize("known", KNOWN, ids=[k.name for k in KNOWN])
def test_each_known_disagreement_is_real_and_explained(known: Known) -> None:
    schema, instance = known.example
    assert jsonschema_valid(schema, instance)
    if known.error is not None:
        assert ajv_verdict(schema, instance) is None
        with pytest.raises(AjvSchemaError) as info:
            ajv().validate(schema, instance)
        assert known.error.search(str(info.value))
    else:
        assert ajv_verdict(schema, instance) is False
        text = json.dumps(instance)
        report = check_ajv(schema, [text])
        assert report.known == {known.name: [text]} and not report.unexplained
        with pytest.warns(UserWarning, match=known.name):
            assert_ajv_accepts(schema, [text])


def test_generate_mode_offers_only_emails_every_validator_accepts() -> None:
    """The one known disagreement structgen can act on: generating, an email has a dotted
    domain (ajv-formats); accepting, RFC 5321's address literals and one-label domains stay."""
    assert all(not k.structgen_changes for k in KNOWN)
    schema = {"type": "string", "format": "email"}
    for address in ["joe.bloggs@[127.0.0.1]", "a@b", "a@b.co", "x.y+z@mail.example.org"]:
        assert structgen_accepts(schema, address) == ajv_verdict(schema, address), address
    accept = Compiler(byte_vocab()).json_schema(schema, options=SchemaOptions(mode="accept"))
    for address in ["joe.bloggs@[127.0.0.1]", "a@b"]:
        assert jsonschema_valid(schema, address)
        matcher = Matcher(accept)
        assert matcher.accept_bytes(json.dumps(address).encode()) and matcher.can_terminate()


def test_an_unexplained_disagreement_fails() -> None:
    schema = {"type": "string", "format": "email", "maxLength": 16}
    report = check_ajv(schema, ['"b"', '"a@b.co"', '"joe@[127.0.0.1]"'], where="here")
    assert report.unexplained == ['here: "b"']
    assert report.known == {"email-undotted-domain-or-address-literal": ['here: "joe@[127.0.0.1]"']}
    with pytest.raises(AssertionError, match="invalid under ajv"):
        report.assert_clean()
    with pytest.raises(AssertionError, match="no verdict"):
        assert_ajv_accepts({"type": "strnig"}, ["1"])
    with pytest.raises(AssertionError, match="judged 0"):
        check_ajv({"type": "strnig"}, ["1"]).assert_clean()
