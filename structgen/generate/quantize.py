"""Weight-only int8 (and int4) quantization of a `transformers` model for the own loop (CPU).

Decoding reads every weight once per token, so it is bound by memory bandwidth: a quarter of
the bytes per weight is faster as well as smaller. Each `nn.Linear` (and the input embedding,
whose int8 rows the tied output head shares) keeps its weight as int8 with one scale per output
row (symmetric, per channel); activations stay in floating point. The matrix product is torch's
`_weight_int8pack_mm` (bf16 activations, int8 weights), the kernel torch ships for weight-only
int8 on the CPU; no extra package is needed.

`quantize="int4"` puts the linear layers in 4 bits instead — groups of 32 inputs, each with
a scale and an offset, multiplied by torch's CPU int4 kernel (`_weight_int4pack_mm_for_cpu`) —
and keeps the embedding and the tied head int8 (a lookup table, and on small models most of the
weights). Activation quantization (torch's `quantize_dynamic`) is not used: on SmolLM2 it raises the
perplexity of a fixed text by 240-390%; weight-only int8 changes it by under 1%. On a GPU the
kernel is not there: `quantize_weights` refuses CUDA models with a clear error (see
docs/guide/quantization.md).
"""

from __future__ import annotations

from typing import Any

import torch

from structgen.errors import GenerationError

__all__ = [
    "KV_CACHE_MODES",
    "QUANTIZE_MODES",
    "Int4Linear",
    "Int8Embedding",
    "Int8Linear",
    "cache_bytes",
    "int4_available",
    "int8_cache_layer_class",
    "quantize_cache",
    "quantize_weights",
    "weight_bytes",
]

QUANTIZE_MODES = ("int8", "int4")
#: weights per int4 group (one scale and offset each)
INT4_GROUP = 32


def _int8_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 rows of `weight` and their scales (one per row)."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q.contiguous(), scale


class Int8Linear(torch.nn.Module):
    """`nn.Linear` with int8 weights (per output channel); same inputs and outputs."""

    weight_int8: torch.Tensor
    scale: torch.Tensor

    def __init__(
        self, linear: torch.nn.Linear, shared: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> None:
        super().__init__()
        q, scale = shared if shared is not None else _int8_rows(linear.weight)
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.register_buffer("weight_int8", q)
        self.register_buffer("scale", scale.to(torch.bfloat16))
        self.bias = (
            None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone())
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        y = torch._weight_int8pack_mm(rows, self.weight_int8, self.scale)
        y = y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def _int4_groups(weight: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric 4-bit codes of `weight` [N, K] in groups of `group` along K (as int32 in
    0..15, what torch's packing takes) and each group's (scale, zero) as torch's CPU int4 kernel
    reads them: [K / group, N, 2], the weight being `(code - 8) * scale + zero`."""
    w = weight.detach().float()
    n, k = w.shape
    groups = w.reshape(n, k // group, group)
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)
    scale = ((high - low) / 15).clamp(min=1e-8)
    codes = torch.round((groups - low[..., None]) / scale[..., None]).clamp(0, 15)
    zero = low + 8 * scale
    scales_and_zeros = torch.stack([scale, zero], dim=-1).transpose(0, 1).contiguous()
    return codes.to(torch.int32).reshape(n, k), scales_and_zeros.to(torch.bfloat16)


def int4_available() -> bool:
    """Whether this torch has the CPU int4 weight kernel (`_weight_int4pack_mm_for_cpu`)."""
    aten = torch.ops.aten
    return hasattr(aten, "_weight_int4pack_mm_for_cpu") and hasattr(
        aten, "_convert_weight_to_int4pack_for_cpu"
    )


class Int4Linear(torch.nn.Module):
    """`nn.Linear` with 4-bit weights in groups of `INT4_GROUP` inputs (a scale and an offset
    per group), multiplied by torch's CPU int4 kernel; same inputs and outputs."""

    weight_int4: torch.Tensor
    scales_and_zeros: torch.Tensor

    def __init__(self, linear: torch.nn.Linear, group: int = INT4_GROUP) -> None:
        super().__init__()
        codes, scales_and_zeros = _int4_groups(linear.weight, group)
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.group = group
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
        self.register_buffer("weight_int4", packed)
        self.register_buffer("scales_and_zeros", scales_and_zeros)
        self.bias = (
            None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone())
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        y: torch.Tensor = torch.ops.aten._weight_int4pack_mm_for_cpu(
            rows, self.weight_int4, self.group, self.scales_and_zeros
        )
        y = y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int4"


class Int8Embedding(torch.nn.Module):
    """`nn.Embedding` with int8 rows: a lookup reads int8 and scales the rows it returns."""

    weight_int8: torch.Tensor
    scale: torch.Tensor

    def __init__(self, embedding: torch.nn.Embedding) -> None:
        super().__init__()
        q, scale = _int8_rows(embedding.weight)
        self.num_embeddings, self.embedding_dim = q.shape
        self.padding_idx = embedding.padding_idx
        self.dtype = embedding.weight.dtype
        self.register_buffer("weight_int8", q)
        self.register_buffer("scale", scale)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = self.weight_int8[ids].to(self.dtype)
        return rows * self.scale[ids].unsqueeze(-1).to(self.dtype)


def weight_bytes(model: Any) -> int:
    """The bytes of a model's parameters and buffers, each tensor counted once (tied ones too)."""
    seen: set[int] = set()
    total = 0
    for t in [*model.parameters(), *model.buffers()]:
        key = t.data_ptr()
        if key in seen:
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    return total


def quantize_weights(model: Any, mode: str) -> Any:
    """Quantize `model`'s weights in place (`mode`: "int8" or "int4") and return it.

    Every `nn.Linear` becomes an `Int8Linear` ("int4": an `Int4Linear`, where its inputs come
    in whole groups); the input embedding becomes an `Int8Embedding`, and an output head tied
    to it shares its int8 rows (in both modes: a lookup table and the head it is tied to stay
    int8). Raises `GenerationError` for an unknown mode, a model not on the CPU, or a torch
    without the kernel.
    """
    if mode not in QUANTIZE_MODES:
        raise GenerationError(
            f"quantize must be one of {', '.join(map(repr, QUANTIZE_MODES))}, got {mode!r}"
        )
    try:
        device = next(model.parameters()).device
    except StopIteration:
        raise GenerationError("quantize: the model has no parameters") from None
    if device.type != "cpu":
        raise GenerationError(
            f"quantize={mode!r} runs on the CPU (torch's weight-only kernels); this model is on"
            f" {device}. On a GPU, load the model quantized (for example with torchao) and pass"
            " it without quantize="
        )
    if not hasattr(torch, "_weight_int8pack_mm"):
        raise GenerationError("quantize='int8' needs torch >= 2.3 (torch._weight_int8pack_mm)")
    if mode == "int4" and not int4_available():
        raise GenerationError(
            "quantize='int4' needs torch's CPU int4 kernel (torch >= 2.6: "
            "aten._weight_int4pack_mm_for_cpu); use quantize='int8'"
        )
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    tied = (
        isinstance(embeddings, torch.nn.Embedding)
        and isinstance(head, torch.nn.Linear)
        and head.weight.data_ptr() == embeddings.weight.data_ptr()
    )
    replaced: dict[int, torch.nn.Module] = {}
    if isinstance(embeddings, torch.nn.Embedding):
        int8_embeddings = Int8Embedding(embeddings)
        replaced[id(embeddings)] = int8_embeddings
        if tied:
            assert isinstance(head, torch.nn.Linear)
            shared = (int8_embeddings.weight_int8, int8_embeddings.scale)
            replaced[id(head)] = Int8Linear(head, shared=shared)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            new = replaced.get(id(child))
            if new is None and isinstance(child, torch.nn.Linear):
                whole = child.in_features % INT4_GROUP == 0 and child.out_features % 8 == 0
                layer = Int4Linear(child) if mode == "int4" and whole else Int8Linear(child)
                new = replaced[id(child)] = layer
            if new is not None:
                setattr(parent, name, new)
    if tied and hasattr(model, "config"):
        model.config.tie_word_embeddings = False  # (nothing to re-tie: the rows are shared)
    model.structgen_quantized = mode
    return model


# ----------------------------------------------------------------------------- KV cache

KV_CACHE_MODES = ("int8",)


def _int8_tokens(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 of `x` [batch, heads, seq, dim] with one scale per (row, head, token)."""
    scale = (x.abs().amax(dim=-1, keepdim=True).float() / 127.0).clamp(min=1e-12)
    return torch.round(x.float() / scale).clamp(-127, 127).to(torch.int8), scale


def _int8_cache_layer_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class Int8CacheLayer(DynamicLayer):  # type: ignore[misc, valid-type, no-untyped-call]
        """A `DynamicLayer` whose keys and values are stored as int8 with one scale per
        (row, head, token). Reading `keys`/`values` gives them back in the model's dtype, and
        assigning them quantizes: every operation the loop does on a cache (add rows, drop
        columns, select rows, crop) works unchanged, and re-quantizing what was dequantized
        gives the same int8 values (the largest element of each token maps to ±127 again).
        Attention always sees the quantized values, so a prefix-cache hit (stored dequantized,
        quantized again) is token-identical to a cold run."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._q: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None
            self._dtype = torch.float32
            super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]

        def _get(self, which: int) -> Any:
            if self._q is None:
                return None
            q, s = self._q[2 * which], self._q[2 * which + 1]
            return (q.float() * s).to(self._dtype)

        def _set(self, which: int, value: Any) -> None:
            if value is None or value.numel() == 0:  # (reset, or lazy_initialization's empty)
                if value is not None:
                    self._dtype = value.dtype
                self._q = None
                return
            self._dtype = value.dtype
            q, s = _int8_tokens(value)
            parts = list(self._q) if self._q is not None else [q, s, q, s]
            parts[2 * which], parts[2 * which + 1] = q, s
            self._q = (parts[0], parts[1], parts[2], parts[3])

        keys = property(lambda self: self._get(0), lambda self, v: self._set(0, v))
        values = property(lambda self: self._get(1), lambda self, v: self._set(1, v))

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            self._dtype = key_states.dtype
            kq, ks = _int8_tokens(key_states)
            vq, vs = _int8_tokens(value_states)
            if self._q is not None and self._q[0].numel():
                old = self._q
                kq, ks = torch.cat([old[0], kq], dim=-2), torch.cat([old[1], ks], dim=-2)
                vq, vs = torch.cat([old[2], vq], dim=-2), torch.cat([old[3], vs], dim=-2)
            self._q = (kq, ks, vq, vs)
            return self.keys, self.values

        def get_seq_length(self) -> int:
            if not self.is_initialized or self._q is None or self._q[0].numel() == 0:
                return 0
            return int(self._q[0].shape[-2])

        def memory_bytes(self) -> int:
            """The bytes this layer holds (int8 values and their scales)."""
            return 0 if self._q is None else sum(t.numel() * t.element_size() for t in self._q)

    return Int8CacheLayer


_LAYER_CLASS: list[type] = []


def int8_cache_layer_class() -> type:
    """The int8 cache layer class (built on first use: it subclasses transformers' layer)."""
    if not _LAYER_CLASS:
        _LAYER_CLASS.append(_int8_cache_layer_class())
    return _LAYER_CLASS[0]


def quantize_cache(cache: Any, mode: str) -> Any:
    """`cache` (an empty `DynamicCache`) with int8 layers instead of its dynamic ones."""
    if mode not in KV_CACHE_MODES:
        raise GenerationError(
            f"kv_cache must be one of {', '.join(map(repr, KV_CACHE_MODES))}, got {mode!r}"
        )
    from transformers.cache_utils import DynamicLayer

    layer = int8_cache_layer_class()
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise GenerationError("kv_cache='int8' needs transformers >= 4.56 (cache layers)")
    if any(type(x) is not DynamicLayer for x in layers):
        raise GenerationError(
            "kv_cache='int8' supports models whose cache layers are all full attention "
            "(this one has sliding-window or other layers)"
        )
    cache.layers = [layer() for _ in layers]
    if hasattr(cache, "layer_class_to_replicate"):
        cache.layer_class_to_replicate = layer if cache.layer_class_to_replicate else None
    return cache


def cache_bytes(cache: Any) -> int:
    """The bytes a cache's keys and values take (int8 layers: their int8 values and scales)."""
    total = 0
    for layer in getattr(cache, "layers", []):
        count = getattr(layer, "memory_bytes", None)
        if count is not None:
            total += count()
        elif getattr(layer, "keys", None) is not None and layer.keys.numel():
            total += sum(t.numel() * t.element_size() for t in (layer.keys, layer.values))
    return total
