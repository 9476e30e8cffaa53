"""`InternedSets`, the weak table of Earley sets by kernel: a set is found while it lives, its
entry goes when it dies, and the table itself is freed by reference counting (no cycle)."""

from __future__ import annotations

import gc
import weakref

from structgen.grammar.earley import EarleyGrammar, InternedSets
from structgen.grammar.lark_frontend import lark_to_ir


class _Set:
    """A stand-in value (any weakly referenceable object)."""


def test_entries_live_as_long_as_their_sets() -> None:
    table = InternedSets()
    a, b = _Set(), _Set()
    table.add(frozenset({1}), a)  # type: ignore[arg-type]
    table.add(frozenset({2}), b)  # type: ignore[arg-type]
    assert table.get(frozenset({1})) is a and len(table) == 2
    del a
    assert table.get(frozenset({1})) is None
    assert len(table) == 1 and len(table._kernels) == 1
    # a kernel stored again (its old set dead) keeps the new set only
    c = _Set()
    table.add(frozenset({2}), c)  # type: ignore[arg-type]
    del b
    assert table.get(frozenset({2})) is c and len(table) == 1


def test_the_table_is_freed_without_the_cyclic_collector() -> None:
    gc.disable()
    try:
        table = InternedSets()
        kept = _Set()
        table.add(frozenset({1}), kept)  # type: ignore[arg-type]
        ref = weakref.ref(table)
        del table
        assert ref() is None
        del kept  # (its callback finds the table gone)
    finally:
        gc.enable()


def test_equal_parses_are_one_object() -> None:
    """After each "a" the parse is the same (its kernel's origins are themselves interned): the
    second scan finds the set the first made."""
    grammar = EarleyGrammar(lark_to_ir('start: "a" start | "b"\n'))
    a = grammar.terminal_names.index("A")
    once = grammar.initial_set().scan(frozenset({a}))
    assert once is not None
    twice = once.scan(frozenset({a}))
    assert twice is not None
    assert twice.scan(frozenset({a})) is twice.scan(frozenset({a}))
    assert grammar.interned.get(frozenset()) is None
