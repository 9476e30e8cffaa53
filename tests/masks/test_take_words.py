"""`take_words` (`_native.c`), which hands a continued walk's mask back as its non-zero words
(blocks of eight words tested at once), against numpy's `flatnonzero`: the same indices and
values in order, and the buffer left all zero for the next walk."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structgen.automata._native_subset import addresses
from structgen.masks._kernel import _EXT

pytestmark = pytest.mark.skipif(_EXT is None, reason="the C extension is not built")


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(0, 80),  # (sizes around and between the blocks of eight)
    set_words=st.lists(st.tuples(st.integers(0, 79), st.integers(1, 2**32 - 1)), max_size=24),
)
def test_take_words_is_the_nonzero_words_in_order(
    size: int, set_words: list[tuple[int, int]]
) -> None:
    assert _EXT is not None
    words = np.zeros(size, dtype=np.uint32)
    for i, value in set_words:
        if i < size:
            words[i] = value
    expected_idx = np.flatnonzero(words)
    expected_val = words[expected_idx].copy()
    idx = np.full(max(size, 1), -7, dtype=np.int64)
    val = np.zeros(max(size, 1), dtype=np.uint32)
    p_words, p_idx, p_val = addresses(words, idx, val)
    k = _EXT.take_words(p_words, size, p_idx, p_val)
    assert k == len(expected_idx)
    assert np.array_equal(idx[:k], expected_idx)
    assert np.array_equal(val[:k], expected_val)
    assert not words.any()
