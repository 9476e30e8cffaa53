"""`Events.groups`: a walk's boundary events split by the state they die in — ascending states,
each group's events in walk order, the events themselves when there is one state — whichever
way they are split (Python lists for small walks, numpy for large ones, C for a walk's own)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structgen.automata._native_subset import addresses
from structgen.masks._kernel import _EXT, Events, native_available


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=0, max_size=150), st.integers(0, 10**6))
def test_groups_split_by_state_in_walk_order(states: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = len(states)
    lo = rng.integers(0, 10**6, n).astype(np.int64)
    hi = lo + rng.integers(1, 100, n)
    cut = rng.integers(1, 8, n).astype(np.int32)
    events = Events(lo, hi, cut, np.array(states, dtype=np.int32))
    groups = events.groups()
    assert [s for s, _ in events.groups()] == [s for s, _ in groups]  # (asked again: the same)
    expected: dict[int, list[int]] = {}
    for i, s in enumerate(states):
        expected.setdefault(s, []).append(i)
    assert [s for s, _ in groups] == sorted(expected)
    for s, part in groups:
        idx = expected[s]
        assert isinstance(s, int)
        assert part.lo.tolist() == lo[idx].tolist()
        assert part.hi.tolist() == hi[idx].tolist()
        assert part.cut.tolist() == cut[idx].tolist()
        assert part.state.tolist() == [s] * len(idx)
    if len(expected) == 1:
        assert groups[0][1] is events


@pytest.mark.skipif(not native_available(), reason="needs the C walk")
@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=150), st.integers(0, 10**6))
def test_packed_events_group_as_the_python_split(states: list[int], seed: int) -> None:
    """A C walk's events are packed into bytes ordered by state (`pack_events`): their groups
    are the Python split's, read from the bytes, each with its own cache key."""
    rng = np.random.default_rng(seed)
    n = len(states)
    lo = rng.integers(0, 10**6, n).astype(np.int64)
    hi = lo + rng.integers(1, 100, n)
    cut = rng.integers(1, 8, n).astype(np.int32)
    state = np.array(states, dtype=np.int32)
    packed, bounds = _EXT.pack_events(*addresses(lo, hi, cut, state), n)
    events = Events.from_packed(packed, n, bounds)
    assert len(events) == n and events.nbytes == 24 * n
    grouped = events.groups()
    expected = Events(lo, hi, cut, state).groups()
    assert [s for s, _ in grouped] == [s for s, _ in expected]
    for (_, got), (_, want) in zip(grouped, expected, strict=True):
        assert len(got) == len(want)
        assert got.key == want.key
        for a, b in zip(got, want, strict=True):
            assert a.tolist() == b.tolist()
    assert sorted(events.state.tolist()) == events.state.tolist()
