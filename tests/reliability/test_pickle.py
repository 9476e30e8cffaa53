"""Compiled grammars pickle (a server ships them between processes) and come back equal.

They pickle as their recipe and compile again on load; the round trip is checked in this
process and in a fresh one (where no compile cache can hand back the original object), and the
unpickled grammar must produce the same masks.
"""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest
from pydantic import BaseModel, Field

from structgen import CompiledGrammar, Compiler, Matcher, SchemaOptions, allocate_bitmask
from structgen.grammar.lark_frontend import load_builtin
from structgen.vocab import Vocabulary

TOKENS = [b"a", b"b", b"ab", b"1", b"12", b"{", b"}", b'"', b'"a"', b":", b",", b" ", b"x", b"-"]


class Point(BaseModel):
    x: int = Field(ge=0, le=9)
    label: str = Field(max_length=3)


def _vocab() -> Vocabulary:
    return Vocabulary.from_tokens([*TOKENS, None], eos_token_ids=[len(TOKENS)])


def _kinds(compiler: Compiler) -> dict[str, CompiledGrammar]:
    return {
        "regex": compiler.regex(r"a+b?\d*", ignore_case=True),
        "choice": compiler.choice(["ab", "b", "x1"]),
        "grammar": compiler.grammar(load_builtin("arithmetic")),
        "json_schema": compiler.json_schema(
            {"type": "object", "properties": {"a": {"type": "integer"}}},
            options=SchemaOptions(whitespace="compact"),
        ),
        "pydantic": compiler.json_schema(Point),
        "json": compiler.json(),
    }


def _masks(grammar: CompiledGrammar, steps: list[int]) -> list[list[int]]:
    matcher = Matcher(grammar)
    bitmask = allocate_bitmask(1, grammar.vocab.size)
    out = []
    for token in [*steps, None]:
        matcher.fill_bitmask(bitmask)
        out.append(bitmask[0].tolist())
        if token is None or not matcher.accept_token(token):
            break
    return out


@pytest.mark.parametrize("kind", ["regex", "choice", "grammar", "json_schema", "pydantic", "json"])
def test_round_trip_is_equal_and_masks_agree(kind: str) -> None:
    grammar = _kinds(Compiler(_vocab()))[kind]
    copy = pickle.loads(pickle.dumps(grammar))
    assert isinstance(copy, CompiledGrammar)
    assert copy == grammar and hash(copy) == hash(grammar)
    assert copy.kind == grammar.kind
    steps = [0, 2, 3] if kind in ("regex", "choice") else [5, 8, 9, 3, 6]
    assert _masks(copy, steps) == _masks(grammar, steps)


def test_round_trip_in_a_fresh_process_gives_the_same_fingerprint_and_masks() -> None:
    grammars = _kinds(Compiler(_vocab()))
    blob = pickle.dumps(grammars)
    script = (
        "import pickle, sys\n"
        "from structgen import Matcher, allocate_bitmask\n"
        "gs = pickle.loads(sys.stdin.buffer.read())\n"
        "out = {}\n"
        "for name, g in gs.items():\n"
        "    b = allocate_bitmask(1, g.vocab.size); Matcher(g).fill_bitmask(b)\n"
        "    out[name] = (g.fingerprint, b[0].tolist())\n"
        "sys.stdout.buffer.write(pickle.dumps(out))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], input=blob, capture_output=True, check=True, timeout=120
    )
    remote = pickle.loads(done.stdout)  # our own subprocess's output, not user data
    for name, grammar in grammars.items():
        bitmask = allocate_bitmask(1, grammar.vocab.size)
        Matcher(grammar).fill_bitmask(bitmask)
        assert remote[name][0] == grammar.fingerprint, name
        assert np.array_equal(np.array(remote[name][1], dtype=np.int32), bitmask[0]), name


def test_regex_asts_and_grammar_ir_round_trip() -> None:
    # Compiled with mypyc, a frozen dataclass refuses to be unpickled field by field, and the
    # node classes are plain classes: each says how it is rebuilt (`__reduce__`).
    import copy

    from structgen.automata.regex_syntax import (
        Difference,
        Empty,
        parse_regex,
        search_language,
    )
    from structgen.grammar.ir import Grammar, Rule, TerminalDef

    node = parse_regex(r"(ab|[c-f]x{2,3})*\.?")
    values = [
        node,
        Empty(),
        Difference(parse_regex('"[a-z]*"'), (parse_regex('"id"'),)),
        search_language(r"^(?=\d)\w+$"),
        Grammar("s", (Rule("s", ("A", "s")), Rule("s", ())), (TerminalDef("A", node),)),
    ]
    for value in values:
        again = pickle.loads(pickle.dumps(value))
        assert again == value and hash(again) == hash(value) and repr(again) == repr(value)
        assert copy.deepcopy(value) == value


def _errors() -> list[Exception]:
    from structgen.errors import (
        ArgumentError,
        GenerationError,
        GrammarError,
        LimitExceededError,
        RegexError,
        SchemaError,
        UnsupportedRegexError,
        UnsupportedSchemaError,
        ValidationAttempt,
        ValidationFailedError,
    )
    from structgen.grammar.structural_tag import StructuralTagError

    return [
        ArgumentError("bitmask must be 2-D"),
        GenerationError("no tokens left"),
        RegexError("unbalanced parenthesis", pattern="(ab", offset=0),
        RegexError("too large", pattern="a{9999}"),
        UnsupportedRegexError("lookahead", pattern="(?=a)", offset=1),
        GrammarError("unexpected token", line=3, column=7),
        StructuralTagError("no end tag"),
        SchemaError("not a schema", pointer="/properties/a"),
        UnsupportedSchemaError("unknown format"),
        LimitExceededError("too many DFA states", limit="max_dfa_states", value=10),
        ValidationFailedError("Point", (ValidationAttempt(text="{}", error="x missing"),)),
    ]


@pytest.mark.parametrize("error", _errors(), ids=lambda e: type(e).__name__)
def test_errors_round_trip_with_their_fields(error: Exception) -> None:
    """An error raised in a worker process reaches the parent with its message and fields
    (the default pickling called the class with the message alone: keyword-only fields
    refused it, the others lost their fields and wrapped the message again)."""
    error.add_note("raised in a worker")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error) and back.args == error.args
    assert vars(back) == vars(error)
    with pytest.raises(type(error)):
        raise back
