"""Printable constraints (issue 20): `regex_text` writes an AST back as a pattern that `re`
reads with the same language, `Grammar.to_text` / `CompiledGrammar.to_text` show rules and
terminals, and `structgen inspect` prints them without a model run."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from structgen import Compiler
from structgen.automata.regex_syntax import RegexError, parse_regex
from structgen.automata.regex_text import regex_text
from tests.reliability.fuzzing import byte_vocab, random_regex

TEXTS = ["".join(t) for n in range(4) for t in itertools.product("ab1-é\n", repeat=n)]


def test_regex_text_has_the_same_language_as_the_pattern() -> None:
    rng = random.Random(5)
    checked = 0
    for _ in range(1500):
        pattern = random_regex(rng)
        try:
            node = parse_regex(pattern, dialect="python-ascii")
            original = re.compile(pattern, re.ASCII)
        except (RegexError, re.error):
            continue
        written = re.compile(regex_text(node, limit=10_000))
        for text in TEXTS:
            assert (written.fullmatch(text) is None) == (original.fullmatch(text) is None), (
                pattern,
                regex_text(node),
                text,
            )
        checked += 1
    assert checked > 200


def test_long_patterns_are_cut() -> None:
    text = regex_text(parse_regex("(?:abcdefgh){1,3}" * 30), limit=50)
    assert len(text) == 50 and text.endswith("…")


def test_a_grammar_prints_its_rules_and_terminals() -> None:
    compiled = Compiler(byte_vocab()).grammar(
        'start: pair+\npair: NAME "=" NUM\nNAME: /[a-z]+/\nNUM: /[0-9]{1,3}/\n'
    )
    text = compiled.to_text()
    lines = text.splitlines()
    assert lines[0].startswith("start ::= ")
    assert "NAME ::= /[a-z]+/" in lines and "NUM ::= /[0-9]{1,3}/" in lines
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    unique = Compiler(byte_vocab()).json_schema(schema).to_text()
    assert unique.splitlines()[-1] == "%unique integer items at /"
    assert Compiler(byte_vocab()).regex("a+b").to_text() == "root ::= /a+b/"


def test_inspect_command(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.test_cli import assert_one_line_error, run

    code, out, _ = run(capsys, "inspect", "--regex", r"\d{2}")
    assert code == 0
    assert "# kind: regex" in out and out.strip().endswith(r"root ::= /\d{2}/")
    code, out, _ = run(capsys, "inspect", "--grammar", "json")
    assert code == 0 and "start ::= " in out
    code, _, err = run(capsys, "inspect")
    assert code == 2
    assert_one_line_error(err, "name a constraint")
