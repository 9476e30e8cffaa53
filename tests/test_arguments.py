"""Bad arguments at the front doors raise typed errors that say what was expected (issue 19):
`ArgumentError` (also a `TypeError` and a `ValueError`) from `Compiler` and `Matcher`,
`GenerationError` from the generation entry points — never a `TypeError` from deep inside."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from structgen import ArgumentError, Compiler, GenerationError, Matcher, SchemaError
from tests.reliability.fuzzing import byte_vocab

COMPILER = Compiler(byte_vocab())
GRAMMAR = COMPILER.regex("ab")

BAD_CALLS: list[tuple[str, Callable[[], Any], str]] = [
    ("regex(None)", lambda: COMPILER.regex(None), "pattern must be a str"),
    ("regex(bytes)", lambda: COMPILER.regex(b"a"), "decode it first"),
    ("regex flag", lambda: COMPILER.regex("a", ignore_case="yes"), "ignore_case"),
    ("choice(str)", lambda: COMPILER.choice("abc"), "list of strings"),
    ("choice(ints)", lambda: COMPILER.choice([1, 2]), "option must be a str"),
    ("choice([])", lambda: COMPILER.choice([]), "non-empty"),
    ("grammar(None)", lambda: COMPILER.grammar(None), "lark_text must be a str"),
    ("ebnf(3)", lambda: COMPILER.ebnf(3), "ebnf_text must be a str"),
    ("options=dict", lambda: COMPILER.json_schema({}, options={}), "SchemaOptions"),
    ("limits=dict", lambda: Compiler(byte_vocab(), limits={}), "CompileLimits"),
    ("Compiler(None)", lambda: Compiler(None), "Vocabulary"),
    ("Matcher(str)", lambda: Matcher("ab"), "CompiledGrammar"),
    ("stop ids", lambda: Matcher(GRAMMAR, stop_token_ids="x"), "stop_token_ids"),
    ("accept_tokens(5)", lambda: Matcher(GRAMMAR).accept_tokens(5), "token_ids"),
    ("accept_bytes(str)", lambda: Matcher(GRAMMAR).accept_bytes("ab"), "encode"),
    ("rollback(-1)", lambda: Matcher(GRAMMAR).rollback(-1), ">= 0"),
    ("rollback(str)", lambda: Matcher(GRAMMAR).rollback("x"), "integer"),
    ("rollback(too many)", lambda: Matcher(GRAMMAR).rollback(3), "remembered"),
    ("fill_bitmask(None)", lambda: Matcher(GRAMMAR).fill_bitmask(None), "2-D"),
    (
        "fill_bitmask(row)",
        lambda: Matcher(GRAMMAR).fill_bitmask(np.zeros((1, 9), np.int32), -1),
        ">= 0",
    ),
]


@pytest.mark.parametrize(("name", "call", "says"), BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_compiler_and_matcher_arguments(name: str, call: Callable[[], Any], says: str) -> None:
    with pytest.raises(ArgumentError, match=says) as info:
        call()
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)


def test_a_schema_that_is_not_one_is_a_schema_error() -> None:
    for bad in (3, None, [1]):
        with pytest.raises(SchemaError, match="a schema must be"):
            COMPILER.json_schema(bad)


def test_the_token_loop_never_raises() -> None:
    matcher = Matcher(GRAMMAR)
    for bad in ("a", None, -5, 10**9, 1.5):
        assert matcher.accept_token(bad) is False  # type: ignore[arg-type]
    assert matcher.accept_tokens(np.array([ord("a"), ord("b")])) == 2


@pytest.fixture(scope="module")
def scheduler() -> Any:
    from structgen.generate import Scheduler
    from tests.generate.test_generator import generator

    return Scheduler(generator())


@pytest.mark.slow
class TestGenerationFrontDoor:
    @pytest.mark.parametrize(
        ("prompt", "says"),
        [
            (42, "got int 42"),
            (None, "got NoneType"),
            (b"hi", "bytes; decode it"),
            ({"role": "user"}, "got dict"),
            ([], "empty"),
            ([1, "a"], "a prompt is text"),
        ],
    )
    def test_bad_prompts(self, scheduler: Any, prompt: Any, says: str) -> None:
        with pytest.raises(GenerationError, match=says):
            scheduler.submit(prompt)

    def test_params_and_grammar(self, scheduler: Any) -> None:
        with pytest.raises(GenerationError, match=r"SamplingParams\(\*\*\{'max_new_tokens': 4\}\)"):
            scheduler.submit("hi", {"max_new_tokens": 4})
        with pytest.raises(GenerationError, match="grammar must be a CompiledGrammar"):
            scheduler.submit("hi", grammar="[a-z]+")

    def test_token_ids_as_an_array(self, scheduler: Any) -> None:
        from structgen import SamplingParams

        handle = scheduler.submit(np.array([1, 2, 3]), SamplingParams(max_new_tokens=1))
        assert handle.request.prompt_ids == (1, 2, 3)
        handle.cancel()

    def test_lm_arguments(self) -> None:
        from structgen import LM
        from tests.generate.test_generator import generator

        lm = LM(generator().model, generator().tokenizer)
        with pytest.raises(GenerationError, match="got int"):
            lm.text(42)
        with pytest.raises(ArgumentError, match="list of strings"):
            lm.choice("Which?", "abc")
        with pytest.raises(ArgumentError, match="grammar must be a str"):
            lm.grammar("Say", None)
        with pytest.raises(GenerationError, match="unknown sampling option"):
            lm.text("hi", max_tokens=3)
