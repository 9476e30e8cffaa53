"""`DecodeBatch`: one batch of requests from prefill to the last token.

Each `step()` is one forward pass for every unfinished row:

1. feed each row's pending tokens (the prompt at prefill; afterwards the last sampled token plus
   any jump-forward tokens) as one left-padded chunk (`model_io.ModelRunner.feed`);
2. while the device runs that forward (CUDA kernels are queued asynchronously), fill the grammar
   bitmasks on the host — the matchers already hold every token fed in step 1;
3. copy the bitmask to the device, apply it to the logits there, apply the sampling rules and
   draw; the chosen ids are the only data that comes back to the host;
4. accept the ids into the matchers, the text trackers and the metrics; ask each matcher for
   forced tokens (jump forward) and queue them for the next forward; drop finished rows from
   the batch (and their rows of the KV cache).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from structgen.generate.model_io import (
    ModelRunner,
    cache_from_tensors,
    cache_tensors,
    has_sliding_layers,
)
from structgen.generate.params import SamplingParams
from structgen.generate.prefix_cache import PrefixCache
from structgen.generate.requests import Request
from structgen.generate.results import FinishReason, GenerationResult, RequestMetrics
from structgen.generate.sampling import PenaltyState, SamplingTensors, choose_tokens
from structgen.generate.text import TextTracker
from structgen.masks import apply_bitmask, bitmask_words
from structgen.matcher import Matcher
from structgen.vocab import Vocabulary

__all__ = ["DecodeBatch"]


@dataclass(slots=True)
class _Row:
    """The mutable state of one request inside a batch."""

    index: int
    prompt: tuple[int, ...]
    params: SamplingParams
    matcher: Matcher | None
    generator: torch.Generator | None
    text: TextTracker
    output: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    finish: FinishReason | None = None
    first_token_at: float = 0.0
    last_token_at: float = 0.0
    forward_passes: int = 0
    forced_tokens: int = 0
    cached_tokens: int = 0


class DecodeBatch:
    """Runs a list of checked requests together; `results` fills in as rows finish."""

    def __init__(
        self,
        runner: ModelRunner,
        vocab: Vocabulary,
        requests: Sequence[Request],
        *,
        eos_token_ids: frozenset[int],
        context_length: int | None,
        prefix_cache: PrefixCache | None,
        jump_forward: bool,
    ) -> None:
        self._runner = runner
        self._vocab = vocab
        self._eos = eos_token_ids
        self._context = context_length
        self._jump_forward = jump_forward
        self._started = time.perf_counter()
        device = runner.device
        self._rows = [self._make_row(i, r, device) for i, r in enumerate(requests)]
        self.results: list[GenerationResult | None] = [None] * len(requests)
        self._active = list(self._rows)
        self._tensors = SamplingTensors.build([r.params for r in self._active], device)
        self._penalties = (
            PenaltyState([r.prompt for r in self._rows], vocab.size, device)
            if self._tensors.any_penalty
            else None
        )
        self._constrained = any(r.matcher is not None for r in self._rows)
        words = bitmask_words(vocab.size)
        pin = device.type == "cuda"
        self._host_mask = torch.full((len(self._rows), words), -1, dtype=torch.int32)
        if pin:
            self._host_mask = self._host_mask.pin_memory()
        self._host_mask_np = self._host_mask.numpy()
        self._device_mask = self._host_mask.to(device) if pin else self._host_mask
        self._positions = [0] * len(self._rows)
        self._cache, self._attention, start = self._start_cache(prefix_cache)
        for row in self._rows:  # the first step feeds the rest of the prompt (+ forced tokens)
            row.pending = list(row.prompt[start:])
            self._queue_forced(row)

    # ------------------------------------------------------------------ setup

    def _make_row(self, index: int, request: Request, device: Any) -> _Row:
        params = request.params
        generator = None
        if not params.greedy:
            seed = params.seed
            if seed is None:  # follow torch's global seed, so torch.manual_seed reproduces runs
                seed = int(torch.randint(0, 2**62, (1,)).item())
            generator = torch.Generator(device=device).manual_seed(seed)
        matcher = Matcher(request.grammar) if request.grammar is not None else None
        return _Row(index, request.prompt_ids, params, matcher, generator, TextTracker(params.stop))

    def _start_cache(self, prefix_cache: PrefixCache | None) -> tuple[Any, torch.Tensor, int]:
        """(cache, attention mask, positions already in it): empty, or a shared cached prefix.

        The prefix is the longest run of tokens every row starts with (leaving each row at least
        one token to feed). On a cache miss it is prefilled alone, once, and stored; on a hit its
        keys and values are copied in and those tokens are not run through the model again.
        """
        runner = self._runner
        rows = len(self._rows)
        device = runner.device
        cache = runner.new_cache()
        empty = torch.zeros((rows, 0), dtype=torch.long, device=device)
        if prefix_cache is None or prefix_cache.max_entries == 0 or has_sliding_layers(cache):
            return cache, empty, 0
        common = _common_prefix([r.prompt for r in self._rows])
        common = common[: min(len(r.prompt) for r in self._rows) - 1]
        if len(common) < prefix_cache.min_tokens:
            return cache, empty, 0
        hit = prefix_cache.lookup(common)
        if hit is None:
            first = runner.new_cache()
            one = torch.zeros((1, 0), dtype=torch.long, device=device)
            runner.feed([common], first, one, [0])
            kv, length = cache_tensors(first), len(common)
            prefix_cache.store(common, kv)
            for row in self._rows:
                row.forward_passes += 1
        else:
            kv, length = hit.kv, hit.length
            for row in self._rows:
                row.cached_tokens = length
        self._positions = [length] * rows
        cache = cache_from_tensors(runner, kv, length=length, batch=rows)
        attention = torch.ones((rows, length), dtype=torch.long, device=device)
        return cache, attention, length

    # ------------------------------------------------------------------ the loop

    @property
    def done(self) -> bool:
        return not self._active

    def step(self) -> None:
        """One forward pass for every unfinished row (see the module docstring)."""
        if not self._active:
            return
        chunks = [r.pending for r in self._active]
        logits, self._attention = self._runner.feed(
            chunks, self._cache, self._attention, self._positions
        )
        for row in self._active:
            row.forward_passes += 1
        mask = self._fill_masks()  # host work, overlapping the forward on CUDA
        if mask is not None:
            apply_bitmask(logits, mask)
        generators = [r.generator for r in self._active]
        chosen = choose_tokens(logits, self._tensors, generators, self._penalties)
        ids = chosen.tolist()  # the only device → host transfer of the step
        now = time.perf_counter()
        forced: list[tuple[int, int]] = []
        for j, (row, token) in enumerate(zip(self._active, ids)):
            self._accept(row, int(token), now)
            if row.finish is None:
                before = len(row.output)
                self._queue_forced(row)
                forced.extend((j, t) for t in row.output[before:])
        if self._penalties is not None:
            self._count(chosen, forced)
        self._drop_finished()

    def _fill_masks(self) -> torch.Tensor | None:
        if not self._constrained:
            return None
        host = self._host_mask_np
        for j, row in enumerate(self._active):
            if row.matcher is not None:
                row.matcher.fill_bitmask(host, j)
            else:
                host[j] = -1
        n = len(self._active)
        if self._device_mask is self._host_mask:
            return self._host_mask[:n]
        self._device_mask[:n].copy_(self._host_mask[:n], non_blocking=True)
        return self._device_mask[:n]

    def _accept(self, row: _Row, token: int, now: float) -> None:
        if not row.first_token_at:
            row.first_token_at = now
        row.last_token_at = now
        row.output.append(token)
        row.pending = [token]
        if row.matcher is not None:
            if not row.matcher.accept_token(token):
                row.finish = "grammar"
                return
            if row.matcher.is_terminated():
                row.finish = "eos"
                return
        elif token in self._eos and not row.params.ignore_eos:
            row.finish = "eos"
            return
        if row.text.push(self._token_bytes(token)):
            row.finish = "stop"
        elif len(row.output) >= row.params.max_new_tokens or self._context_full(row):
            row.finish = "length"

    def _queue_forced(self, row: _Row) -> None:
        """Jump forward: accept the grammar's forced tokens now, feed them with the next pass."""
        if not self._jump_forward or row.matcher is None or row.finish is not None:
            return
        budget = row.params.max_new_tokens - len(row.output) - 1  # leave room for one draw
        if self._context is not None:
            budget = min(budget, self._context - self._row_length(row) - 1)
        if budget <= 0:
            return
        tokens = row.matcher.forced_tokens()[:budget]
        if not tokens:
            return
        accepted = row.matcher.accept_tokens(tokens)
        tokens = tokens[:accepted]
        row.output.extend(tokens)
        row.pending.extend(tokens)
        row.forced_tokens += len(tokens)
        for token in tokens:
            if row.text.push(self._token_bytes(token)):
                row.finish = "stop"
                break

    def _token_bytes(self, token: int) -> bytes:
        return self._vocab.token_bytes(token) if 0 <= token < self._vocab.size else b""

    def _row_length(self, row: _Row) -> int:
        return len(row.prompt) + len(row.output)

    def _context_full(self, row: _Row) -> bool:
        return self._context is not None and self._row_length(row) >= self._context

    def _count(self, chosen: torch.Tensor, forced: list[tuple[int, int]]) -> None:
        assert self._penalties is not None
        device = chosen.device
        rows = torch.arange(len(self._active), device=device)
        self._penalties.add(rows, chosen)
        if forced:
            extra = torch.tensor(forced, dtype=torch.long, device=device)
            self._penalties.add(extra[:, 0], extra[:, 1])

    def _drop_finished(self) -> None:
        finished = [r for r in self._active if r.finish is not None]
        if not finished:
            return
        for row in finished:
            self._finish(row)
        keep = [j for j, r in enumerate(self._active) if r.finish is None]
        self._active = [self._active[j] for j in keep]
        if not self._active:
            self._cache = None
            return
        index = torch.tensor(keep, dtype=torch.long, device=self._runner.device)
        self._cache.batch_select_indices(index)
        self._attention = self._attention[index]
        self._positions = [self._positions[j] for j in keep]
        self._tensors = SamplingTensors.build([r.params for r in self._active], self._runner.device)
        if self._penalties is not None:
            self._penalties.select(index)

    def _finish(self, row: _Row) -> None:
        assert row.finish is not None
        row.text.finish()
        end = time.perf_counter()
        first = row.first_token_at or end
        n = len(row.output)
        per_token = (row.last_token_at - first) / (n - 1) if n > 1 else 0.0
        metrics = RequestMetrics(
            prompt_tokens=len(row.prompt),
            output_tokens=n,
            time_to_first_token=first - self._started,
            time_per_output_token=per_token,
            total_time=end - self._started,
            forward_passes=row.forward_passes,
            forced_tokens=row.forced_tokens,
            cached_prompt_tokens=row.cached_tokens,
        )
        self.results[row.index] = GenerationResult(
            text=row.text.text,
            token_ids=tuple(row.output),
            finish_reason=row.finish,
            metrics=metrics,
        )

    def run(self) -> list[GenerationResult]:
        while not self.done:
            self.step()
        return [r for r in self.results if r is not None]

    # ------------------------------------------------------------------ streaming

    def row_text_delta(self, index: int, *, final: bool = False) -> str:
        return self._rows[index].text.delta(final=final)


def _common_prefix(prompts: Sequence[Sequence[int]]) -> list[int]:
    first = prompts[0]
    n = min(len(p) for p in prompts)
    i = 0
    while i < n and all(p[i] == first[i] for p in prompts):
        i += 1
    return list(first[:i])
