"""Rules for arrays, from their typed form: one rule per (position, `contains` count) state.

Positions up to the longest prefix have their own item rule, the ones after share the tail's;
`minItems`/`maxItems` bound the states, and `contains` with `minContains`/`maxContains`
counts matching items (a matching and a non-matching rule per position). A position no value
can fill ends the array there."""

from __future__ import annotations

from typing import TYPE_CHECKING

from structgen.errors import LimitExceededError
from structgen.schema._combinators import negate
from structgen.schema._forms import ArrayForm, Unsat

if TYPE_CHECKING:
    from structgen.schema._compiler import SchemaCompiler

__all__ = ["array_rule"]


def array_rule(c: SchemaCompiler, form: ArrayForm) -> str:
    ptr, lo, hi = form.ptr, form.min_items, form.max_items
    contains, cmin, cmax = form.contains, form.min_contains, form.max_contains
    position = form.position
    width = form.width
    # element rules per position (None: no value allowed there)
    elements: list[str | None] = []
    for i in range(width + 1):
        try:
            elements.append(c.value(position(i)))
        except Unsat:
            elements.append(None)
    for i, e in enumerate(elements):
        if e is None:
            limit = i
            if lo > limit:
                raise Unsat(ptr, f"item {i} can never be valid but minItems is {lo}")
            hi = limit if hi is None else min(hi, limit)
            break
    counted: list[str | None] = []
    uncounted: list[str | None] = list(elements)
    if contains is not None:
        for i in range(width + 1):
            try:
                counted.append(c.value([*position(i), contains]))
            except Unsat:
                counted.append(None)
        if cmax is not None:
            neg = negate(c, contains)
            uncounted = []
            for i in range(width + 1):
                try:
                    uncounted.append(c.value([*position(i), neg]))
                except Unsat:
                    uncounted.append(None)
    cap = 0 if contains is None else (cmax + 1 if cmax is not None else cmin)
    index_cap = max(width, lo, 1)
    sep = c.emit.punct(",")
    states: dict[tuple[int, int], str] = {}
    todo: list[tuple[int, int]] = []
    total = (hi if hi is not None else index_cap) + 1
    if total * (cap + 1) > c.opts.max_rules:
        raise LimitExceededError(
            "the array's item counts need too many grammar rules",
            limit="SchemaOptions.max_rules",
            value=c.opts.max_rules,
        )

    def state(i: int, matched: int) -> str:
        if hi is None:
            i = min(i, index_cap)
        matched = min(matched, cap)
        key = (i, matched)
        if key not in states:
            states[key] = c.emit.new_rule("arr")
            todo.append(key)
        return states[key]

    start = state(0, 0)
    while todo:
        i, matched = todo.pop()
        name = states[(i, matched)]
        if contains is not None and cmax is not None and matched > cmax:
            continue  # too many matches: a dead state
        if i >= lo and (contains is None or matched >= cmin):
            c.emit.add(name)
        if hi is not None and i >= hi:
            continue
        k = min(i, width)
        prefix_sym = [sep] if i > 0 else []
        if uncounted[k] is not None:
            c.emit.add(name, *prefix_sym, uncounted[k], state(i + 1, matched))  # type: ignore[arg-type]
        if (
            contains is not None
            and counted[k] is not None
            and matched < cap
            and (cmax is None or matched < cmax)  # one more match would be too many: no edge
        ):
            c.emit.add(name, *prefix_sym, counted[k], state(i + 1, matched + 1))  # type: ignore[arg-type]
    rule = c.emit.new_rule("array")
    c.emit.add(rule, c.emit.punct("["), start, c.emit.punct("]"))
    return rule
