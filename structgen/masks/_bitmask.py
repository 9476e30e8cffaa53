"""Packed int32 token bitmasks: allocate, fill from a boolean, apply to logits.

Format (shared with xgrammar and llguidance, so masks are interchangeable): bit `j` of word `i`
set ⇔ token `32*i + j` allowed. Applying is vectorised on the logits' device: the words are
expanded to bits with one shift-and-and over a `[batch, words, 32]` view, never a Python loop over
the vocabulary.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "allocate_bitmask",
    "apply_bitmask",
    "bitmask_words",
    "pack_bool_mask",
    "unpack_bitmask",
    "without_tokens",
]


def bitmask_words(vocab_size: int) -> int:
    """Number of int32 words per row for `vocab_size` tokens."""
    return (vocab_size + 31) // 32


def allocate_bitmask(
    batch: int, vocab_size: int, *, backend: str = "torch", device: Any = None
) -> Any:
    """A zeroed int32 bitmask `[batch, ceil(vocab_size/32)]` (torch by default, or numpy)."""
    shape = (batch, bitmask_words(vocab_size))
    if backend == "numpy":
        return np.zeros(shape, dtype=np.int32)
    if backend != "torch":
        raise ValueError(f"backend must be 'torch' or 'numpy', not {backend!r}")
    import torch

    warm_numpy_bridge()
    return torch.zeros(shape, dtype=torch.int32, device=device)


#: the last bitmask tensor filled through `numpy_rows`, and its memory as numpy (one slot)
_ROWS: tuple[Any, Any] | None = None


def numpy_rows(bitmask: Any) -> Any:
    """A batch bitmask as numpy where it is a CPU tensor (the same memory), else itself: what a
    serving backend hands `Matcher.fill_bitmask`. An engine fills one tensor row by row (vLLM
    the same one every step): its view is made once for all of them, where each fill's
    `.numpy()` cost ~2 µs, and ~60 µs in the first fill of a step after a compile (torch's code
    gone from the caches). The slot keeps the last tensor alive until another comes."""
    global _ROWS
    known = _ROWS
    if known is not None and known[0] is bitmask:
        return known[1]
    if isinstance(bitmask, np.ndarray) or not bitmask.is_cpu or bitmask.requires_grad:
        return bitmask
    rows = bitmask.numpy()
    _ROWS = (bitmask, rows)
    return rows


_BRIDGE_WARM = False


def warm_numpy_bridge() -> None:
    """Cross torch's numpy bridge once in each direction (`.numpy()`, `torch.from_numpy`).

    Each direction's first use in a process costs 0.15-0.3 ms (torch sets its numpy support up
    lazily), and a matcher's first `fill_bitmask` would pay it inside the first batch step of a
    server: whoever allocates the bitmask pays it up front instead (start-up)."""
    global _BRIDGE_WARM
    if _BRIDGE_WARM:
        return
    import torch

    torch.from_numpy(np.zeros(1, dtype=np.int32)).numpy()
    _BRIDGE_WARM = True


def pack_bool_mask(allowed: npt.NDArray[np.bool_]) -> npt.NDArray[np.int32]:
    """Pack a bool array [n] into int32 words (little-endian bit order within each word)."""
    words = bitmask_words(len(allowed))
    padded = np.zeros(words * 32, dtype=bool)
    padded[: len(allowed)] = allowed
    packed = np.packbits(padded, bitorder="little")
    return packed.view("<i4").astype(np.int32, copy=False)


def unpack_bitmask(row: Any, vocab_size: int) -> npt.NDArray[np.bool_]:
    """The bool array [vocab_size] of one bitmask row (numpy or torch, any device)."""
    if not isinstance(row, np.ndarray):
        row = row.detach().cpu().numpy()
    data = np.ascontiguousarray(row, dtype="<i4").view(np.uint8)
    return np.unpackbits(data, bitorder="little")[:vocab_size].astype(bool)


_SHIFTS: dict[Any, Any] = {}


def without_tokens(row: npt.NDArray[np.int32], ids: Any) -> npt.NDArray[np.int32]:
    """A copy of the packed mask `row` with the tokens `ids` cleared (for guards that refuse a
    few tokens of a cached mask, which must stay untouched)."""
    out = row.copy()
    ids = np.asarray(ids, dtype=np.int64)
    np.bitwise_and.at(
        out.view(np.uint32), ids >> 5, ~(np.uint32(1) << (ids & 31).astype(np.uint32))
    )
    return out


def apply_bitmask(logits: Any, bitmask: Any, *, indices: Any = None) -> Any:
    """Set disallowed logits to -inf, in place, on the logits' device; returns `logits`.

    `logits` is `[batch, vocab]` (or `[vocab]` with a one-row bitmask), torch or numpy. The
    bitmask may be wider than the logits (padding ids) or narrower (ids past it are disallowed).
    `indices` selects the logits rows the bitmask rows apply to (default: all, in order).
    """
    if isinstance(logits, np.ndarray):
        return _apply_numpy(logits, np.asarray(bitmask), indices)
    import torch

    squeeze = logits.dim() == 1
    target = logits.unsqueeze(0) if squeeze else logits
    mask = bitmask if bitmask.dim() == 2 else bitmask.unsqueeze(0)
    if mask.device != target.device:
        mask = mask.to(target.device, non_blocking=True)
    key = target.device
    shifts = _SHIFTS.get(key)
    if shifts is None:
        shifts = torch.arange(32, dtype=torch.int32, device=target.device)
        _SHIFTS[key] = shifts
    vocab = target.shape[-1]
    bits = (mask.unsqueeze(-1) >> shifts) & 1  # [rows, words, 32]
    allowed = bits.reshape(mask.shape[0], -1).bool()
    if allowed.shape[1] < vocab:
        pad = torch.zeros(
            (allowed.shape[0], vocab - allowed.shape[1]), dtype=torch.bool, device=target.device
        )
        allowed = torch.cat([allowed, pad], dim=1)
    allowed = allowed[:, :vocab]
    if indices is None:
        target.masked_fill_(~allowed, float("-inf"))
    else:
        idx = torch.as_tensor(indices, device=target.device, dtype=torch.long)
        rows = target[idx]
        rows.masked_fill_(~allowed, float("-inf"))
        target[idx] = rows
    return logits


def _apply_numpy(
    logits: npt.NDArray[Any], bitmask: npt.NDArray[Any], indices: Any
) -> npt.NDArray[Any]:
    target = logits[None, :] if logits.ndim == 1 else logits
    mask = bitmask if bitmask.ndim == 2 else bitmask[None, :]
    vocab = target.shape[-1]
    data = np.ascontiguousarray(mask, dtype="<i4").view(np.uint8)
    allowed = np.unpackbits(data, axis=1, bitorder="little").astype(bool)
    if allowed.shape[1] < vocab:
        allowed = np.pad(allowed, ((0, 0), (0, vocab - allowed.shape[1])))
    allowed = allowed[:, :vocab]
    rows = range(target.shape[0]) if indices is None else list(indices)
    for mask_row, logit_row in enumerate(rows):
        target[logit_row, ~allowed[mask_row]] = -np.inf
    return logits
