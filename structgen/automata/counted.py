"""Large counted repetitions without expanding them: `x{lo,hi}` as a counter over `x`'s DFA.

Thompson's construction copies the item of a counted repetition once per count, so a JSON
string body with `maxLength: 8192` becomes an NFA of 160,000 states — built in full before the
first mask, although a generation visits the first few dozen counts. Here such a repetition is a
`CountedSource`: a state is (units read, state inside the current unit), built lazily like every
other DFA row, so compiling costs what the item costs, not what the count multiplies it to.

It is exact when the item is *prefix-free* (no accepted text continues into another accepted
text — one character, one escape sequence: every JSON string unit) and does not accept the
empty text: then a unit ends exactly when the item's DFA accepts, and the count is known at
every byte. `SequenceSource` concatenates such parts with ordinary DFAs (the quotes around a
string body). `compile_counted` uses them only where the expansion would be large and the item
qualifies; everything else goes through the NFA as before. See docs/design/automata.md.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING

from structgen.automata import _native_subset
from structgen.automata.dfa import ByteDFA, _Source, class_representatives, joint_classes
from structgen.automata.nfa import AutomataLimits, nfa_size
from structgen.automata.regex_syntax import Concat, Node, Repeat, concat

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from structgen.automata._native_subset import NativeUnion

__all__ = ["CountedSource", "SequenceSource", "compile_counted"]

#: a repetition whose expansion would need more NFA states than this is counted instead
COUNT_ABOVE = 2048
#: an item's DFA with more states than this is not checked for prefix-freedom (expanded)
MAX_UNIT_STATES = 4096
#: rows built in C (`_subset.c`, the union context's sequence and counted modes) when the
#: extension is there; False: `expand` builds them in Python (the same keys; tests compare)
NATIVE_ROWS = True


def _native(
    parts: list[ByteDFA],
    byte_classes: npt.NDArray[np.uint8],
    max_states: int,
    mode: int,
    *,
    lo: int = 0,
    hi: int | None = None,
) -> NativeUnion | None:
    """The C context of a counted repetition or sequence, where the extension is built."""
    if not (NATIVE_ROWS and _native_subset.native_subset_available()):
        return None
    return _native_subset.NativeUnion(parts, byte_classes, max_states, mode=mode, lo=lo, hi=hi)


def is_prefix_free_unit(dfa: ByteDFA) -> bool:
    """Whether `dfa` rejects the empty text and no accepted text continues into another one
    (built in full: callers pass small automata)."""
    if dfa.is_empty or dfa.is_accepting(dfa.start):
        return False
    count = dfa.build_all()
    if count > MAX_UNIT_STATES:
        return False
    # (every row built: the accepting states' rows read at once, not state by state)
    return not bool((dfa.table[:count][dfa.accepting[:count]] >= 0).any())


class CountedSource(_Source):
    """`unit{lo,hi}` (`hi` None: no upper bound) for a prefix-free `unit` DFA.

    A key is `(k, q)`: `k` units read (capped at `lo` when there is no upper bound, where more
    no longer matters) and `q` the unit's state inside the current unit, or -1 between units.
    Every key reachable is live: a unit starts only while `k < hi`, and every unit state can
    finish its unit.
    """

    counts = True

    def __init__(self, unit: ByteDFA, lo: int, hi: int | None) -> None:
        self.unit = unit
        self.lo = lo
        self.hi = hi
        self.byte_classes = unit.byte_classes
        self.reps = class_representatives(unit.byte_classes)
        self.num_classes = len(self.reps)

    def alphabet(self) -> int:
        return self.unit.alphabet

    def memory_bytes(self) -> int:
        return self.unit.memory_bytes()

    def start_key(self) -> tuple[int, int]:
        return (0, -1)

    def start_is_live(self) -> bool:
        return self.hi is None or self.hi >= self.lo

    def is_accepting(self, key: tuple[int, int]) -> bool:
        k, q = key
        return q < 0 and k >= self.lo and (self.hi is None or k <= self.hi)

    def make_native(self, max_states: int) -> NativeUnion | None:
        return _native(
            [self.unit],
            self.byte_classes,
            max_states,
            _native_subset.COUNTED,
            lo=self.lo,
            hi=self.hi,
        )

    def bounded_key(self, key: tuple[int, int], depth: int) -> Hashable:
        """Units complete at most one per byte, so on the next `depth` bytes the count matters
        only through how far it is from `lo` and from `hi`, each capped past `depth`."""
        k, q = key
        cap = depth + 1
        to_hi = None if self.hi is None else min(self.hi - k, cap)
        return (max(0, min(self.lo - k, cap)), to_hi, q)

    def expand(self, key: tuple[int, int], intern: Callable[[Hashable], int]) -> list[int]:
        k, q = key
        out = [-1] * self.num_classes
        if q < 0:
            if self.hi is not None and k >= self.hi:
                return out
            q = self.unit.start
        unit = self.unit
        done = k + 1 if self.hi is not None else min(k + 1, self.lo)
        seen: dict[int, int] = {-1: -1}  # many classes lead to one unit state
        for c, t in enumerate(unit.row(q)[self.reps].tolist()):
            target = seen.get(t)
            if target is None:
                target = seen[t] = intern((done, -1) if unit.is_accepting(t) else (k, t))
            out[c] = target
        return out


class SequenceSource(_Source):
    """The concatenation of `parts` (DFAs): a key is the set of `(part, state)` positions the
    input may be at, closed under "a part accepted: the next one starts"."""

    def __init__(self, parts: Sequence[ByteDFA]) -> None:
        self.parts = list(parts)
        self.counts = any(p._source.counts for p in self.parts)
        self.byte_classes = joint_classes([p.byte_classes for p in self.parts])
        self.reps = class_representatives(self.byte_classes)
        self.num_classes = len(self.reps)

    def alphabet(self) -> int:
        out = 0
        for p in self.parts:
            out |= p.alphabet
        return out

    def memory_bytes(self) -> int:
        return sum(p.memory_bytes() for p in self.parts)

    def make_native(self, max_states: int) -> NativeUnion | None:
        return _native(self.parts, self.byte_classes, max_states, _native_subset.SEQUENCE)

    def bounded_key(self, key: frozenset[tuple[int, int]], depth: int) -> Hashable:
        return frozenset((i, self.parts[i].bounded_class(s, depth)) for i, s in key)

    def _close(self, positions: set[tuple[int, int]]) -> frozenset[tuple[int, int]]:
        parts = self.parts
        last = len(parts) - 1
        stack = list(positions)
        while stack:
            i, s = stack.pop()
            if i < last and parts[i].is_accepting(s):
                nxt = (i + 1, parts[i + 1].start)
                if nxt not in positions:
                    positions.add(nxt)
                    stack.append(nxt)
        return frozenset(positions)

    def start_key(self) -> frozenset[tuple[int, int]]:
        return self._close({(0, self.parts[0].start)})

    def start_is_live(self) -> bool:
        return not any(p.is_empty for p in self.parts)

    def is_accepting(self, key: frozenset[tuple[int, int]]) -> bool:
        last = len(self.parts) - 1
        return any(i == last and self.parts[i].is_accepting(s) for i, s in key)

    def expand(
        self, key: frozenset[tuple[int, int]], intern: Callable[[Hashable], int]
    ) -> list[int]:
        positions = list(key)
        if len(positions) == 1:  # (inside one part, the usual case: a string's body)
            return self._expand_one(*positions[0], intern)
        rows = [self.parts[i].row(s)[self.reps].tolist() for i, s in positions]
        # Classes are many, distinct targets few: close and intern each combination once.
        seen: dict[tuple[int, ...], int] = {}
        out: list[int] = []
        for combo in zip(*rows, strict=True):
            target = seen.get(combo)
            if target is None:
                moved = {(i, t) for (i, _), t in zip(positions, combo, strict=True) if t >= 0}
                target = seen[combo] = intern(self._close(moved)) if moved else -1
            out.append(target)
        return out

    def _expand_one(self, i: int, s: int, intern: Callable[[Hashable], int]) -> list[int]:
        """`expand` of the key {(i, s)}: each distinct target closed and interned once."""
        part = self.parts[i]
        last = len(self.parts) - 1
        seen: dict[int, int] = {-1: -1}
        out: list[int] = []
        for t in part.row(s)[self.reps].tolist():
            target = seen.get(t)
            if target is None:
                if i < last and part.is_accepting(t):
                    target = intern(self._close({(i, t)}))
                else:
                    target = intern(frozenset(((i, t),)))
                seen[t] = target
            out.append(target)
        return out


def compile_counted(
    node: Node,
    compile_part: Callable[[Node], ByteDFA],
    *,
    fingerprint: str,
    limits: AutomataLimits,
    count_above: int = COUNT_ABOVE,
) -> ByteDFA | None:
    """`node`'s DFA with its large counted repetitions counted (see the module docstring), or
    None when it has none that qualify (the caller builds the NFA). `compile_part` builds the
    DFA of a piece (the items between repetitions, a repetition's item); repetitions whose
    expansion needs more than `count_above` NFA states are counted."""
    items = list(node.items) if isinstance(node, Concat) else [node]
    plan: list[Node | ByteDFA] = []
    counted = False
    for index, item in enumerate(items):
        if isinstance(item, Repeat) and nfa_size(item) > count_above:
            unit = compile_part(item.item)
            if is_prefix_free_unit(unit):
                source = CountedSource(unit, item.min, item.max)
                where = f"{fingerprint}/count{index}"
                plan.append(ByteDFA(source, fingerprint=where, limits=limits))
                counted = True
                continue
        plan.append(item)
    if not counted:
        return None
    parts: list[ByteDFA] = []
    run: list[Node] = []
    for entry in [*plan, None]:
        if isinstance(entry, ByteDFA) or entry is None:
            if run:
                parts.append(compile_part(concat(run)))
                run = []
            if entry is not None:
                parts.append(entry)
        else:
            run.append(entry)
    if len(parts) == 1:
        return parts[0]
    return ByteDFA(SequenceSource(parts), fingerprint=fingerprint, limits=limits)
