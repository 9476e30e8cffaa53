"""Weight-only int8 (and int4) quantization of a `transformers` model for the own loop.

Decoding reads every weight once per token, so it is bound by memory bandwidth: a quarter of
the bytes per weight is faster as well as smaller. Each `nn.Linear` (and the input embedding,
whose int8 rows the tied output head shares) keeps its weight as int8 with one scale per output
row (symmetric, per channel); activations stay in floating point.

Two backends do the linear layers. On the CPU ("torch"), torch's own weight-only kernels:
`_weight_int8pack_mm` (bf16 activations, int8 weights) and, for `quantize="int4"`, groups of 32
inputs with a scale and an offset each on `_weight_int4pack_mm_for_cpu`; no extra package. On a
GPU ("torchao", the optional extra `structgen[gpu]`, pinned), torchao's weight-only tensors:
int8 per output row, and int4 in groups of 32 on tinygemm's tile-packed kernel
(`aten._weight_int4pack_mm`, which takes bf16: an int4 model on a GPU runs in bf16). In both,
the embedding and a head tied to it stay int8 (a lookup table, and on small models most of the
weights). Activation quantization (torch's `quantize_dynamic`) is not used: on SmolLM2 it raises
the perplexity of a fixed text by 240-390%; weight-only int8 changes it by under 1%. See
docs/guide/quantization.md.
"""

from __future__ import annotations

from typing import Any

import torch

from structgen.errors import GenerationError

__all__ = [
    "KV_CACHE_MODES",
    "QUANTIZE_BACKENDS",
    "QUANTIZE_MODES",
    "TORCHAO_VERSION",
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
        rows = x.reshape(-1, self.in_features)
        if rows.device.type == "cpu":
            y = torch._weight_int8pack_mm(rows.to(torch.bfloat16), self.weight_int8, self.scale)
        else:  # (no int8 kernel outside the CPU in torch: dequantize, as torchao's int8 does)
            y = torch.mm(rows, self.weight_int8.t().to(rows.dtype)) * self.scale.to(rows.dtype)
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


def _plain_tensors(t: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors that hold `t`: itself, or a tensor subclass's inner tensors (torchao's
    quantized weights report their original dtype and shape, not the bytes they hold)."""
    flatten = getattr(t, "__tensor_flatten__", None)
    if flatten is None or type(t) in (torch.Tensor, torch.nn.Parameter):
        return [t]
    names = flatten()[0]
    inner = (getattr(t, name) for name in names)
    return [p for x in inner if isinstance(x, torch.Tensor) for p in _plain_tensors(x)]


def weight_bytes(model: Any) -> int:
    """The bytes of a model's parameters and buffers, each tensor counted once (tied ones too;
    a quantized tensor subclass by the tensors inside it)."""
    seen: set[int] = set()
    total = 0
    for outer in [*model.parameters(), *model.buffers()]:
        for t in _plain_tensors(outer):
            key = t.data_ptr()
            if key in seen:
                continue
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


QUANTIZE_BACKENDS = ("torch", "torchao")
#: the torchao release the GPU path is written and tested against (the `gpu` extra pins it)
TORCHAO_VERSION = "0.17.0"


def _torchao() -> Any:
    """torchao's `quantization` module, or a `GenerationError` saying how to install it."""
    try:
        import torchao.quantization as tq
    except ImportError as exc:
        raise GenerationError(
            "quantize on a GPU uses torchao: pip install 'structgen[gpu]' "
            f"(torchao=={TORCHAO_VERSION}); or quantize on the CPU"
        ) from exc
    return tq


def _check_backend(mode: str, backend: str, device: torch.device) -> None:
    """Refuse what the chosen backend cannot run, with what to do instead."""
    if backend == "torchao":
        _torchao()
        return
    if device.type != "cpu":
        raise GenerationError(
            f"quantize={mode!r} with torch's kernels runs on the CPU; this model is on {device}:"
            " use backend='torchao' (the default on a GPU; pip install 'structgen[gpu]')"
        )
    if not hasattr(torch, "_weight_int8pack_mm"):
        raise GenerationError("quantize='int8' needs torch >= 2.3 (torch._weight_int8pack_mm)")
    if mode == "int4" and not int4_available():
        raise GenerationError(
            "quantize='int4' needs torch's CPU int4 kernel (torch >= 2.6: "
            "aten._weight_int4pack_mm_for_cpu); use quantize='int8'"
        )


def _torchao_linears(model: Any, mode: str) -> None:
    """Quantize `model`'s `nn.Linear` layers with torchao, in place: int8 per output row, or
    int4 in groups of `INT4_GROUP` on tinygemm's tile-packed kernel (bf16 weights) where the
    inputs come in whole groups, int8 elsewhere."""
    tq = _torchao()
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    int4 = {id(m) for m in linears if mode == "int4" and m.in_features % INT4_GROUP == 0}
    if int4:
        config = tq.Int4WeightOnlyConfig(
            group_size=INT4_GROUP, int4_packing_format="tile_packed_to_4d",
            set_inductor_config=False,
        )  # fmt: skip
        tq.quantize_(model, config, filter_fn=lambda m, _name: id(m) in int4)
    int8 = tq.Int8WeightOnlyConfig(version=2, set_inductor_config=False)
    rest = {id(m) for m in linears} - int4
    tq.quantize_(model, int8, filter_fn=lambda m, _name: id(m) in rest)


def quantize_weights(model: Any, mode: str, *, backend: str | None = None) -> Any:
    """Quantize `model`'s weights in place (`mode`: "int8" or "int4") and return it.

    The input embedding becomes an `Int8Embedding`, and an output head tied to it shares its
    int8 rows (in both modes: a lookup table and the head it is tied to stay int8). The other
    `nn.Linear` layers are quantized by `backend`: "torch" (the default on the CPU; torch's
    CPU kernels, `Int8Linear` / `Int4Linear`) or "torchao" (the default elsewhere; torchao's
    weight-only tensors; int4 turns the model into bf16). Raises `GenerationError` for an
    unknown mode or backend, torch's kernels on a GPU, or a kernel or package that is missing.
    """
    if mode not in QUANTIZE_MODES:
        raise GenerationError(
            f"quantize must be one of {', '.join(map(repr, QUANTIZE_MODES))}, got {mode!r}"
        )
    try:
        first = next(model.parameters())
    except StopIteration:
        raise GenerationError("quantize: the model has no parameters") from None
    device = first.device
    if backend is None:
        backend = "torch" if device.type == "cpu" else "torchao"
    if backend not in QUANTIZE_BACKENDS:
        raise GenerationError(
            f"backend must be one of {', '.join(map(repr, QUANTIZE_BACKENDS))}, got {backend!r}"
        )
    _check_backend(mode, backend, device)
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    tied = (
        isinstance(embeddings, torch.nn.Embedding)
        and isinstance(head, torch.nn.Linear)
        and head.weight.data_ptr() == embeddings.weight.data_ptr()
    )
    if backend == "torchao" and mode == "int4" and first.dtype != torch.bfloat16:
        model.to(torch.bfloat16)  # (tinygemm's int4 kernel takes bf16 only; the whole model)
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
            if new is None and backend == "torch" and isinstance(child, torch.nn.Linear):
                whole = child.in_features % INT4_GROUP == 0 and child.out_features % 8 == 0
                layer = Int4Linear(child) if mode == "int4" and whole else Int8Linear(child)
                new = replaced[id(child)] = layer
            if new is not None:
                setattr(parent, name, new)
    if backend == "torchao":
        _torchao_linears(model, mode)
    if tied and hasattr(model, "config"):
        model.config.tie_word_embeddings = False  # (nothing to re-tie: the rows are shared)
    model.structgen_quantized = mode
    model.structgen_quantize_backend = backend
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
