"""Rules for scalar values: null, booleans, numbers (ranges, `multipleOf`), strings (lengths,
patterns, formats) and finite sets (`enum`/`const` members), each from its typed form.

Generate mode spells each value once, as `json.dumps` does (plain integers, no trailing zeros,
keys and enum strings without escapes beyond the necessary); accept mode takes every valid
spelling. See docs/design/json-schema.md."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from structgen.automata import Node, Pattern, String, alternation, parse_regex
from structgen.errors import UnsupportedSchemaError
from structgen.schema._emitter import quoted, strings_except
from structgen.schema._formats import KNOWN_UNSUPPORTED, format_nodes
from structgen.schema._forms import NumberForm, StringForm, Unsat, excluded_values
from structgen.schema._keywords import json_equal
from structgen.schema._numbers import NumRange, number_node
from structgen.schema._refs import Sub
from structgen.schema._strings import (
    any_string_body,
    encode,
    length_body,
    literal_bodies,
    literal_body,
)

if TYPE_CHECKING:
    from structgen.schema._compiler import SchemaCompiler

__all__ = [
    "boolean_rule",
    "null_rule",
    "number_rule",
    "scalar_text",
    "string_parts",
    "string_rule",
    "string_words",
]


def _nonint(zeros: str) -> Node:
    """Non-integer number texts whose *parsed double* is not an integer either (jsonschema
    judges the float): at most 15 significant digits round-trip through a double, so such a
    text cannot land on an integer (`zeros`: trailing zeros, which do not count); longer ones
    (1.0000000000000001, 1e25-sized fractions) could, and are left out."""
    return parse_regex(
        r"-?(?:"
        + "|".join(
            rf"[1-9][0-9]{{{k - 1}}}\.(?:[0-9]{{0,{14 - k}}}[1-9]){zeros}" for k in range(1, 15)
        )
        + rf"|0\.0{{0,20}}[1-9](?:[0-9]{{0,13}}[1-9])?{zeros})"
    )


_NONINT = _nonint("0*")
_CANONICAL_NONINT = _nonint("")  # generating: no trailing zeros, as a writer spells numbers
# Drafts 3 and 4: a number written with a fraction or an exponent is not an integer (`1.0`).
_WRITTEN_NONINT = parse_regex(
    r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+)"
)


def null_rule(c: SchemaCompiler, flat: list[Sub]) -> str:
    if any(v is None for v in excluded_values(flat)):
        raise Unsat(flat[0].ptr if flat else "", "null is excluded")
    return c.emit.terminal(String("null"))


def boolean_rule(c: SchemaCompiler, flat: list[Sub]) -> str:
    excluded = excluded_values(flat)
    words = [w for w, v in (("true", True), ("false", False)) if not any(x is v for x in excluded)]
    if not words:
        raise Unsat(flat[0].ptr if flat else "", "both booleans are excluded")
    return c.emit.terminal(_words(tuple(words)))


@lru_cache(maxsize=8)
def _words(words: tuple[str, ...]) -> Node:
    """`true`, `false` or both: one instance each for every compile."""
    return alternation(String(w) for w in words)


def scalar_text(c: SchemaCompiler, v: Any, kinds: frozenset[str]) -> Node:
    """The texts of one scalar `enum`/`const` member; `kinds`: the types the conjunction
    allows (under drafts 3 and 4 an integer-only one excludes `0.0`, `1.0`: floats there)."""
    if v is None:
        return String("null")
    if v is True:
        return String("true")
    if v is False:
        return String("false")
    if isinstance(v, str):
        return quoted(literal_body(v, canonical=c.canonical))
    if c.canonical:
        return String(json.dumps(v))  # as a writer spells it: 3, 1.5, 1e+100
    if not c.integer_fractions and "nonint" not in kinds:
        return number_node(NumRange(v, v), integer=True, fractions=False)
    return number_node(NumRange(v, v), integer=False)


def string_words(c: SchemaCompiler, words: list[str]) -> Node:
    """The texts of a set of string members, quotes included."""
    return quoted(literal_bodies(words, canonical=c.canonical))


# ----------------------------------------------------------------------------- numbers


def number_rule(c: SchemaCompiler, form: NumberForm, kinds: frozenset[str]) -> str:
    ptr, rng, excluded = form.ptr, form.range, form.excluded
    integer = "nonint" not in kinds
    if form.multiples:
        step = form.step
        integer = True
        if "integer" not in kinds:
            raise Unsat(ptr, "multipleOf admits only integers here")
        if step > 1:
            return _multiple(c, rng, step, excluded, ptr)
    ranges = _split_range(rng, excluded)
    if not ranges:
        raise Unsat(ptr, "the numeric range is empty")
    nodes = [
        number_node(r, integer=integer, canonical=c.canonical, fractions=c.integer_fractions)
        for r in ranges
    ]
    node = alternation(nodes)
    if kinds == frozenset({"nonint"}):
        # drafts 3 and 4 (accepting): any text with a fraction or exponent is no integer;
        # generating offers only what every validator (ajv: `Number.isInteger`) agrees on
        if c.canonical:
            return c.emit.terminal(node, (_CANONICAL_NONINT,))
        return c.emit.terminal(node, (_NONINT if c.integer_fractions else _WRITTEN_NONINT,))
    return c.emit.terminal(node)


def _multiple(c: SchemaCompiler, rng: NumRange, step: int, excluded: list[Any], ptr: str) -> str:
    lo, hi = rng.int_bounds()
    if lo is not None and hi is not None:
        if lo > hi:
            raise Unsat(ptr, "the numeric range is empty")
        first = -(-lo // step) * step
        count = (hi - first) // step + 1 if first <= hi else 0
        if count <= 0:
            raise Unsat(ptr, "no multiple of multipleOf lies in the range")
        if count <= 2000:
            values = [
                v for v in range(first, hi + 1, step) if not any(json_equal(v, e) for e in excluded)
            ]
            if not values:
                raise Unsat(ptr, "every multiple is excluded")
            return c.emit.terminal(
                alternation(
                    number_node(
                        NumRange(v, v),
                        integer=True,
                        canonical=c.canonical,
                        fractions=c.integer_fractions,
                    )
                    for v in values
                )
            )
    if excluded:
        raise UnsupportedSchemaError("multipleOf with excluded values", pointer=ptr)
    # divisibility by `step` as a right-linear grammar over single-digit terminals; it
    # covers all integers (lo and hi open) or the non-negative ones (lo <= 0, hi open)
    if (lo is not None and lo > 0) or hi is not None:
        raise UnsupportedSchemaError(
            f"multipleOf {step} with a wide range cannot be enforced exactly", pointer=ptr
        )
    return _divisible(c, step, negatives=lo is None)


def _divisible(c: SchemaCompiler, step: int, *, negatives: bool) -> str:
    key = ("divisible", step, negatives)
    if key in c.memo:
        return c.memo[key]
    name = c.emit.new_rule("div")
    c.memo[key] = name
    zeros = 0  # a multiple of k * 10**z is 0 or a multiple of k followed by z zeros
    while step % 10 == 0:
        step //= 10
        zeros += 1
    digits = [c.emit.terminal(String(str(d))) for d in range(10)]
    states = [c.emit.new_rule(f"mod{step}_") for _ in range(step)]
    for r in range(step):
        if r == 0:
            c.emit.add(states[r])
        for d in range(10):
            c.emit.add(states[r], digits[d], states[(r * 10 + d) % step])
    zero = c.emit.terminal(String("0"))
    c.emit.add(name, zero)
    body = c.emit.new_rule("divpos")
    if zeros:  # the multiple of k, then the zeros, each a digit (no lexeme to split)
        prefix = c.emit.new_rule("divpre")
        for d in range(1, 10):
            c.emit.add(prefix, digits[d], states[d % step])
        c.emit.add(body, prefix, *([digits[0]] * zeros))
    else:
        for d in range(1, 10):
            c.emit.add(body, digits[d], states[d % step])
    c.emit.add(name, body)
    if negatives:
        c.emit.add(name, c.emit.terminal(String("-")), body)
        if not c.canonical:
            c.emit.add(name, c.emit.terminal(String("-0")))
    return name


def _split_range(rng: NumRange, excluded: list[Any]) -> list[NumRange]:
    """`rng` minus single excluded values, as ranges with exclusive ends at each of them."""
    pieces = [rng]
    for v in sorted({float(x) if isinstance(x, float) else x for x in excluded}):
        out: list[NumRange] = []
        for r in pieces:
            inside_lo = r.lo is None or v > r.lo or (v == r.lo and not r.lo_excl)
            inside_hi = r.hi is None or v < r.hi or (v == r.hi and not r.hi_excl)
            if not (inside_lo and inside_hi):
                out.append(r)
                continue
            out.append(NumRange(r.lo, v, lo_excl=r.lo_excl, hi_excl=True))
            out.append(NumRange(v, r.hi, lo_excl=True, hi_excl=r.hi_excl))
        pieces = out
    return [p for p in pieces if not _empty_range(p)]


def _empty_range(r: NumRange) -> bool:
    if r.lo is None or r.hi is None:
        return False
    return r.lo > r.hi or (r.lo == r.hi and (r.lo_excl or r.hi_excl))


# ----------------------------------------------------------------------------- strings


def string_parts(c: SchemaCompiler, form: StringForm) -> list[Pattern]:
    """Encoded body languages to intersect for the strings of `form` (empty: any string)."""
    decoded: list[Node] = []
    for item in form.constraints:
        sub = item.sub
        if item.kind == "pattern":
            decoded.extend(c.patterns.nodes(item.text, f"{sub.ptr}/pattern"))
        elif item.kind == "not_pattern":
            node = c.patterns.possible(item.text, f"{sub.ptr}/not/pattern")
            decoded.append(c.complement(node, sub))
        else:
            nodes = format_nodes(item.text, generate=c.canonical)
            if nodes is not None:
                decoded.extend(nodes)
            elif item.text in KNOWN_UNSUPPORTED:
                c.fail(f"format {item.text!r} is not supported (ignored)", f"{sub.ptr}/format")
    lo, hi = form.min_length, form.max_length
    if hi is not None and lo > hi:
        raise Unsat(form.ptr, "minLength is greater than maxLength")
    canonical = c.canonical
    parts: list[Pattern] = [encode(n, canonical=canonical) for n in decoded]
    if form.excluded:
        parts.append(strings_except(form.excluded, canonical=canonical))
    if lo > 0 or hi is not None:
        parts.insert(0, length_body(lo, hi, canonical=canonical))
    return parts


def string_rule(c: SchemaCompiler, form: StringForm) -> str:
    parts = string_parts(c, form)
    if not parts:
        return c.emit.string_terminal(any_string_body(canonical=c.canonical))
    return c.emit.string_terminal(parts[0], tuple(parts[1:]))
