"""The regex frontend: every syntax feature, every error with its offset, Unicode classes."""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence

import pytest

from structgen.automata import (
    Alternation,
    CharClass,
    Concat,
    Empty,
    Repeat,
    String,
    alternation,
    compile_regex,
    concat,
    literal_node,
    parse_regex,
    repeat,
)
from structgen.automata import intervals as iv
from structgen.automata import unicode_tables as ut
from structgen.automata.regex_syntax import MAX_GROUP_DEPTH
from structgen.errors import RegexError

ALL_CHARS = "".join(map(chr, range(0x110000)))


def agrees(pattern: str, samples: Sequence[str], flags: int = 0) -> None:
    """compile_regex(pattern) accepts exactly the samples re.fullmatch accepts."""
    dfa = compile_regex(
        pattern, ignore_case=bool(flags & re.IGNORECASE), dotall=bool(flags & re.DOTALL)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        compiled = re.compile(pattern, flags)
    for s in samples:
        expected = compiled.fullmatch(s) is not None
        assert dfa.accepts(s.encode()) == expected, (pattern, s, expected)


class TestAst:
    def test_literal_runs_merge(self) -> None:
        assert parse_regex("abc") == String("abc")
        assert parse_regex("") == Empty()

    def test_quantifier_binds_to_last_char(self) -> None:
        assert parse_regex("abc*") == Concat((String("ab"), Repeat(String("c"), 0, None)))
        assert parse_regex("ab{2,3}") == Concat((String("a"), Repeat(String("b"), 2, 3)))

    def test_single_char_alternation_becomes_class(self) -> None:
        assert parse_regex("a|b|[c-d]") == CharClass(((ord("a"), ord("d")),))

    def test_groups_are_transparent(self) -> None:
        assert parse_regex("(?:ab)(c)(?P<n>d)") == String("abcd")

    def test_combinators(self) -> None:
        assert concat([Empty(), String("a"), Concat((String("b"), Empty()))]) == String("ab")
        assert alternation([String("ab"), String("ab")]) == String("ab")
        assert alternation([]) == CharClass(())
        assert isinstance(alternation([String("ab"), String("c")]), Alternation)
        assert repeat(String("a"), 1, 1) == String("a")
        assert repeat(String("a"), 0, 0) == Empty()
        assert repeat(Empty(), 2, None) == Empty()

    def test_literal_node(self) -> None:
        assert literal_node("a.b") == String("a.b")
        assert literal_node("") == Empty()
        node = literal_node("k", ignore_case=True)
        assert isinstance(node, CharClass)
        assert iv.contains(node.ranges, 0x212A)  # KELVIN SIGN


class TestFeatures:
    def test_literals_and_escapes(self) -> None:
        agrees(r"a\.b\*\+\?\(\)\[\]\{\}\|\^\$\\", [r"a.b*+?()[]{}|^$\\", "a.b"])
        agrees(r"\n\t\r\f\v\a\0", ["\n\t\r\f\v\a\0", "n"])
        agrees(r"\x41\u00e9\U0001F600\101\07", ["Aé😀A\x07", "A"])
        agrees(r"\N{EM DASH}\N{LATIN SMALL LETTER E WITH ACUTE}", ["—é", "-e"])
        agrees(r"\-\ \é\#", ["- é#"])

    def test_dot(self) -> None:
        agrees(r"a.c", ["abc", "a\nc", "aéc", "a😀c", "ac", "abbc"])
        agrees(r"a.c", ["a\nc", "abc"], re.DOTALL)
        agrees(r"(?s)a.c", ["a\nc"])
        agrees(r"(?s:.)(.)", ["\n\n", "\na", "a\n"])

    def test_classes(self) -> None:
        samples = ["a", "b", "z", "-", "]", "^", "\\", "A", "é", "中", "😀", "", "ab"]
        for pattern in [
            r"[abc]",
            r"[a-z]",
            r"[^a-z]",
            r"[]a]",
            r"[^]a]",
            r"[a-]",
            r"[-a]",
            r"[\]\\^-]",
            r"[\^a]",
            r"[à-ÿ一-龥]",
            r"[\u4e00-\u9fa5]",
            r"[\U0001F600-\U0001F64F]",
            r"[\d\s]",
            r"[^\W\d]",
            r"[\x00-\x7f]",
            r"[\101-\132]",
            r"[\b]",
            r"[.*+?(){}|$]",
        ]:
            agrees(pattern, [*samples, "\b", ".", "1", " "])

    def test_nested_bracket_is_literal(self) -> None:
        agrees(r"[[a]", ["[", "a", "]"])
        agrees(r"[a&&b]", ["&", "a"])

    def test_class_escapes(self) -> None:
        samples = ["1", "١", "a", "é", "_", " ", "\u00a0", "\u2003", "中", "-", "\x1c", "²", "Ⅷ"]
        for pattern in [r"\d", r"\D", r"\w", r"\W", r"\s", r"\S"]:
            agrees(pattern, samples)
            agrees("(?a)" + pattern, samples)

    @pytest.mark.parametrize(
        ("pattern", "ours", "theirs"),
        [
            (r"\d", ut.digit_ranges(), str.isdecimal),
            (r"\w", ut.word_ranges(), lambda c: c.isalnum() or c == "_"),
            (r"\s", ut.space_ranges(), str.isspace),
        ],
    )
    def test_unicode_category_sets_equal_re(
        self, pattern: str, ours: iv.Ranges, theirs: object
    ) -> None:
        found = re.findall(pattern, ALL_CHARS)
        assert iv.from_points(map(ord, found)) == ours
        sample = ALL_CHARS[:0x3000] + ALL_CHARS[0x1D400:0x1E000]
        assert {c for c in sample if theirs(c)} == {c for c in sample if iv.contains(ours, ord(c))}  # type: ignore[operator]

    def test_quantifiers(self) -> None:
        samples = ["", "a", "aa", "aaa", "aaaa", "aaaaa", "b"]
        for q in ["*", "+", "?", "{2}", "{2,}", "{,2}", "{1,3}", "{0,0}", "{3,3}", "{,}"]:
            agrees("a" + q, samples)
            agrees("a" + q + "?", samples)  # lazy: same language
            agrees("(?:ab)" + q, ["", "ab", "abab", "ababab", "aba"])

    def test_brace_literals(self) -> None:
        for pattern in [r"a{", r"a{}", r"a{1", r"a{1,", r"a{x}", r"{", r"x{,2", r"a{ 1}", r"}"]:
            agrees(pattern, [pattern.replace("\\", ""), "a", "aa", "x{,2"])

    def test_alternation_and_groups(self) -> None:
        samples = ["", "a", "b", "ab", "abc", "cd", "abcd", "x"]
        for pattern in [
            "a|b",
            "ab|cd",
            "a|",
            "|a",
            "(a|b)c?",
            "(?:ab|c)(d)?",
            "(?P<x>a)(b|)",
            "()",
        ]:
            agrees(pattern, samples)

    def test_anchors_at_the_ends_are_no_ops(self) -> None:
        samples = ["", "a", "ab", "b", "a\n", "\na"]
        for pattern in [
            "^a$",
            r"\Aa\Z",
            "^a|^b$",
            "(^a|b$)",
            "^(?:a|b)$",
            "(?m)^a$",
            "^$",
            "$^",
            "^^a$$",
            "(^a)?b",
            "((^))a",
        ]:
            agrees(pattern, samples)

    def test_inline_flags(self) -> None:
        samples = ["abc", "ABC", "aBc", "a\nc", "a c", "abC"]
        for pattern in [
            "(?i)abc",
            "(?i:a)bc",
            "a(?i:b)c",
            "(?i)a(?-i:b)c",
            "(?is)a.c",
            "(?x) a b c",
        ]:
            agrees(pattern, samples)
        agrees("(?x)a b # comment\n c", ["abc", "a b c"])
        agrees("(?x)[ ]a", [" a", "a"])
        agrees("(?x)a\\ b", ["a b", "ab"])
        agrees("(?x:a b) c", ["ab c", "abc"])
        agrees("(?i)(?s)a.", ["A\n"])
        agrees("(?i)a|b", ["A", "B"])
        agrees("(?u)a", ["a"])

    def test_comments(self) -> None:
        agrees("a(?#comment)b", ["ab"])
        agrees("a(?#c)*", ["", "a", "aa"])

    def test_quantifier_after_comment_or_whitespace_binds_to_last_char(self) -> None:
        samples = ["", "a", "ab", "abb", "abab", "b"]
        for pattern in ["ab(?#c)*", "ab(?#c){2}", "(?x)ab *", "(?x)ab # c\n+", "(?x)ab\n?"]:
            agrees(pattern, samples)

    def test_flags_argument(self) -> None:
        assert parse_regex("a", flags="i") == parse_regex("(?i)a")
        assert parse_regex("a.", flags=frozenset({"s"})) == parse_regex("(?s)a.")
        with pytest.raises(RegexError, match="unknown regex flag"):
            parse_regex("a", flags="q")
        with pytest.raises(RegexError, match="incompatible"):
            parse_regex("a", flags="au")


class TestIgnoreCase:
    SAMPLES = (
        "k", "K", "\u212a", "s", "S", "\u017f", "i", "I", "\u0131", "\u0130",
        "ß", "ẞ", "σ", "ς", "Σ", "µ", "μ", "Μ", "é", "É", "1", "_", "ǅ", "ǆ", "Ǆ",
        "\u0345", "ι", "Ι", "\u1fbe", "ﬅ", "ﬆ", "Ա", "ա", "𐐀", "𐐨",
    )  # fmt: skip

    def test_literals(self) -> None:
        for ch in self.SAMPLES:
            agrees(re.escape(ch), self.SAMPLES, re.IGNORECASE)

    def test_classes(self) -> None:
        for pattern in [
            "[a-z]", "[^a-z]", "[k]", "[^k]", "[s-t]", "[σ]", "[^σ]", "[\\w]", "[\\W]",
            "[\\wé]", "[^\\Wk]", "[ß]", "[\U00010400-\U00010427]", "[Α-Ω]", "[0-9]", "[^0-9]",
        ]:  # fmt: skip
            agrees(pattern, self.SAMPLES, re.IGNORECASE)

    def test_ascii_mode(self) -> None:
        for pattern in ["(?a)k", "(?a)[a-z]", "(?a)[^k]", "(?ai)\\w", "(?a:[é])"]:
            agrees(pattern, self.SAMPLES, re.IGNORECASE)

    def test_tables_match_sre(self) -> None:
        import _sre  # type: ignore[import-not-found]

        tables = ut.unicode_case_tables()
        # every code point with a case mapping is below U+20000 (checked by the last line)
        for cp in range(0x20000):
            assert tables.lower_of(cp) == _sre.unicode_tolower(cp)
            assert iv.contains(tables.cased, cp) == _sre.unicode_iscased(cp)
        assert tables.cased[-1][1] < 0x20000

    def test_extra_cases_match_re(self) -> None:
        casefix = pytest.importorskip("re._casefix")
        assert ut.unicode_case_tables().extras == casefix._EXTRA_CASES


MALFORMED: list[tuple[str, int | None, str]] = [
    # offsets as Python's re reports them, except the inline-flag ones, which point at the flag
    ("(", 0, "missing ), unterminated subpattern"),
    ("a)", 1, "unbalanced parenthesis"),
    ("a|b)", 3, "unbalanced parenthesis"),
    ("[a", 0, "unterminated character set"),
    ("[]", 0, "unterminated character set"),
    ("[z-a]", 1, "bad character range z-a"),
    ("[a-\\d]", 1, "bad character range"),
    ("[\\w-z]", 1, "bad character range"),
    ("*", 0, "nothing to repeat"),
    ("a|*", 2, "nothing to repeat"),
    ("(*)", 1, "nothing to repeat"),
    ("{1}", 0, "nothing to repeat"),
    ("^*", 1, "nothing to repeat"),
    ("(?#c)*", 5, "nothing to repeat"),
    ("a**", 2, "multiple repeat"),
    ("a{2}{3}", 4, "multiple repeat"),
    ("a*??", 3, "multiple repeat"),
    ("a{3,2}", 2, "min repeat greater than max repeat"),
    ("a{4294967295}", 1, "too large"),
    ("a\\", 1, "bad escape (end of pattern)"),
    ("\\q", 0, "bad escape \\q"),
    ("[\\q]", 1, "bad escape \\q"),
    ("[\\8]", 1, "bad escape \\8"),
    ("\\x4g", 0, "incomplete escape \\x4"),
    ("\\u12", 0, "incomplete escape \\u12"),
    ("\\U0011ffff", 0, "bad escape \\U0011ffff"),
    ("\\N", 2, "missing {"),
    ("\\N{}", 3, "missing character name"),
    ("\\N{NOPE}", 0, "undefined character name"),
    ("\\777", 0, "octal escape value"),
    ("[\\777]", 1, "octal escape value"),
    ("(?", 2, "unexpected end of pattern"),
    ("(?Px)", 1, "unknown extension ?Px"),
    ("(?<x)", 1, "unknown extension ?<x"),
    ("(?z)", 1, "unknown extension ?z"),
    ("(?P<1a>x)", 4, "bad character in group name"),
    ("(?P<a>x)(?P<a>y)", 12, "redefinition of group name"),
    ("(?P<a", 4, "missing >"),
    ("(?#abc", 0, "unterminated comment"),
    ("(?L)", 2, "'L' flag"),
    ("(?au)", 3, "incompatible"),
    ("(?-a:x)", 3, "cannot turn off"),
    ("(?i-i:x)", 5, "flag turned on and off"),
    ("(?i", 3, "missing -, : or )"),
    ("(?-i", 4, "missing :"),
    ("a(?i)b", 1, "global flags"),
    ("a|(?i)b", 2, "global flags"),
    ("(a(?i))", 2, "global flags"),
]

UNSUPPORTED: list[tuple[str, int | None, str]] = [
    # the offset of the construct
    ("(a)\\1", 3, "backreference"),
    ("(?P<n>a)(?P=n)", 8, "named backreference"),
    ("a(?=b)", 1, "lookahead"),
    ("a(?!b)", 1, "lookahead"),
    ("(?<=a)b", 0, "lookbehind"),
    ("(?<!a)b", 0, "lookbehind"),
    ("(a)?(?(1)b|c)", 4, "conditional"),
    ("(?>a)", 0, "atomic group"),
    ("a*+", 1, "possessive"),
    ("a^b", 1, "start anchor"),
    ("a\\Ab", 1, "start anchor"),
    ("a$b", 1, "end anchor"),
    ("a\\Zb", 1, "end anchor"),
    ("(a$)b", 2, "end anchor"),
    ("(?m)a$\\n^b", 5, "end anchor"),
    ("(^a)*", 1, "start anchor"),
    ("(a$)+", 2, "end anchor"),
    ("a?^b", 2, "start anchor"),
    ("(" * (MAX_GROUP_DEPTH + 1) + ")" * (MAX_GROUP_DEPTH + 1), MAX_GROUP_DEPTH, "nested"),
]

ERRORS = MALFORMED + UNSUPPORTED


class TestErrors:
    @pytest.mark.parametrize(("pattern", "offset", "reason"), ERRORS)
    def test_error_offset_and_reason(self, pattern: str, offset: int | None, reason: str) -> None:
        with pytest.raises(RegexError) as info:
            parse_regex(pattern)
        assert info.value.offset == offset
        assert reason in info.value.reason
        assert info.value.pattern == pattern
        assert isinstance(info.value, ValueError)

    @pytest.mark.parametrize("pattern", [e[0] for e in MALFORMED])
    def test_malformed_patterns_also_fail_in_re(self, pattern: str) -> None:
        with pytest.raises((re.error, OverflowError)):
            re.compile(pattern)

    def test_unsupported_reasons_say_what_to_do(self) -> None:
        for pattern in ["(a)\\1", "a(?=b)", "a^b", "(?>a)", "a*+"]:
            with pytest.raises(RegexError) as info:
                parse_regex(pattern)
            assert "not supported" in info.value.reason
            assert "(" in info.value.reason  # a hint in parentheses
            assert str(info.value.offset) in str(info.value)

    def test_error_message_shows_caret(self) -> None:
        with pytest.raises(RegexError) as info:
            parse_regex("ab[z-a]")
        assert "  ab[z-a]\n     ^" in str(info.value)
