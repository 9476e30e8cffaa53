"""`or_words` (`_subset.c`), the scatter-OR a mask's first visit uses for each continued walk's
cached sparse words, against numpy's `words[indices] |= values`; bad input is a ValueError."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structgen.engines.grammar import _OR_WORDS

pytestmark = pytest.mark.skipif(_OR_WORDS is None, reason="the C extension is not built")


@settings(max_examples=100, deadline=None)
@given(
    size=st.integers(1, 64),
    pairs=st.lists(st.tuples(st.integers(0, 63), st.integers(0, 2**32 - 1)), max_size=20),
)
def test_or_words_is_numpys_scatter_or(size: int, pairs: list[tuple[int, int]]) -> None:
    rng = np.random.default_rng(size)
    words = rng.integers(0, 2**32, size, dtype=np.uint32)
    unique = dict((i % size, v) for i, v in pairs)  # (the walks' indices never repeat)
    indices = np.array(sorted(unique), dtype=np.int64)
    values = np.array([unique[i] for i in sorted(unique)], dtype=np.uint32)
    expected = words.copy()
    expected[indices] |= values
    as_bytes = words.copy()  # (a continued walk's words set comes as the C call's bytes)
    _OR_WORDS(words, indices, values)
    assert np.array_equal(words, expected)
    _OR_WORDS(as_bytes, indices.tobytes(), values.tobytes())
    assert np.array_equal(as_bytes, expected)


def test_or_words_refuses_bad_input() -> None:
    words = np.zeros(4, dtype=np.uint32)
    one = np.ones(1, dtype=np.uint32)
    with pytest.raises(ValueError):
        _OR_WORDS(words, np.array([4], dtype=np.int64), one)  # out of range
    with pytest.raises(ValueError):
        _OR_WORDS(words, np.array([-1], dtype=np.int64), one)
    with pytest.raises(ValueError):
        _OR_WORDS(words, np.array([0, 1], dtype=np.int64), one)  # sizes differ
    with pytest.raises((ValueError, TypeError, BufferError)):
        _OR_WORDS(words.view(np.uint32)[::2], np.array([0], dtype=np.int64), one)
    frozen = np.zeros(4, dtype=np.uint32)
    frozen.setflags(write=False)
    with pytest.raises((ValueError, TypeError, BufferError)):
        _OR_WORDS(frozen, np.array([0], dtype=np.int64), one)
    assert not words.any()
