"""`WeakValues`: the weak map of the shared terminal automata."""

from __future__ import annotations

import gc

from structgen._weakmap import WeakValues


class Value:
    """A weakly referable value."""


def test_values_are_held_weakly_and_a_dead_one_reads_as_missing() -> None:
    values: WeakValues[str, Value] = WeakValues()
    kept, dropped = Value(), Value()
    assert values.setdefault("kept", kept) is kept
    assert values.setdefault("dropped", dropped) is dropped
    del dropped
    gc.collect()
    assert values.get("kept") is kept
    assert values.get("dropped") is None
    assert len(values) == 1  # (counts the live ones)


def test_setdefault_keeps_the_live_value_and_replaces_a_dead_one() -> None:
    values: WeakValues[str, Value] = WeakValues()
    first, second = Value(), Value()
    values.setdefault("k", first)
    assert values.setdefault("k", second) is first
    del first
    gc.collect()
    assert values.setdefault("k", second) is second
    assert values.get("k") is second


def test_pop_and_clear() -> None:
    values: WeakValues[str, Value] = WeakValues()
    v = Value()
    values.setdefault("k", v)
    assert values.pop("k") is v
    assert values.pop("k") is None
    values.setdefault("k", v)
    values.clear()
    assert values.get("k") is None and len(values) == 0


def test_dead_entries_are_swept_as_the_map_grows() -> None:
    # Without callbacks a dead value's entry (and its key) stays until a sweep; sweeps run
    # whenever the map has doubled, so the entries stay within about twice the live ones.
    values: WeakValues[int, Value] = WeakValues()
    alive = [Value() for _ in range(10)]
    for i, v in enumerate(alive):
        values.setdefault(i, v)
    for i in range(10, 5000):
        values.setdefault(i, Value())  # dies at once
        assert len(values._data) <= 65
    assert len(values) == 10
