"""Python ``re`` syntax -> a small AST of frozen dataclasses with full-match semantics.

The AST is flag-free: case folding, ``.``/DOTALL and ``\\d\\w\\s`` are resolved to explicit code
point sets while parsing, so the rest of the pipeline only sees ``Empty``, ``String``,
``CharClass``, ``Concat``, ``Alternation`` and ``Repeat``. Anchors (``^ $ \\A \\Z``) are accepted
only where they cannot change a full match (at the very start / very end, also inside a leading
or trailing group or alternative) and vanish. Everything whose meaning is not a regular language
over code points (backreferences, lookaround, ``\\b``, conditionals, atomic groups, possessive
quantifiers) raises ``RegexError`` with the offset of the construct.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from structgen.automata import intervals as iv
from structgen.automata import unicode_tables as ut
from structgen.automata.intervals import Ranges
from structgen.errors import RegexError

__all__ = [
    "ANY_CHAR",
    "MAX_GROUP_DEPTH",
    "Alternation",
    "CharClass",
    "Concat",
    "Empty",
    "Node",
    "Repeat",
    "String",
    "alternation",
    "concat",
    "literal_node",
    "parse_regex",
    "repeat",
]

MAX_GROUP_DEPTH = 200
_MAXREPEAT = 4294967295  # sre's MAXREPEAT on 64-bit builds


@dataclass(frozen=True, slots=True)
class Empty:
    """Matches the empty string only."""


@dataclass(frozen=True, slots=True)
class String:
    """Matches exactly ``text`` (code points, case-sensitive). ``text`` is never empty."""

    text: str


@dataclass(frozen=True, slots=True)
class CharClass:
    """Matches one code point from ``ranges`` (normal-form inclusive ranges; may be empty)."""

    ranges: Ranges


@dataclass(frozen=True, slots=True)
class Concat:
    """Matches its items one after another."""

    items: tuple[Node, ...]
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        # Cached: schema frontends hash deep, shared subtrees many times (dict keys, dedupe).
        h = self._hash
        if not h:
            h = hash(("Concat", *(self.items,))) or 1
            object.__setattr__(self, "_hash", h)
        return h

    def __reduce__(self) -> tuple[type[Concat], tuple[Any, ...]]:
        return (Concat, (self.items,))  # no cached hash: it differs per process


@dataclass(frozen=True, slots=True)
class Alternation:
    """Matches any one of its items."""

    items: tuple[Node, ...]
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        # Cached: schema frontends hash deep, shared subtrees many times (dict keys, dedupe).
        h = self._hash
        if not h:
            h = hash(("Alternation", *(self.items,))) or 1
            object.__setattr__(self, "_hash", h)
        return h

    def __reduce__(self) -> tuple[type[Alternation], tuple[Any, ...]]:
        return (Alternation, (self.items,))  # no cached hash: it differs per process


@dataclass(frozen=True, slots=True)
class Repeat:
    """Matches ``item`` between ``min`` and ``max`` times (``max=None``: unbounded)."""

    item: Node
    min: int
    max: int | None
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        # Cached: schema frontends hash deep, shared subtrees many times (dict keys, dedupe).
        h = self._hash
        if not h:
            h = hash(("Repeat", *(self.item, self.min, self.max))) or 1
            object.__setattr__(self, "_hash", h)
        return h

    def __reduce__(self) -> tuple[type[Repeat], tuple[Any, ...]]:
        return (Repeat, (self.item, self.min, self.max))  # no cached hash: it differs per process


Node = Empty | String | CharClass | Concat | Alternation | Repeat

ANY_CHAR: Ranges = ((0, iv.MAX_CODE_POINT),)
_ANY_BUT_NEWLINE: Ranges = ((0, 9), (11, iv.MAX_CODE_POINT))


# ----------------------------------------------------------------------------- combinators


def concat(items: Iterable[Node]) -> Node:
    """Concatenation, flattened: nested ``Concat`` inlined, ``Empty`` dropped, strings merged."""
    out: list[Node] = []
    for item in items:
        parts = item.items if isinstance(item, Concat) else (item,)
        for part in parts:
            if isinstance(part, Empty):
                continue
            if isinstance(part, String) and out and isinstance(out[-1], String):
                out[-1] = String(out[-1].text + part.text)
            else:
                out.append(part)
    if not out:
        return Empty()
    if len(out) == 1:
        return out[0]
    return Concat(tuple(out))


def alternation(items: Iterable[Node]) -> Node:
    """Alternation, flattened; alternatives of single characters become one ``CharClass``."""
    flat: list[Node] = []
    for item in items:
        flat.extend(item.items if isinstance(item, Alternation) else (item,))
    if not flat:
        return CharClass(())
    uniq = list(dict.fromkeys(flat))
    if len(uniq) == 1:
        return uniq[0]
    if all(isinstance(x, CharClass) or (isinstance(x, String) and len(x.text) == 1) for x in uniq):
        ranges: list[tuple[int, int]] = []
        for x in uniq:
            if isinstance(x, CharClass):
                ranges.extend(x.ranges)
            elif isinstance(x, String):
                ranges.append((ord(x.text), ord(x.text)))
        return CharClass(iv.normalize(ranges))
    return Alternation(tuple(uniq))


def repeat(item: Node, min_count: int, max_count: int | None) -> Node:
    """``item{min,max}`` with trivial cases simplified."""
    if max_count is not None and max_count < min_count:
        raise ValueError("max_count < min_count")
    if max_count == 0 or isinstance(item, Empty):
        return Empty()
    if min_count == 1 and max_count == 1:
        return item
    return Repeat(item, min_count, max_count)


def literal_node(text: str, *, ignore_case: bool = False) -> Node:
    """The AST matching ``text`` exactly (or case-insensitively, like ``re.IGNORECASE``)."""
    if not ignore_case:
        return String(text) if text else Empty()
    return concat(_fold_char(ord(c), False) for c in text)


@lru_cache(maxsize=8192)
def _fold_char(cp: int, ascii_only: bool) -> Node:
    tables = ut.ascii_case_tables() if ascii_only else ut.unicode_case_tables()
    ranges = tables.fold(((cp, cp),))
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return String(chr(cp))
    return CharClass(ranges)


# ----------------------------------------------------------------------------- parser

_I, _S, _M, _X, _A, _U = 1, 2, 4, 8, 16, 32
_FLAG_BITS = {"i": _I, "s": _S, "m": _M, "x": _X, "a": _A, "u": _U}
_WHITESPACE = frozenset(" \t\n\r\v\f")
_SPECIAL = frozenset("\\[](){}|.*+?^$")
_SPECIAL_VERBOSE = _SPECIAL | _WHITESPACE | {"#"}
_DIGITS = frozenset("0123456789")
_OCTDIGITS = frozenset("01234567")
_HEXDIGITS = frozenset("0123456789abcdefABCDEF")
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_ESCAPES = {"a": 7, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92}
_CATEGORY_LETTERS = frozenset("dDsSwW")

# Item kinds, for "nothing to repeat" / "multiple repeat" checks.
_PLAIN, _ANCHOR, _REPEATED = 0, 1, 2


@dataclass(slots=True)
class _Info:
    """What a parsed item means for the anchor and quantifier checks."""

    zero_width: bool  # matches only the empty string
    start_anchor: int | None  # offset of a ^ / \A inside it
    end_anchor: int | None  # offset of a $ / \Z inside it that needs the end of the pattern
    kind: int = _PLAIN


def _parse_flag_letters(flags: Iterable[str], pattern: str) -> int:
    bits = 0
    for f in flags:
        if f not in _FLAG_BITS:
            raise RegexError(
                f"unknown regex flag {f!r}; supported flags are i, s, m, x, a, u",
                pattern=pattern,
            )
        bits |= _FLAG_BITS[f]
    if bits & _A and bits & _U:
        raise RegexError("flags 'a' and 'u' are incompatible", pattern=pattern)
    return bits


def parse_regex(pattern: str, *, flags: Iterable[str] = "") -> Node:
    """Parse a Python ``re`` pattern into an AST with full-match semantics.

    ``flags`` holds flag letters (``"i"`` ignore case, ``"s"`` dotall, ``"m"`` multiline, ``"x"``
    verbose, ``"a"`` ASCII, ``"u"`` Unicode), e.g. ``"is"`` or Lark's ``frozenset({"i"})``.
    Raises ``RegexError`` with the offset of the problem for malformed or unsupported patterns.
    """
    return _Parser(pattern, _parse_flag_letters(flags, pattern)).parse()


class _Parser:
    def __init__(self, pattern: str, flags: int) -> None:
        self.p = pattern
        self.n = len(pattern)
        self.i = 0
        self.global_flags = flags
        self.group_names: set[str] = set()
        self.depth = 0

    # --- helpers

    def error(self, reason: str, offset: int | None) -> RegexError:
        return RegexError(reason, pattern=self.p, offset=offset)

    def unsupported(self, what: str, offset: int, hint: str) -> RegexError:
        return self.error(f"{what} is not supported ({hint})", offset)

    # --- structure

    def parse(self) -> Node:
        node, _ = self.parse_alternation(self.global_flags, at_start=True, top=True)
        if self.i < self.n:
            # parse_alternation stops only at ')' or the end
            raise self.error("unbalanced parenthesis: this ')' closes no group", self.i)
        return node

    def parse_alternation(self, flags: int, *, at_start: bool, top: bool) -> tuple[Node, _Info]:
        branches: list[Node] = []
        zero_width = True
        start_anchor: int | None = None
        end_anchor: int | None = None
        first = True
        while True:
            if top:
                flags = self.global_flags
            node, info = self.parse_branch(flags, at_start=at_start, first=top and first)
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
        node = alternation(branches) if len(branches) > 1 else branches[0]
        return node, _Info(zero_width, start_anchor, end_anchor)

    def parse_branch(self, flags: int, *, at_start: bool, first: bool) -> tuple[Node, _Info]:
        p, n = self.p, self.n
        items: list[Node] = []
        infos: list[_Info] = []
        all_zero_width = True  # every item so far matches only ""
        pending_end: int | None = None  # a $ that nothing consuming may follow
        start_anchor: int | None = None
        plain = _Info(False, None, None)
        while self.i < n:
            c = p[self.i]
            if c == "|" or c == ")":
                break
            start = self.i
            if flags & _X:
                if c in _WHITESPACE:
                    self.i += 1
                    continue
                if c == "#":
                    nl = p.find("\n", self.i)
                    self.i = n if nl < 0 else nl + 1
                    continue
            node: Node | None
            info = plain
            special = _SPECIAL_VERBOSE if flags & _X else _SPECIAL
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
                    node = _fold_char(ord(c), bool(flags & _A))
                self.i = j
            elif c == "\\":
                node, info = self.parse_escape(flags, at_start and all_zero_width)
            elif c == "[":
                node = self.parse_class(flags)
            elif c == ".":
                self.i += 1
                node = CharClass(ANY_CHAR if flags & _S else _ANY_BUT_NEWLINE)
            elif c == "(":
                res = self.parse_group(flags, at_start=at_start and all_zero_width, first=first)
                if res is None:  # comment
                    continue
                if isinstance(res, int):  # global flags
                    if not first or items:
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
                node, info = self.anchor(c == "^", start, at_start and all_zero_width)
            elif c in "*+?{":
                q = self.parse_quantifier()
                if q is None:  # a '{' that is not a quantifier is a literal
                    self.i = start + 1
                    node = _fold_char(ord(c), bool(flags & _A)) if flags & _I else String(c)
                else:
                    lo, hi = q
                    if not items or infos[-1].kind == _ANCHOR:
                        raise self.error("nothing to repeat", start)
                    if infos[-1].kind == _REPEATED:
                        raise self.error(
                            "multiple repeat; put the repeated part in a group, e.g. (?:a*)*",
                            start,
                        )
                    if self.i < n and p[self.i] == "?":
                        self.i += 1  # lazy: the same language under full-match semantics
                    elif self.i < n and p[self.i] == "+":
                        raise self.unsupported(
                            "a possessive quantifier",
                            start,
                            "it can change which strings match; drop the trailing '+'",
                        )
                    prev = infos[-1]
                    if hi is None or hi > 1:
                        if prev.start_anchor is not None:
                            raise self.anchor_error(True, prev.start_anchor)
                        if prev.end_anchor is not None:
                            raise self.anchor_error(False, prev.end_anchor)
                    items[-1] = repeat(items[-1], lo, hi)
                    infos[-1] = _Info(
                        prev.zero_width, prev.start_anchor, prev.end_anchor, _REPEATED
                    )
                    continue
            else:
                # ']' and '}' are literals
                self.i += 1
                node = _fold_char(ord(c), bool(flags & _A)) if flags & _I else String(c)
            assert node is not None
            if pending_end is not None and not info.zero_width:
                raise self.anchor_error(False, pending_end)
            if info.end_anchor is not None and pending_end is None:
                pending_end = info.end_anchor
            if info.start_anchor is not None and start_anchor is None:
                start_anchor = info.start_anchor
            all_zero_width = all_zero_width and info.zero_width
            items.append(node)
            infos.append(info)
        return concat(items), _Info(all_zero_width, start_anchor, pending_end)

    def anchor(self, is_start: bool, offset: int, at_start: bool) -> tuple[Node, _Info]:
        if is_start:
            if not at_start:
                raise self.anchor_error(True, offset)
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
        """Parse ``* + ? {m} {m,} {,n} {m,n}`` at ``self.i``; None for a literal ``{``."""
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
        j = self.i
        if j < n and p[j] == "}":
            return None
        k = j
        while k < n and p[k] in _DIGITS:
            k += 1
        lo_text = p[j:k]
        if k < n and p[k] == ",":
            m = k + 1
            while m < n and p[m] in _DIGITS:
                m += 1
            hi_text = p[k + 1 : m]
            end = m
        else:
            hi_text = lo_text
            end = k
        if end >= n or p[end] != "}":
            return None
        self.i = end + 1
        lo = int(lo_text) if lo_text else 0
        hi = int(hi_text) if hi_text else None
        if lo >= _MAXREPEAT or (hi is not None and hi >= _MAXREPEAT):
            raise self.error("the repetition number is too large", start)
        if hi is not None and hi < lo:
            raise self.error("min repeat greater than max repeat", start + 1)
        return lo, hi

    # --- escapes

    def parse_escape(self, flags: int, at_start: bool) -> tuple[Node, _Info]:
        p = self.p
        start = self.i
        if start + 1 >= self.n:
            raise self.error("bad escape (end of pattern): a trailing backslash", start)
        c = p[start + 1]
        self.i = start + 2
        plain = _Info(False, None, None)
        if c in _CATEGORY_LETTERS:
            return CharClass(_category(c, bool(flags & _A))), plain
        if c == "A":
            return self.anchor(True, start, at_start)
        if c == "Z":
            return self.anchor(False, start, at_start)
        if c == "b" or c == "B":
            raise self.unsupported(
                f"the word boundary \\{c}",
                start,
                "it is an assertion about neighbouring characters; spell the characters out",
            )
        if c in _DIGITS and c != "0":
            # octal escape or group reference, as sre decides
            j = self.i
            if j + 1 < self.n and c in _OCTDIGITS and p[j] in _OCTDIGITS and p[j + 1] in _OCTDIGITS:
                value = int(p[start + 1 : j + 2], 8)
                if value > 0o377:
                    raise self.error(
                        f"octal escape value {p[start : j + 2]} outside of range 0-0o377",
                        start,
                    )
                self.i = j + 2
                return self.char_node(value, flags), plain
            raise self.unsupported(
                "a backreference",
                start,
                "the language it describes is not regular; repeat the sub-pattern instead",
            )
        cp = self.escape_code_point(c, start, in_class=False)
        return self.char_node(cp, flags), plain

    def escape_code_point(self, c: str, start: int, *, in_class: bool) -> int:
        """The code point of a literal escape ``\\c...`` whose backslash is at ``start``.

        ``self.i`` is just after ``c`` and is advanced past any digits or name.
        """
        p = self.p
        if c in _ESCAPES:
            return _ESCAPES[c]
        if in_class and c == "b":
            return 8
        if c in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[c]
            j = self.i
            while j < self.n and j - self.i < width and p[j] in _HEXDIGITS:
                j += 1
            text = p[start:j]
            if j - self.i != width:
                raise self.error(f"incomplete escape {text}", start)
            self.i = j
            value = int(text[2:], 16)
            if value > iv.MAX_CODE_POINT:
                raise self.error(f"bad escape {text}: beyond U+10FFFF", start)
            return value
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

    def char_node(self, cp: int, flags: int) -> Node:
        if flags & _I:
            return _fold_char(cp, bool(flags & _A))
        return String(chr(cp))

    # --- character classes

    def parse_class(self, flags: int) -> Node:
        p, n = self.p, self.n
        start = self.i
        self.i += 1
        negate = False
        if self.i < n and p[self.i] == "^":
            negate = True
            self.i += 1
        literals: list[tuple[int, int]] = []
        categories: list[Ranges] = []
        nonempty = False
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
                text = p[item_start : self.i]
                if isinstance(lo_item, tuple) or isinstance(hi_item, tuple):
                    raise self.error(
                        f"bad character range {text}: a class escape cannot bound a range",
                        item_start,
                    )
                if hi_item < lo_item:
                    raise self.error(
                        f"bad character range {text}: the end is below the start", item_start
                    )
                literals.append((lo_item, hi_item))
            else:
                _add_class_item(lo_item, literals, categories)
        lits = iv.normalize(literals)
        cats = iv.union(*categories) if categories else ()
        if flags & _I:
            tables = ut.ascii_case_tables() if flags & _A else ut.unicode_case_tables()
            ranges = tables.fold(lits, cats)
        else:
            ranges = iv.union(lits, cats)
        if negate:
            ranges = iv.complement(ranges)
        return CharClass(ranges)

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
        self.i = start + 2
        if e in _CATEGORY_LETTERS:
            return _category(e, bool(flags & _A))
        if e in _DIGITS and e not in _OCTDIGITS:
            raise self.error(f"bad escape \\{e}", start)
        return self.escape_code_point(e, start, in_class=True)

    # --- groups

    def parse_group(
        self, flags: int, *, at_start: bool, first: bool
    ) -> tuple[Node, _Info] | int | None:
        """Parse a group at ``(``. Returns the node, None for a comment, new flags for (?flags)."""
        p, n = self.p, self.n
        start = self.i
        self.i += 1
        inner_flags = flags
        if self.i < n and p[self.i] == "?":
            self.i += 1
            if self.i >= n:
                raise self.error("unexpected end of pattern after '(?'", self.i)
            c = p[self.i]
            self.i += 1
            if c == "P":
                if self.i < n and p[self.i] == "<":
                    self.i += 1
                    close = p.find(">", self.i)
                    if close < 0:
                        raise self.error("missing >, unterminated group name", self.i)
                    name = p[self.i : close]
                    if not name:
                        raise self.error("missing group name", self.i)
                    if not name.isidentifier():
                        raise self.error(f"bad character in group name {name!r}", self.i)
                    if name in self.group_names:
                        raise self.error(f"redefinition of group name {name!r}", self.i)
                    self.group_names.add(name)
                    self.i = close + 1
                elif self.i < n and p[self.i] == "=":
                    raise self.unsupported(
                        "a named backreference (?P=name)",
                        start,
                        "the language it describes is not regular; repeat the sub-pattern",
                    )
                elif self.i >= n:
                    raise self.error("unexpected end of pattern after '(?P'", self.i)
                else:
                    raise self.error(
                        f"unknown extension ?P{p[self.i]}; named groups are written (?P<name>...)",
                        start + 1,
                    )
            elif c == ":":
                pass
            elif c == "#":
                close = p.find(")", self.i)
                if close < 0:
                    raise self.error("missing ), unterminated comment", start)
                self.i = close + 1
                return None
            elif c in "=!":
                raise self.unsupported(
                    "a lookahead assertion", start, "rewrite the pattern without lookaround"
                )
            elif c == "<":
                if self.i < n and p[self.i] in "=!":
                    raise self.unsupported(
                        "a lookbehind assertion", start, "rewrite the pattern without lookaround"
                    )
                raise self.error(
                    f"unknown extension ?<{p[self.i : self.i + 1]}; named groups are written"
                    " (?P<name>...)",
                    start + 1,
                )
            elif c == "(":
                raise self.unsupported(
                    "a conditional group (?(...)...)", start, "its meaning is not regular"
                )
            elif c == ">":
                raise self.unsupported(
                    "an atomic group (?>...)",
                    start,
                    "it can change which strings match; use (?:...) instead",
                )
            elif c in "aiLmsux-":
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
            else:
                raise self.error(f"unknown extension ?{c}", start + 1)
        self.depth += 1
        if self.depth > MAX_GROUP_DEPTH:
            raise self.error(f"groups nested more than {MAX_GROUP_DEPTH} deep", start)
        node, info = self.parse_alternation(inner_flags, at_start=at_start, top=False)
        self.depth -= 1
        if self.i >= n or p[self.i] != ")":
            raise self.error("missing ), unterminated subpattern", start)
        self.i += 1
        return node, info

    def parse_flags(self, c: str, flags: int, start: int) -> int | tuple[int, int]:
        """Parse inline flags after ``(?``; ``c`` is the first flag char (already consumed).

        Returns the new global flags for ``(?flags)`` or ``(add, remove)`` for ``(?flags:...)``.
        """
        p, n = self.p, self.n
        add = remove = 0
        if c != "-":
            while True:
                if c == "L":
                    raise self.error(
                        "bad inline flags: cannot use 'L' flag with a str pattern", self.i - 1
                    )
                add |= _FLAG_BITS[c]
                if add & _A and add & _U:
                    raise self.error(
                        "bad inline flags: flags 'a' and 'u' are incompatible", self.i - 1
                    )
                if self.i >= n:
                    raise self.error("missing -, : or ) after inline flags", self.i)
                c = p[self.i]
                self.i += 1
                if c in ")-:":
                    break
                if c not in _FLAG_BITS:
                    raise self.error(
                        "unknown flag" if c.isalpha() else "missing -, : or )", self.i - 1
                    )
        if c == ")":
            merged = flags | add
            if merged & _A and merged & _U:
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
        if (flags | add) & _A and (flags | add) & _U:
            raise self.error("bad inline flags: flags 'a' and 'u' are incompatible", start)
        return add, remove


def _add_class_item(
    item: int | Ranges, literals: list[tuple[int, int]], categories: list[Ranges]
) -> None:
    if isinstance(item, tuple):
        categories.append(item)
    else:
        literals.append((item, item))


def _category(letter: str, ascii_only: bool) -> Ranges:
    lower = letter.lower()
    if lower == "d":
        ranges = ut.digit_ranges(ascii_only)
    elif lower == "w":
        ranges = ut.word_ranges(ascii_only)
    else:
        ranges = ut.space_ranges(ascii_only)
    return _complement_cached(ranges) if letter.isupper() else ranges


@lru_cache(maxsize=16)
def _complement_cached(ranges: Ranges) -> Ranges:
    return iv.complement(ranges)
