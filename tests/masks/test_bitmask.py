"""Bitmask helpers against a plain reference computation (numpy and torch)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from structgen import allocate_bitmask, apply_bitmask
from structgen.masks import bitmask_words, pack_bool_mask, unpack_bitmask
from structgen.masks._bitmask import numpy_rows


def reference_apply(logits: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    out = logits.copy()
    out[~allowed] = -np.inf
    return out


@given(st.lists(st.booleans(), min_size=1, max_size=300))
def test_pack_unpack_round_trip(bits: list[bool]) -> None:
    allowed = np.array(bits, dtype=bool)
    packed = pack_bool_mask(allowed)
    assert packed.dtype == np.int32 and len(packed) == bitmask_words(len(bits))
    assert np.array_equal(unpack_bitmask(packed, len(bits)), allowed)
    for i, bit in enumerate(bits):  # the documented format: bit j of word i <=> token 32*i + j
        assert bool((int(packed[i // 32]) >> (i % 32)) & 1) == bit


def test_allocate_shapes() -> None:
    assert allocate_bitmask(3, 100).shape == (3, 4)
    assert allocate_bitmask(2, 64, backend="numpy").shape == (2, 2)
    assert allocate_bitmask(1, 65).dtype == torch.int32
    with pytest.raises(ValueError):
        allocate_bitmask(1, 10, backend="jax")


def test_a_torch_bitmask_warms_the_numpy_bridge(monkeypatch: pytest.MonkeyPatch) -> None:
    """Allocating a torch bitmask crosses torch's numpy bridge once (its first use costs a
    fraction of a millisecond, which a matcher's first fill would pay in a batch step)."""
    from structgen.masks import _bitmask

    monkeypatch.setattr(_bitmask, "_BRIDGE_WARM", False)
    allocate_bitmask(1, 10, backend="numpy")
    assert not _bitmask._BRIDGE_WARM
    allocate_bitmask(1, 10)
    assert _bitmask._BRIDGE_WARM


@settings(max_examples=60)
@given(
    st.integers(min_value=1, max_value=4),
    st.integers(min_value=1, max_value=200),
    st.integers(min_value=0, max_value=2**32 - 1),
)
def test_apply_matches_reference(batch: int, vocab: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    allowed = rng.random((batch, vocab)) < 0.3
    logits = rng.standard_normal((batch, vocab)).astype(np.float32)
    bitmask = np.stack([pack_bool_mask(row) for row in allowed])
    expected = reference_apply(logits, allowed)
    got_np = apply_bitmask(logits.copy(), bitmask)
    assert np.array_equal(got_np, expected)
    got_torch = apply_bitmask(torch.from_numpy(logits.copy()), torch.from_numpy(bitmask))
    assert np.array_equal(got_torch.numpy(), expected)


def test_logits_wider_than_bitmask_are_disallowed() -> None:
    logits = torch.zeros(1, 70)
    bitmask = torch.from_numpy(pack_bool_mask(np.ones(32, dtype=bool)))[None, :]
    apply_bitmask(logits, bitmask)
    assert torch.isfinite(logits[0, :32]).all() and torch.isinf(logits[0, 32:]).all()


def test_indices_select_rows() -> None:
    logits = torch.zeros(3, 40)
    allowed = np.zeros(40, dtype=bool)
    allowed[5] = True
    bitmask = torch.from_numpy(pack_bool_mask(allowed))[None, :]
    apply_bitmask(logits, bitmask, indices=[1])
    assert torch.isfinite(logits[0]).all() and torch.isfinite(logits[2]).all()
    assert torch.isfinite(logits[1, 5]) and torch.isinf(logits[1]).sum() == 39


def test_one_dimensional_logits() -> None:
    logits = np.zeros(10, dtype=np.float32)
    allowed = np.array([True, False] * 5)
    apply_bitmask(logits, pack_bool_mask(allowed))
    assert np.array_equal(np.isfinite(logits), allowed)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu() -> None:
    rng = np.random.default_rng(1)
    allowed = rng.random((4, 1000)) < 0.5
    bitmask = torch.from_numpy(np.stack([pack_bool_mask(r) for r in allowed]))
    logits = torch.randn(4, 1000)
    expected = apply_bitmask(logits.clone(), bitmask)
    got = apply_bitmask(logits.cuda(), bitmask.cuda()).cpu()
    assert torch.equal(got, expected)


def test_numpy_rows_is_the_tensors_memory_made_once() -> None:
    """What a serving backend hands `fill_bitmask`: a CPU tensor's memory as numpy, the same
    view for every fill of that tensor; numpy arrays as they are."""
    first = torch.full((4, 3), -1, dtype=torch.int32)
    rows = numpy_rows(first)
    assert isinstance(rows, np.ndarray) and numpy_rows(first) is rows
    rows[2, 1] = 7
    assert int(first[2, 1]) == 7  # (the same memory)
    second = torch.zeros((2, 3), dtype=torch.int32)
    assert numpy_rows(second) is not rows and numpy_rows(second).shape == (2, 3)
    array = np.zeros((2, 3), dtype=np.int32)
    assert numpy_rows(array) is array
    grad = torch.zeros((2, 3), requires_grad=True)
    assert numpy_rows(grad) is grad  # (torch refuses .numpy() there: the matcher copies)
