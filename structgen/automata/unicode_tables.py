"""Unicode tables for the regex frontend, derived from the running Python's own Unicode database.

``\\d``, ``\\w`` and ``\\s`` follow Python's ``re`` for str patterns: ``\\d`` is ``str.isdecimal``
(category Nd), ``\\w`` is ``str.isalnum`` plus ``_``, ``\\s`` is ``str.isspace``. Case-insensitive
matching follows ``re.IGNORECASE``: a character ``c`` matches a set ``S`` when ``lower(c)`` lies in
the lowered set plus the "extra cases" (different lowercase letters with the same uppercase, e.g.
``s``/``ſ`` and ``k``/Kelvin sign), where ``lower`` is the simple lowercase mapping (the first code
point of ``str.lower``, as ``_sre`` uses). Every table is computed once on first use (tens of
milliseconds) and cached.
"""

from __future__ import annotations

import re
from functools import cache

import numpy as np

from structgen.automata import intervals as iv
from structgen.automata.intervals import Ranges

__all__ = [
    "CaseTables",
    "ascii_case_tables",
    "digit_ranges",
    "space_ranges",
    "unicode_case_tables",
    "word_ranges",
]

_N = iv.MAX_CODE_POINT + 1
_CHUNK = 4096

ASCII_DIGIT: Ranges = ((0x30, 0x39),)
ASCII_WORD: Ranges = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
ASCII_SPACE: Ranges = ((0x09, 0x0D), (0x20, 0x20))


@cache
def _all_chars() -> str:
    """Every code point, in order (surrogates included), decoded in one C call."""
    return np.arange(_N, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")


def _runs(pattern: str) -> Ranges:
    """The code points Python's `re` matches with `pattern` (a class and `+`), as ranges: `re`
    itself is the definition (and scans every code point in C, 4x faster than testing each
    character with a `str` method)."""
    return tuple((m.start(), m.end() - 1) for m in re.finditer(pattern, _all_chars()))


@cache
def _decimal() -> Ranges:
    return _runs(r"\d+")


@cache
def _word() -> Ranges:
    return _runs(r"\w+")


@cache
def _space() -> Ranges:
    return _runs(r"\s+")


def digit_ranges(ascii_only: bool = False) -> Ranges:
    """The code points ``\\d`` matches."""
    return ASCII_DIGIT if ascii_only else _decimal()


def word_ranges(ascii_only: bool = False) -> Ranges:
    """The code points ``\\w`` matches."""
    return ASCII_WORD if ascii_only else _word()


def space_ranges(ascii_only: bool = False) -> Ranges:
    """The code points ``\\s`` matches."""
    return ASCII_SPACE if ascii_only else _space()


def _changed(upper: bool) -> dict[int, str]:
    """Code point -> full case mapping, for every code point the mapping changes.

    Chunks are mapped in one C call each and compared with numpy; only the matches are
    re-mapped one character at a time (``str.lower`` on a chunk applies the final-sigma rule,
    per-character mapping does not, and the per-character one is what ``re`` uses).
    """
    s = _all_chars()
    out: dict[int, str] = {}
    for start in range(0, _N, _CHUNK):
        chunk = s[start : start + _CHUNK]
        mapped = chunk.upper() if upper else chunk.lower()
        if len(mapped) == len(chunk):
            a = np.frombuffer(chunk.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
            b = np.frombuffer(mapped.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
            positions = (np.flatnonzero(a != b) + start).tolist()
        else:
            positions = list(range(start, start + len(chunk)))
        for cp in positions:
            c = chr(cp)
            m = c.upper() if upper else c.lower()
            if m != c:
                out[cp] = m
    return out


class CaseTables:
    """Simple lowercase mapping, cased characters and extra cases for one matching mode."""

    __slots__ = ("cased", "changed", "extras", "image", "lower", "preimage")

    def __init__(
        self, lower: dict[int, int], cased: Ranges, extras: dict[int, tuple[int, ...]]
    ) -> None:
        self.lower = lower  # code point -> simple lowercase, only where it differs
        self.changed: Ranges = iv.from_points(lower)
        pre: dict[int, list[int]] = {}
        for cp, lo in lower.items():
            pre.setdefault(lo, []).append(cp)
        self.preimage = pre  # lowercase -> the code points that lower to it
        self.image: Ranges = iv.from_points(pre)
        self.cased = cased  # code points with a lower- or uppercase mapping
        self.extras = extras  # lowercase -> other lowercases sharing its uppercase

    def lower_of(self, cp: int) -> int:
        """The simple lowercase of ``cp``."""
        return self.lower.get(cp, cp)

    def fold(self, literal_ranges: Ranges, categories: Ranges = ()) -> Ranges:
        """All code points ``re.IGNORECASE`` matches for a set of literals/ranges and categories.

        Mirrors ``_sre``: when the literal part holds no cased character the set is matched as
        is; otherwise a code point ``c`` matches when ``lower(c)`` is in the lowered literal part
        (plus extra cases) or in the categories.
        """
        if not iv.intersect(literal_ranges, self.cased):
            return iv.union(literal_ranges, categories)
        moved = iv.intersect(literal_ranges, self.changed)
        lowered_points: list[int] = []
        for lo, hi in moved:
            lowered_points.extend(self.lower[cp] for cp in range(lo, hi + 1))
        lowered = iv.union(
            iv.difference(literal_ranges, self.changed), iv.from_points(lowered_points)
        )
        extra_points: list[int] = []
        for cp in self.extras:
            if iv.contains(lowered, cp):
                extra_points.extend(self.extras[cp])
        target = iv.union(lowered, iv.from_points(extra_points), categories)
        # {c : lower(c) in target}: unchanged code points match themselves, changed ones
        # match through their lowercase.
        hits: list[int] = []
        for lo, hi in iv.intersect(target, self.image):
            for lc in range(lo, hi + 1):
                hits.extend(self.preimage[lc])
        return iv.union(iv.difference(target, self.changed), iv.from_points(hits))


@cache
def unicode_case_tables() -> CaseTables:
    """Tables for ``re.IGNORECASE`` on str patterns (Unicode simple case mapping)."""
    lowers = _changed(upper=False)
    uppers = _changed(upper=True)
    lower = {cp: ord(m[0]) for cp, m in lowers.items() if ord(m[0]) != cp}
    upper_first = {cp for cp, m in uppers.items() if ord(m[0]) != cp}
    cased = iv.from_points(set(lower) | upper_first)
    # Different lowercase letters with the same (full) uppercase, as re._casefix derives them.
    groups: dict[str, set[int]] = {}
    for cp, up in uppers.items():
        groups.setdefault(up, set()).add(cp)
    for up, members in groups.items():
        if len(up) == 1 and up.upper() == up:
            members.add(ord(up))
    extras: dict[int, tuple[int, ...]] = {}
    for members in groups.values():
        lows = sorted({lower.get(cp, cp) for cp in members})
        if len(lows) > 1:
            for cp in lows:
                extras[cp] = tuple(x for x in lows if x != cp)
    return CaseTables(lower, cased, extras)


@cache
def ascii_case_tables() -> CaseTables:
    """Tables for ``re.IGNORECASE | re.ASCII``: only A-Z/a-z fold."""
    lower = {cp: cp + 32 for cp in range(0x41, 0x5B)}
    return CaseTables(lower, ((0x41, 0x5A), (0x61, 0x7A)), {})
