"""`first_byte_dead` and `or_and` (`_subset.c`), the two packed-mask steps of a first visit
whose lexeme may end: against the numpy they replace (the OR of the dead bytes' token rows, or
all text tokens less the live bytes' rows; `out |= a & b`), on random rows with every count of
live bytes; bad sizes are a ValueError."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structgen.engines.grammar import _OR_AND
from structgen.masks._walker import _FIRST_BYTE_DEAD

pytestmark = pytest.mark.skipif(
    _FIRST_BYTE_DEAD is None or _OR_AND is None, reason="the C extension is not built"
)


def _by_byte(words: int, seed: int) -> np.ndarray:
    """A [257, words] table like `first_byte_masks`: each token in one byte's row (or none,
    a special token), row 256 the OR of the others."""
    rng = np.random.default_rng(seed)
    first = rng.integers(0, 260, words * 32)  # (>= 256: a special token, in no row)
    table = np.zeros((257, words), dtype=np.uint32)
    for token, byte in enumerate(first.tolist()):
        if byte < 256:
            table[byte, token >> 5] |= np.uint32(1 << (token & 31))
    table[256] = np.bitwise_or.reduce(table[:256], axis=0)
    return table.view(np.int32)


@settings(max_examples=150, deadline=None)
@given(
    words=st.integers(1, 9),
    live=st.sets(st.integers(0, 255)),
    seed=st.integers(0, 3),
)
def test_first_byte_dead_is_the_dead_bytes_tokens(words: int, live: set[int], seed: int) -> None:
    by_byte = _by_byte(words, seed)
    row = np.full(256, -1, dtype=np.int32)
    row[sorted(live)] = 7
    dead = [b for b in range(256) if b not in live]
    expected = np.zeros(words, dtype=np.uint32)
    for b in dead:
        expected |= by_byte[b].view(np.uint32)
    out = np.full(words, -5, dtype=np.int32)  # (whatever was there is overwritten)
    _FIRST_BYTE_DEAD(row, by_byte, out)
    assert np.array_equal(out.view(np.uint32), expected)


@settings(max_examples=100, deadline=None)
@given(size=st.integers(0, 40), seed=st.integers(0, 2**16))
def test_or_and_is_numpys(size: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    out, a, b = (rng.integers(-(2**31), 2**31, size, dtype=np.int32) for _ in range(3))
    expected = out | (a & b)
    _OR_AND(out, a, b)
    assert np.array_equal(out, expected)


def test_bad_sizes_are_refused() -> None:
    by_byte = _by_byte(2, 0)
    with pytest.raises(ValueError):
        _FIRST_BYTE_DEAD(np.zeros(255, dtype=np.int32), by_byte, np.zeros(2, dtype=np.int32))
    with pytest.raises(ValueError):
        _FIRST_BYTE_DEAD(np.zeros(256, dtype=np.int32), by_byte, np.zeros(3, dtype=np.int32))
    with pytest.raises(ValueError):
        _OR_AND(np.zeros(2, dtype=np.int32), np.zeros(3, dtype=np.int32), np.zeros(2, np.int32))
    frozen = np.zeros(2, dtype=np.int32)
    frozen.setflags(write=False)
    with pytest.raises((ValueError, TypeError, BufferError)):
        _OR_AND(frozen, np.zeros(2, dtype=np.int32), np.zeros(2, dtype=np.int32))
