"""The sampling rules as batched tensor functions, one parameter per row.

Everything here runs on the logits' device with no host round trip; the loop syncs only the
chosen ids. Each function takes `[batch, vocab]` float logits and per-row parameter tensors
(`[batch]`), so a batch can mix greedy, temperature, top-k/top-p/min-p and penalty settings.
Disabled rows use the neutral value (top_k 0, top_p 1, min_p 0, penalty 1 / 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from structgen.generate.params import SamplingParams

__all__ = [
    "PenaltyState",
    "SamplingTensors",
    "apply_min_p",
    "apply_penalties",
    "apply_temperature",
    "apply_top_k",
    "apply_top_p",
    "choose_tokens",
]

_NEG_INF = float("-inf")


def apply_penalties(
    logits: torch.Tensor,
    counts: torch.Tensor,
    seen: torch.Tensor,
    repetition: torch.Tensor,
    frequency: torch.Tensor,
    presence: torch.Tensor,
) -> torch.Tensor:
    """Repetition (over `seen`: prompt and output), frequency and presence (over output `counts`).

    `counts` [batch, vocab] holds how often each token was generated, `seen` [batch, vocab] is
    True for tokens in the prompt or the output. In place; returns `logits`.
    """
    rep = repetition.unsqueeze(1)
    penalised = torch.where(logits > 0, logits / rep, logits * rep)
    logits.copy_(torch.where(seen, penalised, logits))
    logits -= frequency.unsqueeze(1) * counts
    logits -= presence.unsqueeze(1) * (counts > 0).to(logits.dtype)
    return logits


def apply_temperature(logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """Divide each row by its temperature (rows with temperature 0 are left alone: greedy)."""
    safe = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    logits /= safe.unsqueeze(1)
    return logits


def apply_top_k(logits: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """Keep the `k` largest logits of each row (ties at the k-th value are kept); 0 = off."""
    vocab = logits.shape[-1]
    k = torch.where(top_k > 0, top_k.clamp(max=vocab), torch.full_like(top_k, vocab))
    if bool((k >= vocab).all()):
        return logits
    ordered = torch.sort(logits, dim=-1, descending=True).values
    kth = ordered.gather(1, (k - 1).unsqueeze(1))
    logits.masked_fill_(logits < kth, _NEG_INF)
    return logits


def apply_top_p(logits: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose probability reaches `top_p`; 1 = off."""
    if bool((top_p >= 1).all()):
        return logits
    ordered, order = torch.sort(logits, dim=-1, descending=True)
    probs = ordered.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # mass of the strictly more likely tokens
    drop_sorted = before >= top_p.unsqueeze(1)
    drop_sorted[:, 0] = False  # the most likely token always stays
    drop = torch.zeros_like(drop_sorted).scatter_(1, order, drop_sorted)
    logits.masked_fill_(drop, _NEG_INF)
    return logits


def apply_min_p(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Drop tokens whose probability is below `min_p` times the row's top probability; 0 = off."""
    if bool((min_p <= 0).all()):
        return logits
    probs = logits.softmax(dim=-1)
    threshold = probs.max(dim=-1, keepdim=True).values * min_p.unsqueeze(1)
    logits.masked_fill_(probs < threshold, _NEG_INF)
    return logits


@dataclass(slots=True)
class SamplingTensors:
    """The per-row parameters of a batch as device tensors (rebuilt when rows leave)."""

    greedy: torch.Tensor
    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    min_p: torch.Tensor
    repetition: torch.Tensor
    frequency: torch.Tensor
    presence: torch.Tensor
    all_greedy: bool
    any_penalty: bool

    @classmethod
    def build(cls, params: Sequence[SamplingParams], device: Any) -> SamplingTensors:
        def floats(values: list[float]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.float32, device=device)

        return cls(
            greedy=torch.tensor([p.greedy for p in params], dtype=torch.bool, device=device),
            temperature=floats([p.temperature for p in params]),
            top_k=torch.tensor([p.top_k for p in params], dtype=torch.long, device=device),
            top_p=floats([p.top_p for p in params]),
            min_p=floats([p.min_p for p in params]),
            repetition=floats([p.repetition_penalty for p in params]),
            frequency=floats([p.frequency_penalty for p in params]),
            presence=floats([p.presence_penalty for p in params]),
            all_greedy=all(p.greedy for p in params),
            any_penalty=any(p.uses_penalties for p in params),
        )


class PenaltyState:
    """Device-side token counts for the penalties: `counts` (output) and `seen` (prompt+output)."""

    def __init__(self, prompts: Sequence[Sequence[int]], vocab: int, device: Any) -> None:
        self.counts = torch.zeros((len(prompts), vocab), dtype=torch.float32, device=device)
        self.seen = torch.zeros((len(prompts), vocab), dtype=torch.bool, device=device)
        for row, ids in enumerate(prompts):
            index = torch.tensor([i for i in ids if 0 <= i < vocab], dtype=torch.long)
            self.seen[row, index.to(device)] = True

    def add(self, rows: torch.Tensor, tokens: torch.Tensor) -> None:
        """Count `tokens[i]` for row `rows[i]` (a device scatter; no host sync)."""
        ones = torch.ones_like(tokens, dtype=torch.float32)
        self.counts.index_put_((rows, tokens), ones, accumulate=True)
        self.seen[rows, tokens] = True

    def select(self, keep: torch.Tensor) -> None:
        self.counts = self.counts[keep]
        self.seen = self.seen[keep]

    def row(self, index: int) -> PenaltyState:
        """A one-row view (for drawing one row again)."""
        view = PenaltyState.__new__(PenaltyState)
        view.counts = self.counts[index : index + 1]
        view.seen = self.seen[index : index + 1]
        return view


def choose_tokens(
    logits: torch.Tensor,
    params: SamplingTensors,
    generators: Sequence[torch.Generator | None],
    penalties: PenaltyState | None = None,
) -> torch.Tensor:
    """The next token of every row ([batch] long, on the logits' device).

    `logits` must already carry the grammar mask (-inf for disallowed tokens); it is modified.
    `generators[row]` is the row's random generator, None for greedy rows.
    """
    if penalties is not None and params.any_penalty:
        apply_penalties(
            logits,
            penalties.counts,
            penalties.seen,
            params.repetition,
            params.frequency,
            params.presence,
        )
    best = logits.argmax(dim=-1)
    if params.all_greedy:
        return best
    apply_temperature(logits, params.temperature)
    apply_top_k(logits, params.top_k)
    apply_top_p(logits, params.top_p)
    apply_min_p(logits, params.min_p)
    probs = logits.softmax(dim=-1)
    probs = torch.nan_to_num(probs, nan=0.0)  # a fully masked row: fall back to argmax below
    drawn = best.clone()
    for row, generator in enumerate(generators):
        if generator is None:  # a greedy row
            continue
        weights = probs[row]
        drawn[row] = torch.multinomial(weights + (weights.sum() <= 0), 1, generator=generator)[0]
    return torch.where(params.greedy, best, drawn)
