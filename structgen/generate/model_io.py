"""The model boundary: one forward over a left-padded chunk, and KV-cache tensor helpers.

Every forward of the loop — prefill, a decode step, a jump-forward chunk, the suffix after a
cached prefix — is the same operation: append a chunk of new tokens per row to the sequences in
the cache. Rows feed different numbers of tokens, so each row's chunk is *left*-padded to the
longest one; the pads get attention-mask 0, so they become masked holes in the cache that no
later token attends to. Position ids count only real tokens (the sum of the mask so far), so a
hole shifts nothing. Because the last column is always a real token, `logits_to_keep=1` gives
each row's next-token logits.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "ForwardKeywords",
    "ModelRunner",
    "cache_from_tensors",
    "cache_tensors",
    "new_cache",
]

KV = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True, slots=True)
class ForwardKeywords:
    """The keyword names a model's (or decoder's) `forward` understands; they vary by version."""

    cache: str
    keep: str | None
    cache_position: bool

    @classmethod
    def of(cls, module: Any) -> ForwardKeywords:
        params = inspect.signature(module.forward).parameters
        return cls(
            cache="cache" if "cache" in params else "past_key_values",
            keep=next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None),
            cache_position="cache_position" in params,
        )


def new_cache(model: Any) -> Any:
    """An empty `DynamicCache` for `model`."""
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # older transformers: no config argument
        return DynamicCache()


class ModelRunner:
    """Holds the model and the keyword names its `forward` understands."""

    def __init__(self, model: Any, pad_token_id: int, *, kv_cache: str | None = None) -> None:
        self.model = model
        self.pad_token_id = pad_token_id
        self.keywords = ForwardKeywords.of(model)
        self.device: torch.device = next(model.parameters()).device
        #: how the KV cache stores keys and values (None: the model's dtype; "int8")
        self.kv_cache = kv_cache
        if kv_cache is not None:
            self.new_cache()  # (an unsupported mode or model fails here, not mid-request)

    def new_cache(self) -> Any:
        cache = new_cache(self.model)
        if self.kv_cache is not None:
            from structgen.generate.quantize import quantize_cache

            cache = quantize_cache(cache, self.kv_cache)
        return cache

    def feed(
        self,
        chunks: Sequence[Sequence[int]],
        cache: Any,
        attention_mask: torch.Tensor,
        next_positions: list[int],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append one left-padded chunk per row; returns (last logits [batch, vocab], new mask).

        `attention_mask` [batch, cached] covers what is in `cache`; `next_positions[row]` is the
        number of real tokens of the row so far (updated in place).
        """
        width = max(len(c) for c in chunks)
        rows = len(chunks)
        ids = torch.full((rows, width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((rows, width), dtype=torch.long)
        positions = torch.zeros((rows, width), dtype=torch.long)
        for row, chunk in enumerate(chunks):
            n = len(chunk)
            start = next_positions[row]
            ids[row, width - n :] = torch.tensor(chunk, dtype=torch.long)
            mask[row, width - n :] = 1
            positions[row, : width - n] = start  # pads: any position, they are masked
            positions[row, width - n :] = torch.arange(start, start + n)
            next_positions[row] = start + n
        device = self.device
        full_mask = torch.cat([attention_mask, mask.to(device, non_blocking=True)], dim=1)
        kwargs: dict[str, Any] = {
            "input_ids": ids.to(device, non_blocking=True),
            "attention_mask": full_mask,
            "position_ids": positions.to(device, non_blocking=True),
            self.keywords.cache: cache,
            "use_cache": True,
        }
        if self.keywords.keep is not None:
            kwargs[self.keywords.keep] = 1
        if self.keywords.cache_position:
            cached = attention_mask.shape[1]
            kwargs["cache_position"] = torch.arange(cached, cached + width, device=device)
        out = self.model(**kwargs)
        return out.logits[:, -1, :].float(), full_mask


def cache_tensors(cache: Any) -> KV:
    """The per-layer (keys, values) tensors [batch, heads, seq, dim] of a `DynamicCache`."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [(layer.keys, layer.values) for layer in layers]
    return list(zip(cache.key_cache, cache.value_cache))  # transformers < 4.56


def cache_from_tensors(runner: ModelRunner, kv: KV, *, length: int, batch: int) -> Any:
    """A fresh `DynamicCache` holding the first `length` positions of `kv`, repeated `batch` times.

    Slicing and `expand` make views; the cache's first `update` concatenates into new tensors,
    so the source tensors (a prefix-cache entry) are never written.
    """
    cache = runner.new_cache()
    for layer, (keys, values) in enumerate(kv):
        k = keys[:, :, :length, :].expand(batch, -1, -1, -1).contiguous()
        v = values[:, :, :length, :].expand(batch, -1, -1, -1).contiguous()
        cache.update(k, v, layer)
    return cache


def has_sliding_layers(cache: Any) -> bool:
    """Sliding-window caches drop old positions; prefix reuse is off for them."""
    return any(getattr(layer, "is_sliding", False) for layer in getattr(cache, "layers", []))
