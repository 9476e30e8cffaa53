"""JSON string syntax as regex ASTs: decoded-text languages mapped onto their encodings.

JSON Schema judges the *decoded* string (`minLength`, `pattern`, `format`, `enum` compare code
points), but the model emits the *encoded* text, where one code point may be written raw, as a
short escape (`\\n`), as `\\uXXXX` (either hex case) or, beyond the BMP, as a surrogate pair.
`encode(node)` substitutes every character set of a decoded-language AST by the alternation of
its encodings, so a regex over decoded strings becomes the exact regex over encoded bodies.

Generating is another job: a model offered every spelling wanders into `\\u0072` escapes. With
`canonical=True` each function here spells a code point one way only, the way
`json.dumps(..., ensure_ascii=False)` does (raw, except `\\"`, `\\\\`, the short escapes of
control characters and `\\u00xx` for the other controls), so the encoded language is the image
of the decoded one under a bijection and every constraint stays exact. See
docs/design/json-schema.md (strings) and docs/guide/generation.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Any

from structgen._json_spelling import MANY_LITERALS, MAX_TRIE_WORD, SHORT_ESCAPES, canonical_text
from structgen.automata import (
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
from structgen.automata import intervals as iv
from structgen.schema._recent import Recent

__all__ = [
    "ANY_CHAR",
    "any_string_body",
    "canonical_class",
    "canonical_text",
    "encode",
    "fixed_width_range",
    "hex_range",
    "length_body",
    "literal_body",
]

ANY_CHAR = CharClass(((0, iv.MAX_CODE_POINT),))
ANY_STAR = Repeat(ANY_CHAR, 0, None)
_CONTROL: iv.Ranges = ((0, 0x1F),)
_RAW_FORBIDDEN: iv.Ranges = iv.normalize([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])
_RAW_OK: iv.Ranges = iv.complement(_RAW_FORBIDDEN)
_SURROGATES: iv.Ranges = ((0xD800, 0xDFFF),)
_BMP_CHARS: iv.Ranges = iv.difference(((0, 0xFFFF),), _SURROGATES)
# Above this many ranges, a class's `\uXXXX` forms are limited to U+0000-U+00FF and its
# surrogate-pair forms dropped: the exact alternation would be large and such forms are rare.
_MAX_ESCAPE_RANGES = 64
# What json.dumps writes as a short escape (it never escapes `/`).
_CANONICAL_SHORT = {0x22: '"', 0x5C: "\\", 8: "b", 12: "f", 10: "n", 13: "r", 9: "t"}
_CANONICAL_RAW: iv.Ranges = iv.difference(_RAW_OK, _SURROGATES)
_LOWER_HEX = "0123456789abcdef"


@lru_cache(maxsize=4096)
def _hex_digit(lo: int, hi: int) -> Node:
    """One hex digit whose value is in [lo, hi], either letter case."""
    ranges: list[tuple[int, int]] = []
    if lo <= 9:
        ranges.append((0x30 + lo, 0x30 + min(hi, 9)))
    if hi >= 10:
        a, b = max(lo, 10) - 10, hi - 10
        ranges += [(0x61 + a, 0x61 + b), (0x41 + a, 0x41 + b)]
    return CharClass(iv.normalize(ranges))


@lru_cache(maxsize=4096)
def _dec_digit(lo: int, hi: int) -> Node:
    return CharClass(((0x30 + lo, 0x30 + hi),))


def fixed_width_range(
    lo: int, hi: int, width: int, base: int, digit: Callable[[int, int], Node]
) -> Node:
    """Strings of exactly `width` base-`base` digits (leading zeros kept) with value in [lo, hi]."""
    if lo > hi:
        return CharClass(())
    return _FixedWidthRange(lo, hi, width, base, digit).build(0, True, True)


class _FixedWidthRange:
    """`fixed_width_range`'s recursion, memoized by (position, tight below, tight above) in a
    dict of its own (no self-referring closure: no cycle, and it compiles with mypyc)."""

    def __init__(
        self, lo: int, hi: int, width: int, base: int, digit: Callable[[int, int], Node]
    ) -> None:
        self.width, self.base, self.digit = width, base, digit
        self.lo_d, self.hi_d = self._digits(lo), self._digits(hi)
        self.built: dict[tuple[int, bool, bool], Node] = {}

    def _digits(self, value: int) -> list[int]:
        out = []
        for _ in range(self.width):
            out.append(value % self.base)
            value //= self.base
        return out[::-1]

    def build(self, pos: int, tight_lo: bool, tight_hi: bool) -> Node:
        key = (pos, tight_lo, tight_hi)
        node = self.built.get(key)
        if node is None:
            node = self.built[key] = self._build(pos, tight_lo, tight_hi)
        return node

    def _build(self, pos: int, tight_lo: bool, tight_hi: bool) -> Node:
        width, base, digit, build = self.width, self.base, self.digit, self.build
        if pos == width:
            return Empty()
        a = self.lo_d[pos] if tight_lo else 0
        b = self.hi_d[pos] if tight_hi else base - 1
        if not tight_lo and not tight_hi:
            return repeat(digit(0, base - 1), width - pos, width - pos)
        parts: list[Node] = []
        if a == b:
            return concat([digit(a, a), build(pos + 1, tight_lo, tight_hi)])
        parts.append(concat([digit(a, a), build(pos + 1, tight_lo, False)]))
        if b - a >= 2:
            parts.append(concat([digit(a + 1, b - 1), build(pos + 1, False, False)]))
        parts.append(concat([digit(b, b), build(pos + 1, False, tight_hi)]))
        return alternation(parts)


@lru_cache(maxsize=4096)  # (the same ranges recur in every string class)
def hex_range(lo: int, hi: int) -> Node:
    """Four hex digits (any case) for the values [lo, hi]."""
    return fixed_width_range(lo, hi, 4, 16, _hex_digit)


@lru_cache(maxsize=4096)
def dec_fixed(lo: int, hi: int, width: int) -> Node:
    """`width` decimal digits, leading zeros kept, value in [lo, hi] (dates, times)."""
    return fixed_width_range(lo, hi, width, 10, _dec_digit)


def _unicode_escapes(ranges: iv.Ranges) -> list[Node]:
    """`\\uXXXX` forms of the BMP code points in `ranges`, and surrogate pairs beyond it."""
    out: list[Node] = []
    many = len(ranges) > _MAX_ESCAPE_RANGES
    bmp = iv.intersect(ranges, ((0, 0xFF),) if many else _BMP_CHARS)
    hexes = [hex_range(a, b) for a, b in bmp]
    if hexes:
        out.append(concat([String("\\u"), alternation(hexes)]))
    if not many:
        astral = iv.intersect(ranges, ((0x10000, iv.MAX_CODE_POINT),))
        for a, b in astral:
            out.append(_pair_range(a, b))
    return out


def _surrogates(cp: int) -> tuple[int, int]:
    v = cp - 0x10000
    return 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF)


@lru_cache(maxsize=1024)
def _pair_range(lo: int, hi: int) -> Node:
    (h1, l1), (h2, l2) = _surrogates(lo), _surrogates(hi)
    u = String("\\u")

    def pair(ha: int, hb: int, la: int, lb: int) -> Node:
        return concat([u, hex_range(ha, hb), u, hex_range(la, lb)])

    if h1 == h2:
        return pair(h1, h1, l1, l2)
    parts = [pair(h1, h1, l1, 0xDFFF)]
    if h2 - h1 >= 2:
        parts.append(pair(h1 + 1, h2 - 1, 0xDC00, 0xDFFF))
    parts.append(pair(h2, h2, 0xDC00, l2))
    return alternation(parts)


@lru_cache(maxsize=4096)
def encode_class(ranges: iv.Ranges) -> Node:
    """All encodings of one code point from `ranges` inside a JSON string body."""
    parts: list[Node] = []
    raw = iv.intersect(ranges, _RAW_OK)
    if raw:
        parts.append(CharClass(raw))
    shorts = sorted(esc for cp, esc in SHORT_ESCAPES.items() if iv.contains(ranges, cp))
    if shorts:
        parts.append(concat([String("\\"), alternation(String(s) for s in shorts)]))
    parts.extend(_unicode_escapes(ranges))
    return alternation(parts)


@lru_cache(maxsize=4096)
def canonical_class(ranges: iv.Ranges, *, controls: bool = True) -> Node:
    """The one spelling json.dumps(ensure_ascii=False) gives each code point of `ranges`:
    raw, `\\"`, `\\\\`, `\\b \\f \\n \\r \\t`, and `\\u00xx` (lowercase) for the other
    control characters (left out with `controls=False`). Lone surrogates have no spelling."""
    parts: list[Node] = []
    raw = iv.intersect(ranges, _CANONICAL_RAW)
    if raw:
        parts.append(CharClass(raw))
    shorts = [esc for cp, esc in sorted(_CANONICAL_SHORT.items()) if iv.contains(ranges, cp)]
    if shorts:
        parts.append(concat([String("\\"), CharClass(iv.from_points(map(ord, shorts)))]))
    if controls:
        by_high: dict[str, list[int]] = {}
        for cp in range(0x20):
            if cp not in _CANONICAL_SHORT and iv.contains(ranges, cp):
                by_high.setdefault(_LOWER_HEX[cp >> 4], []).append(ord(_LOWER_HEX[cp & 15]))
        if by_high:
            highs = [
                concat([String(h), CharClass(iv.from_points(lo))]) for h, lo in by_high.items()
            ]
            parts.append(concat([String("\\u00"), alternation(highs)]))
    return alternation(parts)


#: `encode_class` of one character, by the character (a key's characters are spelled one by one,
#: each once per new key: a dict read, not a tuple of ranges hashed through `lru_cache`)
_CHAR_SPELLINGS: Recent[str, Node] = Recent(4096)


def _char_spellings(c: str) -> Node:
    found = _CHAR_SPELLINGS.get(c)
    if found is None:
        cp = ord(c)
        found = _CHAR_SPELLINGS.put(c, encode_class(((cp, cp),)))
    return found


def encode(node: Node, *, canonical: bool = False) -> Node:
    """The encoded-body language of a decoded-text language (every character substituted):
    every spelling, or with `canonical` the one json.dumps writes. Cached: the same formats and
    patterns come back schema after schema (70% of the calls over MaskBench)."""
    return _encode_cached(node, canonical)


@lru_cache(maxsize=1024)
def _encode_cached(node: Node, canonical: bool) -> Node:
    return _encode(node, canonical)


def _encode(node: Node, canonical: bool) -> Node:
    if isinstance(node, Empty):
        return node
    if isinstance(node, String):
        if canonical:
            return String(canonical_text(node.text))
        return concat([_char_spellings(c) for c in node.text])
    if isinstance(node, CharClass):
        return canonical_class(node.ranges) if canonical else encode_class(node.ranges)
    if isinstance(node, Concat):
        return concat(_encode(item, canonical) for item in node.items)
    if isinstance(node, Alternation):
        return alternation(_encode(item, canonical) for item in node.items)
    if isinstance(node, Repeat):
        return repeat(_encode(node.item, canonical), node.min, node.max)
    raise TypeError(f"unknown regex node {node!r}")


# A body with no constraint: what any JSON parser accepts (lone surrogates included).
_ANY_BODY = Repeat(
    alternation(
        [
            CharClass(_RAW_OK),
            concat([String("\\"), CharClass(iv.from_points(map(ord, '"\\/bfnrt')))]),
            concat([String("\\u"), repeat(_hex_digit(0, 15), 4, 4)]),
        ]
    ),
    0,
    None,
)


_CANONICAL_ANY_BODY = Repeat(canonical_class(ANY_CHAR.ranges), 0, None)


def any_string_body(*, canonical: bool = False) -> Node:
    """Any JSON string body (between the quotes); with `canonical`, json.dumps' spelling."""
    return _CANONICAL_ANY_BODY if canonical else _ANY_BODY


_HEX = _hex_digit(0, 15)
_SHORT_CLASS = CharClass(iv.from_points(map(ord, '"\\/bfnrt')))
# `\uXXXX` of a non-surrogate code point: first digit not d/D, or d/D then 0-7
_U_NONSURROGATE = concat(
    [
        String("\\u"),
        alternation(
            [
                concat([CharClass(iv.normalize([(0x30, 0x39), (0x61, 0x63), (0x65, 0x66),
                                                (0x41, 0x43), (0x45, 0x46)])),
                        repeat(_HEX, 3, 3)]),
                concat([CharClass(((0x44, 0x44), (0x64, 0x64))), CharClass(((0x30, 0x37),)),
                        repeat(_HEX, 2, 2)]),
            ]
        ),
    ]
)  # fmt: skip
_SIMPLE_UNIT = alternation([CharClass(_RAW_OK), concat([String("\\"), _SHORT_CLASS])])
# Above these counts, cheaper units keep the automaton within the size limits: no surrogate
# pairs, then no `\uXXXX`, then raw characters only; beyond `MAX_COUNTED` the bound itself is
# lowered (strings that long are never generated; nothing invalid is ever accepted). Short
# escapes cost about 5 NFA states per counted character, so up to 32,768 (`maxLength: 32767` is
# common) they stay within `AutomataLimits.max_nfa_states`; without them a string holding a `"`,
# a `\\` or a newline could not be written at all.
_PAIRS_UP_TO = 512
_UNICODE_UP_TO = 4096
_SHORT_UP_TO = 32_768
MAX_COUNTED = 60_000


def _unit(bound: int, canonical: bool = False) -> Node:
    """One decoded code point, in as many encodings as the count `bound` affords."""
    if canonical:
        if bound > _SHORT_UP_TO:
            return CharClass(_CANONICAL_RAW)
        return canonical_class(ANY_CHAR.ranges, controls=bound <= _UNICODE_UP_TO)
    if bound > _SHORT_UP_TO:
        return CharClass(_RAW_OK)
    if bound > _UNICODE_UP_TO:
        return _SIMPLE_UNIT
    parts: list[Node] = [_SIMPLE_UNIT, _U_NONSURROGATE]
    if bound <= _PAIRS_UP_TO:
        parts.append(_pair_range(0x10000, iv.MAX_CODE_POINT))
    return alternation(parts)


def length_body(min_len: int, max_len: int | None, *, canonical: bool = False) -> Node:
    """Bodies decoding to between `min_len` and `max_len` code points.

    An escape counts as the one code point it decodes to. For large counts only cheaper
    encodings are allowed (see `_unit`); raw characters, astral ones included, always are.
    """
    min_len = min(min_len, MAX_COUNTED)
    if max_len is not None:
        max_len = max(min(max_len, MAX_COUNTED), min_len)
    bound = max_len if max_len is not None else min_len
    unit = _unit(bound, canonical)
    if max_len is None:
        return concat([repeat(unit, min_len, min_len), Repeat(_unit(0, canonical), 0, None)])
    return repeat(unit, min_len, max_len)


@lru_cache(maxsize=4096)
def literal_body(text: str, *, canonical: bool = False) -> Node:
    """Every encoding of exactly `text` (with `canonical`: json.dumps' one). Cached: the same
    keys ("id", "name", "type") come back object after object and schema after schema."""
    if not text:
        return Empty()
    return String(canonical_text(text)) if canonical else encode(String(text))


def _compact_char(ch: str) -> Node:
    """The spellings of one character that JSON encoders write: raw (or its short escape) and,
    for non-ASCII and control characters, `\\uXXXX` too (what `ensure_ascii` produces)."""
    cp = ord(ch)
    if cp in SHORT_ESCAPES:
        return (
            String("\\" + SHORT_ESCAPES[cp])
            if cp != 0x2F
            else alternation([String("/"), String("\\/")])
        )
    if 0x20 <= cp < 0x7F:
        return String(ch)
    return encode_class(((cp, cp),))


def literal_bodies(words: Iterable[str], *, canonical: bool = False) -> Node:
    """The encoded bodies of exactly `words`, as a trie (shared prefixes built once).

    For many words (an enum of thousands of strings) each character is spelled only the ways
    encoders write it — printable ASCII raw, `\\uXXXX` only for the others — which keeps the
    automaton linear in the trie's size; for a few words every encoding is allowed. With
    `canonical`, each word is spelled once, as json.dumps writes it.
    """
    unique = sorted(set(words))
    if len(unique) <= MANY_LITERALS:
        return alternation(literal_body(w, canonical=canonical) for w in unique)
    # The trie is built recursively: very long words stay plain alternatives.
    long = [w for w in unique if len(w) > MAX_TRIE_WORD]
    trie: dict[str, Any] = {}
    end = ""
    for word in unique:
        if len(word) > MAX_TRIE_WORD:
            continue
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[end] = {}
    built = _TrieBodies(canonical, end).build(trie)
    return alternation([built, *(literal_body(w, canonical=canonical) for w in long)])


class _TrieBodies:
    """`literal_bodies`' recursion over its trie, each character's spelling made once. (A
    class, not recursive closures: those are a reference cycle with their scope.)"""

    def __init__(self, canonical: bool, end: str) -> None:
        self.canonical, self.end = canonical, end
        self.memo: dict[str, Node] = {}

    def char(self, ch: str) -> Node:
        hit = self.memo.get(ch)
        if hit is None:
            spelled = String(canonical_text(ch)) if self.canonical else _compact_char(ch)
            hit = self.memo[ch] = spelled
        return hit

    def build(self, node: dict[str, Any]) -> Node:
        end, char = self.end, self.char
        parts: list[Node] = [Empty()] if end in node else []
        for ch, child in node.items():
            if ch == end:
                continue
            # (a run of nodes with one child each, a word's tail: one concat, not one per
            # character, each copying the tail built so far)
            run = [char(ch)]
            while len(child) == 1 and end not in child:
                ((ch, child),) = child.items()
                run.append(char(ch))
            if len(child) > 1:
                run.append(self.build(child))
            parts.append(concat(run))
        return alternation(parts)


def any_of_literals(words: Sequence[str]) -> Node:
    """Encoded bodies of a finite set of decoded strings."""
    return alternation(literal_body(w) for w in sorted(set(words)))
