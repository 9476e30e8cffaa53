"""Beam search for one prompt, with an optional grammar per beam (batch 1).

Follows `transformers`' beam search so the two agree: each step takes the top `2 * num_beams`
continuations of all beams by accumulated log-probability; a continuation that ends (EOS, or the
length limit) and ranks among the first `num_beams` becomes a finished hypothesis scored
`sum_logprobs / generated_length ** length_penalty`; the best `num_beams` unfinished ones go on.
The search stops when `num_beams` hypotheses are finished and the best running beam, scored at
its current length, cannot beat the worst of them. Grammar masks are applied to the
log-probabilities (not renormalised, so scores stay the model's own probabilities); each beam
owns a `Matcher` copy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from structgen.generate.model_io import ModelRunner
from structgen.generate.params import BeamParams
from structgen.generate.requests import Request
from structgen.generate.results import BeamHypothesis
from structgen.masks import allocate_bitmask, apply_bitmask
from structgen.matcher import Matcher
from structgen.vocab import Vocabulary

__all__ = ["beam_search"]


@dataclass(slots=True)
class _Beam:
    tokens: list[int]
    score: float
    matcher: Matcher | None


def beam_search(
    runner: ModelRunner,
    vocab: Vocabulary,
    request: Request,
    params: BeamParams,
    *,
    eos_token_ids: frozenset[int],
    context_length: int | None,
) -> list[BeamHypothesis]:
    """The best finished hypotheses, best first."""
    nb = params.num_beams
    limit = params.max_new_tokens
    if context_length is not None:
        limit = max(1, min(limit, context_length - len(request.prompt_ids)))
    device = runner.device
    cache = runner.new_cache()
    attention = torch.zeros((1, 0), dtype=torch.long, device=device)
    positions = [0]
    matcher = Matcher(request.grammar) if request.grammar is not None else None
    beams = [_Beam([], 0.0, matcher)]
    logits, attention = runner.feed([list(request.prompt_ids)], cache, attention, positions)
    finished: list[tuple[float, _Beam]] = []
    bitmask = allocate_bitmask(nb, vocab.size, device=device) if matcher is not None else None
    for step in range(1, limit + 1):
        logprobs = logits.log_softmax(dim=-1)
        if bitmask is not None:
            for j, beam in enumerate(beams):
                assert beam.matcher is not None
                beam.matcher.fill_bitmask(bitmask, j)
            apply_bitmask(logprobs, bitmask[: len(beams)])
        scores = torch.tensor([b.score for b in beams], device=device, dtype=logprobs.dtype)
        total = (logprobs + scores.unsqueeze(1)).reshape(-1)
        width = logprobs.shape[-1]
        top_scores, top_index = torch.topk(total, min(2 * nb, total.numel()))
        candidates = list(zip(top_scores.tolist(), top_index.tolist()))
        running: list[_Beam] = []
        parents: list[int] = []
        for rank, (score, flat) in enumerate(candidates):
            if score == float("-inf"):
                break
            parent, token = divmod(flat, width)
            base = beams[parent]
            child_matcher = base.matcher.copy() if base.matcher is not None else None
            if child_matcher is not None and not child_matcher.accept_token(token):
                continue
            child = _Beam([*base.tokens, token], score, child_matcher)
            ends = token in eos_token_ids or step == limit
            if ends:
                if rank < nb:
                    finished.append((score / (step**params.length_penalty), child))
                continue
            if len(running) < nb:
                running.append(child)
                parents.append(parent)
        finished.sort(key=lambda item: -item[0])
        del finished[nb:]
        if not running or _cannot_improve(finished, running, nb, step, params.length_penalty):
            break
        beams = running
        index = torch.tensor(parents, dtype=torch.long, device=device)
        cache.reorder_cache(index)
        attention = attention[index]
        positions = [positions[p] for p in parents]
        logits, attention = runner.feed(
            [[b.tokens[-1]] for b in beams], cache, attention, positions
        )
    count = params.num_return or nb
    return [_hypothesis(vocab, beam, score) for score, beam in finished[:count]]


def _cannot_improve(
    finished: list[tuple[float, _Beam]], running: list[_Beam], nb: int, step: int, penalty: float
) -> bool:
    if len(finished) < nb:
        return False
    best_running = max(b.score for b in running) / float(step**penalty)
    return best_running <= finished[-1][0]


def _hypothesis(vocab: Vocabulary, beam: _Beam, score: float) -> BeamHypothesis:
    data = b"".join(vocab.token_bytes(t) for t in beam.tokens if 0 <= t < vocab.size)
    return BeamHypothesis(
        text=data.decode("utf-8", errors="replace"),
        token_ids=tuple(beam.tokens),
        score=score,
        sum_logprobs=beam.score,
    )
