"""`Events.groups`: a walk's boundary events split by the state they die in — ascending states,
each group's events in walk order, the events themselves when there is one state — whichever
way they are split (Python lists for small walks, numpy for large ones)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from structgen.masks._kernel import Events


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
