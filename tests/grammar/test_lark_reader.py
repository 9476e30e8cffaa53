"""`lark_reader`: Lark grammar text read without Lark, checked against Lark itself.

* literals' escapes evaluate as Lark's `eval_escaping` evaluates them (Hypothesis);
* the reader takes the grammars users write (the shipped ones, the test suite's) and leaves the
  rest to Lark (templates, %declare, other imports, every error: Lark's messages stay);
* both directions of language equality, on shipped and on random grammars (Hypothesis):
  sentences sampled from the reader's IR parse with Lark's own Earley parser, and sentences
  sampled from the IR Lark's loader gives are accepted by the reader's IR.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import lark
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from lark.load_grammar import eval_escaping

from structgen.automata import AutomataLimits
from structgen.engines.grammar import GrammarEngine
from structgen.errors import GrammarError
from structgen.grammar.ir import Grammar
from structgen.grammar.lark_frontend import (
    builtin_names,
    lark_to_ir,
    lark_to_ir_with_lark,
    load_builtin,
)
from structgen.grammar.lark_reader import (
    _LEXER,
    _Fallback,
    _regex_tokens,
    _token_lists,
    _unescape,
    read_lark,
)
from structgen.grammar.sampler import sample_sentences
from tests.conftest import load_vocab

GRAMMARS = {
    "options and groups": (
        'start: item ("," item)* [";"] "."?\n'
        'item: NAME ("=" value)? | "(" item+ ")"\n'
        'value: NUMBER | STRING | "true"i | "none"\n'
        "NAME: /[a-z_][a-z0-9_]*/\n"
        'NUMBER: DIGIT+ ("." DIGIT+)?\n'
        'DIGIT: "0".."9"\n'
        "%import common.ESCAPED_STRING -> STRING\n"
        '%ignore " "\n'
    ),
    "wide repetitions": 'start: "x"~2..70 ";"\n',
    "repetitions": ('start: "a"~3 B~1..2 c~0..20 d*\nB: "b"\nc: "c" | "C"\nd: ("x" | "y")~2\n'),
    "modifiers, priorities, aliases": (
        "?start: _item+ -> top\n"
        "!_item.2: WORD\n"
        '    | "[" named* "]"\n'
        "named: WORD -> word\n"
        '    | "<" _item ">" -> nested\n'
        "WORD.3: /\\w+/i\n"
        "%import common.WS\n"
        "%ignore WS\n"
    ),
    "common imports": (
        "start: (SIGNED_NUMBER | CNAME | C_COMMENT)+\n"
        "%import common (SIGNED_NUMBER, CNAME, WS_INLINE)\n"
        "%import common.C_COMMENT\n"
        "%ignore WS_INLINE\n"
    ),
    "escapes": (
        'start: "\\"" TEXT "\\"" | "\\\\" | /\\d+\\/\\d+/ | "tab\\there" | "\\x41\\u00e9"\n'
        'TEXT: /[^"\\\\]+/\n'
        "// a comment\n"
        "# another\n"
    ),
}


@functools.cache
def lark_parser(text: str) -> lark.Lark:
    return lark.Lark(text, parser="earley", lexer="dynamic_complete")  # (every lexeme length)


def ir_accepts(grammar: Grammar | GrammarEngine, text: str) -> bool:
    engine = (
        grammar
        if isinstance(grammar, GrammarEngine)
        else GrammarEngine(grammar, load_vocab("gpt2"), limits=AutomataLimits())
    )
    state = engine.advance(engine.initial_state, text.encode())
    return state is not None and engine.is_accepting(state)


def assert_same_language(text: str, *, count: int = 12, seed: int = 0) -> None:
    fast = read_lark(text)
    assert fast is not None, "the reader left this grammar to Lark"
    reference = lark_to_ir_with_lark(text)
    parser = lark_parser(text)
    engine = GrammarEngine(fast, load_vocab("gpt2"), limits=AutomataLimits())
    reference_engine = GrammarEngine(reference, load_vocab("gpt2"), limits=AutomataLimits())
    for sentence in sample_sentences(fast, count=count, seed=seed, max_terminals=25):
        parser.parse(sentence)  # raises if Lark rejects what the reader's IR derives
        assert ir_accepts(engine, sentence) == ir_accepts(reference_engine, sentence), sentence
    for sentence in sample_sentences(reference, count=count, seed=seed, max_terminals=25):
        # (the engine's lexer is greedy, see docs/design/grammars.md: the same on both IRs)
        assert ir_accepts(engine, sentence) == ir_accepts(reference_engine, sentence), sentence
    # the terminals the grammar names keep their names (anonymous ones may be named otherwise)
    named = {t.name for t in reference.terminals if re.search(rf"\b{t.name}\b", text)}
    assert named <= {t.name for t in fast.terminals}
    assert set(reference.ignore) == set(fast.ignore) or all(
        name.startswith("__IGNORE") for name in reference.ignore
    )


@pytest.mark.parametrize("name", builtin_names())
def test_shipped_grammars_are_read_without_lark(name: str) -> None:
    """The same language, and here even the same IR: the same rules (helper rules named
    alike) and the same terminal ASTs, in another order."""
    text = load_builtin(name)
    assert_same_language(text, count=20)
    fast, reference = read_lark(text), lark_to_ir_with_lark(text)
    assert fast is not None
    assert set(fast.rules) == set(reference.rules)
    assert {t.name: t for t in fast.terminals} == {t.name: t for t in reference.terminals}
    assert fast.ignore == reference.ignore


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_constructs(name: str) -> None:
    assert_same_language(GRAMMARS[name], count=20)


@pytest.mark.parametrize(
    "text",
    [
        'start: pair{A}\npair{x}: x x\nA: "a"\n',  # templates
        "start: A\n%declare A\n",
        "%import json (value)\nstart: value\n",  # other libraries
        'start: A\nA: "a"\n%override A: "b"\n',
        "start: a\n",  # undefined rule
        'start: "a"\nstart: "b"\n',  # defined twice
        "start: A\nA: /a*/\n",  # empty-matching terminal
        "start: A\nA: /(?<=x)a/\n",  # lookbehind
        # (a rewritten common terminal inside another: Lark's compiled pattern decides)
        'start: S\nS: ESCAPED_STRING "x"\n%import common.ESCAPED_STRING\n',
        "start: S\nS: ESCAPED_STRING\n%import common.ESCAPED_STRING\n",
        'start: _a\n_a: "a" -> x\n',  # an alias on an inlined rule
        'start: ["a"] ["a"]\n',  # colliding options (Lark: rules defined twice)
        'start: "a"? "a"?\n',  # (Lark merges these: equal spellings are left to Lark)
        "start: A\nA: /a(/\n",  # bad regex
        'start: "a" )\n',  # syntax error
        "start: A\nA: B\nB: A\n",  # recursive terminals
        'start: ""\n',  # empty literal
    ],
)
def test_the_rest_goes_to_lark(text: str) -> None:
    assert read_lark(text) is None
    try:
        expected: object = lark_to_ir_with_lark(text)
    except GrammarError as exc:
        expected = str(exc)
    try:
        got: object = lark_to_ir(text)
    except GrammarError as exc:
        got = str(exc)
    assert got == expected  # (the same IR or the same error: both came from Lark)


# The grammar language's tokens one match each (spaces and tabs their own `skip` match), as the
# reader scanned them before its matches took the spaces before each token: the reference.
_ONE_TOKEN_PER_MATCH = re.compile(
    r"""
    (?P<rule>_?[a-z][_a-z0-9]*)
  | (?P<term>_?[A-Z][_A-Z0-9]*)
  | (?P<string>"(?:\\"|\\\\|[^"\n])*?"i?)
  | (?P<skip>\s*(?://|\#)[^\n]*|[ \t]+|\\[ ]*\n)
  | (?P<nl_or>(?:\r?\n)+\s*\|)
  | (?P<nl>(?:\r?\n)+\s*)
  | (?P<to>->)
  | (?P<dotdot>\.\.)
  | (?P<op>[+*]|\?(?![a-z_]))
  | (?P<mod>(?:!|!\??|\?!?)(?=[_a-z]))
  | (?P<regexp>/(?!/)(?:\\/|\\\\|[^/])*?/[imslux]*)
  | (?P<directive>%[a-z]+)
  | (?P<number>[+-]?\d+)
  | (?P<punct>[()\[\]{}:,|~.])
    """,
    re.VERBOSE,
)


def _reference_tokens(text: str) -> list[tuple[str, str]] | None:
    out, pos = [], 0
    for found in _ONE_TOKEN_PER_MATCH.finditer(text):
        if found.start() != pos:
            return None
        value = found.group()
        pos += len(value)
        kind = found.lastgroup or ""
        if kind != "skip":
            out.append((value if kind == "punct" else kind, value))
    return [*out, ("nl", "")] if pos == len(text) else None


def _reader_tokens(text: str) -> list[tuple[str, str]] | None:
    try:
        return list(zip(*_token_lists(text), strict=True))
    except _Fallback:
        return None


_TOKEN_TEXTS = [
    *GRAMMARS.values(),
    'a: b  \n  // a comment\n  | c  // another\n\n   B: /x/i \\\n  "q"i\n%ignore  B\n',
    "start:\ta\t|\tb  ",  # tabs, spaces at the very end
    "start: a\r\n  | b\r\n",
    'start: a ~ 2..3 -> x\n?b: !c? "a".."z"\n',
    "start: a @ b\n",  # a character no token reads: Lark decides
    "   ",
    "",
]


@pytest.mark.parametrize("text", _TOKEN_TEXTS)
def test_tokens_are_one_token_per_match_ones(text: str) -> None:
    """The reader's matches take the spaces before their token: the tokens (or the fallback)
    are those of one match per token and per run of spaces."""
    assert _reader_tokens(text) == _reference_tokens(text)


def test_shipped_grammar_tokens_are_one_token_per_match_ones() -> None:
    texts = [load_builtin(name) for name in builtin_names()]
    lark_dir = Path(lark.__file__).parent / "grammars"
    texts += [path.read_text(encoding="utf-8") for path in sorted(lark_dir.glob("*.lark"))]
    for text in texts:
        assert _reader_tokens(text) == _reference_tokens(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=' \t\n\r|/#\\"aZ_09.:?!+*-~>()[]{}%i@', max_size=40))
def test_random_text_tokens_are_one_token_per_match_ones(text: str) -> None:
    assert _reader_tokens(text) == _reference_tokens(text)


def _scanned_in_c(text: str) -> list[tuple[str, str]] | None:
    found = _LEXER.tokens(text)
    return None if found is None else list(zip(*found, strict=True))


def _scanned_by_regex(text: str) -> list[tuple[str, str]] | None:
    try:
        return list(zip(*_regex_tokens(text), strict=True))
    except _Fallback:
        return None


_C_SCAN = pytest.mark.skipif(_LEXER is None, reason="the C token scan is not built")


@_C_SCAN
def test_the_c_scan_reads_the_shipped_grammars_as_the_regex_does() -> None:
    texts = [load_builtin(name) for name in builtin_names()] + _TOKEN_TEXTS
    lark_dir = Path(lark.__file__).parent / "grammars"
    texts += [path.read_text(encoding="utf-8") for path in sorted(lark_dir.glob("*.lark"))]
    for text in texts:
        found = _scanned_in_c(text)
        if text.isascii() and "@" not in text:  # (it answers for plain grammars)
            assert found is not None, text
        assert found is None or found == _scanned_by_regex(text), text


@_C_SCAN
@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=' \t\n\r\x0b\x1c|/#\\"aZ_09.:?!+*-~>()[]{}%ilx@\x00é', max_size=40))
def test_the_c_scan_reads_random_text_as_the_regex_does(text: str) -> None:
    """Where the C scan answers, its tokens are the regex's; where it cannot tell (a literal
    that does not close, text no token reads, a character outside ASCII) it leaves it to the
    regex."""
    found = _scanned_in_c(text)
    assert found is None or found == _scanned_by_regex(text)
    if not text.isascii():
        assert found is None


def test_start_rule_other_than_start() -> None:
    text = 'expr: NUM ("+" NUM)*\nNUM: /[0-9]+/\n'
    assert read_lark(text, "start") is None  # (Lark's error: no rule 'start')
    fast = read_lark(text, "expr")
    assert fast is not None and fast.start == "expr"
    assert ir_accepts(fast, "1+22+3") and not ir_accepts(fast, "1+")


# ----------------------------------------------------------------------------- escapes


@given(st.text(alphabet="ab\\\"'xuU0123456789AFfnrtd/ \u00e9", max_size=14))
@settings(max_examples=400, deadline=None)
def test_escapes_evaluate_as_lark_evaluates_them(body: str) -> None:
    """`_unescape` against Lark's own `eval_escaping` (+ its string step) on literal bodies."""
    for regex in (False, True):
        try:
            expected: str | None = eval_escaping(body)
            if not regex and expected is not None:
                expected = expected.replace("\\\\", "\\")
        except Exception:
            expected = None
        try:
            got: str | None = _unescape(body, regex)
        except _Fallback:
            got = None
        if got is not None:  # (the reader may leave more to Lark, never read differently)
            assert got == expected, (body, regex)


# ----------------------------------------------------------------------------- random grammars

_LITERALS = ['"a"', '"b"', '"ab"', '"x"i', '"-"', '"("', '")"', "/[0-9]+/", "/c+/", '"d".."f"']


#: how many alternatives Lark may spell out of one rule: it expands optional items, groups and
#: bounded repeats into a rule's alternatives (a product over its items), so a few nested
#: `[..]~0..2` multiply into millions, and Lark's own simplification then runs for minutes (1.5 s
#: at ~1,000)
_MAX_EXPANDED = 300
_REPEATS = {"": lambda c: c, "?": lambda c: c + 1, "*": lambda c: c, "+": lambda c: c}
_REPEATS |= {"~2": lambda c: c * c, "~0..2": lambda c: 1 + c + c * c}


@st.composite
def _expansion(draw: st.DrawFn, depth: int, names: list[str]) -> tuple[str, int]:
    """An expansion and (at most) the number of alternatives Lark spells out of it (`*` and
    `+` make rules of their own: counted as if inline, an overestimate)."""
    items = []
    count = 1
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.integers(0, 9 if depth < 2 else 5))
        alternatives = 1
        if kind <= 3:
            atom = draw(st.sampled_from(_LITERALS))
        elif kind <= 5:
            atom = draw(st.sampled_from(names))
        elif kind <= 7:
            inner = [draw(_expansion(depth + 1, names)) for _ in range(draw(st.integers(1, 2)))]
            joined = " | ".join(text for text, _ in inner)
            alternatives = sum(n for _, n in inner) + (kind == 7)
            atom = f"({joined})" if kind == 6 else f"[{joined}]"
        else:
            text, alternatives = draw(_expansion(depth + 1, names))
            atom = f"({text})"
        op = draw(st.sampled_from(["", "", "?", "*", "+", "~2", "~0..2"]))
        items.append(atom + op)
        count *= _REPEATS[op](alternatives)
    return " ".join(items), count


@st.composite
def random_grammars(draw: st.DrawFn) -> str:
    names = ["r1", "r2", "T", "U"]
    start, count = draw(_expansion(0, names))
    lines = [f"start: {start}"]
    # r1, r2 may recurse; each has a non-recursive alternative so sentences exist
    for rule in ("r1", "r2"):
        alts = [draw(_expansion(1, ["T", "U"])), draw(_expansion(1, names))]
        lines.append(f"{rule}: " + "\n    | ".join(text for text, _ in alts))
        count = max(count, sum(n for _, n in alts))
    assume(count <= _MAX_EXPANDED)
    lines.append(f"T: {draw(st.sampled_from(_LITERALS))} ({draw(st.sampled_from(_LITERALS))})?")
    u_body = draw(st.sampled_from(["INT", "/[xy]/", '"u"~1..3']))
    lines.append(f"U.2: {u_body}")
    lines.append("%import common.INT")
    if draw(st.booleans()):
        lines.append('%ignore " "')
    return "\n".join(lines) + "\n"


@given(random_grammars(), st.integers(0, 3))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_grammars_have_lark_language(text: str, seed: int) -> None:
    try:
        lark_to_ir_with_lark(text)
    except GrammarError:  # (Lark refuses some: then the reader must have left it to Lark)
        assert read_lark(text) is None
        return
    # (the reader leaves options that spell one alternative twice to Lark: Lark merges some
    # such alternatives and refuses others)
    assume(read_lark(text) is not None)
    assert_same_language(text, count=4, seed=seed)
