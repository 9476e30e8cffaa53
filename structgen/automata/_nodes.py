"""The regex AST's node classes and the combinators that build them (`regex_syntax` re-exports
them: import them from there, or from `structgen.automata`).

Compiled with mypyc (`_compiled.EXTRA_MODULES`): every frontend builds these nodes by the
thousand per compile (a key's spellings, a format, a number range) and hashes them as cache
keys, so they are plain classes with an explicit `__init__`, `__eq__` and `__hash__` — native
when compiled (a dataclass keeps a generated `__init__` in Python) — immutable by convention.
Equality and `repr` are a frozen dataclass's: by class and fields. The nodes that hash a
subtree cache the hash (schema frontends hash deep, shared subtrees many times); the cache is
left out of pickles (`__reduce__`), since string hashes differ per process.
"""

from __future__ import annotations

from collections.abc import Iterable

from structgen.automata import intervals as iv
from structgen.automata.intervals import Ranges

__all__ = [
    "Alternation",
    "CharClass",
    "Concat",
    "Empty",
    "Node",
    "Repeat",
    "String",
    "alternation",
    "concat",
    "repeat",
]


class Empty:
    """Matches the empty string only."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return True if isinstance(other, Empty) else NotImplemented

    def __hash__(self) -> int:
        return hash(())

    def __repr__(self) -> str:
        return "Empty()"

    def __reduce__(self) -> tuple[type[Empty], tuple[()]]:
        return (Empty, ())


class String:
    """Matches exactly ``text`` (code points, case-sensitive). ``text`` is never empty."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, String):
            return NotImplemented
        return self.text == other.text

    def __hash__(self) -> int:
        return hash((self.text,))

    def __repr__(self) -> str:
        return f"String(text={self.text!r})"

    def __reduce__(self) -> tuple[type[String], tuple[str]]:
        return (String, (self.text,))


class CharClass:
    """Matches one code point from ``ranges`` (normal-form inclusive ranges; may be empty)."""

    __slots__ = ("_hash", "ranges")

    def __init__(self, ranges: Ranges) -> None:
        self.ranges = ranges
        self._hash = 0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CharClass):
            return NotImplemented
        return self.ranges == other.ranges

    def __hash__(self) -> int:
        # Cached: a class's ranges are a tuple of pairs, hashed afresh on every dict lookup.
        h = self._hash
        if not h:
            h = self._hash = hash(("CharClass", self.ranges)) or 1
        return h

    def __repr__(self) -> str:
        return f"CharClass(ranges={self.ranges!r})"

    def __reduce__(self) -> tuple[type[CharClass], tuple[Ranges]]:
        return (CharClass, (self.ranges,))


class Concat:
    """Matches its items one after another."""

    __slots__ = ("_hash", "items")

    def __init__(self, items: tuple[Node, ...]) -> None:
        self.items = items
        self._hash = 0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Concat):
            return NotImplemented
        return self.items == other.items

    def __hash__(self) -> int:
        h = self._hash
        if not h:
            h = self._hash = hash(("Concat", self.items)) or 1
        return h

    def __repr__(self) -> str:
        return f"Concat(items={self.items!r})"

    def __reduce__(self) -> tuple[type[Concat], tuple[tuple[Node, ...]]]:
        return (Concat, (self.items,))


class Alternation:
    """Matches any one of its items."""

    __slots__ = ("_hash", "items")

    def __init__(self, items: tuple[Node, ...]) -> None:
        self.items = items
        self._hash = 0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Alternation):
            return NotImplemented
        return self.items == other.items

    def __hash__(self) -> int:
        h = self._hash
        if not h:
            h = self._hash = hash(("Alternation", self.items)) or 1
        return h

    def __repr__(self) -> str:
        return f"Alternation(items={self.items!r})"

    def __reduce__(self) -> tuple[type[Alternation], tuple[tuple[Node, ...]]]:
        return (Alternation, (self.items,))


class Repeat:
    """Matches ``item`` between ``min`` and ``max`` times (``max=None``: unbounded)."""

    __slots__ = ("_hash", "item", "max", "min")

    def __init__(self, item: Node, min: int, max: int | None) -> None:
        self.item = item
        self.min = min
        self.max = max
        self._hash = 0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Repeat):
            return NotImplemented
        return self.item == other.item and self.min == other.min and self.max == other.max

    def __hash__(self) -> int:
        h = self._hash
        if not h:
            h = self._hash = hash(("Repeat", self.item, self.min, self.max)) or 1
        return h

    def __repr__(self) -> str:
        return f"Repeat(item={self.item!r}, min={self.min!r}, max={self.max!r})"

    def __reduce__(self) -> tuple[type[Repeat], tuple[Node, int, int | None]]:
        return (Repeat, (self.item, self.min, self.max))


Node = Empty | String | CharClass | Concat | Alternation | Repeat


# ----------------------------------------------------------------------------- combinators


def concat(items: Iterable[Node]) -> Node:
    """Concatenation, flattened: nested ``Concat`` inlined, ``Empty`` dropped, strings merged."""
    out: list[Node] = []
    run: list[str] = []  # the texts of the strings met since the last other node
    for item in items:
        parts: tuple[Node, ...] = item.items if isinstance(item, Concat) else (item,)
        for part in parts:
            if isinstance(part, String):
                run.append(part.text)  # (joined once at the run's end, not once per piece)
                if len(run) > 1:
                    continue
            elif isinstance(part, Empty):
                continue
            elif run:
                if len(run) > 1:
                    out[-1] = String("".join(run))
                run.clear()
            out.append(part)
    if len(run) > 1:
        out[-1] = String("".join(run))
    if not out:
        return Empty()
    if len(out) == 1:
        return out[0]
    return Concat(tuple(out))


def alternation(items: Iterable[Node]) -> Node:
    """Alternation, flattened; alternatives of single characters become one ``CharClass``."""
    flat: list[Node] = []
    for item in items:
        if isinstance(item, Alternation):
            flat.extend(item.items)
        else:
            flat.append(item)
    if not flat:
        return CharClass(())
    uniq: list[Node] = list(dict.fromkeys(flat))
    if len(uniq) == 1:
        return uniq[0]
    ranges: list[tuple[int, int]] = []
    for x in uniq:
        if isinstance(x, CharClass):
            ranges.extend(x.ranges)
        elif isinstance(x, String) and len(x.text) == 1:
            ranges.append((ord(x.text), ord(x.text)))
        else:
            return Alternation(tuple(uniq))
    return CharClass(iv.normalize(ranges))


def repeat(item: Node, min_count: int, max_count: int | None) -> Node:
    """``item{min,max}`` with trivial cases simplified."""
    if max_count is not None and max_count < min_count:
        raise ValueError("max_count < min_count")
    if max_count == 0 or isinstance(item, Empty):
        return Empty()
    if min_count == 1 and max_count == 1:
        return item
    return Repeat(item, min_count, max_count)
