"""Fuzzed and malformed inputs: every case compiles or raises a typed error within its time
bound, nothing crashes or hangs, and whatever the matcher accepts to the end is valid (under
jsonschema and under ajv, tests/oracles/).

Cases come from seeded generators (tests/reliability/fuzzing.py), so a failure names its seed.
`benchmarks/fuzz.py` runs the same generators longer and prints the figures.
"""

from __future__ import annotations

import json
import random
import re
import warnings

import jsonschema
import lark
import pytest
from jsonschema import Draft202012Validator

from structgen import (
    CompiledGrammar,
    Compiler,
    GrammarError,
    LimitExceededError,
    Matcher,
    RegexError,
    SchemaError,
    SchemaOptions,
    StructgenError,
    allocate_bitmask,
)
from structgen.grammar.lark_frontend import builtin_names, load_builtin
from tests.oracles.checks import assert_ajv_accepts
from tests.reliability.fuzzing import (
    BAD_GRAMMARS,
    PATHOLOGICAL_REGEXES,
    bounded_fullmatch,
    byte_vocab,
    deep_schema,
    dumps_ok,
    malformed_schema,
    mutate_text,
    random_regex,
    random_walk,
    time_bound,
    valid_schema,
)

BOUND_S = 30.0  # per case; generous for a loaded 2-core machine, far below "a hang"
VOCAB = byte_vocab()
FORMATS = Draft202012Validator.FORMAT_CHECKER


_ACCEPT = SchemaOptions(mode="accept")


def _compile_schema(schema: object, options: SchemaOptions = _ACCEPT) -> CompiledGrammar | None:
    """Compile and fill the first mask; None for a typed refusal. Anything else propagates.
    Accept mode: the checks below compare every JSON spelling with jsonschema's verdict."""
    with time_bound(BOUND_S), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            grammar = Compiler(VOCAB).json_schema(schema, options=options)
            Matcher(grammar).fill_bitmask(allocate_bitmask(1, VOCAB.size))
        except StructgenError:
            return None
    return grammar


# ---------------------------------------------------------------------- schemas


@pytest.mark.parametrize("seed", range(120))
def test_malformed_schemas_compile_or_raise_a_typed_error(seed: int) -> None:
    schema = malformed_schema(random.Random(seed))
    grammar = _compile_schema(schema)
    if grammar is None or not dumps_ok(schema):
        return
    try:
        Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError:
        return  # compiled a schema the metaschema rejects: no oracle for its instances
    rng = random.Random(seed)
    outs = []
    for _ in range(3):
        with time_bound(BOUND_S):
            out = random_walk(grammar, rng)
        if out is not None:
            _assert_valid(schema, out, seed)
            outs.append(out.decode("utf-8"))
    assert_ajv_accepts(schema, outs, where=f"seed {seed}")


def _assert_valid(schema: object, out: bytes, seed: int) -> None:
    value = json.loads(out.decode("utf-8"))
    errors = list(Draft202012Validator(schema, format_checker=FORMATS).iter_errors(value))
    assert not errors, f"seed {seed}: accepted invalid {out!r}: {errors[0].message}"


@pytest.mark.parametrize("seed", range(150))
def test_accepted_outputs_of_random_schemas_always_validate(seed: int) -> None:
    schema = valid_schema(random.Random(seed))
    Draft202012Validator.check_schema(schema)
    grammar = _compile_schema(schema)
    if grammar is None:
        return  # unsupported or unsatisfiable: refusing is sound
    rng = random.Random(seed + 1)
    outs = []
    for _ in range(4):
        with time_bound(BOUND_S):
            out = random_walk(grammar, rng)
        if out is not None:
            _assert_valid(schema, out, seed)
            outs.append(out.decode("utf-8"))
    assert_ajv_accepts(schema, outs, where=f"seed {seed}")  # and under ajv (ECMA-262 patterns)


def test_ref_cycles_and_missing_refs_are_typed() -> None:
    with pytest.raises(SchemaError):
        Compiler(VOCAB).json_schema({"$ref": "#/$defs/missing"})
    with pytest.raises(SchemaError):
        Compiler(VOCAB).json_schema(
            {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
        )
    # A cycle through an object is a real recursive language, not an error.
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}}
    assert _compile_schema(tree) is not None


def test_contradictions_are_unsatisfiable_errors() -> None:
    for schema in (
        {"type": "integer", "minimum": 5, "maximum": 1},
        {"allOf": [{"type": "string"}, {"type": "integer"}]},
        {"type": "string", "minLength": 5, "maxLength": 2},
        {"enum": []},
        {"not": {}},
    ):
        with pytest.raises(SchemaError):
            Compiler(VOCAB).json_schema(schema)


@pytest.mark.parametrize("depth", [64, 500, 5000])
def test_deep_nesting_compiles_or_hits_a_limit(depth: int) -> None:
    try:
        grammar = _compile_schema(deep_schema(depth))
    except RecursionError:  # pragma: no cover - the failure this test exists to catch
        pytest.fail(f"depth {depth}: RecursionError instead of a typed error")
    if grammar is not None:
        text = b"[" * depth + b"1" + b"]" * depth
        matcher = Matcher(grammar)
        assert matcher.accept_bytes(text) and matcher.can_terminate()


def test_huge_enum_compiles_within_the_bound() -> None:
    values = [f"value-{i}" for i in range(20000)]
    grammar = _compile_schema({"enum": values})
    assert grammar is not None
    matcher = Matcher(grammar)
    assert matcher.accept_bytes(b'"value-12345"') and matcher.can_terminate()


# ---------------------------------------------------------------------- regexes


def _python_verdict(pattern: str) -> re.Pattern[str] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return None


@pytest.mark.parametrize("seed", range(250))
def test_random_regexes_compile_or_raise_and_accept_only_matches(seed: int) -> None:
    pattern = random_regex(random.Random(seed))
    with time_bound(BOUND_S):
        try:
            grammar = Compiler(VOCAB).regex(pattern)
        except (RegexError, LimitExceededError):
            return
    python = _python_verdict(pattern)
    assert python is not None, f"seed {seed}: {pattern!r} compiled but Python's re rejects it"
    rng = random.Random(seed)
    for _ in range(4):
        with time_bound(BOUND_S):
            out = random_walk(grammar, rng, max_tokens=60)
        if out is not None:
            text = out.decode("utf-8")
            verdict = bounded_fullmatch(python, text)
            assert verdict is not False, f"seed {seed}: {pattern!r} accepted {text!r}"


@pytest.mark.parametrize("pattern", PATHOLOGICAL_REGEXES)
def test_pathological_regexes_never_hang(pattern: str) -> None:
    with time_bound(BOUND_S):
        try:
            grammar = Compiler(VOCAB).regex(pattern)
        except (RegexError, LimitExceededError):
            return
        python = _python_verdict(pattern)
        assert python is not None
        out = random_walk(grammar, random.Random(0), max_tokens=60)
    if out is not None:
        assert bounded_fullmatch(python, out.decode("utf-8")) is not False


# ---------------------------------------------------------------------- grammars


@pytest.mark.parametrize("index", range(len(BAD_GRAMMARS)))
def test_bad_grammars_raise_grammar_errors_or_compile(index: int) -> None:
    text = BAD_GRAMMARS[index]
    with time_bound(BOUND_S):
        try:
            grammar = Compiler(VOCAB).grammar(text)
            Matcher(grammar).fill_bitmask(allocate_bitmask(1, VOCAB.size))
        except StructgenError as exc:
            assert isinstance(exc, (GrammarError, LimitExceededError)), repr(exc)
            assert str(exc)


@pytest.mark.parametrize("seed", range(60))
def test_mutated_shipped_grammars_raise_or_stay_sound(seed: int) -> None:
    rng = random.Random(seed)
    names = builtin_names()
    text = mutate_text(load_builtin(names[seed % len(names)]), rng)
    with time_bound(BOUND_S):
        try:
            grammar = Compiler(VOCAB).grammar(text)
            out = random_walk(grammar, rng, max_tokens=80)
        except StructgenError as exc:
            assert str(exc)
            return
    if out is None:
        return
    try:
        parser = lark.Lark(text, start="start", parser="earley")
    except lark.exceptions.LarkError:
        pytest.fail(f"seed {seed}: structgen compiled a grammar Lark rejects:\n{text}")
    parser.parse(out.decode("utf-8"))  # raises (fails the test) if structgen let through junk


# ---------------------------------------------------------------------- the token loop


def test_the_token_loop_never_raises() -> None:
    grammar = Compiler(VOCAB).regex(r"ab|c")
    matcher = Matcher(grammar)
    eos = VOCAB.eos_token_ids[0]
    for junk in (-1, VOCAB.size, 10**12, 2**63, ord("z"), eos):
        assert matcher.accept_token(junk) is False
    for junk in (None, "a", 1.5, b"a"):
        assert matcher.accept_token(junk) is False  # type: ignore[arg-type]
    assert matcher.accept_token(ord("c")) and matcher.accept_token(eos)
    assert matcher.is_terminated()
    assert matcher.accept_token(ord("a")) is False  # after termination
    assert matcher.accept_token(eos) is False
    matcher.rollback(2)
    assert matcher.accept_token(ord("a")) and matcher.accept_token(ord("b"))
    assert matcher.can_terminate()


def test_large_string_enums_accept_what_encoders_write_and_nothing_else() -> None:
    values = [f"v{i}" for i in range(150)] + ['qu"ote', "back\\slash", "sl/ash", "tab\t", "é€😀"]
    values.append("ctl\x01")
    grammar = _compile_schema({"enum": values})
    assert grammar is not None
    for value in values:
        for ascii_only in (True, False):
            text = json.dumps(value, ensure_ascii=ascii_only).encode()
            matcher = Matcher(grammar)
            assert matcher.accept_bytes(text) and matcher.can_terminate(), text
    for other in ('"v150"', '"v1 "', '"qu\\"ote\\""', '"V1"', '""'):
        matcher = Matcher(grammar)
        assert not (matcher.accept_bytes(other.encode()) and matcher.can_terminate()), other
    generate = _compile_schema({"enum": values}, SchemaOptions(mode="generate"))
    assert generate is not None
    for value in values:
        canonical = json.dumps(value, ensure_ascii=False).encode()
        matcher = Matcher(generate)
        assert matcher.accept_bytes(canonical) and matcher.can_terminate(), canonical
        escaped = json.dumps(value).encode()
        if escaped != canonical:
            matcher = Matcher(generate)
            assert not (matcher.accept_bytes(escaped) and matcher.can_terminate()), escaped


def test_a_limit_hit_while_generating_refuses_the_token_and_is_reported() -> None:
    from structgen import CompileLimits

    # 300 states allowed; the counted repetition needs one state per character read so far.
    limits = CompileLimits(max_dfa_states=300, eager_dfa_states=0)
    grammar = Compiler(VOCAB, limits=limits).regex("[ab]{0,1000}")
    matcher = Matcher(grammar)
    accepted = 0
    for _ in range(1000):
        if not matcher.accept_token(ord("a")):
            break
        accepted += 1
    assert 0 < accepted < 1000
    assert isinstance(matcher.error, LimitExceededError)
    assert "max_dfa_states" in str(matcher.error)
    matcher.rollback(1)  # still usable at its last good state
    assert matcher.can_terminate()


def test_a_limit_hit_while_filling_a_mask_allows_only_stopping() -> None:
    from structgen import CompileLimits, allocate_bitmask

    # The mask walk reads whole tokens ahead: with 40 states it runs out inside a mask, not in
    # accept_token (MaskBench: a `pattern` with `maxLength: 5000` hit this and raised).
    limits = CompileLimits(max_dfa_states=40, eager_dfa_states=0)
    grammar = Compiler(VOCAB, limits=limits).regex("[ab]{0,1000}")
    matcher = Matcher(grammar)
    bitmask = allocate_bitmask(1, VOCAB.size, backend="numpy")
    for _ in range(60):
        matcher.fill_bitmask(bitmask, 0)  # never raises
        if matcher.error is not None:
            break
        assert matcher.accept_token(ord("a"))
    assert isinstance(matcher.error, LimitExceededError)
    allowed = {i for i in range(VOCAB.size) if (int(bitmask[0, i >> 5]) >> (i & 31)) & 1}
    assert allowed == set(VOCAB.eos_token_ids)  # only stopping is offered
    matcher.can_terminate()  # answers (True or False), never raises
    matcher.forced_tokens()


def test_non_integer_numbers_never_parse_to_integer_floats() -> None:
    """Found by the fuzzer: `{"not": {"type": "integer"}}` once let through a long decimal
    that Python parses to an integral float (jsonschema then calls it an integer)."""
    grammar = _compile_schema({"not": {"type": "integer"}})
    assert grammar is not None
    for text, ok in (
        (b"1.5", True),
        (b"-0.001", True),
        (b"12345678901234.5", True),
        (b"67395601243213399539392860.584", False),
        (b"1.0000000000000001", False),
        (b"1.0", False),
        (b"7", False),
    ):
        matcher = Matcher(grammar)
        assert (matcher.accept_bytes(text) and matcher.can_terminate()) is ok, text
    rng = random.Random(0)
    for _ in range(30):
        out = random_walk(grammar, rng)
        if out is not None:
            _assert_valid({"not": {"type": "integer"}}, out, 0)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "number", "minimum": float("nan")},
        {"type": "number", "maximum": float("inf")},
        {"enum": [1, {"a": [float("nan")]}]},
        {"properties": {1: {}}},
    ],
)
def test_values_json_cannot_hold_are_schema_errors(schema: dict[str, object]) -> None:
    with pytest.raises(SchemaError, match="at /"):
        Compiler(VOCAB).json_schema(schema)


def test_multiple_of_with_only_an_upper_bound_is_never_looser() -> None:
    """Found by the fuzzer: `exclusiveMaximum` was dropped when `multipleOf` had no lower bound."""
    schema = {"type": "integer", "exclusiveMaximum": 1, "multipleOf": 5}
    try:
        grammar = Compiler(VOCAB).json_schema(schema)
    except StructgenError:
        return  # refusing is sound
    for text in (b"993961223960", b"5", b"10"):
        matcher = Matcher(grammar)
        assert not (matcher.accept_bytes(text) and matcher.can_terminate()), text


@pytest.mark.parametrize(
    ("schema", "valid", "invalid"),
    [
        (
            {"contains": {"type": "integer"}, "maxContains": 1},
            [b'[1, "a"]', b"3"],
            [b"[]", b"[1, 2]"],
        ),
        (
            {"type": "array", "contains": {"type": "integer"}, "minContains": 2, "maxContains": 3},
            [b"[1, 2]", b'[1, "x", 2, 3]'],
            [b"[1]", b"[1, 2, 3, 4]"],
        ),
    ],
)
def test_max_contains_compiles_and_counts(
    schema: dict[str, object], valid: list[bytes], invalid: list[bytes]
) -> None:
    """Found while writing the docs: maxContains referenced an undefined grammar rule."""
    grammar = Compiler(VOCAB).json_schema(schema)
    validator = Draft202012Validator(schema)
    assert all(validator.is_valid(json.loads(t)) for t in valid)
    assert not any(validator.is_valid(json.loads(t)) for t in invalid)
    for text in valid:
        matcher = Matcher(grammar)
        assert matcher.accept_bytes(text) and matcher.can_terminate(), text
    for text in invalid:
        matcher = Matcher(grammar)
        assert not (matcher.accept_bytes(text) and matcher.can_terminate()), text


def test_compile_time_has_a_limit_that_names_its_knob() -> None:
    from structgen import CompileLimits

    limits = CompileLimits(max_compile_seconds=0.01, max_nfa_states=10**7)
    with pytest.raises(LimitExceededError, match="max_compile_seconds") as info:
        # (30-40 ms unbounded, most of it one C call that builds the NFA, checked after it;
        # `{1,100}` took ~13 ms where earlier tests had left its pieces cached)
        Compiler(VOCAB, limits=limits).regex("(x{1,1000}){1,300}")
    assert info.value.limit == "CompileLimits.max_compile_seconds"
    # The budget is per compile: the next one starts afresh.
    assert Compiler(VOCAB, limits=limits).regex("ab") is not None


def test_min_properties_with_only_optional_declared_keys_compiles() -> None:
    """Found by compiling all of MaskBench: a dead object state (below `minProperties`, nothing
    left to add) was referenced without productions, a GrammarError."""
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        "additionalProperties": False,
        "minProperties": 1,
    }
    grammar = Compiler(VOCAB).json_schema(schema)
    for text, ok in ((b'{"a": 1}', True), (b'{"b": "x"}', True), (b"{}", False)):
        matcher = Matcher(grammar)
        assert (matcher.accept_bytes(text) and matcher.can_terminate()) is ok, text


def test_large_integer_enums_compile_quickly_and_exactly() -> None:
    """Found by the fuzzer: each integer of an enum built a full range automaton (4 ms and
    hundreds of states each), so 2,500 of them ran past the state limit after seconds."""
    values = list(range(500, 3000))
    with time_bound(5.0):
        grammar = Compiler(VOCAB).json_schema(
            {"enum": [*values, 0]}, options=SchemaOptions(mode="accept")
        )
    for text, ok in ((b"2999", True), (b"500.0", True), (b"-0", True), (b"3000", False)):
        matcher = Matcher(grammar)
        assert (matcher.accept_bytes(text) and matcher.can_terminate()) is ok, text
    with time_bound(5.0):
        grammar = Compiler(VOCAB).json_schema(
            {"enum": [*values, 0]}, options=SchemaOptions(mode="generate")
        )  # generate mode: plain digits only
    for text, ok in ((b"2999", True), (b"0", True), (b"500.0", False), (b"-0", False)):
        matcher = Matcher(grammar)
        assert (matcher.accept_bytes(text) and matcher.can_terminate()) is ok, text
