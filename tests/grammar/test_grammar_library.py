"""The shipped grammars (grammars/*.lark), checked with Lark's own Earley parser.

Real examples are accepted and near misses rejected; the header of each file documents it with
an example that parses; and each grammar is written so that Lark's default `dynamic` lexer
(one greedy match per terminal) and `dynamic_complete` (every match length, the IR's meaning)
agree, so the IR describes exactly what `lark.Lark(text, parser="earley")` accepts.
"""

from __future__ import annotations

import functools
import random

import lark
import pytest

from structgen.grammar.lark_frontend import lark_to_ir, load_builtin
from structgen.grammar.sampler import sample_sentences

VALID = {
    "json": [
        "{}",
        "[]",
        ' { "a" : [ 1, -0, 2.5, 1E+2, 3e-7, true, false, null ] } \n',
        '"\\ud83d\\ude00 \\" \\\\ \\/ \\b\\f\\n\\r\\t é中😀"',
        '[[[{"k": {"nested": [{}]}}]]]',
        "-12.75e10",
        '{\n  "name": "Ada",\n\t"langs": ["en", "fr"]\r\n}',
    ],
    "arithmetic": [
        "1+2*3",
        "(1 + 2) * 3",
        "2 ^ 3 ^ 2",
        "-3",
        "- -3",
        "1.25 / .5",
        "((((1))))",
        "\t7 - 0.5*(2-8)/ 3 ",
    ],
    "sql_select": [
        "SELECT * FROM users",
        "select id, name from users where age > 30 order by name asc limit 5",
        "SELECT COUNT(DISTINCT city) AS n FROM people",
        "SELECT t.* FROM t",
        'SELECT "weird ""name""" FROM "my table" AS x;',
        "SELECT a FROM t WHERE NOT (a = 1 OR b <> 'it''s') AND c IS NOT NULL",
        "SELECT a FROM t INNER JOIN u ON t.id = u.tid LEFT OUTER JOIN v ON v.x=t.y",
        "SELECT a, SUM(b) FROM t WHERE a NOT IN (1, 2,3) AND name NOT LIKE 'x%' "
        "GROUP BY a HAVING SUM(b) >= 10 ORDER BY a DESC, b LIMIT 10 OFFSET 20",
        "  SELECT\n  a\nFROM\n  t\n  WHERE a != -1.5 ;  ",
    ],
    "csv": [
        "a",
        "a,b\n1,2",
        "a,b\r\n1,2\r\n",
        'name,comment\nAda,"multi\nline, with ""quotes"""\n',
        "a,b,c\n,,\n1,,3\nx\n",
        "ä,ö\nü,ß\n",
    ],
    "tool_call": [
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        '{"name":"f","arguments":{}}',
        '{\n  "name": "search.web",\n  "arguments": {\n    "q": "lark",\n'
        '    "n": [1, {"x": null}]\n  }\n}',
    ],
}

INVALID = {
    "json": [
        '{"a":1,}',
        "[01]",
        '"\\x"',
        "{'a': 1}",
        "[1 2]",
        '"a\nb"',
        "1.",
        ".5",
        "-",
        "tru",
        '{"a"}',
        "",
        "NaN",
        "[1,]",
    ],
    "arithmetic": ["1 +", "2 3", "(1", "1)", "*2", "1..2", "1 ^", "", "1+-", "1\n+2"],
    "sql_select": [
        "SELECT a FROMt",
        "SELECTa FROM t",
        "SELECT FROM t",
        "SELECT a",
        "SELECT a, FROM t",
        "SELECT a FROM t WHERE",
        "SELECT a FROM t ORDER",
        "SELECT a FROM t LIMIT",
        "SELECT a b FROM t",
        "SELECT a FROM t LIMIT x",
        "SELECT a FROM t WHERE a = 'x",
        "SELECT a FROM t ORDER a",
        "SELECT * FROM t WHERE a IS NUL",
        "SELECT a FROM t WHERE a = 1AND b = 2",
        "SELECT a FROM t -- comment",
    ],
    "csv": ["a,b\n\n", '"a', 'a"b', '"a"b', "", "a\rb", "a,b\n\n1,2"],
    "tool_call": [
        '{"name": "f"}',
        '{"arguments": {}, "name": "f"}',
        '{"name": "1f", "arguments": {}}',
        '{"name": "f", "arguments": []}',
        '{"name": "f", "arguments": {"a": }}',
    ],
}


@functools.cache
def parser(name: str, lexer: str = "dynamic") -> lark.Lark:
    return lark.Lark(load_builtin(name), parser="earley", lexer=lexer)


def lark_accepts(name: str, text: str, lexer: str = "dynamic") -> bool:
    try:
        parser(name, lexer).parse(text)
    except lark.exceptions.UnexpectedInput:
        return False
    return True


@pytest.mark.parametrize("name", sorted(VALID))
def test_real_examples_are_accepted(name: str) -> None:
    for text in VALID[name]:
        assert lark_accepts(name, text), text


@pytest.mark.parametrize("name", sorted(INVALID))
def test_near_misses_are_rejected(name: str) -> None:
    for text in INVALID[name]:
        assert not lark_accepts(name, text), text


@pytest.mark.parametrize("name", sorted(VALID))
def test_header_documents_the_grammar_with_a_working_example(name: str) -> None:
    text = load_builtin(name)
    header = []
    for line in text.splitlines():
        if not line.startswith("//"):
            break
        header.append(line)
    assert len(header) >= 3 and "// Example:" in header
    example_lines = header[header.index("// Example:") + 1 :]
    assert example_lines and all(line.startswith("//   ") for line in example_lines)
    example = "\n".join(line[len("//   ") :] for line in example_lines)
    assert lark_accepts(name, example), example


@pytest.mark.parametrize("name", sorted(VALID))
def test_greedy_and_complete_lexing_agree(name: str) -> None:
    """The grammar's language does not depend on Lark's per-terminal greedy match."""
    grammar = lark_to_ir(load_builtin(name))
    rng = random.Random(7)
    texts = list(VALID[name]) + list(INVALID[name])
    for text in sample_sentences(grammar, count=12, seed=3, max_terminals=40):
        texts += [text] + [mutate(text, rng) for _ in range(3)]
    for text in texts:
        greedy = lark_accepts(name, text)
        assert greedy == lark_accepts(name, text, "dynamic_complete"), text


def mutate(text: str, rng: random.Random) -> str:
    """Insert, delete or replace one character (shared with the engine tests)."""
    pos = rng.randrange(len(text) + 1)
    op = rng.choice(["insert", "delete", "replace"])
    char = rng.choice("a Z9-.,\"'()[]{}:\n\\é*^+=")
    if op == "insert" or not text:
        return text[:pos] + char + text[pos:]
    pos = min(pos, len(text) - 1)
    if op == "delete":
        return text[:pos] + text[pos + 1 :]
    return text[:pos] + char + text[pos + 1 :]


def test_sql_keywords_fold_case_in_ascii_only() -> None:
    """`"select"i` folds A-Z/a-z only: Lark's Python `re` would also take `ſELECT` (long s)
    and `LİMIT` (dotted capital I), which no SQL engine reads as keywords."""
    from structgen import Compiler, Matcher
    from tests.reliability.fuzzing import byte_vocab

    compiled = Compiler(byte_vocab()).grammar(load_builtin("sql_select"))

    def accepts(text: str) -> bool:
        matcher = Matcher(compiled)
        return bool(matcher.accept_bytes(text.encode()) and matcher.can_terminate())

    for text in ["SELECT a FROM t LIMIT 1", "select a from t limit 1", "SeLeCt a FrOm t"]:
        assert accepts(text), text
        assert lark_accepts("sql_select", text), text
    for text in [
        "\u017fELECT a FROM t",
        "SELECT a FROM t L\u0130MIT 1",
        "SELECT a FROM t WHERE a \u0130S NULL",
    ]:
        assert lark_accepts("sql_select", text), text  # Lark's re.IGNORECASE folds them
        assert not accepts(text), text
