"""`SpeculativeGenerator`: constrained speculative decoding in structgen's own loop (batch 1).

A small draft model proposes up to `k` tokens under the grammar's masks; the target model checks
all of them in one forward pass, with the grammar mask applied at every drafted position. Each
drafted token `x` is kept with probability `min(1, p(x) / q(x))`, where `p` and `q` are the
target's and the draft's *masked and processed* distributions (temperature, top-k, top-p, min-p);
at the first rejection a token is drawn from the normalised residual `max(0, p - q)`, and when
all are kept one bonus token is drawn from the target. The output distribution is exactly that of
plain constrained sampling from the target (greedy: token-identical to `Generator.generate`).
Rejected tokens are rolled back in the matcher and in both KV caches. Tokens the grammar forces
(jump forward) are fed to both models without drafting. See docs/design/generation.md.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from structgen.compiler import CompiledGrammar
from structgen.errors import GenerationError
from structgen.generate.batch import MAX_REDRAWS
from structgen.generate.finish import finish_after
from structgen.generate.loop import Generator
from structgen.generate.model_io import ForwardKeywords, has_sliding_layers, new_cache
from structgen.generate.params import SamplingParams
from structgen.generate.quantize import QUANTIZE_MODES, quantize_weights
from structgen.generate.requests import Prompt, VocabularyCheck, check_budget
from structgen.generate.results import FinishReason, GenerationResult, RequestMetrics
from structgen.generate.sampling import (
    SamplingTensors,
    apply_min_p,
    apply_temperature,
    apply_top_k,
    apply_top_p,
)
from structgen.generate.text import TextTracker
from structgen.masks import apply_bitmask, bitmask_words, unpack_bitmask
from structgen.matcher import Matcher
from structgen.vocab import Vocabulary

__all__ = [
    "PromptLookupDraft",
    "SpeculativeGenerator",
    "SpeculativeMetrics",
    "SpeculativeResult",
    "quantized_draft",
    "truncated_draft",
    "verify_token",
]


@dataclass(frozen=True, slots=True)
class SpeculativeMetrics(RequestMetrics):
    """`RequestMetrics` (its `forward_passes` are the target's) plus the speculation counts.

    `drafted_tokens` the draft proposed, `accepted_tokens` of them the target kept;
    `draft_forward_passes` the draft's model calls. Forced (jump-forward) tokens are neither.
    """

    drafted_tokens: int = 0
    accepted_tokens: int = 0
    draft_forward_passes: int = 0

    @property
    def acceptance_rate(self) -> float:
        """Kept drafted tokens over drafted tokens (0 when nothing was drafted)."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    @property
    def tokens_per_target_forward(self) -> float:
        """Output tokens per target forward pass (prefill included): plain decoding gives ~1."""
        return self.output_tokens / self.forward_passes if self.forward_passes else 0.0


@dataclass(frozen=True, slots=True)
class SpeculativeResult(GenerationResult):
    """A `GenerationResult` whose `metrics` carry the speculation counts."""

    metrics: SpeculativeMetrics


def quantized_draft(model: Any, mode: str = "int8") -> Any:
    """A draft that is `model` with its weights quantized (a copy; `model` is unchanged): the
    same network, so it proposes what the target would most of the time, at a quarter of the
    weight bytes per token."""
    if getattr(model, "structgen_quantized", None) is not None:
        raise GenerationError("the target is quantized already: a quantized draft of it is itself")
    return quantize_weights(copy.deepcopy(model), mode).eval()


def truncated_draft(model: Any, num_layers: int = 4) -> Any:
    """A cheap draft: `model` keeping only its first `num_layers` decoder layers.

    The copy shares every weight tensor with `model` (no memory is copied) and keeps its
    tokenizer, final norm and output head, so it drafts in the target's vocabulary. It is a weak
    but realistic draft for tests and benchmarks when no smaller sibling model is at hand.
    """
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise GenerationError(
            f"truncated_draft needs a decoder with `model.model.layers`, got {type(model).__name__}"
        )
    if isinstance(num_layers, bool) or not isinstance(num_layers, int):
        raise GenerationError(f"num_layers must be an integer, got {num_layers!r}")
    if not 1 <= num_layers <= len(layers):
        raise GenerationError(f"num_layers must be in [1, {len(layers)}], got {num_layers}")
    memo: dict[int, Any] = {id(p): p for p in model.parameters()}  # share, do not copy, weights
    draft = copy.deepcopy(model, memo)
    draft.model.layers = torch.nn.ModuleList(list(draft.model.layers)[:num_layers])
    config = draft.config
    config.num_hidden_layers = num_layers
    layer_types = getattr(config, "layer_types", None)
    if isinstance(layer_types, list):
        config.layer_types = layer_types[:num_layers]
    return draft.eval()


class PromptLookupDraft:
    """A draft without a model: the continuation of the latest earlier occurrence of the text's
    last n tokens (prompt-lookup, or n-gram, speculation — what vLLM and SGLang call ``ngram``).

    It shines where the output copies the prompt (extraction into a schema, editing, quoting):
    each verified round then keeps several tokens for one target forward. The draft distribution
    is a point mass on the proposed token, so the speculative-sampling rule keeps it with
    probability `p(token)` and otherwise draws from `p` without it: the output distribution is
    still exactly plain sampling from the target. `max_ngram`..`min_ngram` are the suffix
    lengths tried, longest first (short matches guess badly, and a wrong guess still costs
    verification work); `window` bounds how far back it searches.
    """

    def __init__(self, *, max_ngram: int = 4, min_ngram: int = 3, window: int = 4096) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise GenerationError(
                f"PromptLookupDraft needs 1 <= min_ngram <= max_ngram, got {min_ngram}..{max_ngram}"
            )
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.window = window
        # the runner interface `_Run` drives (no model, no cache)
        self.length = 0
        self.calls = 0
        self.cache: Any = None

    def propose(self, context: list[int]) -> int | None:
        """The token that followed the latest earlier occurrence of `context`'s tail, if any."""
        tail_start = max(0, len(context) - self.window)
        for n in range(min(self.max_ngram, len(context) - 1), self.min_ngram - 1, -1):
            suffix = context[-n:]
            first = suffix[0]
            # scan backwards for an earlier occurrence whose continuation is known
            for i in range(len(context) - n - 1, tail_start - 1, -1):
                if context[i] == first and context[i : i + n] == suffix:
                    return context[i + n]
        return None

    def reset(self) -> None:
        self.length = 0
        self.calls = 0

    def crop(self, length: int) -> None:
        pass

    def __repr__(self) -> str:
        return f"PromptLookupDraft(max_ngram={self.max_ngram}, min_ngram={self.min_ngram})"


# ---------------------------------------------------------------------------------- the rule


def verify_token(
    p: torch.Tensor, q: torch.Tensor, token: int, generator: torch.Generator | None
) -> int | None:
    """The speculative-sampling rule for one drafted `token` (drawn from `q`); None keeps it.

    `p` and `q` are the target's and the draft's final distributions [vocab] at this position
    (masked, then temperature/top-k/top-p/min-p). The token is kept with probability
    `min(1, p(token) / q(token))`; otherwise the returned replacement is drawn from
    `max(0, p - q)` normalised. Together: the token that results is distributed exactly as `p`.
    """
    u = float(torch.rand(1, generator=generator, device=p.device)[0])
    if u * float(q[token]) < float(p[token]):  # u < p(x) / q(x)
        return None
    residual = (p - q).clamp_(min=0)
    return _draw(residual if float(residual.sum()) > 0 else p, generator)


def _draw(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    weights = probs + (probs.sum() <= 0)  # nothing allowed: any token (the grammar ends)
    return int(torch.multinomial(weights, 1, generator=generator)[0])


# ---------------------------------------------------------------------------------- models


class _Model:
    """One model and its own KV cache, fed chunks at batch 1 (no padding, no holes)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self._keywords = ForwardKeywords.of(model)
        self.device: torch.device = next(model.parameters()).device
        self._decoder, self._head = _split_head(model)
        self.cache: Any = None
        self.length = 0  # tokens in the cache
        self.calls = 0

    def reset(self) -> None:
        self.cache = new_cache(self.model)
        self.length = 0
        self.calls = 0

    def _inputs(self, tokens: list[int], keywords: ForwardKeywords) -> dict[str, Any]:
        n = len(tokens)
        start = self.length
        device = self.device
        kwargs: dict[str, Any] = {
            "input_ids": torch.tensor([tokens], dtype=torch.long, device=device),
            "attention_mask": torch.ones((1, start + n), dtype=torch.long, device=device),
            "position_ids": torch.arange(start, start + n, device=device).unsqueeze(0),
            keywords.cache: self.cache,
            "use_cache": True,
        }
        if keywords.cache_position:
            kwargs["cache_position"] = torch.arange(start, start + n, device=device)
        return kwargs

    def feed(self, tokens: list[int], keep: int) -> torch.Tensor:
        """Append `tokens` to the cache; the float logits [keep, vocab] of the last positions."""
        kwargs = self._inputs(tokens, self._keywords)
        if self._keywords.keep is not None:
            kwargs[self._keywords.keep] = keep
        out = self.model(**kwargs)
        self.length += len(tokens)
        self.calls += 1
        logits: torch.Tensor = out.logits[0, -keep:, :].float()
        return logits

    def feed_allowed(self, tokens: list[int], allowed: torch.Tensor, vocab: int) -> torch.Tensor:
        """`feed(tokens, 1)` computing the output head only for the `allowed` ids (-inf elsewhere).

        Under a narrow grammar mask this skips most of the head, which is most of a small
        draft's cost (SmolLM2-135M: 28M of its 135M weights). Falls back to `feed` for models
        whose head is not a plain linear layer.
        """
        if self._decoder is None or self._head is None:
            return self.feed(tokens, 1)
        decoder, keywords = self._decoder
        out = decoder(**self._inputs(tokens, keywords))
        self.length += len(tokens)
        self.calls += 1
        hidden = out.last_hidden_state[0, -1:, :]
        index = allowed.to(self.device)
        logits = hidden @ self._head.weight.index_select(0, index).T
        if self._head.bias is not None:
            logits = logits + self._head.bias.index_select(0, index)
        full = torch.full((1, vocab), float("-inf"), device=self.device)
        full[0, index] = logits[0].float()
        return full

    def crop(self, length: int) -> None:
        """Forget every cached position from `length` on (rejected drafted tokens)."""
        remove = self.length - length
        if remove > 0:
            self.cache.crop(-remove)  # negative: remove that many (every transformers version)
            self.length = length


_LOGIT_SCALES = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier")


def _split_head(
    model: Any,
) -> tuple[tuple[Any, ForwardKeywords] | None, torch.nn.Linear | None]:
    """(decoder, its forward keywords) and the linear output head, or Nones.

    Only for the usual `*ForCausalLM` layout whose logits are `head(decoder(...))` with nothing
    in between (no soft-capping or scaling in the config).
    """
    get_decoder = getattr(model, "get_decoder", None)
    get_head = getattr(model, "get_output_embeddings", None)
    if get_decoder is None or get_head is None:
        return None, None
    decoder, head = get_decoder(), get_head()
    config = getattr(model, "config", None)
    scaled = any(getattr(config, name, None) not in (None, 1, 1.0) for name in _LOGIT_SCALES)
    if decoder is None or not isinstance(head, torch.nn.Linear) or scaled:
        return None, None
    return (decoder, ForwardKeywords.of(decoder)), head


def _vocab_size(model: Any) -> int:
    config = getattr(model, "config", None)
    size = getattr(config, "vocab_size", 0) if config is not None else 0
    if not size:
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if head is None:
            raise GenerationError(
                f"the draft must be a transformers causal LM, got {type(model).__name__}"
            )
        size = head.weight.shape[0]
    return int(size)


# ---------------------------------------------------------------------------------- the loop


@dataclass(slots=True)
class _Step:
    """One drafted token: where it sits in the draft block, its draft distribution, what follows."""

    offset: int  # index of the token in the block (the target row predicting it)
    token: int
    q: torch.Tensor | None  # the draft's processed distribution [vocab] (None when greedy)
    terminated: bool  # the matcher accepted it as EOS
    fits: bool = True  # budget-aware closing: the output can still be completed after it
    forced: list[int] = field(default_factory=list)


@dataclass(slots=True)
class _Draft:
    """A drafted block: sampled steps, each followed by its forced tokens; the masks per step."""

    steps: list[_Step]
    tokens: list[int]  # the block: every step's token and forced tokens, in order
    finished: bool  # the last step ends the request if kept (EOS, length): no bonus token
    masks: torch.Tensor | None  # [len(steps) + 1, words]: one per step, then the bonus position


class _Run:
    """The state of one speculative request, from the first forward to the result."""

    def __init__(
        self,
        spec: SpeculativeGenerator,
        prompt: list[int],
        grammar: CompiledGrammar | None,
        params: SamplingParams,
    ) -> None:
        self.spec = spec
        self.vocab = spec.vocab
        self.prompt = prompt
        self.params = params
        self.matcher = Matcher(grammar) if grammar is not None else None
        # closing needs a plan from the start (none found: the budget cannot be kept, so off)
        self.closing = (
            self.matcher is not None
            and params.close_within_budget
            and self.matcher.tokens_to_finish() is not None
        )
        self.closing_redraws = 0
        self.text = TextTracker(params.stop)
        self.output: list[int] = []
        self.finish: FinishReason | None = None
        self.started = time.perf_counter()
        self.first_at = 0.0
        self.last_at = 0.0
        self.forced_count = 0
        self.drafted = 0
        self.accepted = 0
        target = spec._target
        self.device = target.device
        self.generator: torch.Generator | None = None
        if not params.greedy:
            seed = params.seed
            if seed is None:  # follow torch's global seed, as the plain loop does
                seed = int(torch.randint(0, 2**62, (1,)).item())
            self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.tensors = SamplingTensors.build([params] * (spec.k + 1), self.device)
        self.words = bitmask_words(self.vocab.size)
        self.host = np.full((spec.k + 1, self.words), -1, dtype=np.int32)

    # ------------------------------------------------------------------ helpers

    def _context_full(self, length: int) -> bool:
        context = self.spec.context_length
        return context is not None and length >= context

    def _forced_budget(self, outputs: int) -> int:
        budget = self.params.max_new_tokens - outputs - 1  # leave room for one draw
        context = self.spec.context_length
        if context is not None:
            budget = min(budget, context - len(self.prompt) - outputs - 1)
        return budget

    def _tokens_left(self, outputs: int) -> int:
        left = self.params.max_new_tokens - outputs
        context = self.spec.context_length
        if context is not None:
            left = min(left, context - len(self.prompt) - outputs)
        return left

    def _take_forced(self, outputs: int) -> list[int]:
        """Accept the grammar's forced tokens into the matcher (as the plain loop would)."""
        matcher = self.matcher
        if not self.spec.jump_forward or matcher is None:
            return []
        budget = self._forced_budget(outputs)
        if budget <= 0:
            return []
        tokens = matcher.forced_tokens()[:budget]
        if not tokens:
            return []
        if not self.closing:
            return tokens[: matcher.accept_tokens(tokens)]
        # forced text is on every path, but its spelling must fit the budget
        left = self._tokens_left(outputs)
        fitting = 0
        for token in tokens:
            if not matcher.fits(token, left - fitting):
                break
            matcher.accept_token(token)
            fitting += 1
        return tokens[:fitting]

    def _close(self, token: int, weights: torch.Tensor) -> int:
        """Budget-aware closing at the committed position: `token` (the target's choice there)
        if the output can still be completed after it, else the target's choice among the tokens
        that fit: its best one (greedy; `weights` are masked scores) or a new draw from its
        distribution `weights` without the tokens that do not fit, at most `MAX_REDRAWS` times,
        then the plan's next token. A draw from `p` kept when it fits and drawn again from `p`
        restricted to the tokens that fit when it does not is distributed as that restriction,
        so the output stays the target's, as in the plain loop."""
        matcher = self.matcher
        assert matcher is not None
        left = self._tokens_left(len(self.output))
        if matcher.fits(token, left):
            return token
        weights = weights.clone()
        greedy = self.params.greedy
        for _ in range(MAX_REDRAWS):
            self.closing_redraws += 1
            weights[token] = float("-inf") if greedy else 0.0
            if greedy:
                if not bool(torch.isfinite(weights).any()):
                    break
                token = int(weights.argmax())
            else:
                if float(weights.sum()) <= 0:
                    break
                token = self._draw(weights)
            if matcher.fits(token, left):
                return token
        plan = matcher.completion_tokens()
        return plan[0] if plan else token

    def _probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Masked logits [n, vocab] → the sampling distribution of each row (in place)."""
        n = logits.shape[0]
        tensors = self.tensors
        apply_temperature(logits, tensors.temperature[:n])
        apply_top_k(logits, tensors.top_k[:n])
        apply_top_p(logits, tensors.top_p[:n])
        apply_min_p(logits, tensors.min_p[:n])
        return torch.nan_to_num(logits.softmax(dim=-1), nan=0.0)

    def _allowed(self, row: int) -> torch.Tensor | None:
        """The allowed ids of a mask row when they are few (the draft then skips most of its
        output head), else None."""
        if not self.spec.sparse_draft_head:
            return None
        ids = np.flatnonzero(unpack_bitmask(self.host[row], self.vocab.size))
        if len(ids) > self.vocab.size // 8:
            return None
        return torch.from_numpy(ids)

    def _draw(self, probs: torch.Tensor) -> int:
        return _draw(probs, self.generator)

    @staticmethod
    def _bonus(probs: torch.Tensor | None, row: int) -> torch.Tensor:
        assert probs is not None
        return probs[row]

    # ------------------------------------------------------------------ committing

    def _push_sampled(self, token: int, *, in_matcher: bool, terminated: bool = False) -> None:
        """Append a sampled token and check for the end, as the plain loop's `_accept` does.

        `in_matcher`: the matcher already holds it (a kept drafted token, `terminated` says
        whether it was accepted as EOS); otherwise it is accepted here.
        """
        now = time.perf_counter()
        if not self.first_at:
            self.first_at = now
        self.last_at = now
        self.output.append(token)
        self.finish = finish_after(
            token,
            self.vocab.token_bytes(token),
            matcher=self.matcher,
            terminated=terminated if in_matcher else None,
            eos_token_ids=self.spec.eos_token_ids,
            params=self.params,
            text=self.text,
            output_length=len(self.output),
            context_full=self._context_full(len(self.prompt) + len(self.output)),
        )

    def _push_forced(self, tokens: list[int]) -> None:
        self.output.extend(tokens)
        self.forced_count += len(tokens)
        for token in tokens:
            if self.text.push(self.vocab.token_bytes(token)):
                self.finish = "stop"
                break

    # ------------------------------------------------------------------ one round

    def _propose_model(
        self, draft: _Model, pending: list[int], row: int
    ) -> tuple[int, torch.Tensor | None]:
        """The draft model's token under mask row `row`, and its distribution (None: greedy)."""
        allowed = self._allowed(row) if self.matcher is not None else None
        if allowed is not None:
            logits = draft.feed_allowed(pending, allowed, self.vocab.size).to(self.device)
        else:
            logits = draft.feed(pending, 1).to(self.device)
        if self.matcher is not None:
            apply_bitmask(logits, torch.from_numpy(self.host[row : row + 1]))
        if self.params.greedy:
            return int(logits[0].argmax()), None
        q = self._probs(logits)[0]
        return self._draw(q), q

    def _propose_lookup(
        self, lookup: PromptLookupDraft, context: list[int], row: int
    ) -> tuple[int, torch.Tensor | None] | None:
        """Prompt lookup's token if mask row `row` allows it; its distribution is a point mass."""
        token = lookup.propose(context)
        if token is None:
            return None
        if self.matcher is not None and not (int(self.host[row][token >> 5]) >> (token & 31)) & 1:
            return None
        if self.params.greedy:
            return token, None
        q = torch.zeros(self.vocab.size, device=self.device)
        q[token] = 1.0
        return token, q

    def _draft(self) -> _Draft:
        """Up to `k` tokens from the draft, each under the mask of its position."""
        spec = self.spec
        draft = spec._draft
        matcher = self.matcher
        steps: list[_Step] = []
        block: list[int] = []
        outputs = len(self.output)
        context = self.prompt + self.output  # what prompt lookup searches, grown as we draft
        pending = context[draft.length :]
        finished = False
        for i in range(spec.k):
            if matcher is not None:
                matcher.fill_bitmask(self.host, i)
                if not self.host[i].any():  # nothing allowed: the target's own step ends it
                    break
            if isinstance(draft, PromptLookupDraft):
                proposal = self._propose_lookup(draft, context, i)
            else:
                proposal = self._propose_model(draft, pending, i)
            if proposal is None:
                break  # nothing (allowed) to propose: verify what we have
            token, q = proposal
            terminated = False
            fits = True
            if matcher is not None:
                if self.closing:  # checked before the matcher moves on; verified in `round`
                    fits = matcher.fits(token, self._tokens_left(outputs))
                if not matcher.accept_token(token):  # only a lazily hit compile limit
                    break  # the target's own step at this position handles it
                terminated = matcher.is_terminated()
            step = _Step(len(block), token, q, terminated, fits)
            steps.append(step)
            block.append(token)
            context.append(token)
            pending = [token]
            outputs += 1
            if not fits:
                break  # kept, it is replaced (see `round`): nothing after it can be kept
            if terminated or (
                matcher is None and token in spec.eos_token_ids and not self.params.ignore_eos
            ):
                finished = True
                break
            if outputs >= self.params.max_new_tokens or self._context_full(
                len(self.prompt) + outputs
            ):
                finished = True
                break
            step.forced = self._take_forced(outputs)
            block.extend(step.forced)
            context.extend(step.forced)
            pending.extend(step.forced)
            outputs += len(step.forced)
        masks = None
        if matcher is not None:
            n = len(steps)
            matcher.fill_bitmask(self.host, n)  # the bonus position
            masks = torch.from_numpy(self.host[: n + 1].copy())
        self.drafted += len(steps)
        return _Draft(steps, block, finished, masks)

    def round(self) -> None:
        """Draft, verify in one target forward, keep the agreed prefix, roll back the rest."""
        spec = self.spec
        target, draft = spec._target, spec._draft
        base = len(self.prompt) + len(self.output)  # committed tokens before this round
        block = self._draft()
        steps = block.steps
        pending = (self.prompt + self.output)[target.length :]
        logits = target.feed(pending + block.tokens, len(block.tokens) + 1)
        rows = [s.offset for s in steps] + [len(block.tokens)]
        scores = logits[rows]  # [steps + 1, vocab]: the rows that predict a sampled token
        if block.masks is not None:
            apply_bitmask(scores, block.masks)
        greedy = self.params.greedy
        probs = None if greedy else self._probs(scores.clone())
        best = scores.argmax(dim=-1).tolist() if greedy else []
        rejected: int | None = None
        final: int | None = None
        for i, step in enumerate(steps):
            if greedy:
                final = int(best[i])
            else:
                assert probs is not None and step.q is not None
                replacement = verify_token(probs[i], step.q, step.token, self.generator)
                final = step.token if replacement is None else replacement
            if final == step.token and step.fits:
                final = None
                continue
            rejected = i  # replaced, or kept but unable to finish in time (`_close` redraws)
            break
        kept = steps if rejected is None else steps[:rejected]
        self.accepted += len(kept)
        keep_tokens = len(block.tokens) if rejected is None else steps[rejected].offset
        if self.matcher is not None:
            self.matcher.rollback(len(block.tokens) - keep_tokens)
        valid = base + keep_tokens  # positions both caches may keep
        target.crop(valid)
        draft.crop(min(draft.length, valid))
        for step in kept:
            self._push_sampled(step.token, in_matcher=True, terminated=step.terminated)
            if self.finish is None and step.forced:
                self._push_forced(step.forced)
            if self.finish is not None:
                return
        if final is None:
            if block.finished:  # unreachable: the last kept step ended the request
                return
            n = len(steps)  # the bonus token, or the target's own step (nothing drafted)
            final = int(best[n]) if greedy else self._draw(self._bonus(probs, n))
            position = n
        else:
            assert rejected is not None
            position = rejected
        if self.closing:
            weights = scores[position] if greedy else self._bonus(probs, position)
            final = self._close(final, weights)
        self._push_sampled(final, in_matcher=False)
        if self.finish is None:
            forced = self._take_forced(len(self.output))
            if forced:
                self._push_forced(forced)

    def run(self) -> SpeculativeResult:
        spec = self.spec
        spec._target.reset()
        spec._draft.reset()
        forced = self._take_forced(0)  # forced at the start ride along with the prompt
        if forced:
            self._push_forced(forced)
        while self.finish is None:
            self.round()
        self.text.finish()
        end = time.perf_counter()
        first = self.first_at or end
        n = len(self.output)
        metrics = SpeculativeMetrics(
            prompt_tokens=len(self.prompt),
            output_tokens=n,
            time_to_first_token=first - self.started,
            time_per_output_token=(self.last_at - first) / (n - 1) if n > 1 else 0.0,
            total_time=end - self.started,
            forward_passes=spec._target.calls,
            forced_tokens=self.forced_count,
            cached_prompt_tokens=0,
            closing_redraws=self.closing_redraws,
            drafted_tokens=self.drafted,
            accepted_tokens=self.accepted,
            draft_forward_passes=spec._draft.calls,
        )
        spec._target.cache = spec._draft.cache = None  # free the caches
        assert self.finish is not None
        complete = self.matcher is None or self.matcher.can_terminate()
        return SpeculativeResult(
            self.text.text, tuple(self.output), self.finish, metrics, complete=complete
        )


# ---------------------------------------------------------------------------------- front


class SpeculativeGenerator:
    """Constrained speculative decoding: `draft` proposes `k` tokens, `target` verifies them.

    `target` is a `Generator` (its vocabulary, EOS ids and `jump_forward` setting are used) or a
    `transformers` causal LM, then with its `tokenizer`. `draft` is any causal LM with the same
    tokenizer (same vocabulary size; give `draft_tokenizer` to have its tokens compared too), or
    a `PromptLookupDraft` (``"ngram"`` for the default one): no model, the tokens that followed
    the text's last n-gram earlier in the prompt or output, or ``"int8"`` / ``"int4"``: a
    weight-quantized copy of the target (`quantized_draft`), which agrees with it most of the
    time.
    One request at a time (batch 1); no repetition/frequency/presence penalties.
    `sparse_draft_head`: under a narrow mask the draft computes logits for the allowed ids
    only (its output head is much of a small draft's cost); the output does not depend on it.
    Budget-aware closing as in `Generator` (`close_within_budget`): a verified token after which
    the output cannot be completed in time is drawn again from the target's distribution without
    it, which keeps the output distribution the target's restricted to the tokens that fit; a
    budget below the grammar's shortest output is refused up front.
    """

    def __init__(
        self,
        target: Generator | Any,
        draft: Any,
        tokenizer: Any = None,
        *,
        k: int = 4,
        draft_tokenizer: Any = None,
        sparse_draft_head: bool = True,
    ) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise GenerationError(
                f"k (tokens drafted per round) must be an integer >= 1, got {k!r}"
            )
        if isinstance(target, Generator):
            gen = target
            if tokenizer is not None and tokenizer is not gen.tokenizer:
                raise GenerationError("give the tokenizer once: the Generator already has one")
        else:
            if tokenizer is None:
                raise GenerationError("a target model needs its tokenizer (or pass a Generator)")
            gen = Generator(target, tokenizer, prefix_cache=None)
        self.generator = gen
        self.k = k
        self.vocab: Vocabulary = gen.vocab
        self.tokenizer = gen.tokenizer
        self.eos_token_ids = gen.eos_token_ids
        self.context_length = gen.context_length
        self.jump_forward = gen.jump_forward
        self.sparse_draft_head = sparse_draft_head
        if isinstance(draft, str) and draft in ("ngram", "prompt_lookup"):
            draft = PromptLookupDraft()
        elif isinstance(draft, str) and draft in QUANTIZE_MODES:
            draft = quantized_draft(gen.model, draft)
        elif isinstance(draft, str):
            raise GenerationError(
                f"draft: a causal LM, a PromptLookupDraft, 'ngram', or a quantized copy of the "
                f"target ({', '.join(map(repr, QUANTIZE_MODES))}); got {draft!r}"
            )
        self._target = _Model(gen.model)
        self._draft: _Model | PromptLookupDraft
        if isinstance(draft, PromptLookupDraft):
            self._draft = draft
            self._vocab_check = VocabularyCheck(self.vocab, self.tokenizer)
            self._target.reset()
            if has_sliding_layers(self._target.cache):
                raise GenerationError(
                    "the target uses a sliding-window cache: rejected tokens cannot be cut "
                    "from it, so speculative decoding does not support it"
                )
            self._target.cache = None
            return
        size = _vocab_size(draft)
        if size != self.vocab.size:
            raise GenerationError(
                f"the draft's vocabulary has {size} tokens, the target's {self.vocab.size}: "
                "draft and target must share the tokenizer"
            )
        if draft_tokenizer is not None and draft_tokenizer is not gen.tokenizer:
            theirs = Vocabulary.from_hf(draft_tokenizer, size=size)
            ours = Vocabulary.from_hf(gen.tokenizer, size=size)
            if theirs.fingerprint != ours.fingerprint:
                raise GenerationError(
                    "the draft's tokenizer differs from the target's (token bytes or special "
                    "tokens): speculative decoding needs one shared vocabulary"
                )
        self._vocab_check = VocabularyCheck(self.vocab, self.tokenizer)
        self._draft = _Model(draft)
        for which, runner in (("target", self._target), ("draft", self._draft)):
            runner.reset()
            if has_sliding_layers(runner.cache):
                raise GenerationError(
                    f"the {which} uses a sliding-window cache: rejected tokens cannot be cut "
                    "from it, so speculative decoding does not support it"
                )
            runner.cache = None

    @torch.inference_mode()
    def generate(
        self,
        prompt: Prompt,
        params: SamplingParams | None = None,
        *,
        grammar: CompiledGrammar | None = None,
        chat: bool = False,
    ) -> SpeculativeResult:
        """Generate for one prompt; same output distribution as `Generator.generate`."""
        if params is None:
            params = SamplingParams()
        elif not isinstance(params, SamplingParams):
            raise GenerationError(f"params must be SamplingParams, got {params!r}")
        if params.uses_penalties:
            raise GenerationError(
                "speculative decoding does not support repetition, frequency or presence "
                "penalties; use Generator.generate"
            )
        if grammar is not None:
            self._vocab_check.check(grammar, "prompt")
            check_budget(grammar, params, "prompt")  # (a budget that cannot fit is known now)
        ids = self.generator.encode(prompt, chat=chat)
        context = self.context_length
        if context is not None and len(ids) >= context:
            raise GenerationError(
                f"the prompt has {len(ids)} tokens; the model's context is {context}"
            )
        bad = [t for t in ids if not 0 <= t < self.vocab.size]
        if bad:
            raise GenerationError(f"token ids {bad[:5]} are outside the vocabulary")
        return _Run(self, ids, grammar, params).run()
