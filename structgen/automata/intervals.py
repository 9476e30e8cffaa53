"""Sets of code points (or bytes) as sorted tuples of disjoint, non-adjacent inclusive ranges.

Every function here takes and returns the normal form: ranges sorted by start, no two ranges
overlapping or touching (``(1, 3), (4, 5)`` is written ``(1, 5)``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

__all__ = [
    "MAX_CODE_POINT",
    "Ranges",
    "complement",
    "contains",
    "difference",
    "from_points",
    "intersect",
    "normalize",
    "size",
    "union",
]

MAX_CODE_POINT = 0x10FFFF

Ranges = tuple[tuple[int, int], ...]


def normalize(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Sort and merge arbitrary inclusive ranges (empty ones, lo > hi, are dropped)."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(r for r in ranges if r[0] <= r[1]):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


def from_points(points: Iterable[int]) -> Ranges:
    """The normal form of a set of single code points."""
    out: list[tuple[int, int]] = []
    for p in sorted(set(points)):
        if out and p == out[-1][1] + 1:
            out[-1] = (out[-1][0], p)
        else:
            out.append((p, p))
    return tuple(out)


def union(*sets: Ranges) -> Ranges:
    """The union of any number of range sets."""
    if len(sets) == 1:
        return sets[0]
    return normalize(r for s in sets for r in s)


def complement(ranges: Ranges, top: int = MAX_CODE_POINT) -> Ranges:
    """All values in ``0..top`` not in ``ranges``."""
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= top:
        out.append((nxt, top))
    return tuple(out)


def intersect(a: Ranges, b: Ranges) -> Ranges:
    """The intersection of two range sets (linear merge)."""
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def difference(a: Ranges, b: Ranges) -> Ranges:
    """Values in ``a`` and not in ``b``."""
    if not a or not b:
        return a
    return intersect(a, complement(b, max(a[-1][1], b[-1][1])))


def contains(ranges: Ranges, value: int) -> bool:
    """Whether ``value`` lies in one of the ranges (binary search)."""
    i = bisect_right(ranges, (value, MAX_CODE_POINT + 1)) - 1
    return i >= 0 and ranges[i][0] <= value <= ranges[i][1]


def size(ranges: Ranges) -> int:
    """The number of values in the set."""
    return sum(hi - lo + 1 for lo, hi in ranges)
