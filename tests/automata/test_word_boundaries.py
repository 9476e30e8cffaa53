"""Word-boundary assertions (`\\b`, `\\B`, Rust's `\\<`, `\\>`, `\\b{start}` ...) against the real
engines, every string up to length 3 over an alphabet that mixes ASCII word characters, Unicode
word characters (which only some dialects call word characters), separators and a newline.

Search semantics (`search_language`) for ECMA-262 (node), Python `re` (with and without
`re.ASCII`) and Rust `regex` (pydantic-core); full match (`parse_regex`) against `re.fullmatch`;
the generation reading (ECMA, Python, Rust at once) must only keep strings all three match.
"""

from __future__ import annotations

import itertools
import re

import pytest

from structgen import Compiler, Matcher
from structgen.automata.regex_syntax import UnsupportedRegexError, parse_regex, search_language
from structgen.errors import GrammarError, RegexError
from tests.automata.ecma_oracle import ecma_verdicts
from tests.automata.rust_oracle import rust_search
from tests.automata.test_dialects import GENERATE, matcher
from tests.reliability.fuzzing import byte_vocab

ALPHABET = ["a", "1", "_", "é", "٣", " ", "-", "\n"]
TEXTS = ["".join(t) for n in range(4) for t in itertools.product(ALPHABET, repeat=n)]

PATTERNS = [
    r"\b",
    r"\B",
    r"^\B$",
    r"\ba",
    r"a\b",
    r"\Ba",
    r"a\B",
    r"\b-",
    r"-\b",
    r"\b\w+\b",
    r"^\w+\b",
    r"\b1\b",
    r"(\b|-)a",
    r"a(\B|_)",
    r"^(?:\b[a1]+\b[ -]?)+$",
    r"\b \b",
    r"\Bé",
    r"^\b$",
    r"a\b$",
    r"^\ba",
    r"(^|\b)1",
]
RUST_ONLY = [
    r"\<a",
    r"a\>",
    r"\b{start}\w",
    r"\w\b{end}",
    r"\b{start-half}a",
    r"a\b{end-half}",
    r"a\b{2}",
    r"\b+a",
    r"(?-u:\b)a",
]


class TestAgainstTheEngines:
    def test_ecma(self, node: None) -> None:
        verdicts = ecma_verdicts([(p, TEXTS) for p in PATTERNS])
        for pattern, want in zip(PATTERNS, verdicts, strict=True):
            assert want is not None, pattern
            ours = matcher(pattern, "ecma")
            wrong = [t for t, w in zip(TEXTS, want, strict=True) if ours(t) != w]
            assert not wrong, (pattern, wrong[:5])

    @pytest.mark.parametrize(("dialect", "flags"), [("python", 0), ("python-ascii", re.ASCII)])
    def test_python(self, dialect: str, flags: int) -> None:
        for pattern in PATTERNS:
            compiled = re.compile(pattern, flags)
            ours = matcher(pattern, dialect)
            wrong = [t for t in TEXTS if ours(t) != (compiled.search(t) is not None)]
            assert not wrong, (pattern, wrong[:5])

    def test_rust(self, pydantic_core: None) -> None:
        for pattern in PATTERNS + RUST_ONLY:
            rust = rust_search(pattern)
            assert rust is not None, pattern
            ours = matcher(pattern, "rust")
            wrong = [t for t in TEXTS if ours(t) != rust(t)]
            assert not wrong, (pattern, wrong[:5])

    def test_full_match(self) -> None:
        for pattern in PATTERNS:
            if "^" in pattern or "$" in pattern:
                continue
            compiled = re.compile(pattern, re.ASCII)
            dfa = Compiler(byte_vocab()).regex(pattern)
            for text in TEXTS:
                m = Matcher(dfa)
                ours = m.accept_bytes(text.encode()) and m.can_terminate()
                assert ours == (compiled.fullmatch(text) is not None), (pattern, text)


def test_generation_reading_is_sound_everywhere(node: None, pydantic_core: None) -> None:
    ecma = ecma_verdicts([(p, TEXTS) for p in PATTERNS])
    kept = 0
    for pattern, node_says in zip(PATTERNS, ecma, strict=True):
        assert node_says is not None
        ours = matcher(pattern, GENERATE)
        python = re.compile(pattern)
        rust = rust_search(pattern)
        assert rust is not None
        for text, ecma_ok in zip(TEXTS, node_says, strict=True):
            if ours(text):
                kept += 1
                assert ecma_ok and python.search(text) and rust(text), (pattern, text)
    assert kept > 2000
    # a Unicode word character next to \b: Python and Rust call it a word character, ECMA not
    ours = matcher(r"\bé", GENERATE)
    assert not ours("é") and not ours(" é")
    assert matcher(r"\ba", GENERATE)(" a")


class TestErrors:
    def test_unknown_rust_boundary_is_a_syntax_error(self) -> None:
        with pytest.raises(RegexError) as info:
            search_language(r"a\b{middle}", dialect="rust")
        assert not isinstance(info.value, UnsupportedRegexError)
        assert "start, end" in info.value.reason and info.value.offset == 1

    def test_repeated_boundary_is_nothing_to_repeat(self) -> None:
        for dialect in ("python", "ecma"):
            with pytest.raises(RegexError, match="nothing to repeat"):
                search_language(r"\b*a", dialect=dialect)  # type: ignore[arg-type]

    def test_too_large_is_unsupported_with_a_hint(self) -> None:
        with pytest.raises(UnsupportedRegexError) as info:
            parse_regex(r"\b(\w{1,30}\b-){1,30}")
        assert "word boundary" in info.value.reason and "shorten" in info.value.reason

    def test_lark_terminals_refuse_boundaries(self) -> None:
        with pytest.raises(GrammarError, match="word boundary"):
            Compiler(byte_vocab()).grammar("start: WORD\nWORD: /\\bif\\b/\n")


def test_schema_pattern_with_boundaries_generates_valid_strings() -> None:
    from tests.oracles.checks import ajv

    schema = {"type": "string", "pattern": r"^\bSKU\b-\d{2}\b"}
    compiled = Compiler(byte_vocab()).json_schema(schema)
    texts = ['"SKU-12"', '"SKU-123"', '"SKU-12a"', '"SKU-12 x"', '"xSKU-12"']
    accepted = []
    for text in texts:
        m = Matcher(compiled)
        if m.accept_bytes(text.encode()) and m.can_terminate():
            accepted.append(text[1:-1])
    assert accepted == ["SKU-12", "SKU-12 x"]
    assert all(ajv().validate_many(schema, accepted))
