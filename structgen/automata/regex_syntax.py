"""Regex syntax of several dialects -> a small AST (its node classes: `_nodes.py`).

The AST is flag-free: case folding, ``.``, ``\\d \\w \\s`` and ``\\p{...}`` are resolved to
explicit code point sets while parsing, so the rest of the pipeline only sees ``Empty``,
``String``, ``CharClass``, ``Concat``, ``Alternation`` and ``Repeat``.

``dialect`` (see ``dialects.py``) picks the syntax and the meaning: ``"python"`` (``re``),
``"python-ascii"`` (``re.ASCII``), ``"ecma"`` (ECMA-262 with the ``u`` flag, as JSON Schema
validators such as ajv read patterns) or ``"rust"`` (the ``regex`` crate, as pydantic-core).
A tuple of dialects reads the pattern with the first one's syntax and gives every atom the
intersection of what the dialects that can read that atom mean (``\\D`` is "no dialect's
digit", ``.`` excludes every dialect's line terminators, ``$`` is the very end): a subset of
the strings every one of them matches, which is what generation needs.

Two readings of anchors: ``parse_regex`` is full-match semantics, where ``^ $ \\A \\Z \\z`` are
accepted only where they cannot change a full match and vanish; ``search_language`` is
``re.search`` / ``RegExp.test`` / ``Regex::is_match`` semantics, where anchors may stand
anywhere and are resolved exactly (the strings that contain a match), and lookaheads right
after a leading ``^`` become separate languages the whole string must (not) be in.

Word boundaries (``\\b``, ``\\B``, Rust's ``\\<`` ...) are parsed as markers and resolved into a
plain AST before a parse returns (``codepoint_dfa.py``). Whatever is not a regular language over
code points, or is not implemented (backreferences, other lookaround, conditionals, atomic
groups, possessive quantifiers), raises
``UnsupportedRegexError``; what the dialect itself rejects raises ``RegexError``, both with the
offset of the construct.
"""

from __future__ import annotations

import contextlib
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from structgen.automata import dialects as dl
from structgen.automata import intervals as iv
from structgen.automata import unicode_tables as ut
from structgen.automata._nodes import (
    Alternation,
    CharClass,
    Concat,
    Empty,
    Node,
    Repeat,
    String,
    alternation,
    concat,
    repeat,
)
from structgen.automata.dialects import Dialect, DialectSpec
from structgen.automata.intervals import Ranges
from structgen.errors import RegexError, UnsupportedRegexError

__all__ = [
    "ANY_CHAR",
    "MAX_GROUP_DEPTH",
    "Alternation",
    "CharClass",
    "Concat",
    "Empty",
    "Node",
    "Repeat",
    "SearchLanguage",
    "String",
    "UnsupportedRegexError",
    "alternation",
    "concat",
    "literal_node",
    "parse_regex",
    "repeat",
    "search_language",
]

MAX_GROUP_DEPTH = 200
_MAXREPEAT = 4294967295  # sre's MAXREPEAT on 64-bit builds


@dataclass(frozen=True, slots=True)
class Difference:
    """Matches what ``minuend`` matches and no subtrahend does: an object's "any other key",
    built side by side (`automata.difference`) rather than as a trie of what leaves the
    declared names. A whole terminal's pattern (or one it must also match), never inside
    another node; the subtrahends' languages are finite, and the minuend has an infinite
    future from every state with a move (checked when its automaton is built)."""

    minuend: Node
    subtrahends: tuple[Node, ...]

    def __reduce__(self) -> tuple[type[Difference], tuple[Node, tuple[Node, ...]]]:
        # (by its fields: compiled, a frozen dataclass cannot be unpickled field by field)
        return (Difference, (self.minuend, self.subtrahends))


#: what a grammar terminal matches: a regex AST, or a difference of them
Pattern = Node | Difference


# Word-boundary assertions (``\\b``, ``\\B``, Rust's ``\\<`` ...) are parsed as *markers*: the
# one-point class of code point ``MARKER_BASE + k`` (above U+10FFFF, so no other class contains
# it) for the parser's k-th ``Boundary``. ``codepoint_dfa.eliminate_boundaries`` resolves them
# before a parse returns, so no marker leaves this module.
MARKER_BASE = iv.MAX_CODE_POINT + 1
_MARKERS: Ranges = ((MARKER_BASE, 2**31 - 1),)  # every marker code point

# Neighbour types: a word character, a non-word one, the edge of the text (start or end), and
# (reading several dialects) a character one dialect calls a word character and another not.
WORD, NONWORD, EDGE, EITHER = "w", "n", "e", "?"


@dataclass(frozen=True, slots=True)
class Boundary:
    """A zero-width assertion about the characters on either side: ``pairs`` holds the allowed
    (before, after) types (``WORD``, ``NONWORD``, ``EDGE``); ``word``/``nonword`` are the
    characters it surely calls word / non-word (any other is ``EITHER``: the assertion holds
    next to one only where it holds for both readings)."""

    pairs: frozenset[tuple[str, str]]
    word: Ranges
    nonword: Ranges

    def __reduce__(self) -> tuple[type[Boundary], tuple[Any, ...]]:
        return (Boundary, (self.pairs, self.word, self.nonword))

    def kind(self, cp: int) -> str:
        if iv.contains(self.word, cp):
            return WORD
        if iv.contains(self.nonword, cp):
            return NONWORD
        return EITHER

    def after(self, before: str) -> frozenset[str]:
        """The types the next character may have, given the previous one's."""
        if before == EITHER:
            return self.after(WORD) & self.after(NONWORD)
        return frozenset(b for a, b in self.pairs if a == before)


def _pairs(before: str, after: str) -> frozenset[tuple[str, str]]:
    return frozenset((a, b) for a in before for b in after)


_NOT_WORD = NONWORD + EDGE
_BOUNDARY_PAIRS: dict[str, frozenset[tuple[str, str]]] = {
    "b": _pairs(WORD, _NOT_WORD) | _pairs(_NOT_WORD, WORD),
    "B": _pairs(WORD, WORD) | _pairs(_NOT_WORD, _NOT_WORD),
    "start": _pairs(_NOT_WORD, WORD),
    "end": _pairs(WORD, _NOT_WORD),
    "start-half": _pairs(_NOT_WORD, WORD + _NOT_WORD),
    "end-half": _pairs(WORD + _NOT_WORD, _NOT_WORD),
}
_RUST_BOUNDARIES = frozenset(("start", "end", "start-half", "end-half"))

ANY_CHAR: Ranges = ((0, iv.MAX_CODE_POINT),)
_ANY_BUT_NEWLINE: Ranges = ((0, 9), (11, iv.MAX_CODE_POINT))


# ----------------------------------------------------------------------------- combinators


def literal_node(text: str, *, ignore_case: bool = False, ascii_case: bool = False) -> Node:
    """The AST matching ``text`` exactly, or case-insensitively: like ``re.IGNORECASE``, or
    folding only A-Z/a-z with ``ascii_case`` (``re.IGNORECASE | re.ASCII``)."""
    if not ignore_case:
        return String(text) if text else Empty()
    if ascii_case:  # (A-Z/a-z each a pair, the rest itself: no fold tables needed)
        return concat(_ascii_fold(c) for c in text)
    return concat(_fold_char(ord(c), ascii_case) for c in text)


def _ascii_fold(c: str) -> Node:
    """`_fold_char(ord(c), True)`, directly: a Lark grammar's `"select"i` keywords are folded
    at every compile."""
    if "a" <= c <= "z" or "A" <= c <= "Z":
        upper, lower = ord(c.upper()), ord(c.lower())
        return CharClass(((upper, upper), (lower, lower)))
    return String(c)


@lru_cache(maxsize=8192)
def _fold_char(cp: int, ascii_only: bool) -> Node:
    tables = ut.ascii_case_tables() if ascii_only else ut.unicode_case_tables()
    return _char_class(tables.fold(((cp, cp),)))


def _char_class(ranges: Ranges) -> Node:
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return String(chr(ranges[0][0]))
    return CharClass(ranges)


# ----------------------------------------------------------------------------- anchors


@dataclass(frozen=True, slots=True)
class SearchLanguage:
    """The strings a pattern finds a match in: ``node``, intersected with each lookahead's
    language (``positive``) or its complement (not ``positive``) — lookaheads right after a
    leading ``^`` assert something about the whole string from its start."""

    node: Node
    lookaheads: tuple[tuple[bool, Node], ...] = ()

    def __reduce__(self) -> tuple[type[SearchLanguage], tuple[Any, ...]]:
        return (SearchLanguage, (self.node, self.lookaheads))


# Search mode gives every parsed piece *anchor obligations*: a piece is a map from a key
# (anchored at the start, end state) to the language of the strings it spells that way. Start
# anchored: a `^` was passed, so nothing may come before. End state: _FREE (no `$` passed),
# _NL (Python's `$`: only a final "\n" may follow), _END (only the end may follow).
_FREE, _NL, _END = 0, 1, 2
_Key = tuple[bool, int]


class _Anchored:
    """A piece with anchor obligations: its language by (start anchored, end state). Native
    when compiled (not a frozen dataclass: see `_Info`). Never compared."""

    __slots__ = ("parts",)

    def __init__(self, parts: dict[_Key, Node]) -> None:
        self.parts = parts


_Item = Node | _Anchored
_PLAIN_KEY: _Key = (False, _FREE)
_ANY_STAR = Repeat(CharClass(ANY_CHAR), 0, None)
_NL_TAIL = Alternation((Empty(), String("\n")))


def _parts(item: _Item) -> dict[_Key, Node]:
    return item.parts if isinstance(item, _Anchored) else {_PLAIN_KEY: item}


def _pack(found: dict[_Key, list[Node]]) -> _Item:
    parts = {key: alternation(nodes) for key, nodes in found.items() if nodes}
    if not parts:
        return CharClass(())
    if list(parts) == [_PLAIN_KEY]:
        return parts[_PLAIN_KEY]
    return _Anchored(parts)


def _is_marker_class(node: Node) -> bool:
    return isinstance(node, CharClass) and bool(node.ranges) and node.ranges[-1][1] >= MARKER_BASE


@lru_cache(maxsize=4096)
def _nullable(node: Node) -> bool:
    if isinstance(node, Empty):
        return True
    if isinstance(node, CharClass):
        return _is_marker_class(node)
    if isinstance(node, String):
        return False
    if isinstance(node, Concat):
        return all(_nullable(x) for x in node.items)
    if isinstance(node, Alternation):
        return any(_nullable(x) for x in node.items)
    return node.min == 0 or _nullable(node.item)


@lru_cache(maxsize=4096)
def _empty_part(node: Node) -> Node:
    """The ways ``node`` matches the empty string: ``Empty`` or ``CharClass(())`` (never)
    when it has no word-boundary markers, else the markers that must hold there."""
    if isinstance(node, Empty):
        return node
    if isinstance(node, String):
        return CharClass(())
    if isinstance(node, CharClass):
        return CharClass(iv.intersect(node.ranges, _MARKERS))
    if isinstance(node, Concat):
        return concat(_empty_part(x) for x in node.items)
    if isinstance(node, Alternation):
        return alternation(_empty_part(x) for x in node.items if _nullable(x))
    return Empty() if node.min == 0 else _empty_part(node.item)


def _spells_char(node: Node, cp: int) -> bool:
    """Whether ``node`` matches the one-character string ``chr(cp)``."""
    if isinstance(node, Empty):
        return False
    if isinstance(node, String):
        return node.text == chr(cp)
    if isinstance(node, CharClass):
        return iv.contains(node.ranges, cp)
    if isinstance(node, Alternation):
        return any(_spells_char(x, cp) for x in node.items)
    if isinstance(node, Concat):
        return any(
            _spells_char(x, cp) and all(_nullable(y) for j, y in enumerate(node.items) if j != i)
            for i, x in enumerate(node.items)
        )
    return (
        (node.max is None or node.max >= 1)
        and _spells_char(node.item, cp)
        and (node.min <= 1 or _nullable(node.item))
    )


def _cat(a: _Item, b: _Item) -> _Item:
    """Concatenation with anchor obligations resolved: text before a `^` or after a `$` (but a
    final "\\n" after Python's) makes a way of spelling impossible."""
    if not isinstance(a, _Anchored) and not isinstance(b, _Anchored):
        return concat([a, b])
    found: dict[_Key, list[Node]] = {}
    for (s1, e1), na in _parts(a).items():
        for (s2, e2), nb in _parts(b).items():
            left = na
            if s2:
                if not _nullable(left):
                    continue
                left = _empty_part(left)
            start = s1 or s2
            if e1 == _FREE:
                found.setdefault((start, e2), []).append(concat([left, nb]))
                continue
            if _nullable(nb):
                found.setdefault((start, max(e1, e2)), []).append(concat([left, _empty_part(nb)]))
            if e1 == _NL and _spells_char(nb, 10):
                if _has_marker(nb):
                    raise _BoundaryAfterDollar
                found.setdefault((start, _END), []).append(concat([left, String("\n")]))
    return _pack(found)


class _BoundaryAfterDollar(Exception):
    """A word boundary where Python's `$` lets a final newline follow (reported by `_parse`)."""


@lru_cache(maxsize=4096)
def _has_marker(node: Node) -> bool:
    if isinstance(node, CharClass):
        return _is_marker_class(node)
    if isinstance(node, (Concat, Alternation)):
        return any(_has_marker(x) for x in node.items)
    if isinstance(node, Repeat):
        return _has_marker(node.item)
    return False


def _alt(items: Iterable[_Item]) -> _Item:
    items = list(items)
    if not any(isinstance(x, _Anchored) for x in items):
        return alternation(items)  # type: ignore[arg-type]
    found: dict[_Key, list[Node]] = {}
    for item in items:
        for key, node in _parts(item).items():
            found.setdefault(key, []).append(node)
    return _pack(found)


def _search_node(item: _Item, *, from_start: bool = False) -> Node:
    """The strings containing a match (``from_start``: a match at the start)."""
    out: list[Node] = []
    for (start, end), node in _parts(item).items():
        head = [] if start or from_start else [_ANY_STAR]
        tail = [_ANY_STAR] if end == _FREE else [_NL_TAIL] if end == _NL else []
        out.append(concat([*head, node, *tail]))
    return alternation(out)


# ----------------------------------------------------------------------------- parser

_I, _S, _M, _X, _A, _U, _R = 1, 2, 4, 8, 16, 32, 64
_FLAG_BITS = {"i": _I, "s": _S, "m": _M, "x": _X, "a": _A, "u": _U, "R": _R, "U": 0}
_FAMILY_FLAGS = {"python": "imsxau", "ecma": "ims", "rust": "imsxuUR"}
_WHITESPACE = frozenset(" \t\n\r\v\f")
_SPECIAL = frozenset("\\[](){}|.*+?^$")
_SPECIAL_VERBOSE = _SPECIAL | _WHITESPACE | {"#"}
#: the next character of `_SPECIAL` (a branch that is one literal run, found in one scan)
_NEXT_SPECIAL = re.compile(r"[\\\[\](){}|.*+?^$]")
_DIGITS = frozenset("0123456789")
_OCTDIGITS = frozenset("01234567")
_HEXDIGITS = frozenset("0123456789abcdefABCDEF")
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_ESCAPES = {"a": 7, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92}
_ECMA_ESCAPES = {"f": 12, "n": 10, "r": 13, "t": 9, "v": 11}
_ECMA_SYNTAX = frozenset("^$\\.*+?()[]{}|/")
_CATEGORY_LETTERS = frozenset("dDsSwW")
_POSIX: dict[str, Ranges] = {
    "alnum": ((0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)), "alpha": ((0x41, 0x5A), (0x61, 0x7A)),
    "ascii": ((0, 0x7F),), "blank": ((9, 9), (32, 32)), "cntrl": ((0, 0x1F), (0x7F, 0x7F)),
    "digit": ((0x30, 0x39),), "graph": ((0x21, 0x7E),), "lower": ((0x61, 0x7A),),
    "print": ((0x20, 0x7E),), "punct": ((0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E)),
    "space": ((9, 13), (32, 32)), "upper": ((0x41, 0x5A),),
    "word": ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)),
    "xdigit": ((0x30, 0x39), (0x41, 0x46), (0x61, 0x66)),
}  # fmt: skip

# Item kinds, for "nothing to repeat" / "multiple repeat" checks.
_PLAIN, _ANCHOR, _REPEATED, _LOOK = 0, 1, 2, 3


class _Info:
    """What a parsed item means for the anchor and quantifier checks. (Not a dataclass:
    compiled with mypyc, a dataclass keeps its generated `__init__` in Python, ~0.4 µs a call,
    and every parsed item makes one; this one is native. Never compared.)"""

    __slots__ = ("end_anchor", "kind", "start_anchor", "zero_width")

    def __init__(
        self,
        zero_width: bool,
        start_anchor: int | None,
        end_anchor: int | None,
        kind: int = _PLAIN,
    ) -> None:
        self.zero_width = zero_width  # matches only the empty string
        self.start_anchor = start_anchor  # offset of a ^ / \A inside it
        # offset of a $ / \Z inside it that needs the end of the pattern
        self.end_anchor = end_anchor
        self.kind = kind


_PLAIN_INFO = _Info(False, None, None)


def _parse_flag_letters(flags: Iterable[str], pattern: str, dialect: Dialect) -> int:
    fam = dl.family(dialect)
    allowed = _FAMILY_FLAGS[fam]
    bits = 0
    for f in flags:
        if f not in allowed:
            raise RegexError(
                f"unknown regex flag {f!r}; supported flags are {', '.join(allowed)}",
                pattern=pattern,
            )
        bits |= _FLAG_BITS[f]
    if fam == "rust":
        bits &= ~_U  # Unicode is the default; "u" only says so
    elif bits & _U and (bits & _A or dialect == "python-ascii"):
        raise RegexError("flags 'a' and 'u' are incompatible", pattern=pattern)
    return bits


def parse_regex(
    pattern: str,
    *,
    flags: Iterable[str] = "",
    dialect: DialectSpec = "python",
    ascii_case: bool = False,
    word_boundaries: bool = True,
) -> Node:
    """Parse a pattern into an AST with full-match semantics.

    ``flags`` holds flag letters (``"i"`` ignore case, ``"s"`` dotall, ``"m"`` multiline, ``"x"``
    verbose, ``"a"`` ASCII, ``"u"`` Unicode), e.g. ``"is"`` or Lark's ``frozenset({"i"})``.
    ``dialect``: see the module docstring; ``ascii_case`` folds case in ASCII whatever the
    dialect says (Lark's ``i`` without ``u``); ``word_boundaries=False`` refuses ``\\b`` and
    its kin (a lexer's terminal, whose neighbours are other tokens). Raises ``RegexError`` with
    the offset of the problem for malformed patterns, ``UnsupportedRegexError`` for unsupported
    ones.
    """
    node: Node = _parse(pattern, flags, dialect, ascii_case, word_boundaries, search=False)
    return node


def search_language(
    pattern: str,
    *,
    flags: Iterable[str] = "",
    dialect: DialectSpec = "python",
    ascii_case: bool = False,
    word_boundaries: bool = True,
) -> SearchLanguage:
    """The strings in which ``pattern`` finds a match (``re.search``, ``RegExp.test``,
    ``Regex::is_match``), anchors resolved exactly in the dialect's meaning.

    Anchors may stand anywhere (``(^a|b)c``, ``^(a|$)``, ``a$\\n`` in Python); with the
    multiline flag they are unsupported. Lookaheads are supported right after a leading ``^``
    when the pattern has one top-level alternative (each becomes a language of its own).
    """
    language: SearchLanguage = _parse(
        pattern, flags, dialect, ascii_case, word_boundaries, search=True
    )
    return language


def _parse(
    pattern: str,
    flags: Iterable[str],
    dialect: DialectSpec,
    ascii_case: bool,
    word_boundaries: bool,
    *,
    search: bool,
) -> Any:
    """`parse_regex` (full match) or `search_language` (`search`): an unsupported construct is
    reported only once the whole pattern is known to be well-formed in the dialect."""
    ds = dl.dialects_of(dialect)
    bits = _parse_flag_letters(flags, pattern, ds[0])
    parser = _Parser(pattern, ds, bits, search=search, ascii_case=ascii_case)
    parser.boundaries_ok = word_boundaries
    try:
        try:
            found = parser.parse_search() if search else parser.parse_full()
        except _BoundaryAfterDollar:
            raise parser.unsupported(
                "a word boundary after `$` (where a final newline may follow)",
                0,
                "put it before the `$`",
            ) from None
    except UnsupportedRegexError:
        _check_syntax(pattern, ds, bits, search=search, ascii_case=ascii_case)
        raise
    if not parser.boundaries:
        return found
    return _resolve_boundaries(found, parser)


def _resolve_boundaries(found: Node | SearchLanguage, parser: _Parser) -> Node | SearchLanguage:
    """The parse with its word-boundary markers resolved (see ``MARKER_BASE``)."""
    from structgen.automata.codepoint_dfa import eliminate_boundaries

    def resolve(node: Node) -> Node:
        try:
            return eliminate_boundaries(node, parser.boundaries)
        except RegexError as exc:
            raise parser.unsupported(
                "a word boundary in a pattern this large", 0, f"{exc.reason}; shorten it"
            ) from None

    if isinstance(found, SearchLanguage):
        looks = tuple((positive, resolve(node)) for positive, node in found.lookaheads)
        return SearchLanguage(resolve(found.node), looks)
    return resolve(found)


def _check_syntax(
    pattern: str, ds: tuple[Dialect, ...], bits: int, *, search: bool, ascii_case: bool
) -> None:
    """Parse again past unsupported constructs: a syntax error anywhere in the pattern is
    the dialect's verdict (a malformed pattern), whatever came before it."""
    checker = _Parser(pattern, ds[:1], bits, search=search, ascii_case=ascii_case)
    checker.tolerant = True
    with contextlib.suppress(UnsupportedRegexError, _BoundaryAfterDollar):
        checker.parse_search() if search else checker.parse_full()


def _set_op(op: str, left: Ranges, right: Ranges) -> Ranges:
    if op == "&&":
        return iv.intersect(left, right)
    if op == "--":
        return iv.difference(left, right)
    return iv.union(iv.difference(left, right), iv.difference(right, left))


def _ecma_name_ok(name: str) -> bool:
    if not name:
        return False
    first, rest = name[0], name[1:]
    if not (first in "$_" or first.isidentifier()):
        return False
    return all(c in "$\u200c\u200d" or ("a" + c).isidentifier() for c in rest)


def _rust_name_ok(name: str) -> bool:
    if not name or not (name[0] == "_" or name[0].isalpha()):
        return False
    return all(c.isalnum() or c in "_.[]" for c in name)


class _Parser:
    def __init__(
        self,
        pattern: str,
        dialects: tuple[Dialect, ...],
        flags: int,
        *,
        search: bool,
        ascii_case: bool,
    ) -> None:
        self.p = pattern
        self.n = len(pattern)
        self.i = 0
        self.dialects = dialects
        self.d: Dialect = dialects[0]
        self.fam = dl.family(self.d)
        self.global_flags = flags
        self.search = search
        self.ascii_case = ascii_case
        self.group_names: set[str] = set()
        self.depth = 0
        self.top_branches = 1
        self.lookaheads: list[tuple[bool, Node]] = []
        self.lookahead_at: int | None = None
        self.in_lookahead = False
        self._ecma_groups: tuple[int, frozenset[str]] | None = None
        self.tolerant = False
        self.boundaries_ok = True
        self.boundaries: list[Boundary] = []  # marker k stands for boundaries[k]

    # --- helpers

    def error(self, reason: str, offset: int | None) -> RegexError:
        return RegexError(reason, pattern=self.p, offset=offset)

    def refuse(self, err: RegexError) -> None:
        """Raise an unsupported construct, unless this pass only checks the syntax (then
        parsing goes on past it, so that a later syntax error is still found)."""
        if not self.tolerant:
            raise err

    def unsupported(self, what: str, offset: int, hint: str) -> RegexError:
        return UnsupportedRegexError(
            f"{what} is not supported ({hint})", pattern=self.p, offset=offset
        )

    def case_tables(self, dialect: Dialect, flags: int) -> ut.CaseTables:
        if self.ascii_case or dl.folds_ascii(dialect, bool(flags & _A)):
            return ut.ascii_case_tables()
        return ut.unicode_case_tables()

    def across(
        self, start: int, flags: int, first: Ranges, read: Callable[[_Parser, int], Ranges]
    ) -> Ranges:
        """``first`` (this dialect's set for the atom at ``start..self.i``) intersected with
        what each other dialect reads there; a dialect that cannot read the atom, or reads a
        different stretch of the pattern, is skipped."""
        end = self.i
        out = first
        for d in self.dialects[1:]:
            sub = _Parser(self.p, (d,), 0, search=False, ascii_case=self.ascii_case)
            sub.i = start
            try:
                ranges = read(sub, flags)
            except (RegexError, dl.PropertyError):
                continue
            if sub.i == end:
                out = iv.intersect(out, ranges)
        return out

    def boundary(self, kind: str, flags: int) -> Node:
        """The marker of a word-boundary assertion: ``kind`` is ``b``, ``B`` or one of Rust's
        names, its word characters those of ``\\w`` in every dialect read."""
        words = []
        for d in self.dialects:
            ranges = dl.class_escape(d, "w", bool(flags & _A))
            if flags & _I and dl.family(d) == "ecma":
                ranges = self.case_tables(d, flags).fold(ranges)  # adds U+017F and U+212A
            words.append(ranges)
        pairs = _BOUNDARY_PAIRS[kind]
        if kind == "B" and any(dl.family(d) == "python" for d in self.dialects):
            pairs = pairs - {(EDGE, EDGE)}  # Python's \B does not match the empty string
        word = words[0]
        for ranges in words[1:]:
            word = iv.intersect(word, ranges)
        found = Boundary(pairs, word, iv.complement(iv.union(*words)))
        if found not in self.boundaries:
            self.boundaries.append(found)
        k = MARKER_BASE + self.boundaries.index(found)
        return CharClass(((k, k),))

    def char_node(self, cp: int, flags: int) -> Node:
        if not flags & _I:
            return String(chr(cp))
        tables = {id(t): t for t in (self.case_tables(d, flags) for d in self.dialects)}
        if len(tables) == 1:
            return _fold_char(cp, next(iter(tables.values())) is ut.ascii_case_tables())
        ranges = ANY_CHAR
        for t in tables.values():
            ranges = iv.intersect(ranges, t.fold(((cp, cp),)))
        return _char_class(ranges)

    def dot(self, flags: int) -> Ranges:
        ranges = ANY_CHAR
        for d in self.dialects:
            ranges = iv.intersect(ranges, dl.dot(d, dotall=bool(flags & _S), crlf=bool(flags & _R)))
        return ranges

    def dollar(self) -> int:
        return _END if any(dl.dollar_is_end(d) for d in self.dialects) else _NL

    # --- structure

    def parse_full(self) -> Node:
        item, _ = self.parse_alternation(self.global_flags, at_start=True, top=True)
        if self.i < self.n:
            # parse_alternation stops only at ')' or the end
            raise self.error("unbalanced parenthesis: this ')' closes no group", self.i)
        assert not isinstance(item, _Anchored)
        return item

    def parse_search(self) -> SearchLanguage:
        item, _ = self.parse_alternation(self.global_flags, at_start=True, top=True)
        if self.i < self.n:
            raise self.error("unbalanced parenthesis: this ')' closes no group", self.i)
        if self.lookaheads and self.top_branches > 1:
            assert self.lookahead_at is not None
            self.refuse(
                self.unsupported(
                    "a lookahead in one of several top-level alternatives",
                    self.lookahead_at,
                    "it would bind to its alternative only; put the alternatives in a group"
                    " after it",
                )
            )
        return SearchLanguage(_search_node(item), tuple(self.lookaheads))

    def parse_alternation(self, flags: int, *, at_start: bool, top: bool) -> tuple[_Item, _Info]:
        branches: list[_Item] = []
        zero_width = True
        start_anchor: int | None = None
        end_anchor: int | None = None
        first = True
        while True:
            if top and self.fam == "python":
                flags = self.global_flags
            node, info, after = self.parse_branch(flags, at_start=at_start, first=top and first)
            if self.fam == "rust":
                flags = after  # Rust's (?i) holds to the end of the group, across `|`
            branches.append(node)
            zero_width = zero_width and info.zero_width
            if start_anchor is None:
                start_anchor = info.start_anchor
            if end_anchor is None:
                end_anchor = info.end_anchor
            first = False
            if self.i < self.n and self.p[self.i] == "|":
                self.i += 1
                continue
            break
        if top:
            self.top_branches = len(branches)
        node = _alt(branches) if len(branches) > 1 else branches[0]
        return node, _Info(zero_width, start_anchor, end_anchor)

    def parse_branch(self, flags: int, *, at_start: bool, first: bool) -> tuple[_Item, _Info, int]:
        p, n = self.p, self.n
        start = self.i
        if start < n and not flags & (_I | _X) and p[start] not in _SPECIAL:
            # A branch that is one run of plain characters (the words of a large alternation,
            # an enum): found with one scan, what the loop below makes of it character by
            # character.
            found = _NEXT_SPECIAL.search(p, start)
            end = n if found is None else found.start()
            if end == n or p[end] in "|)":
                self.i = end
                return String(p[start:end]), _Info(False, None, None), flags
        items: list[_Item] = []
        infos: list[_Info] = []
        all_zero_width = True  # every item so far matches only ""
        pending_end: int | None = None  # a $ that nothing consuming may follow
        start_anchor: int | None = None
        while self.i < n:
            c = p[self.i]
            if c == "|" or c == ")":
                break
            start = self.i
            if flags & _X and self.fam != "ecma":
                if c in _WHITESPACE:
                    self.i += 1
                    continue
                if c == "#":
                    nl = p.find("\n", self.i)
                    self.i = n if nl < 0 else nl + 1
                    continue
            node: _Item
            info = _PLAIN_INFO
            special = _SPECIAL_VERBOSE if flags & _X and self.fam != "ecma" else _SPECIAL
            if c not in special:
                j = self.i + 1
                if not flags & _I:
                    # a run of plain characters; the last one stays separate unless the run
                    # ends the branch (a quantifier may follow, after a comment or whitespace)
                    while j < n and p[j] not in special:
                        j += 1
                    if j < n and p[j] not in "|)" and j - self.i > 1:
                        j -= 1
                    node = String(p[self.i : j])
                else:
                    node = self.char_node(ord(c), flags)
                self.i = j
            elif c == "\\":
                node, info = self.parse_escape(flags, at_start and all_zero_width)
            elif c == "[":
                ranges = self.class_ranges(flags)
                node = CharClass(self.across(start, flags, ranges, _Parser.class_ranges))
            elif c == ".":
                self.i += 1
                node = CharClass(self.dot(flags))
            elif c == "(":
                zero = start_anchor is not None and all_zero_width
                res = self.parse_group(
                    flags, at_start=at_start and all_zero_width, first=first, zero=zero
                )
                if res is None:  # comment
                    continue
                if isinstance(res, int):  # flags for the rest of the group
                    if self.fam == "python" and (not first or items):
                        raise self.error(
                            "global flags such as (?i) must be at the very start of the pattern;"
                            " use a scoped group (?i:...) here",
                            start,
                        )
                    flags = res
                    continue
                node, info = res
            elif c == "^" or c == "$":
                self.i += 1
                end = self.dollar() if c == "$" else _END
                node, info = self.anchor(c == "^", start, at_start and all_zero_width, flags, end)
            elif c in "*+?{":
                q = self.parse_quantifier()
                if q is None:  # a '{' that is not a quantifier
                    if self.fam == "ecma":
                        raise self.error(
                            "incomplete quantifier: a lone '{' must be escaped as \\{", start
                        )
                    if self.fam == "rust":
                        raise self.error(
                            "invalid repetition: a '{' must start {n}, {n,} or {n,m}; escape it"
                            " as \\{",
                            start,
                        )
                    self.i = start + 1
                    node = self.char_node(ord(c), flags)
                else:
                    lo, hi = q
                    prev = infos[-1] if infos else None
                    if prev is None or (prev.kind == _ANCHOR and self.fam != "rust"):
                        raise self.error("nothing to repeat", start)
                    if prev.kind == _LOOK:
                        if self.fam == "ecma":
                            raise self.error("nothing to repeat (a lookahead)", start)
                        self.refuse(
                            self.unsupported(
                                "a repeated lookahead", start, "write the lookahead once"
                            )
                        )
                    if prev.kind == _REPEATED and self.fam != "rust":
                        raise self.error(
                            "multiple repeat; put the repeated part in a group, e.g. (?:a*)*",
                            start,
                        )
                    if self.i < n and p[self.i] == "?":
                        self.i += 1  # lazy: the same language under full-match semantics
                    elif self.i < n and p[self.i] == "+" and self.fam == "python":
                        self.refuse(
                            self.unsupported(
                                "a possessive quantifier",
                                start,
                                "it can change which strings match; drop the trailing '+'",
                            )
                        )
                        self.i += 1
                    if not self.search and (hi is None or hi > 1):
                        if prev.start_anchor is not None:
                            self.refuse(self.anchor_error(True, prev.start_anchor))
                        if prev.end_anchor is not None:
                            self.refuse(self.anchor_error(False, prev.end_anchor))
                    items[-1] = self.repeat_item(items[-1], lo, hi, start)
                    infos[-1] = _Info(
                        prev.zero_width, prev.start_anchor, prev.end_anchor, _REPEATED
                    )
                    continue
            else:
                # ']' and '}'
                if self.fam == "ecma":
                    raise self.error(
                        f"lone quantifier bracket {c!r}: ECMA-262 (u flag) needs it escaped as"
                        f" \\{c}",
                        start,
                    )
                self.i += 1
                node = self.char_node(ord(c), flags)
            if not self.search:
                if pending_end is not None and not info.zero_width:
                    self.refuse(self.anchor_error(False, pending_end))
                if info.end_anchor is not None and pending_end is None:
                    pending_end = info.end_anchor
            if info.start_anchor is not None and start_anchor is None:
                start_anchor = info.start_anchor
            all_zero_width = all_zero_width and info.zero_width
            items.append(node)
            infos.append(info)
        if any(isinstance(x, _Anchored) for x in items):
            acc: _Item = Empty()
            for x in items:
                acc = _cat(acc, x)
            return acc, _Info(all_zero_width, start_anchor, pending_end), flags
        return concat(items), _Info(all_zero_width, start_anchor, pending_end), flags  # type: ignore[arg-type]

    def repeat_item(self, item: _Item, lo: int, hi: int | None, offset: int) -> _Item:
        if not isinstance(item, _Anchored):
            return repeat(item, lo, hi)
        # Anchors inside a repetition: only the first and last iterations can pass them
        # (text before a `^` or after a `$` is impossible), so a few copies are exact:
        # x* = x{0,2} P* x{0,2} with P the anchor-free part of x.
        if lo > 8 or (hi is not None and hi > 8 + lo):
            self.refuse(
                self.unsupported(
                    "an anchor inside a long repetition", offset, "move the anchor out of it"
                )
            )
            return Empty()
        optional = _alt([Empty(), item])
        out: _Item = Empty()
        for _ in range(lo):
            out = _cat(out, item)
        if hi is not None:
            for _ in range(hi - lo):
                out = _cat(out, optional)
            return out
        plain = item.parts.get(_PLAIN_KEY)
        middle = repeat(plain, 0, None) if plain is not None else Empty()
        two = _cat(optional, optional)
        return _cat(out, _cat(_cat(two, middle), two))

    def anchor(
        self, is_start: bool, offset: int, at_start: bool, flags: int, end: int
    ) -> tuple[_Item, _Info]:
        if self.search:
            if flags & _M:
                self.refuse(
                    self.unsupported(
                        "an anchor with the MULTILINE flag",
                        offset,
                        "it tests the characters around it; drop the flag or the anchor",
                    )
                )
            if is_start:
                return _Anchored({(True, _FREE): Empty()}), _Info(True, offset, None, _ANCHOR)
            return _Anchored({(False, end): Empty()}), _Info(True, None, offset, _ANCHOR)
        if is_start:
            if not at_start:
                self.refuse(self.anchor_error(True, offset))
            return Empty(), _Info(True, offset, None, _ANCHOR)
        return Empty(), _Info(True, None, offset, _ANCHOR)

    def anchor_error(self, is_start: bool, offset: int) -> RegexError:
        if is_start:
            return self.unsupported(
                "a start anchor (^ or \\A) that is not at the start of the pattern",
                offset,
                "patterns always match the whole string; remove it or move it to the start",
            )
        return self.unsupported(
            "an end anchor ($ or \\Z) that is not at the end of the pattern",
            offset,
            "patterns always match the whole string; remove it or move it to the end",
        )

    def parse_quantifier(self) -> tuple[int, int | None] | None:
        """Parse ``* + ? {m} {m,} {,n} {m,n}`` at ``self.i``; None for a ``{`` that is not one
        (``{,n}`` is one in Python only)."""
        p, n = self.p, self.n
        c = p[self.i]
        start = self.i
        self.i += 1
        if c == "*":
            return 0, None
        if c == "+":
            return 1, None
        if c == "?":
            return 0, 1
        spaces = self.fam == "rust"

        def digits(k: int) -> int:
            while k < n and p[k] in _DIGITS:
                k += 1
            return k

        def skip(k: int) -> int:
            while spaces and k < n and p[k] == " ":
                k += 1
            return k

        j = skip(self.i)
        if j < n and p[j] == "}":
            return None
        k = digits(j)
        lo_text = p[j:k]
        k = skip(k)
        if not lo_text and self.fam != "python":
            return None
        if k < n and p[k] == ",":
            m0 = skip(k + 1)
            m = digits(m0)
            hi_text = p[m0:m]
            end = skip(m)
        else:
            hi_text = lo_text
            end = k
        if end >= n or p[end] != "}":
            return None
        self.i = end + 1
        lo = int(lo_text) if lo_text else 0
        hi = int(hi_text) if hi_text else None
        if self.fam == "python" and (lo >= _MAXREPEAT or (hi is not None and hi >= _MAXREPEAT)):
            raise self.error("the repetition number is too large", start)
        if hi is not None and hi < lo:
            raise self.error("min repeat greater than max repeat", start + 1)
        return lo, hi

    # --- escapes

    def parse_escape(self, flags: int, at_start: bool) -> tuple[_Item, _Info]:
        p = self.p
        start = self.i
        if start + 1 >= self.n:
            raise self.error("bad escape (end of pattern): a trailing backslash", start)
        c = p[start + 1]
        self.i = start + 2
        fam = self.fam
        if c in _CATEGORY_LETTERS or (c in "pP" and fam != "python"):
            self.i = start
            ranges = self.escape_set(flags)
            return CharClass(self.across(start, flags, ranges, _Parser.escape_set)), _PLAIN_INFO
        if c == "A" and fam != "ecma":
            return self.anchor(True, start, at_start, flags, _END)
        if (c == "Z" and fam == "python") or (c == "z" and fam == "rust"):
            return self.anchor(False, start, at_start, flags, _END)
        if c in "bB" or (fam == "rust" and c in "<>"):
            kind = {"b": "b", "B": "B", "<": "start", ">": "end"}[c]
            if fam == "rust" and c == "b" and self.i < self.n and p[self.i] == "{":
                close = p.find("}", self.i)
                special = p[self.i + 1 : close] if close > 0 else ""
                if special and all(ch.isalpha() or ch == "-" for ch in special):
                    if special not in _RUST_BOUNDARIES:
                        raise self.error(
                            f"unrecognized special word boundary \\b{{{special}}}; known:"
                            " start, end, start-half, end-half",
                            start,
                        )
                    kind = special
                    self.i = close + 1
            if not self.boundaries_ok:
                self.refuse(
                    self.unsupported(
                        f"the word boundary {p[start : self.i]}",
                        start,
                        "it looks at the neighbouring tokens' characters; spell them out",
                    )
                )
                return Empty(), _Info(True, None, None, _ANCHOR)
            return self.boundary(kind, flags), _Info(True, None, None, _ANCHOR)
        if c in _DIGITS and (c != "0" or fam == "rust"):
            return self.char_node(self.digit_escape(c, start), flags), _PLAIN_INFO
        if c == "k" and fam == "ecma":
            close = p.find(">", self.i)
            name = p[self.i + 1 : close] if p.startswith("<", self.i) and close > 0 else None
            if name is None or name not in self.ecma_groups()[1]:
                raise self.error("invalid named reference: \\k needs <name> of a group", start)
            self.i = close + 1
            self.refuse(
                self.unsupported(
                    "a backreference",
                    start,
                    "the language it describes is not regular; repeat the sub-pattern instead",
                )
            )
            return Empty(), _PLAIN_INFO
        cp = self.escape_code_point(c, start, in_class=False)
        return self.char_node(cp, flags), _PLAIN_INFO

    def digit_escape(self, c: str, start: int) -> int:
        """``\\1``...: an octal escape (Python, as sre decides) or a backreference."""
        p = self.p
        if self.fam == "rust":
            raise self.error("backreferences (and octal escapes) are not Rust regex syntax", start)
        if self.fam == "python":
            j = self.i
            if j + 1 < self.n and c in _OCTDIGITS and p[j] in _OCTDIGITS and p[j + 1] in _OCTDIGITS:
                value = int(p[start + 1 : j + 2], 8)
                if value > 0o377:
                    raise self.error(
                        f"octal escape value {p[start : j + 2]} outside of range 0-0o377",
                        start,
                    )
                self.i = j + 2
                return value
        else:
            j = self.i
            while j < self.n and p[j] in _DIGITS:
                j += 1
            self.i = j
            if int(p[start + 1 : j]) > self.ecma_groups()[0]:
                raise self.error(
                    f"invalid escape {p[start:j]}: the pattern has no such group", start
                )
        self.refuse(
            self.unsupported(
                "a backreference",
                start,
                "the language it describes is not regular; repeat the sub-pattern instead",
            )
        )
        return 0

    def ecma_groups(self) -> tuple[int, frozenset[str]]:
        """The number of capturing groups and their names (ECMA backreferences may point
        forward, so they are counted before parsing)."""
        if self._ecma_groups is None:
            p, n = self.p, self.n
            count, names, i, in_class = 0, set(), 0, False
            while i < n:
                c = p[i]
                if c == "\\":
                    i += 2
                    continue
                if in_class:
                    in_class = c != "]"
                elif c == "[":
                    in_class = True
                elif c == "(":
                    if p.startswith("(?<", i) and p[i + 3 : i + 4] not in ("=", "!"):
                        count += 1
                        names.add(p[i + 3 : max(p.find(">", i), i + 3)])
                    elif p[i + 1 : i + 2] != "?":
                        count += 1
                i += 1
            self._ecma_groups = (count, frozenset(names))
        return self._ecma_groups

    def escape_set(self, flags: int) -> Ranges:
        """The set of a class escape at ``self.i`` (``\\d``, ``\\p{L}``, ...) in this dialect;
        ``RegexError`` when it is not one here."""
        p = self.p
        start = self.i
        if p[start : start + 1] != "\\" or start + 1 >= self.n:
            raise self.error("not a class escape", start)
        c = p[start + 1]
        self.i = start + 2
        if c in _CATEGORY_LETTERS:
            ranges = dl.class_escape(self.d, c, bool(flags & _A))
            if flags & _I and self.fam != "python":
                ranges = self.case_tables(self.d, flags).fold(ranges)
            return ranges
        if c not in "pP" or self.fam == "python":
            raise self.error("not a class escape", start)
        return self.property(c == "P", start, flags)

    def property(self, negated: bool, start: int, flags: int) -> Ranges:
        """``\\p{...}`` / ``\\P{...}`` (Rust also ``\\pL``); ``self.i`` is after the letter."""
        p = self.p
        if self.i < self.n and p[self.i] == "{":
            close = p.find("}", self.i)
            if close < 0:
                raise self.error("unterminated \\p{...}: add the closing '}'", start)
            body = p[self.i + 1 : close]
            self.i = close + 1
        elif self.fam == "rust" and self.i < self.n:
            body = p[self.i]
            self.i += 1
        else:
            raise self.error("invalid property name: write \\p{Name}", start)
        if self.fam == "rust" and body.startswith("^"):
            raise self.error("invalid property name: \\p{^...} is not supported here", start)
        try:
            ranges = dl.property_ranges(self.fam, body)
        except dl.PropertyError as exc:
            if exc.unsupported:
                self.refuse(self.unsupported(f"the property \\p{{{body}}}", start, exc.reason))
                return ()
            raise self.error(f"invalid property name: {exc.reason}", start) from None
        if flags & _I:
            ranges = self.case_tables(self.d, flags).fold(ranges)
        return iv.complement(ranges) if negated else ranges

    def hex_value(self, start: int, width: int, braces: bool) -> int:
        """Hex digits after ``\\x``/``\\u``/``\\U`` at ``self.i``: exactly ``width`` of them, or
        (``braces``) ``{1-8 digits}``."""
        p = self.p
        if braces and self.i < self.n and p[self.i] == "{":
            close = p.find("}", self.i)
            digits = p[self.i + 1 : close] if close > 0 else ""
            if not digits or not all(ch in _HEXDIGITS for ch in digits):
                raise self.error(f"invalid escape {p[start : max(close, self.i) + 1]}", start)
            self.i = close + 1
            value = int(digits, 16)
        else:
            j = self.i
            while j < self.n and j - self.i < width and p[j] in _HEXDIGITS:
                j += 1
            text = p[start:j]
            if j - self.i != width:
                raise self.error(f"incomplete escape {text}", start)
            self.i = j
            value = int(p[j - width : j], 16)
        if value > iv.MAX_CODE_POINT:
            raise self.error(f"bad escape {p[start : self.i]}: beyond U+10FFFF", start)
        if self.fam == "rust" and 0xD800 <= value <= 0xDFFF:
            raise self.error(f"bad escape {p[start : self.i]}: a surrogate", start)
        return value

    def escape_code_point(self, c: str, start: int, *, in_class: bool) -> int:
        """The code point of a literal escape ``\\c...`` whose backslash is at ``start``.

        ``self.i`` is just after ``c`` and is advanced past any digits or name.
        """
        if self.fam == "ecma":
            return self.ecma_escape(c, start, in_class=in_class)
        if self.fam == "rust":
            if c in "afnrtv":
                return _ESCAPES[c]
            if c in "xuU":
                return self.hex_value(start, {"x": 2, "u": 4, "U": 8}[c], True)
            if c.isascii() and not c.isalnum() and (in_class or c not in "<>"):
                return ord(c)
            raise self.error(f"unrecognized escape \\{c} (Rust regex)", start)
        p = self.p
        if c in _ESCAPES:
            return _ESCAPES[c]
        if in_class and c == "b":
            return 8
        if c in "xuU":
            return self.hex_value(start, {"x": 2, "u": 4, "U": 8}[c], False)
        if c == "N":
            if self.i >= self.n or p[self.i] != "{":
                raise self.error("missing { after \\N", self.i)
            close = p.find("}", self.i + 1)
            if close < 0:
                raise self.error("missing }, unterminated name", self.i + 1)
            name = p[self.i + 1 : close]
            if not name:
                raise self.error("missing character name", self.i + 1)
            try:
                value = ord(unicodedata.lookup(name))
            except KeyError:
                raise self.error(f"undefined character name {name!r}", start) from None
            self.i = close + 1
            return value
        if c in _OCTDIGITS:
            # \0 outside a class; any octal digit inside one: up to three digits
            j = self.i
            while j < self.n and j - self.i < 2 and p[j] in _OCTDIGITS:
                j += 1
            text = p[start:j]
            value = int(text[1:], 8)
            if value > 0o377:
                raise self.error(f"octal escape value {text} outside of range 0-0o377", start)
            self.i = j
            return value
        if c in _DIGITS or c in _ASCII_LETTERS:
            raise self.error(
                f"bad escape \\{c}; write \\\\{c} for a literal backslash followed by {c!r}",
                start,
            )
        return ord(c)

    def ecma_escape(self, c: str, start: int, *, in_class: bool) -> int:
        p = self.p
        if c in _ECMA_ESCAPES:
            return _ECMA_ESCAPES[c]
        if in_class and c == "b":
            return 8
        if in_class and c == "-":
            return 45
        if c == "c":
            if self.i < self.n and p[self.i] in _ASCII_LETTERS:
                self.i += 1
                return ord(p[self.i - 1]) % 32
            raise self.error("invalid escape \\c: a control escape needs a letter (\\cJ)", start)
        if c == "0":
            if self.i < self.n and p[self.i] in _DIGITS:
                raise self.error("invalid decimal escape: \\0 followed by a digit", start)
            return 0
        if c == "x":
            j = self.i
            if j + 2 <= self.n and all(ch in _HEXDIGITS for ch in p[j : j + 2]):
                self.i = j + 2
                return int(p[j : j + 2], 16)
            raise self.error("invalid escape \\x: it needs two hex digits", start)
        if c == "u":
            braces = self.i < self.n and p[self.i] == "{"
            value = self.hex_value(start, 4, True)
            j = self.i
            if (
                not braces
                and 0xD800 <= value <= 0xDBFF
                and p.startswith("\\u", j)
                and all(ch in _HEXDIGITS for ch in p[j + 2 : j + 6])
                and len(p[j + 2 : j + 6]) == 4
                and 0xDC00 <= int(p[j + 2 : j + 6], 16) <= 0xDFFF
            ):
                self.i = j + 6
                return 0x10000 + ((value - 0xD800) << 10) + (int(p[j + 2 : j + 6], 16) - 0xDC00)
            return value
        if c in _ECMA_SYNTAX:
            return ord(c)
        raise self.error(
            f"invalid escape \\{c}: ECMA-262 (u flag) escapes only ^ $ \\ . * + ? ( ) [ ] {{ }} | /"
            + (" and -" if in_class else ""),
            start,
        )

    # --- character classes

    def class_ranges(self, flags: int) -> Ranges:
        """The set of the class at ``self.i`` (``[``) in this dialect, folded and negated."""
        if self.fam == "rust":
            return self.rust_class(flags)
        p, n = self.p, self.n
        start = self.i
        self.i += 1
        negate = False
        if self.i < n and p[self.i] == "^":
            negate = True
            self.i += 1
        literals: list[tuple[int, int]] = []
        categories: list[Ranges] = []
        nonempty = self.fam == "ecma"  # ECMA: `[]` is the empty class, `[^]` any character
        while True:
            if self.i >= n:
                raise self.error("unterminated character set: add the closing ']'", start)
            item_start = self.i
            c = p[self.i]
            if c == "]" and nonempty:
                self.i += 1
                break
            nonempty = True
            lo_item = self.class_item(flags)
            if self.i < n and p[self.i] == "-":
                self.i += 1
                if self.i >= n:
                    raise self.error("unterminated character set: add the closing ']'", start)
                if p[self.i] == "]":
                    self.i += 1
                    _add_class_item(lo_item, literals, categories)
                    literals.append((45, 45))
                    break
                hi_item = self.class_item(flags)
                literals.append(self.class_range(lo_item, hi_item, item_start))
            else:
                _add_class_item(lo_item, literals, categories)
        lits = iv.normalize(literals)
        cats = iv.union(*categories) if categories else ()
        ranges = self.fold_class(lits, cats, flags)
        return iv.complement(ranges) if negate else ranges

    def fold_class(self, lits: Ranges, cats: Ranges, flags: int) -> Ranges:
        if not flags & _I:
            return iv.union(lits, cats)
        tables = self.case_tables(self.d, flags)
        if self.fam == "python":
            return tables.fold(lits, cats)
        return tables.fold(iv.union(lits, cats))

    def class_range(self, lo: int | Ranges, hi: int | Ranges, start: int) -> tuple[int, int]:
        """The range `lo-hi` just read from `start`, checked: code points, in order."""
        text = self.p[start : self.i]
        if isinstance(lo, tuple) or isinstance(hi, tuple):
            raise self.error(
                f"bad character range {text}: a class escape cannot bound a range", start
            )
        if hi < lo:
            raise self.error(f"bad character range {text}: the end is below the start", start)
        return (lo, hi)

    def class_item(self, flags: int) -> int | Ranges:
        """One class member: a code point, or the ranges of a class escape like ``\\d``."""
        p = self.p
        c = p[self.i]
        if c != "\\":
            self.i += 1
            return ord(c)
        start = self.i
        if start + 1 >= self.n:
            raise self.error("bad escape (end of pattern): a trailing backslash", start)
        e = p[start + 1]
        if e in _CATEGORY_LETTERS or (e in "pP" and self.fam != "python"):
            return self.escape_set(flags & ~_I)  # folded with the whole class
        self.i = start + 2
        if self.fam == "python" and e in _DIGITS and e not in _OCTDIGITS:
            raise self.error(f"bad escape \\{e}", start)
        if self.fam != "python" and e in _DIGITS and (e != "0" or self.fam == "rust"):
            raise self.error(f"invalid class escape \\{e}", start)
        return self.escape_code_point(e, start, in_class=True)

    def rust_class(self, flags: int) -> Ranges:
        """A Rust class: nested classes, ``[:alpha:]``, ``&&`` ``--`` ``~~`` (left to right)."""
        p, n = self.p, self.n
        start = self.i
        self.i += 1
        negate = False
        if self.i < n and p[self.i] == "^":
            negate = True
            self.i += 1
        left: Ranges | None = None
        op = ""
        current: list[Ranges] = []
        first = True
        while True:
            if self.i >= n:
                raise self.error("unclosed character class: add the closing ']'", start)
            c = p[self.i]
            if c == "]" and not first:
                self.i += 1
                break
            if flags & _X and c in _WHITESPACE:
                self.i += 1
                continue
            first = False
            two = p[self.i : self.i + 2]
            if two in ("&&", "--", "~~"):
                union = iv.union(*current) if current else ()
                left = union if left is None else _set_op(op, left, union)
                op = two
                current = []
                self.i += 2
                continue
            if c == "[":
                posix = self.posix_class()
                current.append(posix if posix is not None else self.rust_class(flags & ~_I))
                continue
            item_start = self.i
            lo_item = self.class_item(flags)
            if self.i + 1 < n and p[self.i] == "-" and p[self.i + 1] not in "]-":
                self.i += 1
                hi_item = self.class_item(flags)
                current.append((self.class_range(lo_item, hi_item, item_start),))
            else:
                current.append(lo_item if isinstance(lo_item, tuple) else ((lo_item, lo_item),))
        union = iv.union(*current) if current else ()
        ranges = union if left is None else _set_op(op, left, union)
        ranges = self.fold_class(ranges, (), flags)
        return iv.complement(ranges) if negate else ranges

    def posix_class(self) -> Ranges | None:
        """``[:name:]`` / ``[:^name:]`` at ``self.i`` (an ASCII class), else None."""
        p = self.p
        if not p.startswith("[:", self.i):
            return None
        close = p.find(":]", self.i + 2)
        if close < 0:
            return None
        name = p[self.i + 2 : close]
        negated = name.startswith("^")
        ranges = _POSIX.get(name[1:] if negated else name)
        if ranges is None:
            return None
        self.i = close + 2
        return iv.complement(ranges) if negated else ranges

    # --- groups

    def group_name(self, close_char: str, start: int) -> None:
        p = self.p
        close = p.find(close_char, self.i)
        if close < 0:
            raise self.error(f"missing {close_char}, unterminated group name", self.i)
        name = p[self.i : close]
        if not name:
            raise self.error("missing group name", self.i)
        ok = {"python": str.isidentifier, "ecma": _ecma_name_ok, "rust": _rust_name_ok}[self.fam]
        if not ok(name):
            raise self.error(f"bad character in group name {name!r}", self.i)
        if name in self.group_names:
            raise self.error(f"redefinition of group name {name!r}", self.i)
        self.group_names.add(name)
        self.i = close + 1

    def parse_group(
        self, flags: int, *, at_start: bool, first: bool, zero: bool
    ) -> tuple[_Item, _Info] | int | None:
        """Parse a group at ``(``. Returns the node, None for a comment, new flags for
        ``(?flags)`` (Python: global; Rust: to the end of the enclosing group)."""
        p, n = self.p, self.n
        fam = self.fam
        start = self.i
        self.i += 1
        inner_flags = flags
        look: bool | None = None
        ignored = False  # an unsupported lookaround, parsed only for its syntax
        if self.i < n and p[self.i] == "?":
            self.i += 1
            if self.i >= n:
                raise self.error("unexpected end of pattern after '(?'", self.i)
            c = p[self.i]
            self.i += 1
            lookbehind = c == "<" and self.i < n and p[self.i] in "=!"
            if c == ":":
                pass
            elif c == "P" and fam != "ecma":
                if self.i < n and p[self.i] == "<":
                    self.i += 1
                    self.group_name(">", start)
                elif self.i < n and p[self.i] == "=" and fam == "python":
                    self.refuse(
                        self.unsupported(
                            "a named backreference (?P=name)",
                            start,
                            "the language it describes is not regular; repeat the sub-pattern",
                        )
                    )
                    close = p.find(")", self.i)
                    self.i = n if close < 0 else close + 1
                    return Empty(), _PLAIN_INFO
                elif self.i >= n:
                    raise self.error("unexpected end of pattern after '(?P'", self.i)
                else:
                    raise self.error(
                        f"unknown extension ?P{p[self.i]}; named groups are written (?P<name>...)",
                        start + 1,
                    )
            elif c == "<" and not lookbehind and fam != "python":
                self.group_name(">", start)
            elif fam == "rust" and (c in "=!" or lookbehind):
                raise self.error("look-around is not Rust regex syntax", start)
            elif c in "=!":
                if self.search and zero and self.depth == 0 and not self.in_lookahead:
                    look = c == "="
                else:
                    self.refuse(
                        self.unsupported(
                            "a lookahead assertion",
                            start,
                            "rewrite the pattern without lookaround; lookaheads work only right"
                            " after a leading ^ of a pattern's search",
                        )
                    )
                    ignored = True
            elif lookbehind:
                self.refuse(
                    self.unsupported(
                        "a lookbehind assertion", start, "rewrite the pattern without lookaround"
                    )
                )
                self.i += 1
                ignored = True
            elif c == "<":
                raise self.error(
                    f"unknown extension ?<{p[self.i : self.i + 1]}; named groups are written"
                    " (?P<name>...)",
                    start + 1,
                )
            elif c == "#" and fam == "python":
                close = p.find(")", self.i)
                if close < 0:
                    raise self.error("missing ), unterminated comment", start)
                self.i = close + 1
                return None
            elif c == "(" and fam == "python":
                raise self.unsupported(
                    "a conditional group (?(...)...)", start, "its meaning is not regular"
                )
            elif c == ">" and fam == "python":
                self.refuse(
                    self.unsupported(
                        "an atomic group (?>...)",
                        start,
                        "it can change which strings match; use (?:...) instead",
                    )
                )
            elif fam == "python" and c in "aiLmsux-":
                res = self.parse_flags(c, flags, start)
                if isinstance(res, int):
                    if not first:
                        raise self.error(
                            "global flags such as (?i) must be at the very start of the"
                            " pattern; use a scoped group (?i:...) here",
                            start,
                        )
                    self.global_flags = res
                    return res
                add, remove = res
                inner_flags = (flags | add) & ~remove
            elif fam == "rust" and c in "imsUuxR-":
                new, scoped = self.rust_flags(c, flags, start)
                if not scoped:
                    return new
                inner_flags = new
            elif fam == "ecma":
                raise self.error(
                    "invalid group: ECMA-262 groups are (...), (?:...),"
                    " (?<name>...) and lookaround",
                    start,
                )
            else:
                raise self.error(f"unknown extension ?{c}", start + 1)
        self.depth += 1
        if self.depth > MAX_GROUP_DEPTH:
            raise self.error(f"groups nested more than {MAX_GROUP_DEPTH} deep", start)
        if look is not None:
            self.in_lookahead = True
        node, info = self.parse_alternation(inner_flags, at_start=at_start, top=False)
        self.depth -= 1
        if self.i >= n or p[self.i] != ")":
            raise self.error("missing ), unterminated subpattern", start)
        self.i += 1
        if ignored:
            return Empty(), _Info(True, None, None, _LOOK)
        if look is not None:
            self.in_lookahead = False
            self.lookaheads.append((look, _search_node(node, from_start=True)))
            if self.lookahead_at is None:
                self.lookahead_at = start
            return Empty(), _Info(True, None, None, _LOOK)
        return node, info

    def rust_flags(self, c: str, flags: int, start: int) -> tuple[int, bool]:
        """Rust inline flags after ``(?`` (``c`` consumed): the new flags and whether they are
        scoped (``(?i:...)``) rather than set for the rest of the group (``(?i)``)."""
        p, n = self.p, self.n
        seen: set[str] = set()
        negated = False
        new = flags
        while True:
            if c == "-":
                if negated:
                    raise self.error("repeated negation in the flags", self.i - 1)
                negated = True
            elif c in ":)":
                break
            elif c in "imsUuxR":
                if c in seen:
                    raise self.error(f"duplicate flag {c!r}", self.i - 1)
                seen.add(c)
                bit = _A if c == "u" else _FLAG_BITS[c]
                on = not negated if c != "u" else negated  # (?-u) turns ASCII mode on
                new = new | bit if on else new & ~bit
            else:
                raise self.error(f"unrecognized flag {c!r}", self.i - 1)
            if self.i >= n:
                raise self.error("unclosed group: the flags need ':' or ')'", start)
            c = p[self.i]
            self.i += 1
        if not seen:
            raise self.error("empty or dangling flags", start)
        return new, c == ":"

    def parse_flags(self, c: str, flags: int, start: int) -> int | tuple[int, int]:
        """Parse inline flags after ``(?``; ``c`` is the first flag char (already consumed).

        Returns the new global flags for ``(?flags)`` or ``(add, remove)`` for ``(?flags:...)``.
        """
        p, n = self.p, self.n
        add = remove = 0
        ascii_dialect = _A if self.d == "python-ascii" else 0
        if c != "-":
            while True:
                if c == "L":
                    raise self.error(
                        "bad inline flags: cannot use 'L' flag with a str pattern", self.i - 1
                    )
                add |= _FLAG_BITS[c]
                if (add | ascii_dialect) & _A and add & _U:
                    raise self.error(
                        "bad inline flags: flags 'a' and 'u' are incompatible", self.i - 1
                    )
                if self.i >= n:
                    raise self.error("missing -, : or ) after inline flags", self.i)
                c = p[self.i]
                self.i += 1
                if c in ")-:":
                    break
                if c not in "imsxau":
                    raise self.error(
                        "unknown flag" if c.isalpha() else "missing -, : or )", self.i - 1
                    )
        if c == ")":
            merged = flags | add
            if (merged | ascii_dialect) & _A and merged & _U:
                raise self.error("bad inline flags: flags 'a' and 'u' are incompatible", start)
            return merged
        if c == "-":
            if self.i >= n:
                raise self.error("missing flag after '-'", self.i)
            c = p[self.i]
            self.i += 1
            if c not in "imsx":
                if c in "aLu":
                    raise self.error(
                        "bad inline flags: cannot turn off flags 'a', 'u' and 'L'", self.i - 1
                    )
                raise self.error("unknown flag" if c.isalpha() else "missing flag", self.i - 1)
            while True:
                remove |= _FLAG_BITS[c]
                if self.i >= n:
                    raise self.error("missing : after inline flags", self.i)
                c = p[self.i]
                self.i += 1
                if c == ":":
                    break
                if c not in "imsx":
                    if c in "aLu":
                        raise self.error(
                            "bad inline flags: cannot turn off flags 'a', 'u' and 'L'",
                            self.i - 1,
                        )
                    raise self.error("unknown flag" if c.isalpha() else "missing :", self.i - 1)
        if add & remove:
            raise self.error("bad inline flags: flag turned on and off", self.i - 1)
        if ((flags | add) | ascii_dialect) & _A and (flags | add) & _U:
            raise self.error("bad inline flags: flags 'a' and 'u' are incompatible", start)
        return add, remove


def _add_class_item(
    item: int | Ranges, literals: list[tuple[int, int]], categories: list[Ranges]
) -> None:
    if isinstance(item, tuple):
        categories.append(item)
    else:
        literals.append((item, item))
