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

`admit()` adds requests to a running batch (continuous batching, used by `scheduler.py`): each new
row gets holes (attention mask 0) under every cache column already there and its prompt as its
pending chunk, so it is prefilled in the same forward as the other rows' decode tokens.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from structgen.generate.finish import finish_after
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
from structgen.matcher import Matcher, fill_bitmasks
from structgen.vocab import Vocabulary

__all__ = ["DecodeBatch"]

#: budget-aware closing draws a row again at most this often per step, then takes its plan
MAX_REDRAWS = 256


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
    closing: bool = False  # budget-aware closing is on (a grammar and close_within_budget)
    closing_redraws: int = 0
    started: float = 0.0  # when the request arrived: the origin of its TTFT and total time


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
        rows = [self._make_row(i, r, device) for i, r in enumerate(requests)]
        for row in rows:
            row.started = self._started
        # Rows by index, until `release`: a batch that keeps admitting never empties, so what
        # its owner has collected must go (or memory grows with every request served).
        self._rows: dict[int, _Row] = {r.index: r for r in rows}
        self._next_index = len(rows)
        self.results: dict[int, GenerationResult] = {}  # finished rows, by index
        self._active = list(rows)
        self._tensors = SamplingTensors.build([r.params for r in self._active], device)
        self._penalties = (
            PenaltyState([r.prompt for r in rows], vocab.size, device)
            if self._tensors.any_penalty
            else None
        )
        self._constrained = any(r.matcher is not None for r in rows)
        self._alloc_masks(len(rows))
        self._positions = [0] * len(rows)
        self._cache, self._attention, start = self._start_cache(prefix_cache)
        for row in rows:  # the first step feeds the rest of the prompt (+ forced tokens)
            row.pending = list(row.prompt[start:])
            self._queue_forced(row)

    # ------------------------------------------------------------------ setup

    def _alloc_masks(self, rows: int) -> None:
        """The reused host bitmask buffer (pinned on CUDA) and its device twin, `rows` rows."""
        device = self._runner.device
        pin = device.type == "cuda"
        self._host_mask = torch.full((rows, bitmask_words(self._vocab.size)), -1, dtype=torch.int32)
        if pin:
            self._host_mask = self._host_mask.pin_memory()
        self._host_mask_np = self._host_mask.numpy()
        self._device_mask = self._host_mask.to(device) if pin else self._host_mask

    def _make_row(self, index: int, request: Request, device: Any) -> _Row:
        params = request.params
        generator = None
        if not params.greedy:
            seed = params.seed
            if seed is None:  # follow torch's global seed, so torch.manual_seed reproduces runs
                seed = int(torch.randint(0, 2**62, (1,)).item())
            generator = torch.Generator(device=device).manual_seed(seed)
        matcher = Matcher(request.grammar) if request.grammar is not None else None
        row = _Row(index, request.prompt_ids, params, matcher, generator, TextTracker(params.stop))
        # closing needs a plan from the start (none found: the budget cannot be kept, so off)
        row.closing = (
            matcher is not None
            and params.close_within_budget
            and matcher.tokens_to_finish() is not None
        )
        return row

    def _start_cache(self, prefix_cache: PrefixCache | None) -> tuple[Any, torch.Tensor, int]:
        """(cache, attention mask, positions already in it): empty, or a shared cached prefix.

        The prefix is the longest run of tokens every row starts with (leaving each row at least
        one token to feed). On a cache miss it is prefilled alone, once, and stored; on a hit its
        keys and values are copied in and those tokens are not run through the model again.
        """
        runner = self._runner
        prompts = [r.prompt for r in self._active]
        rows = len(prompts)
        device = runner.device
        cache = runner.new_cache()
        empty = torch.zeros((rows, 0), dtype=torch.long, device=device)
        if prefix_cache is None or prefix_cache.max_entries == 0 or has_sliding_layers(cache):
            return cache, empty, 0
        common = _common_prefix(prompts)
        common = common[: min(len(p) for p in prompts) - 1]
        if len(common) < prefix_cache.min_tokens:
            return cache, empty, 0
        hit = prefix_cache.lookup(common)
        if hit is None:
            first = runner.new_cache()
            one = torch.zeros((1, 0), dtype=torch.long, device=device)
            runner.feed([common], first, one, [0])
            kv, length = cache_tensors(first), len(common)
            prefix_cache.store(common, kv)
            for row in self._active:
                row.forward_passes += 1
        else:
            kv, length = hit.kv, hit.length
            for row in self._active:
                row.cached_tokens = length
        self._positions = [length] * rows
        cache = cache_from_tensors(runner, kv, length=length, batch=rows)
        attention = torch.ones((rows, length), dtype=torch.long, device=device)
        return cache, attention, length

    # ------------------------------------------------------------------ the loop

    @property
    def done(self) -> bool:
        return not self._active

    @property
    def size(self) -> int:
        """The number of unfinished rows (the rows the next forward runs)."""
        return len(self._active)

    def admit(self, requests: Sequence[Request], *, arrived: Sequence[float] = ()) -> list[int]:
        """Add checked requests to the running batch; returns their row indices (`results`).

        Each new row gets holes (attention mask 0, zero keys and values) under every column the
        cache already has, so the running rows are untouched; its whole prompt (no prefix cache)
        becomes its pending chunk, fed by the next `step()` together with the others' tokens.
        Columns that no unfinished row attends to any more are dropped first, so the cache does
        not keep growing while requests come and go. `arrived[i]` (perf_counter seconds, default
        now) is where request i's TTFT and total time start.
        """
        if not requests:
            return []
        device = self._runner.device
        now = time.perf_counter()
        times = list(arrived) or [now] * len(requests)
        first = self._next_index
        self._next_index += len(requests)
        rows = [self._make_row(first + i, r, device) for i, r in enumerate(requests)]
        for row, at in zip(rows, times):
            row.started = at
        if self._cache is None:  # every earlier row finished: start an empty cache
            self._cache = self._runner.new_cache()
            self._attention = torch.zeros((0, 0), dtype=torch.long, device=device)
            self._positions = []
            self._penalties = None  # its rows belonged to the finished requests
        else:
            self._drop_dead_columns()
        width = self._attention.shape[1]
        holes = torch.zeros((len(rows), width), dtype=torch.long, device=device)
        self._attention = torch.cat([self._attention, holes])
        _add_cache_rows(self._cache, len(rows))
        self._positions.extend([0] * len(rows))
        self._rows.update((r.index, r) for r in rows)
        self._active.extend(rows)
        self._tensors = SamplingTensors.build([r.params for r in self._active], device)
        if self._tensors.any_penalty:
            # Rows that were here without penalties have neutral ones: their counts can start at 0.
            old = self._penalties
            fresh = rows if old is not None else self._active
            state = PenaltyState([r.prompt for r in fresh], self._vocab.size, device)
            if old is not None:
                state.counts = torch.cat([old.counts, state.counts])
                state.seen = torch.cat([old.seen, state.seen])
            self._penalties = state
        else:
            # No row uses penalties (the last one may have finished while its counts stayed):
            # drop them, or they would have fewer rows than the batch.
            self._penalties = None
        self._constrained = self._constrained or any(r.matcher is not None for r in rows)
        if self._host_mask.shape[0] < len(self._active):
            self._alloc_masks(max(len(self._active), 2 * self._host_mask.shape[0]))
        for row in rows:
            row.pending = list(row.prompt)
            self._queue_forced(row)
        return [r.index for r in rows]

    def release(self, index: int) -> None:
        """Forget a finished row and its result (its owner has them): the batch keeps only
        what is still needed, however many requests pass through it."""
        row = self._rows.get(index)
        if row is not None and row.finish is not None:
            del self._rows[index]
            self.results.pop(index, None)

    def cancel(self, index: int) -> None:
        """End an unfinished row now (finish reason "cancelled"): it leaves the batch with its
        KV-cache row, and its result is what it had produced."""
        row = self._rows.get(index)
        if row is None or row.finish is not None:
            return
        row.finish = "cancelled"
        self._drop_finished()

    def _drop_dead_columns(self) -> None:
        """Remove cache columns that are holes in every unfinished row (left by finished rows)."""
        live = self._attention.bool().any(dim=0)
        if bool(live.all()):
            return
        keep = live.nonzero().squeeze(1)
        self._attention = self._attention[:, keep]
        _select_cache_columns(self._cache, keep)

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
        closing = [j for j, r in enumerate(self._active) if r.closing]
        masked = logits[closing].clone() if closing else None  # (choose_tokens edits logits)
        generators = [r.generator for r in self._active]
        chosen = choose_tokens(logits, self._tensors, generators, self._penalties)
        ids = chosen.tolist()  # the only device → host transfer of the step
        if masked is not None:
            for k, j in enumerate(closing):
                token = self._close(self._active[j], j, int(ids[j]), masked[k : k + 1])
                if token != ids[j]:
                    ids[j] = token
                    chosen[j] = token
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
        fill_bitmasks([row.matcher for row in self._active], self._host_mask_np)
        n = len(self._active)
        if self._device_mask is self._host_mask:
            return self._host_mask[:n]
        self._device_mask[:n].copy_(self._host_mask[:n], non_blocking=True)
        return self._device_mask[:n]

    def _tokens_left(self, row: _Row) -> int:
        left = row.params.max_new_tokens - len(row.output)
        if self._context is not None:
            left = min(left, self._context - self._row_length(row))
        return left

    def _close(self, row: _Row, j: int, token: int, masked: torch.Tensor) -> int:
        """Budget-aware closing for one row: `token` if the output can still be completed in
        the tokens left after it, else a new draw from the row's masked logits without the
        tokens that do not fit (at most `MAX_REDRAWS`; then the plan's next token)."""
        assert row.matcher is not None
        left = self._tokens_left(row)
        matcher = row.matcher
        if matcher.fits(token, left):
            return token
        tensors = SamplingTensors.build([row.params], self._runner.device)
        penalties = self._penalties.row(j) if self._penalties is not None else None
        for _ in range(MAX_REDRAWS):
            row.closing_redraws += 1
            masked[0, token] = float("-inf")
            if not bool(torch.isfinite(masked).any()):
                break
            token = int(choose_tokens(masked.clone(), tensors, [row.generator], penalties)[0])
            if matcher.fits(token, left):
                return token
        plan = matcher.completion_tokens()
        return plan[0] if plan else token

    def _accept(self, row: _Row, token: int, now: float) -> None:
        if not row.first_token_at:
            row.first_token_at = now
        row.last_token_at = now
        row.output.append(token)
        row.pending = [token]
        row.finish = finish_after(
            token,
            self._token_bytes(token),
            matcher=row.matcher,
            terminated=None,
            eos_token_ids=self._eos,
            params=row.params,
            text=row.text,
            output_length=len(row.output),
            context_full=self._context_full(row),
        )

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
        if row.closing:  # forced text is on every path, but its spelling must fit the budget
            left = self._tokens_left(row)
            fitting = 0
            for token in tokens:
                if not row.matcher.fits(token, left - fitting):
                    break
                row.matcher.accept_token(token)
                fitting += 1
            accepted = fitting
        else:
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
            if self._tensors.any_penalty:
                self._penalties.select(index)
            else:
                self._penalties = None  # no remaining row uses penalties

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
            time_to_first_token=first - row.started,
            time_per_output_token=per_token,
            total_time=end - row.started,
            forward_passes=row.forward_passes,
            forced_tokens=row.forced_tokens,
            cached_prompt_tokens=row.cached_tokens,
            closing_redraws=row.closing_redraws,
        )
        self.results[row.index] = GenerationResult(
            text=row.text.text,
            token_ids=tuple(row.output),
            finish_reason=row.finish,
            metrics=metrics,
            complete=row.finish != "cancelled"
            and (row.matcher is None or row.matcher.can_terminate()),
        )

    def run(self) -> list[GenerationResult]:
        while not self.done:
            self.step()
        return [self.results[i] for i in sorted(self.results)]

    # ------------------------------------------------------------------ streaming

    def row_text_delta(self, index: int, *, final: bool = False) -> str:
        return self._rows[index].text.delta(final=final)


def _cache_layers(cache: Any) -> list[tuple[Any, int]]:
    """(owner, layer) pairs whose keys/values `_set_kv` can replace, for either cache layout."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [(layer, -1) for layer in layers if getattr(layer, "is_initialized", True)]
    return [(cache, i) for i in range(len(cache.key_cache))]  # transformers < 4.56


def _get_kv(owner: Any, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    if i < 0:
        return owner.keys, owner.values
    return owner.key_cache[i], owner.value_cache[i]


def _set_kv(owner: Any, i: int, keys: torch.Tensor, values: torch.Tensor) -> None:
    if i < 0:
        owner.keys, owner.values = keys, values
    else:
        owner.key_cache[i], owner.value_cache[i] = keys, values


def _add_cache_rows(cache: Any, n: int) -> None:
    """Append `n` batch rows of zeros (holes, masked out) to every layer that holds tensors."""
    for owner, i in _cache_layers(cache):
        keys, values = _get_kv(owner, i)
        if keys is None or keys.dim() != 4:  # not filled yet: the next update creates it
            continue
        k = keys.new_zeros((n, *keys.shape[1:]))
        v = values.new_zeros((n, *values.shape[1:]))
        _set_kv(owner, i, torch.cat([keys, k]), torch.cat([values, v]))


def _select_cache_columns(cache: Any, keep: torch.Tensor) -> None:
    """Keep only sequence positions `keep` ([n] long) in every layer."""
    for owner, i in _cache_layers(cache):
        keys, values = _get_kv(owner, i)
        if keys is None or keys.dim() != 4:
            continue
        _set_kv(owner, i, keys.index_select(2, keep), values.index_select(2, keep))


def _common_prefix(prompts: Sequence[Sequence[int]]) -> list[int]:
    first = prompts[0]
    n = min(len(p) for p in prompts)
    i = 0
    while i < n and all(p[i] == first[i] for p in prompts):
        i += 1
    return list(first[:i])
