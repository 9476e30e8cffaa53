"""The typed form of a conjunction, per kind: what the keywords of all its subschemas say about
numbers, strings, arrays and objects, read once and checked (bounds that cross are `Unsat`).

Reading is the phase between the JSON and the grammar: `_compiler.py` flattens `allOf` and
`$ref` into a conjunction (a list of `Sub`), the readers here turn that list into a form, and the
emitters (`_scalars.py`, `_arrays.py`, `_objects.py`) build rules from the form alone, never from
raw keywords."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

from structgen.errors import UnsupportedSchemaError
from structgen.schema._keywords import NOTIN_KW, NOTPAT_KW, SOME_KW, kind_of
from structgen.schema._numbers import NumRange
from structgen.schema._refs import Sub

if TYPE_CHECKING:
    from structgen.schema._compiler import SchemaCompiler

__all__ = [
    "ArrayForm",
    "ItemsOf",
    "NumberForm",
    "ObjectForm",
    "StringConstraint",
    "StringForm",
    "Unsat",
    "excluded_values",
    "read_array",
    "read_number",
    "read_object",
    "read_string",
]

#: at most this many "some member" constraints on one object (each is a flag in the rules)
MAX_SOME = 3


class Unsat(Exception):
    """A subschema no value satisfies (callers drop the alternative, or report it)."""

    def __init__(self, pointer: str, reason: str) -> None:
        super().__init__(reason)
        self.pointer = pointer
        self.reason = reason


def excluded_values(flat: list[Sub]) -> list[Any]:
    """Values the conjunction excludes one by one (negated `enum`/`const`)."""
    return [v for s in flat for v in s.schema.get(NOTIN_KW, [])]


def _pointer(flat: list[Sub]) -> str:
    return flat[0].ptr if flat else ""


# ----------------------------------------------------------------------------- numbers


@dataclass
class NumberForm:
    """Numbers: one range (bounds of every subschema intersected), the integer steps every
    value must be a multiple of, and values excluded one by one."""

    ptr: str
    range: NumRange
    multiples: list[int]
    excluded: list[Any]

    @property
    def step(self) -> int:
        """The least common multiple of the `multipleOf`s (1: none)."""
        step = 1
        for m in self.multiples:
            step = step * m // math.gcd(step, m)
        return step


def read_number(c: SchemaCompiler, flat: list[Sub]) -> NumberForm:
    rng = NumRange()
    multiples: list[int] = []
    for sub in flat:
        s = sub.schema
        for key in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            if key not in s or isinstance(s[key], bool):
                continue
            value = s[key]
            excl = key.startswith("exclusive")
            if not excl and _legacy_exclusive(s, key):
                excl = True
            if "inimum" in key:
                rng.tighten_lo(value, excl)
            else:
                rng.tighten_hi(value, excl)
        if "multipleOf" in s:
            m = s["multipleOf"]
            if isinstance(m, float) and m.is_integer():
                m = int(Decimal(repr(m)))  # 1e30 as written (10**30), not the double's digits
            if isinstance(m, int) and not isinstance(m, bool):
                multiples.append(m)
            else:
                c.fail(
                    f"multipleOf {m!r} is not an integer; jsonschema judges it in floating "
                    "point, which no regular language matches exactly (ignored)",
                    f"{sub.ptr}/multipleOf",
                )
    excluded = [v for v in excluded_values(flat) if kind_of(v) in ("integer", "nonint")]
    return NumberForm(_pointer(flat), rng, multiples, excluded)


def _legacy_exclusive(s: dict[str, Any], key: str) -> bool:
    """Drafts 3 and 4: `exclusiveMinimum: true` makes `minimum` exclusive."""
    flag = {"minimum": "exclusiveMinimum", "maximum": "exclusiveMaximum"}.get(key)
    return flag is not None and s.get(flag) is True


# ----------------------------------------------------------------------------- strings


@dataclass(frozen=True)
class StringConstraint:
    """One language a string must be in: a `pattern`, the negation of one, or a `format`."""

    kind: Literal["pattern", "not_pattern", "format"]
    text: Any
    sub: Sub


@dataclass
class StringForm:
    """Strings: length bounds (in code points), the languages to intersect (in the order the
    subschemas give them), and values excluded one by one."""

    ptr: str
    min_length: int
    max_length: int | None
    constraints: list[StringConstraint]
    excluded: list[str]


def read_string(flat: list[Sub]) -> StringForm:
    lo, hi = 0, None
    constraints: list[StringConstraint] = []
    for sub in flat:
        s = sub.schema
        if "minLength" in s:
            lo = max(lo, s["minLength"])
        if "maxLength" in s:
            hi = s["maxLength"] if hi is None else min(hi, s["maxLength"])
        if "pattern" in s:
            constraints.append(StringConstraint("pattern", s["pattern"], sub))
        for pat in s.get(NOTPAT_KW, ()):
            constraints.append(StringConstraint("not_pattern", pat, sub))
        if "format" in s:
            constraints.append(StringConstraint("format", s["format"], sub))
    excluded = [v for v in excluded_values(flat) if isinstance(v, str)]
    return StringForm(_pointer(flat), lo, hi, constraints, excluded)


# ----------------------------------------------------------------------------- arrays


@dataclass
class ItemsOf:
    """What one subschema says of positions: its prefix (`prefixItems`, or a tuple `items`)
    and the schema of the items after it (None: it says nothing of them)."""

    prefix: list[Sub]
    tail: Sub | None


@dataclass
class ArrayForm:
    """Arrays: count bounds, each subschema's items, and one `contains` with its counts."""

    ptr: str
    min_items: int
    max_items: int | None
    items: list[ItemsOf]
    contains: Sub | None
    min_contains: int
    max_contains: int | None

    @property
    def width(self) -> int:
        """The longest prefix: positions beyond it all have the tail schemas."""
        return max((len(i.prefix) for i in self.items), default=0)

    def position(self, i: int) -> list[Sub]:
        """The conjunction an item at position `i` must satisfy (prefix entries first)."""
        conj = [it.prefix[i] for it in self.items if i < len(it.prefix)]
        conj += [it.tail for it in self.items if i >= len(it.prefix) and it.tail is not None]
        return conj


def read_array(c: SchemaCompiler, flat: list[Sub]) -> ArrayForm:
    ptr = _pointer(flat)
    lo, hi = 0, None
    items_of: list[ItemsOf] = []
    contains: Sub | None = None
    cmin, cmax = 1, None
    for sub in flat:
        s = sub.schema
        lo = max(lo, s.get("minItems", 0))
        if "maxItems" in s:
            hi = s["maxItems"] if hi is None else min(hi, s["maxItems"])
        prefix = s.get("prefixItems")
        items = s.get("items")
        prefix_key, tail_key = "prefixItems", "items"
        if isinstance(items, list):  # drafts before 2020-12: a tuple `items`
            prefix, items = items, s.get("additionalItems")
            prefix_key, tail_key = "items", "additionalItems"
        # (additionalItems without a tuple `items` has no effect)
        prefix_subs = [c.child(sub, p, prefix_key, i) for i, p in enumerate(prefix or ())]
        tail = c.child(sub, items, tail_key) if items is not None else None
        items_of.append(ItemsOf(prefix_subs, tail))
        if "contains" in s:
            if contains is not None:
                raise UnsupportedSchemaError(
                    "several 'contains' on one array", pointer=f"{sub.ptr}/contains"
                )
            contains = c.child(sub, s["contains"], "contains")
            cmin = s.get("minContains", 1)
            cmax = s.get("maxContains")
        if s.get("uniqueItems") is True and (hi is None or hi > 1) and c.unique is None:
            c.fail(
                "uniqueItems cannot be enforced by a grammar (ignored)", f"{sub.ptr}/uniqueItems"
            )
    if contains is not None and cmin == 0 and cmax is None:
        contains = None
    if hi is not None and lo > hi:
        raise Unsat(ptr, "minItems is greater than maxItems")
    return ArrayForm(ptr, lo, hi, items_of, contains, cmin, cmax)


# ----------------------------------------------------------------------------- objects


@dataclass
class ObjectForm:
    """Objects: the declared names in order (`properties`, then `required` ones not listed),
    which are required, count bounds, the `propertyNames` schemas, and the "some member"
    constraints of negated `additionalProperties`/`patternProperties` (each a flag in the
    rules). `flat` stays for the member policies (`properties`, `patternProperties`,
    `additionalProperties` of each subschema), which depend on the key."""

    ptr: str
    flat: list[Sub]
    order: list[str]
    required: list[str]
    min_properties: int
    max_properties: int | None
    names: list[Sub]
    musts: list[tuple[Sub, dict[str, Any]]]


def read_object(c: SchemaCompiler, flat: list[Sub]) -> ObjectForm:
    ptr = _pointer(flat)
    lo, hi = 0, None
    order: list[str] = []
    required: list[str] = []
    for sub in flat:
        s = sub.schema
        for name in s.get("properties") or {}:
            if name not in order:
                order.append(name)
        for name in s.get("required", []):
            if name not in required:
                required.append(name)
        lo = max(lo, s.get("minProperties", 0))
        if "maxProperties" in s:
            hi = s["maxProperties"] if hi is None else min(hi, s["maxProperties"])
    for name in required:
        if name not in order:
            order.append(name)
    if hi is not None and lo > hi:
        raise Unsat(ptr, "minProperties is greater than maxProperties")
    names = [
        c.child(sub, sub.schema["propertyNames"], "propertyNames")
        for sub in flat
        if "propertyNames" in sub.schema
    ]
    musts = [(sub, spec) for sub in flat for spec in sub.schema.get(SOME_KW, [])]
    if len(musts) > MAX_SOME:
        raise UnsupportedSchemaError(
            f"more than {MAX_SOME} negated additionalProperties/patternProperties on one object",
            pointer=ptr,
        )
    return ObjectForm(ptr, flat, order, required, lo, hi, names, musts)
