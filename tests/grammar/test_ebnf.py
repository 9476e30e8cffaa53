"""GBNF-style EBNF (`Compiler.ebnf`), checked against real oracles.

* regular EBNF grammars drawn by Hypothesis accept exactly what the equivalent Python regex
  fullmatches (random strings and the regex's own near misses);
* recursive grammars agree with a hand-written recogniser over every short string;
* a JSON grammar in EBNF accepts `json.dumps` output token by token with the Llama-3.1
  tokenizer and never accepts text `json.loads` rejects;
* each error names its line and column.
"""

from __future__ import annotations

import itertools
import json
import pickle
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from structgen import Compiler, Matcher
from structgen.automata import AutomataLimits
from structgen.engines.grammar import GrammarEngine
from structgen.errors import GrammarError
from structgen.grammar.ebnf import ebnf_to_ir, looks_like_ebnf
from structgen.vocab import Vocabulary
from tests.conftest import load_tokenizer, load_vocab


def byte_vocab() -> Vocabulary:
    pieces: list[bytes | None] = [None] + [bytes([b]) for b in range(1, 128)]
    return Vocabulary.from_tokens(pieces, eos_token_ids=[0])


COMPILER = Compiler(byte_vocab())


def full_match(grammar_text: str, text: str) -> bool:
    matcher = Matcher(COMPILER.ebnf(grammar_text))
    return matcher.accept_bytes(text.encode()) and matcher.can_terminate()


# ----------------------------------------------------------------------------- regular grammars

ALPHABET = "ab-c"


@st.composite
def expressions(draw: st.DrawFn, depth: int = 0) -> tuple[str, str]:
    """A random EBNF expression and the Python regex with the same language."""
    kinds = ["lit", "class"] if depth >= 3 else ["lit", "class", "seq", "alt", "rep", "rule"]
    kind = draw(st.sampled_from(kinds))
    if kind == "lit":
        text = draw(st.text(alphabet=ALPHABET, max_size=3))
        return json.dumps(text), re.escape(text)
    if kind == "class":
        chars = draw(st.sets(st.sampled_from("abc"), min_size=1, max_size=3))
        negate = draw(st.booleans())
        body = "".join(sorted(chars))
        return f"[{'^' if negate else ''}{body}]", f"[{'^' if negate else ''}{body}]"
    if kind == "rule":  # a reference to the helper rule `item` (defined below)
        return "item", "(?:a|bc)"
    parts = draw(st.lists(expressions(depth + 1), min_size=2, max_size=3))
    if kind == "seq":
        return " ".join(f"({e})" for e, _ in parts), "".join(f"(?:{r})" for _, r in parts)
    if kind == "alt":
        return " | ".join(f"({e})" for e, _ in parts), "|".join(f"(?:{r})" for _, r in parts)
    inner_e, inner_r = parts[0]
    op = draw(st.sampled_from(["*", "+", "?", "{2}", "{1,3}", "{0,2}", "{2,}"]))
    return f"({inner_e}){op}", f"(?:{inner_r}){op}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    expressions(),
    st.lists(st.text(alphabet="abc-\n", max_size=7), min_size=10, max_size=10),
)
def test_regular_grammars_accept_exactly_what_the_regex_fullmatches(
    expr: tuple[str, str], samples: list[str]
) -> None:
    ebnf, regex = expr
    grammar = f'root ::= {ebnf}\nitem ::= "a" | "b" "c"\n'
    pattern = re.compile(regex, re.DOTALL)
    for text in samples:
        assert full_match(grammar, text) == bool(pattern.fullmatch(text)), (grammar, text)


@pytest.mark.parametrize(
    ("grammar", "yes", "no"),
    [  # from peers' test suites: a space before a repetition operator
        ('root ::= item {2, 3}\nitem ::= "a" | "b" "c"\n', ["aa", "abca", "aaa"], ["a", "aaaa"]),
        ("root ::= [bc] {4,}\n", ["bcbc", "bbbbbc"], ["bcb", "a"]),
        ('root ::= "x" * "y" +\n', ["y", "xxyy"], ["x", ""]),
    ],
)
def test_a_repetition_may_follow_a_space(grammar: str, yes: list[str], no: list[str]) -> None:
    for text in yes:
        assert full_match(grammar, text), (grammar, text)
    for text in no:
        assert not full_match(grammar, text), (grammar, text)


def test_escapes_classes_and_any_character() -> None:
    grammar = r"""
root ::= "\x41\u00e9\t" [\]\-a-c\n]+ . "\"" [^\x00-\x7f]?   # comments run to the line end
"""
    pattern = re.compile(r"A\u00e9\t[\]\-a-c\n]+.\"[^\x00-\x7f]?", re.DOTALL)
    samples = ['A\u00e9\ta-]\nX"', 'A\u00e9\tb""', 'A\u00e9\tbb""\u00fc', 'A\u00e9\t""', "A"]
    for text in samples:
        assert full_match(grammar, text) == bool(pattern.fullmatch(text)), text


# ----------------------------------------------------------------------------- recursion


def balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0 and "()" not in text and all(c in "()a" for c in text)


def test_recursive_grammar_agrees_with_a_recogniser_on_every_short_string() -> None:
    # nested parentheses around non-empty runs of `a` (so `()` never appears)
    grammar = """
root ::= item*
item ::= "a" | "(" item+ ")"
"""
    for length in range(7):
        for chars in itertools.product("()a", repeat=length):
            text = "".join(chars)
            assert full_match(grammar, text) == balanced(text), text


@pytest.mark.parametrize(
    ("rules", "regex"),
    [
        ('x ::= "a" x | "b" x | "c"', "[ab]*c"),  # right-linear
        ('x ::= x "a" | x "bc" | "d"', "d(?:a|bc)*"),  # left-linear
        ('x ::= "a" x | ', "a*"),  # an empty alternative
        ('x ::= y "c"\ny ::= "a" y | "b"', "a*bc"),  # over another regular rule
        ('x ::= "a" x "b" | ""', "|ab|aabb|aaabbb"),  # a^n b^n (not regular) up to length 6
    ],
)
def test_linear_recursion_matches_its_regular_language(rules: str, regex: str) -> None:
    grammar = f"root ::= x\n{rules}"
    pattern = re.compile(regex)
    for length in range(7):
        for chars in itertools.product("abcd", repeat=length):
            text = "".join(chars)
            assert full_match(grammar, text) == bool(pattern.fullmatch(text)), (rules, text)


def test_no_lexeme_runs_past_what_the_grammar_needs() -> None:
    # The engine lexes greedily; with multi-character terminals these would be refused.
    sql = 'root ::= "SELECT " col ("," col)* " FROM " name\ncol ::= name | name " "? "(" ")"\n'
    sql += "name ::= [a-z]+"
    assert full_match(sql, "SELECT a,f (),b FROM t")
    assert full_match(sql, "SELECT email FROM users")
    assert full_match('root ::= [a-z]* "a"', "aaa")
    assert full_match('root ::= ("true" | [a-z]+) "x"', "trux")
    assert not full_match('root ::= ("true" | [a-z]+) "x"', "true")


def test_left_recursion_and_rule_names_with_dashes() -> None:
    grammar = 'root ::= sum\nsum ::= sum "+" num-lit | num-lit\nnum-lit ::= [0-9]+'
    assert full_match(grammar, "1+22+333")
    assert not full_match(grammar, "1++2")
    assert not full_match(grammar, "+1")


def test_another_start_rule() -> None:
    assert Matcher(COMPILER.ebnf('value ::= "x"+', start="value")).accept_bytes(b"xxx")


# ----------------------------------------------------------------------------- a real tokenizer

JSON_EBNF = r"""
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( string ws ":" ws value ws ("," ws string ws ":" ws value ws)* )? "}"
array  ::= "[" ws ( value ws ("," ws value ws)* )? "]"
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\""
number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
ws     ::= [ \t\n]{0,20}
"""

DOCUMENTS = [
    {"name": 'Ada \u00e9 "quoted"', "tags": [1, 2.5e3, -0.125, True, None]},
    [[], {}, {"a": {"b": [0, "\\u"]}}],
    "just a string \n with an escape",
]


@pytest.mark.parametrize("document", DOCUMENTS, ids=["object", "nested", "string"])
@pytest.mark.parametrize("indent", [None, 2])
def test_json_in_ebnf_accepts_json_dumps_token_by_token(document: object, indent: int) -> None:
    tokenizer = load_tokenizer("llama3_1")
    grammar = Compiler(load_vocab("llama3_1")).ebnf(JSON_EBNF)
    matcher = Matcher(grammar)
    text = json.dumps(document, indent=indent)
    for token in tokenizer.encode(text, add_special_tokens=False):
        assert matcher.is_allowed(token)
        assert matcher.accept_token(token)
    assert matcher.can_terminate()


def test_json_in_ebnf_never_accepts_what_json_loads_rejects() -> None:
    grammar = Compiler(load_vocab("llama3_1")).ebnf(JSON_EBNF)
    text = json.dumps(DOCUMENTS[0])
    for i in range(len(text)):
        for replacement in ["", "}", '"', "x", ",", "0"]:
            mutated = text[:i] + replacement + text[i + 1 :]
            matcher = Matcher(grammar)
            accepted = matcher.accept_bytes(mutated.encode()) and matcher.can_terminate()
            if accepted:
                json.loads(mutated)  # raises if the grammar accepted invalid JSON


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("text", "message", "line", "column"),
    [
        ('root ::= "a"\nroot ::= "b"', "defined twice", 2, 1),
        ('root ::= "a" other', "'other' is used but never defined", 1, 14),
        ('root ::= "abc', "never closed", 1, 10),
        ("root ::= [a-", "never closed", 1, 10),
        ("root ::= [z-a]", "reversed", 1, 10),
        ('root ::= "a"{3,1}', "maximum below its minimum", 1, 13),
        ('root ::= "a"{1,x}', "{m}, {m,} or {m,n}", 1, 13),
        ('root ::= "a" (= "b")', "lookahead", 1, 14),
        ('root ::= TagDispatch("a")', "macro", 1, 10),
        ('root ::= "\\q"', "unknown escape", 1, 11),
        ('root ::= ("a"', "never closed", 1, 10),
        ('root = "a"', "expected '::='", 1, 6),
        ('root ::= "a" @', "unexpected '@'", 1, 14),
        ("root ::= [^\\x00-\\U0010FFFF]", "matches nothing", 1, 10),
        ('root ::= "a"{20000}', "above 10000", 1, 13),
    ],
)
def test_errors_say_what_and_where(text: str, message: str, line: int, column: int) -> None:
    with pytest.raises(GrammarError) as info:
        ebnf_to_ir(text)
    assert message in str(info.value)
    assert (info.value.line, info.value.column) == (line, column)


def test_a_missing_start_rule_is_named() -> None:
    with pytest.raises(GrammarError, match="no rule named 'root'"):
        ebnf_to_ir('value ::= "x"')


def test_looks_like_ebnf_tells_the_dialects_apart() -> None:
    assert looks_like_ebnf('root ::= "a"')
    assert looks_like_ebnf('# a comment\n  root-rule ::= "a"')
    assert not looks_like_ebnf('start: "a" b\nb: /x+/')


def test_compiled_ebnf_pickles_by_recipe() -> None:
    compiled = COMPILER.ebnf('root ::= "ab"+')
    clone = pickle.loads(pickle.dumps(compiled))
    assert Matcher(clone).accept_bytes(b"abab")


def test_every_terminal_is_one_character() -> None:
    from structgen.automata import CharClass

    grammar = ebnf_to_ir(JSON_EBNF)
    assert all(
        isinstance(t.pattern, CharClass) or len(t.pattern.text) == 1  # type: ignore[union-attr]
        for t in grammar.terminals
    )


# ----------------------------------------------------------------------------- lexeme inference

LIMITS = AutomataLimits()


def _engines(text: str) -> tuple[GrammarEngine, GrammarEngine] | None:
    """The grammar with one character per terminal (the exact reference) and folded."""
    vocab = COMPILER.vocab
    try:
        plain = GrammarEngine(ebnf_to_ir(text), vocab, limits=LIMITS)
    except GrammarError:  # an empty language: refused either way
        with pytest.raises(GrammarError):
            GrammarEngine(ebnf_to_ir(text, limits=LIMITS), vocab, limits=LIMITS)
        return None
    folded = GrammarEngine(ebnf_to_ir(text, limits=LIMITS), vocab, limits=LIMITS)
    return plain, folded


def _agree_on_every_string(text: str, alphabet: str, depth: int) -> None:
    """Both engines agree on every string up to `depth` characters: whether it is a prefix of
    the language, and whether it is in it (depth-first, sharing prefixes)."""
    engines = _engines(text)
    if engines is None:
        return
    plain, folded = engines
    stack = [("", plain.initial_state, folded.initial_state)]
    while stack:
        prefix, a, b = stack.pop()
        assert (a is None) == (b is None), (text, prefix, "prefix")
        if a is None or b is None:
            continue
        assert plain.is_accepting(a) == folded.is_accepting(b), (text, prefix, "accepts")
        if len(prefix) < depth:
            for ch in alphabet:
                data = ch.encode()
                stack.append((prefix + ch, plain.advance(a, data), folded.advance(b, data)))


@st.composite
def grammars(draw: st.DrawFn) -> str:
    """Random grammars over `a`, `b`, `(`, `)` whose rules overlap: words of one are prefixes of
    another's, rules recurse (right-linear or not), runs may be empty."""

    def expr(depth: int) -> str:
        kinds = (
            ["lit", "class", "ref"] if depth >= 2 else ["lit", "class", "ref", "seq", "alt", "rep"]
        )
        kind = draw(st.sampled_from(kinds))
        if kind == "lit":
            return json.dumps(draw(st.sampled_from(["a", "b", "ab", "aa", "(", ")", "a(", ""])))
        if kind == "class":
            return draw(st.sampled_from(["[ab]", "[a]", "[^a()]", "[()]"]))
        if kind == "ref":
            return draw(st.sampled_from(["x", "y", "z"]))
        parts = [expr(depth + 1) for _ in range(draw(st.integers(2, 3)))]
        if kind == "seq":
            return " ".join(f"({p})" for p in parts)
        if kind == "alt":
            return " | ".join(f"({p})" for p in parts)
        return f"({parts[0]}){draw(st.sampled_from(['*', '+', '?', '{1,2}']))}"

    # root embeds itself in the middle (not regular), so the folded parts around it are lexed
    # in context, one after another
    rules = {"root": f"{expr(0)} | ({expr(1)}) root ({expr(1)})"}
    rules.update((name, expr(0)) for name in ("x", "y"))
    rules["z"] = draw(
        st.sampled_from(
            ['"a" z | "b"', 'z "a" | "b"', 'z z | "a"', '"(" z ")" | "a"', "[ab]+", '"a"*']
        )
    )
    return "".join(f"{name} ::= {body}\n" for name, body in rules.items())


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammars())
def test_folded_terminals_keep_the_exact_language(text: str) -> None:
    _agree_on_every_string(text, "ab()", 6)


@pytest.mark.parametrize(
    "body",
    [
        '[a-z]+ "a"',  # a terminal that would read past its own end
        '("true" | [a-z]+) "x"',
        'name "." "*" | name ("." name)?',
        '"SELECT " col ("," col)* " FROM " name',
        'ws "a" ws',  # nullable rules
        's "b" | s s',  # right-linear, then read past
    ],
)
def test_folding_never_changes_what_is_accepted(body: str) -> None:
    # `root` embeds itself between the parts, so they are lexed one after another in context
    text = (
        f'root ::= part | part root part\npart ::= {body} | "(" root ")"\n'
        'name ::= [a-z]+\ncol ::= name | name " "? "(" ")"\nws ::= [ ]*\ns ::= "a" s | "a"\n'
    )
    _agree_on_every_string(text, "aetx.* (),SLFRM", 5)


def test_regular_parts_become_multi_character_terminals() -> None:
    grammar = ebnf_to_ir(JSON_EBNF, limits=LIMITS)
    assert len(grammar.terminals) < len(ebnf_to_ir(JSON_EBNF).terminals)
    # a string, a number, a run of whitespace: one lexeme each (no Earley step per character)
    sizes = sorted(len(str(t.pattern)) for t in grammar.terminals)
    assert sizes[-1] > 200
    engine = GrammarEngine(grammar, COMPILER.vocab, limits=LIMITS)
    state = engine.advance(engine.initial_state, b'{"key": "a long string value", "n": -12.5e3')
    assert state is not None


def test_the_sql_that_folding_once_refused_is_accepted() -> None:
    # name " "? "(" folded into one terminal once made `email FROM` unreachable
    sql = 'root ::= "SELECT " col ("," col)* " FROM " name\ncol ::= name | name " "? "(" ")"\n'
    sql += "name ::= [a-z]+"
    for text in ["SELECT email FROM users", "SELECT a,f (),b FROM t", "SELECT f() FROM t"]:
        assert full_match(sql, text), text
    assert not full_match(sql, "SELECT f ( FROM t")


def test_folding_gives_up_at_its_deadline_with_the_exact_grammar(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from structgen.grammar import ebnf

    monkeypatch.setattr(ebnf, "MAX_FOLD_SECONDS", 0.0)
    grammar = ebnf_to_ir(JSON_EBNF, limits=LIMITS)
    assert len(grammar.terminals) == len(ebnf_to_ir(JSON_EBNF).terminals)  # one character each
    matcher = Matcher(Compiler(COMPILER.vocab).grammar_ir(grammar))
    assert matcher.accept_bytes(b'{"a": [1, "x"]}') and matcher.can_terminate()
