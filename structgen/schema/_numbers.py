"""Exact regular languages of JSON number texts whose value lies in a range.

A JSON number text is either *integer syntax* (`-?(0|[1-9]\\d*)`, which Python's `json` parses
to an exact `int`) or *float syntax* (with a fraction and/or exponent, parsed to a `float`).
jsonschema compares the parsed values with the schema's bounds (ints and floats compare
exactly in Python), so:

* integer texts are bounded exactly: `n >= m` iff `n >= ceil(m)`;
* float texts are judged after rounding: `float(x) >= m` holds iff `x` lies above the midpoint
  between the smallest double `f >= m` and its predecessor. That midpoint has a finite decimal
  expansion, so the set is still a decimal interval; we round it *inward* to 10^-P (P grows with
  the bound's magnitude) to keep the automaton short. Only values within 10^-P of a bound can be
  rejected wrongly; nothing outside the range is ever accepted.

Bounded float texts are written without an exponent (`1e-05` is rejected where a range applies);
unbounded ones take the full JSON syntax. See docs/design/json-schema.md (numbers).
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction
from functools import lru_cache

from structgen.automata import CharClass, Empty, Node, Repeat, String, alternation, concat, repeat
from structgen.schema._strings import dec_fixed

__all__ = [
    "FLOAT_SYNTAX",
    "INT_SYNTAX",
    "NUMBER_SYNTAX",
    "NumRange",
    "float_texts",
    "int_texts",
    "number_node",
]

DIGIT = CharClass(((0x30, 0x39),))
NONZERO = CharClass(((0x31, 0x39),))
_DIGITS = Repeat(DIGIT, 0, None)
_INT_MAG = alternation([String("0"), concat([NONZERO, _DIGITS])])
_MINUS_OPT = repeat(String("-"), 0, 1)
_FRAC = concat([String("."), Repeat(DIGIT, 1, None)])
_EXP = concat(
    [
        CharClass(((0x45, 0x45), (0x65, 0x65))),
        repeat(CharClass(((0x2B, 0x2B), (0x2D, 0x2D))), 0, 1),
        Repeat(DIGIT, 1, None),
    ]
)
INT_SYNTAX = concat([_MINUS_OPT, _INT_MAG])
NUMBER_SYNTAX = concat([INT_SYNTAX, repeat(_FRAC, 0, 1), repeat(_EXP, 0, 1)])
# float syntax without exponent
FLOAT_SYNTAX = concat([INT_SYNTAX, _FRAC])
_MAX_SAFE = 2**53
_MAX_INTEGER_ZEROS = 16  # `3.` followed by at most this many zeros still counts as an integer


Bound = int | float


class NumRange:
    """A value range from JSON Schema bounds; `None` means unbounded on that side."""

    __slots__ = ("hi", "hi_excl", "lo", "lo_excl")

    def __init__(
        self,
        lo: Bound | None = None,
        hi: Bound | None = None,
        *,
        lo_excl: bool = False,
        hi_excl: bool = False,
    ) -> None:
        self.lo, self.hi, self.lo_excl, self.hi_excl = lo, hi, lo_excl, hi_excl

    def tighten_lo(self, value: Bound, exclusive: bool) -> None:
        if self.lo is None or value > self.lo or (value == self.lo and exclusive):
            self.lo, self.lo_excl = value, exclusive

    def tighten_hi(self, value: Bound, exclusive: bool) -> None:
        if self.hi is None or value < self.hi or (value == self.hi and exclusive):
            self.hi, self.hi_excl = value, exclusive

    @property
    def bounded(self) -> bool:
        return self.lo is not None or self.hi is not None

    def int_bounds(self) -> tuple[int | None, int | None]:
        """Inclusive integer bounds equivalent to the range for exact integers."""
        lo = hi = None
        if self.lo is not None:
            f = Fraction(self.lo)
            lo = math.floor(f) + 1 if self.lo_excl else math.ceil(f)
        if self.hi is not None:
            f = Fraction(self.hi)
            hi = math.ceil(f) - 1 if self.hi_excl else math.floor(f)
        return lo, hi

    def float_bounds(self) -> tuple[Decimal | None, Decimal | None]:
        """Inclusive decimal bounds such that every decimal inside parses to a float in range."""
        lo = hi = None
        if self.lo is not None:
            f = _float_at_least(self.lo, strict=self.lo_excl)
            if f is not None:
                if math.isinf(f):
                    return Decimal(1), Decimal(0)  # nothing parses to a float beyond the max
                mid = (Decimal(math.nextafter(f, -math.inf)) + Decimal(f)) / 2
                lo = _round(mid, f, up=True)
        if self.hi is not None:
            f = _float_at_most(self.hi, strict=self.hi_excl)
            if f is not None:
                if math.isinf(f):
                    return Decimal(1), Decimal(0)
                mid = (Decimal(f) + Decimal(math.nextafter(f, math.inf))) / 2
                hi = _round(mid, f, up=False)
        return lo, hi


def _float_at_least(m: Bound, *, strict: bool) -> float | None:
    """The smallest double `>= m` (or `> m` when strict)."""
    try:
        f = float(m)
    except OverflowError:
        return math.inf if m > 0 else None
    if Fraction(f) < Fraction(m) or (strict and Fraction(f) == Fraction(m)):
        f = math.nextafter(f, math.inf)
    return f


def _float_at_most(m: Bound, *, strict: bool) -> float | None:
    try:
        f = float(m)
    except OverflowError:
        return -math.inf if m < 0 else None
    if Fraction(f) > Fraction(m) or (strict and Fraction(f) == Fraction(m)):
        f = math.nextafter(f, -math.inf)
    return f


def _round(mid: Decimal, f: float, *, up: bool) -> Decimal:
    """Round the midpoint inward to a grid of 10^-P, strictly past the midpoint itself."""
    exponent = 0 if f == 0 else Decimal(f).adjusted()
    places = min(40, max(25, 25 - exponent))
    with localcontext() as ctx:
        ctx.prec = 2000
        quantum = Decimal(1).scaleb(-places)
        q = mid.quantize(quantum, rounding=ROUND_CEILING if up else ROUND_FLOOR)
        if q == mid:  # a tie at the midpoint may round either way: step past it
            q = q + quantum if up else q - quantum
        return q.normalize() if q != 0 else Decimal(0)


# ----------------------------------------------------------------------------- integer texts


def _mag_int(a: int, b: int | None) -> Node:
    """Canonical decimal integers (no leading zeros) in [a, b], a >= 0."""
    if b is not None and a > b:
        return CharClass(())
    parts: list[Node] = []
    la = len(str(a))
    lb = len(str(b)) if b is not None else la
    for length in range(la, lb + 1):
        lo = max(a, 10 ** (length - 1) if length > 1 else 0)
        hi = 10**length - 1 if b is None else min(b, 10**length - 1)
        if lo <= hi:
            parts.append(dec_fixed(lo, hi, length))
    if b is None:
        parts.append(concat([NONZERO, repeat(DIGIT, la, None)]))
    return alternation(parts)


_CANONICAL_INT = alternation([String("0"), concat([_MINUS_OPT, NONZERO, _DIGITS])])


@lru_cache(maxsize=1024)
def int_texts(lo: int | None, hi: int | None, canonical: bool = False) -> Node:
    """Integer-syntax texts (`-0` included, unless `canonical`) with value in [lo, hi]."""
    if lo is None and hi is None:
        return _CANONICAL_INT if canonical else INT_SYNTAX
    parts: list[Node] = []
    if hi is None or hi >= 0:
        parts.append(_mag_int(max(lo, 0) if lo is not None else 0, hi))
    if lo is None or lo < 0:
        # negative values: magnitudes in [max(1, -hi), -lo]
        mlo = max(1, -hi) if hi is not None else 1
        mhi = -lo if lo is not None else None
        if mhi is None or mlo <= mhi:
            parts.append(concat([String("-"), _mag_int(mlo, mhi)]))
    if (lo is None or lo <= 0) and (hi is None or hi >= 0) and not canonical:
        parts.append(String("-0"))
    return alternation(parts)


# ----------------------------------------------------------------------------- fraction texts


def _digits_of(value: Decimal) -> tuple[int, str]:
    """Integer part and fraction digits (no trailing zeros) of a non-negative decimal."""
    with localcontext() as ctx:
        ctx.prec = 2000
        whole = int(value)
        frac = value - whole
        text = format(frac, "f")
    digits = text.split(".")[1].rstrip("0") if "." in text else ""
    return whole, digits


def _frac_digits(lo: str | None, hi: str | None) -> Node:
    """Non-empty digit strings s with 0.lo <= 0.s <= 0.hi (shorter strings padded with zeros)."""
    return _FracDigits(lo, hi).build(0, lo is not None, hi is not None, False)


class _FracDigits:
    """`_frac_digits`'s recursion, memoized in a dict of its own (no self-referring closure:
    no cycle, and it compiles with mypyc)."""

    def __init__(self, lo: str | None, hi: str | None) -> None:
        self.lo, self.hi = lo, hi
        self.built: dict[tuple[int, bool, bool, bool], Node] = {}

    def build(self, pos: int, tight_lo: bool, tight_hi: bool, started: bool) -> Node:
        key = (pos, tight_lo, tight_hi, started)
        node = self.built.get(key)
        if node is None:
            node = self.built[key] = self._build(pos, tight_lo, tight_hi, started)
        return node

    def _build(self, pos: int, tight_lo: bool, tight_hi: bool, started: bool) -> Node:
        lo, hi = self.lo, self.hi
        if tight_lo and lo is not None and pos >= len(lo):
            tight_lo = False
        if not tight_lo and not tight_hi:
            return repeat(DIGIT, 0 if started else 1, None)
        if tight_hi and hi is not None and pos >= len(hi):
            # only zeros remain allowed; the lower side is already satisfied or all zeros
            return repeat(String("0"), 0 if started else 1, None)
        parts: list[Node] = []
        can_end = started and not (tight_lo and lo is not None and lo[pos:].strip("0"))
        if can_end:
            parts.append(Empty())
        a = int(lo[pos]) if tight_lo and lo is not None else 0
        b = int(hi[pos]) if tight_hi and hi is not None else 9
        for d in range(a, b + 1):
            nxt = self.build(pos + 1, tight_lo and d == a, tight_hi and d == b, True)
            parts.append(concat([String(str(d)), nxt]))
        return alternation(parts)


def _mag_frac(a: Decimal, b: Decimal | None) -> Node:
    """Texts `N.F` (F non-empty) with a <= N.F <= b, a >= 0."""
    na, fa = _digits_of(a)
    if b is not None and b < a:
        return CharClass(())
    dot = String(".")
    if b is None:
        return alternation(
            [
                concat([String(str(na)), dot, _frac_digits(fa, None)]),
                concat([_mag_int(na + 1, None), dot, _frac_digits(None, None)]),
            ]
        )
    nb, fb = _digits_of(b)
    if na == nb:
        return concat([String(str(na)), dot, _frac_digits(fa, fb)])
    parts = [concat([String(str(na)), dot, _frac_digits(fa, None)])]
    if nb - na >= 2:
        parts.append(concat([_mag_int(na + 1, nb - 1), dot, _frac_digits(None, None)]))
    parts.append(concat([String(str(nb)), dot, _frac_digits(None, fb)]))
    return alternation(parts)


def float_texts(lo: Decimal | None, hi: Decimal | None) -> Node:
    """Fraction-syntax texts (no exponent) with exact decimal value in [lo, hi]."""
    if lo is None and hi is None:
        return FLOAT_SYNTAX
    if lo is not None and hi is not None and lo > hi:
        return CharClass(())
    parts: list[Node] = []
    if hi is None or hi >= 0:
        parts.append(_mag_frac(max(lo, Decimal(0)) if lo is not None else Decimal(0), hi))
    if lo is None or lo <= 0:
        mlo = max(-hi, Decimal(0)) if hi is not None else Decimal(0)
        mhi = -lo if lo is not None else None
        if mhi is None or mlo <= mhi:
            parts.append(concat([String("-"), _mag_frac(mlo, mhi)]))
    return alternation(parts)


def number_node(
    rng: NumRange, *, integer: bool, canonical: bool = False, fractions: bool = True
) -> Node:
    """All JSON number texts (integer-valued ones only when `integer`) inside `rng`; with
    `canonical`, integers are written as plain digits only (no `3.0`, as a writer spells them);
    `fractions=False`: an integer is a number written without a fraction or exponent (`-0`
    included), as drafts 3 and 4 define it.

    Memoised by the bounds: ranges repeat across schemas (0..100, int32...), and returning the
    same AST object lets every later cache (terminal automata, digests) hit at once.
    """
    return _number_node(rng.lo, rng.hi, rng.lo_excl, rng.hi_excl, integer, canonical, fractions)


def _integer_point(
    value: int, integer: bool, canonical: bool = False, fractions: bool = True
) -> Node:
    """The texts of one integral value (an enum or const entry): `v`, and `v.0…` (its float
    spellings; at most 16 zeros where only integers are allowed), `-0` forms for zero — the same
    language the range construction gives for `[v, v]`, in a few states instead of thousands.
    With `canonical` (and `integer`), `v` alone."""
    if canonical and integer:
        return String(str(value))
    if integer and not fractions:
        if value:
            return String(str(value))
        return concat([repeat(String("-"), 0, 1), String("0")])
    zeros = Repeat(String("0"), 1, _MAX_INTEGER_ZEROS if integer else None)
    tail = repeat(concat([String("."), zeros]), 0, 1)
    head = String(str(value)) if value else concat([repeat(String("-"), 0, 1), String("0")])
    return concat([head, tail])


@lru_cache(maxsize=1024)
def _number_node(
    lo: Bound | None,
    hi: Bound | None,
    lo_excl: bool,
    hi_excl: bool,
    integer: bool,
    canonical: bool = False,
    fractions: bool = True,
) -> Node:
    if (
        lo is not None
        and lo == hi
        and not lo_excl
        and not hi_excl
        and float(lo).is_integer()
        and abs(lo) <= _MAX_SAFE
    ):
        return _integer_point(int(lo), integer, canonical, fractions)
    rng = NumRange(lo, hi, lo_excl=lo_excl, hi_excl=hi_excl)
    ilo, ihi = rng.int_bounds()
    if ilo is not None and ihi is not None and ilo > ihi:
        ints: Node = CharClass(())
    else:
        ints = int_texts(ilo, ihi)
    if integer and canonical:
        return int_texts(ilo, ihi, True) if ilo is None or ihi is None or ilo <= ihi else ints
    if integer and not fractions:
        return ints
    if integer:
        # `3.0` is an integer too; floats are exact up to 2**53
        slo = max(ilo, -_MAX_SAFE) if ilo is not None else -_MAX_SAFE
        shi = min(ihi, _MAX_SAFE) if ihi is not None else _MAX_SAFE
        # a bounded run of zeros: `3.0` is what encoders write, and an endless `3.000…` would
        # let a model loop until it runs out of tokens
        tail = concat([String("."), Repeat(String("0"), 1, _MAX_INTEGER_ZEROS)])
        if slo <= shi:
            return alternation([ints, concat([int_texts(slo, shi), tail])])
        return ints
    if not rng.bounded:
        return NUMBER_SYNTAX
    flo, fhi = rng.float_bounds()
    return alternation([ints, float_texts(flo, fhi)])
