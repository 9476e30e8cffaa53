"""Regex dialects against real engines: ECMA-262 (node's `new RegExp(p, "u")`), Python's `re`
(with and without `re.ASCII`) and Rust's `regex` crate (pydantic-core), both ways — what each
accepts and rejects, and which patterns are syntax errors — plus the generation reading (a
tuple of dialects), which must only produce strings every one of them matches.

Matching is search semantics (`search_language`: what JSON Schema `pattern` and Pydantic check);
each case is compiled with `compile_ast` and run on the strings' UTF-8 bytes.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structgen.automata import _rust_tables, compile_ast
from structgen.automata import intervals as iv
from structgen.automata.regex_syntax import (
    UnsupportedRegexError,
    parse_regex,
    search_language,
)
from structgen.errors import RegexError
from tests.automata.ecma_oracle import ecma_errors, ecma_verdicts, node_path
from tests.automata.rust_oracle import rust_error, rust_search
from tests.conftest import missing

GENERATE = ("ecma", "python", "rust")


def matcher(pattern: str, dialect: str | tuple[str, ...]) -> Callable[[str], bool]:
    """structgen's search verdict for `pattern` (lookaheads included)."""
    found = search_language(pattern, dialect=dialect)  # type: ignore[arg-type]
    parts = [(True, compile_ast(found.node))]
    parts += [(positive, compile_ast(node)) for positive, node in found.lookaheads]

    def matches(text: str) -> bool:
        data = text.encode("utf-8", "surrogatepass")
        return all(dfa.accepts(data) == positive for positive, dfa in parts)

    return matches


# Dialect-sensitive (pattern, strings) cases: the issue's, and the corners of each set.
SENSITIVE: list[tuple[str, list[str]]] = [
    ("^SKU-[0-9]{3}$", ["SKU-881", "SKU-881\n", "SKU-88", "xSKU-881"]),
    (r"^\d{5}$", ["٩7🯱99", "12345", "1234", "12345\n"]),
    (r"^\s$", ["\ufeff", "\x1c", "\x1f", "\x85", " ", "\t", "\u3000", "\xa0", "\u2028", "\u180e"]),
    (r"^.$", ["\r", "\u2028", "\u2029", "\n", "a", "😀", "\x85"]),
    (r"^\w+$", ["é", "abc_1", "a-b", "\u0301", "²", "ǅ"]),
    (r"^\D$", ["٣", "a", "1", "🯱"]),
    (r"^[^\s]$", ["\ufeff", "\x85", "\x1c", "a", " "]),
    (r"^\S+$", ["\ufeff", "a\x1c", "ab"]),
    (r"^\W$", ["é", "a", "-", "_"]),
    (r"^[^\d]+$", ["٣", "x", "5"]),
    (r"a$", ["a", "a\n", "ab", "a\n\n"]),
    (r"^$", ["", "\n"]),
    (r"(^a|b)c", ["ac", "xac", "bc", "xbc"]),
    (r"^(a|$)", ["", "a", "b", "ba", "\n"]),
    (r"^(?!ab)[a-z]+$", ["ab", "ac", "abc", "b"]),
    (r"^(?=.{2,4}$)(?!.*--)[a-z-]+", ["ab", "a-b", "a--b", "abcde", "a", "ab-"]),
    (r"^[\w.-]+@[\w-]+\.[a-z]{2,}$", ["a.b@c-d.fr", "é@x.fr", "a@b.c"]),
]

ECMA_ONLY: list[tuple[str, list[str]]] = [
    (r"^\p{Lu}+$", ["ABC", "Abc", "ÀÉ"]),
    (r"^\P{L}$", ["a", "1"]),
    (r"^\p{Script=Greek}+$", ["αβγ", "abc"]),
    (r"^\u{1F600}$", ["😀", "a"]),
    (r"^\uD83D\uDE00$", ["😀"]),
    (r"^\cJ\x41\0$", ["\nA\0"]),
    (r"^[\b\-]+$", ["\b-", "b"]),
    (r"^(?<year>\d{4})-\d{2}$", ["2020-01", "2020-1"]),
    (r"[^]", ["", "a", "\n"]),
    (r"^[]$", ["", "a"]),
    (r"^\/$", ["/"]),
]

ECMA_SYNTAX = [
    # rejected by ECMA-262 with the u flag
    "a{", "a}", "}", "]", "[]a]", "a{,3}", r"\a", r"\z", r"\Z", r"\A", r"\-", r"\@", r"\_",
    r"\ ", r"\e", r"\00", r"\1", r"\k<n>", "(?=a)*", "(?P<n>a)", "(?i)x", "(?i:x)", "(?#x)",
    r"\c1", r"[\c1]", r"[\d-z]", r"[z-\d]", r"[\w-z]", r"[a-\w]", r"[\p{L}-z]", r"\p{Greek}",
    r"\p{l}", r"\pL", r"\p{Lu", r"\p{}", r"\p{RGI_Emoji}", r"\u{110000}", r"\u12", r"\x4",
    r"[\B]", "x{2}{3}", "a**", "a{3,2}", "(?<a>x)(?<a>y)", r"\N{DIGIT ONE}", "{1}", "(?<1a>x)",
    "(?", "a)", "(a", r"\x{41}", "(?>a)", "a*+", r"\8", "(a)\\2", r"[\1]", "^*", "(?<n>a)\\k<m>",
    # accepted (some unsupported by structgen: lookbehind, backreferences, \b)
    r"[\-]", r"\/", r"\0", "(a)\\1", "(?<n>a)\\k<n>", r"a\k<n>(?<n>b)", "(?=a)", "(?<=a)b",
    r"\cA", r"\p{L}", r"\p{gc=Lu}", r"\p{General_Category=Letter}", r"\p{Script=Greek}",
    r"\p{scx=Grek}", r"\p{ASCII}", r"\p{Any}", r"\p{digit}", r"\u{0041}", r"[\b]", r"\B",
    "[^]", "[]", "(?:)", "a|", r"[\s-]", r"[-\s]", "a{1,2}?", "a{99999}", "(?<a$>x)",
    r"[\-\]\\]", r"\P{L}", r"[^\P{L}]", "[a-]", r"[\u{1F600}-\u{1F64F}]", r"\t\n\v\f\r",
]  # fmt: skip

RUST_ONLY: list[tuple[str, list[str]]] = [
    (r"\Aa\z", ["a", "a\n", "ba"]),
    (r"(?i)k", ["K", "\u212a", "x"]),
    (r"(?i)s", ["ſ", "S"]),
    (r"^[[:alpha:]]+$", ["abc", "é"]),
    (r"^[a-z&&[^aeiou]]+$", ["bcd", "bad"]),
    (r"^[a~~c-e]$", ["a", "d", "b"]),
    (r"^[a-d--b]$", ["a", "b", "c"]),
    (r"^\p{Greek}+$", ["αβ", "ab"]),
    (r"^\pL+$", ["aé", "1"]),
    (r"(?-u:\w)", ["é", "a"]),
    (r"^a(?i)b|c$", ["aB", "C", "xC"]),
    (r"^\x{41}\u{42}\U{43}$", ["ABC"]),
    (r"^a{ 2 }$", ["aa", "a"]),
    (r"(?x) a b # c", ["ab", "a b"]),
    (r"^(?P<a>x)(?<b>y)$", ["xy"]),
    (r"^a**$", ["", "aa"]),
]

RUST_SYNTAX = [
    "a{", "a{,3}", r"\Z", r"\e", r"\0", r"\1", "(?=a)", "(?<=a)b", r"\cA", r"\N{DIGIT ONE}", "{",
    r"[\d-z]", r"\K", r"\é", "(?P<1a>x)", "(?)", "(?i", "(?i-i)x", "(?-)x", "[^]", "[]",
    r"\p{^L}", r"\x7", r"\x{}", r"\x{110000}", r"\u{D800}", r"[a-\d]", "(a)(?P<a>b)(?P<a>c)",
    "a{2,1}", r"\Q", "a|*", "(*)", "[[]", "[a[]", "(?s-s:.)", "(?P=a)", r"\k<a>", "(?#x)",
    "(?ii)a",
    # accepted
    "^*", "a}", "}", "]", "[]a]", r"\a", r"\z", r"\A", r"\-", r"\@", r"\_", r"\ ", r"\/",
    "(?<n>a)", "(?P<n>a)", "a(?i)b", "[[:alpha:]]", r"\pL", r"\p{Greek}", r"\u{41}",
    r"\x{41}", r"\U0001F600", "[a&&b]", "x{2}{3}", "a**", "(?<a.b>x)", "(?<é>x)", "(?R)a",
    "(?U)a", "[a-]", "[-a]", "[:alpha:]", "[[:foo:]]", r"\p{l}", r"\p{gc=lu}",
    r"\p{General_Category:Letter}", r"\p{sc=grek}", r"\p{ greek }", r"\pLu", "a{ 2 }",
    r"[\]]", r"[\[]", "(|a)", "(?i:a)", "(?-u)a", "$*", "a*?+",
]  # fmt: skip


class TestEcma:
    def test_cases_agree_with_node(self, node: None) -> None:
        cases = SENSITIVE + ECMA_ONLY
        verdicts = ecma_verdicts(cases)
        for (pattern, texts), want in zip(cases, verdicts, strict=True):
            assert want is not None, pattern
            ours = matcher(pattern, "ecma")
            assert [ours(t) for t in texts] == want, pattern

    def test_syntax_errors_agree_with_node(self, node: None) -> None:
        errors = ecma_errors(ECMA_SYNTAX)
        wrong = []
        for pattern, error in zip(ECMA_SYNTAX, errors, strict=True):
            try:
                search_language(pattern, dialect="ecma")
                ours = None
            except UnsupportedRegexError:
                ours = None
            except RegexError as exc:
                ours = exc.reason
                assert exc.offset is not None and 0 <= exc.offset <= len(pattern), pattern
            if (ours is None) != (error is None):
                wrong.append((pattern, error, ours))
        assert not wrong
        assert sum(e is None for e in errors) >= 30  # both sides are covered

    @settings(max_examples=6, deadline=None)
    @given(st.lists(st.text("a1٣_é \n\r\u2028\ufeff\x85\x1cK", max_size=5), min_size=40))
    def test_generated_strings_agree_with_node(self, texts: list[str]) -> None:
        if node_path() is None:
            missing("node (Node.js, the ECMA-262 oracle)")
        patterns = [p for p, _ in SENSITIVE] + [r"^\w\s\W$", r"[^\s\d]\S", r".\.", "a$"]
        verdicts = ecma_verdicts([(p, texts) for p in patterns])
        for pattern, want in zip(patterns, verdicts, strict=True):
            ours = matcher(pattern, "ecma")
            assert [ours(t) for t in texts] == want, pattern

    def test_unsupported_is_not_a_syntax_error(self) -> None:
        for pattern in ["(?<=a)b", "(a)\\1", "a(?=b)", r"(?<n>a)\k<n>", r"\p{Alphabetic}"]:
            try:
                search_language(pattern, dialect="ecma")
            except UnsupportedRegexError as exc:
                assert "not supported" in exc.reason
        # a syntax error after an unsupported construct is still a syntax error
        with pytest.raises(RegexError) as info:
            search_language("(?<=a)b{", dialect="ecma")
        assert not isinstance(info.value, UnsupportedRegexError)
        assert info.value.offset == 7


class TestPython:
    @pytest.mark.parametrize(("dialect", "flags"), [("python", 0), ("python-ascii", re.ASCII)])
    def test_cases_agree_with_re(self, dialect: str, flags: int) -> None:
        for pattern, texts in SENSITIVE:
            compiled = re.compile(pattern, flags)
            ours = matcher(pattern, dialect)
            for text in texts:
                assert ours(text) == (compiled.search(text) is not None), (pattern, text)

    def test_ascii_classes_and_folding(self) -> None:
        for pattern in [r"\w", r"\W", r"\d\D", r"\s\S", "(?i)k", "(?i)[a-z]+", r"(?i)[^k]"]:
            for text in ["é", "a", "K", "\u212a", "ſ", "٣1", " \x1c", "\x1c ", "s"]:
                want = re.search(pattern, text, re.ASCII) is not None
                assert matcher(pattern, "python-ascii")(text) == want, (pattern, text)
        with pytest.raises(RegexError, match="incompatible"):
            parse_regex("(?u)a", dialect="python-ascii")

    def test_anchors_anywhere_agree_with_re(self, node: None) -> None:
        # random patterns with anchors in groups, alternatives and repetitions: re.search and
        # node's RegExp.test (with $ / ^ for \Z / \A) are the oracles
        rng = random.Random(7)
        atoms = ["a", "b", "\\n", ".", "^", "$", "[ab]", "(?:)", "\\Z", "\\A"]

        def gen(depth: int) -> str:
            if depth > 3 or rng.random() < 0.3:
                return rng.choice(atoms)
            k = rng.random()
            if k < 0.35:
                return gen(depth + 1) + gen(depth + 1)
            if k < 0.6:
                return "(" + gen(depth + 1) + "|" + gen(depth + 1) + ")"
            if k < 0.8:
                return "(?:" + gen(depth + 1) + ")" + rng.choice(["*", "?", "+", "{2}", "{0,3}"])
            return gen(depth + 1) + "|" + gen(depth + 1)

        texts = ["".join(t) for n in range(4) for t in itertools.product("ab\n", repeat=n)]
        patterns: list[str] = []
        while len(patterns) < 250:
            pattern = gen(0)
            try:
                re.compile(pattern)
            except re.error:
                continue
            patterns.append(pattern)
        for pattern in patterns:
            compiled = re.compile(pattern)
            ours = matcher(pattern, "python")
            assert [ours(t) for t in texts] == [bool(compiled.search(t)) for t in texts], pattern
        ecma = [p.replace("\\Z", "$").replace("\\A", "^") for p in patterns]
        for pattern, want in zip(ecma, ecma_verdicts([(p, texts) for p in ecma]), strict=True):
            if want is not None:
                ours = matcher(pattern, "ecma")
                assert [ours(t) for t in texts] == want, pattern


class TestRust:
    def test_cases_agree_with_pydantic_core(self, pydantic_core: None) -> None:
        for pattern, texts in [*SENSITIVE, *RUST_ONLY]:
            if "(?=" in pattern or "(?!" in pattern:
                continue  # look-around is not Rust syntax
            rust = rust_search(pattern)
            assert rust is not None, pattern
            ours = matcher(pattern, "rust")
            assert [ours(t) for t in texts] == [rust(t) for t in texts], pattern

    def test_syntax_errors_agree_with_pydantic_core(self, pydantic_core: None) -> None:
        wrong = []
        for pattern in RUST_SYNTAX:
            try:
                search_language(pattern, dialect="rust")
                ours = None
            except UnsupportedRegexError:
                ours = None
            except RegexError as exc:
                ours = exc.reason
            if (ours is None) != (rust_error(pattern) is None):
                wrong.append((pattern, ours))
        assert not wrong

    @pytest.mark.parametrize(("name", "cls"), [("DIGIT", r"\d"), ("SPACE", r"\s"), ("WORD", r"\w")])
    def test_tables_are_rusts(self, pydantic_core: None, name: str, cls: str) -> None:
        """Each stored range is all in the class and each gap all outside (one call each)."""
        ranges: iv.Ranges = getattr(_rust_tables, name)
        every = rust_search(f"^{cls}+$")
        none = rust_search(f"^{cls.upper()}+$")
        assert every is not None and none is not None

        def text(lo: int, hi: int) -> str:
            return "".join(chr(c) for c in range(lo, hi + 1) if not 0xD800 <= c <= 0xDFFF)

        for lo, hi in ranges:
            assert every(text(lo, hi)), (lo, hi)
        for lo, hi in iv.complement(ranges):
            chunk = text(lo, hi)
            assert not chunk or none(chunk), (lo, hi)


class TestGeneration:
    """The tuple reading: every string it matches, each dialect matches."""

    def oracles(self, pattern: str) -> list[Callable[[str], bool]]:
        out: list[Callable[[str], bool]] = []
        compiled = re.compile(pattern)
        out.append(lambda t: compiled.search(t) is not None)
        rust = rust_search(pattern)  # None for lookaheads: no Rust verdict at all
        if rust is not None:
            out.append(rust)
        return out

    def test_sound_under_every_dialect(self, node: None, pydantic_core: None) -> None:
        alphabet = [
            "a",
            "1",
            "٣",
            "🯱",
            "_",
            "é",
            " ",
            "\n",
            "\r",
            "\u2028",
            "\ufeff",
            "\x85",
            "\x1c",
        ]
        texts = ["".join(t) for n in range(3) for t in itertools.product(alphabet, repeat=n)]
        cases = [(p, texts) for p, _ in SENSITIVE]
        ecma = ecma_verdicts(cases)
        allowed = 0
        for (pattern, _), node_says in zip(cases, ecma, strict=True):
            assert node_says is not None
            ours = matcher(pattern, GENERATE)
            others = self.oracles(pattern)
            for text, ecma_ok in zip(texts, node_says, strict=True):
                if ours(text):
                    allowed += 1
                    assert ecma_ok and all(o(text) for o in others), (pattern, text)
        assert allowed > 100

    @pytest.mark.parametrize(
        ("pattern", "kept", "dropped"),
        [
            (r"^\D$", ["a", " "], ["٣", "🯱", "1"]),  # not any dialect's digit
            (r"^[^\s]$", ["a"], ["\ufeff", "\x85", "\x1c", "\u3000"]),
            (r"^\w$", ["a", "_", "1"], ["é", "٣"]),
            (r"^\W$", ["-"], ["é", "a", "\u0301"]),
            (r"^.$", ["a", "\x85"], ["\n", "\r", "\u2028", "\u2029"]),
            (r"^a$", ["a"], ["a\n"]),
            (r"^\s$", [" ", "\t", "\xa0"], ["\ufeff", "\x85", "\x1c"]),
        ],
    )
    def test_per_atom_intersection(self, pattern: str, kept: list[str], dropped: list[str]) -> None:
        ours = matcher(pattern, GENERATE)
        assert all(ours(t) for t in kept)
        assert not any(ours(t) for t in dropped)

    def test_dialects_that_cannot_read_an_atom_are_skipped(self) -> None:
        # Python has no \p{...}: the class is ECMA's and Rust's
        ours = matcher(r"^\p{Lu}$", GENERATE)
        assert ours("A") and ours("É") and not ours("a")
        # case folding intersects per character: ASCII folding wins over Unicode's
        fold = matcher("(?i)^k$", ("python-ascii", "python"))
        assert fold("K") and fold("k") and not fold("\u212a")

    def test_syntax_is_the_first_dialects(self) -> None:
        with pytest.raises(RegexError):
            search_language("(?i)a", dialect=GENERATE)
        assert matcher("(?i)a", ("rust", "python"))("A")
