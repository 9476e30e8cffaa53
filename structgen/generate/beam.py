"""Beam search for one prompt, with an optional grammar per beam (batch 1).

Follows `transformers`' beam search so the two agree: each step takes the top `2 * num_beams`
continuations of all beams by accumulated log-probability; a continuation that ends (EOS, or the
length limit) and ranks among the first `num_beams` becomes a finished hypothesis scored
`sum_logprobs / generated_length ** length_penalty`; the best `num_beams` unfinished ones go on.
The search stops when `num_beams` hypotheses are finished and the best running beam, scored at
its current length, cannot beat the worst of them. Grammar masks are applied to the
log-probabilities (not renormalised, so scores stay the model's own probabilities); each beam
owns a `Matcher` copy.

One difference, on purpose: hypotheses are told apart by their *text*, not their tokens. Two
tokenizations of one text ("ab" vs "a" + "b"; under a grammar the model is often pushed into
odd spellings) are one hypothesis: a continuation is dropped when a beam with the same text and
at least its log-probability went on before (in this step or an earlier one: "ab" at step 1,
"a" + "b" at step 2), and a finished hypothesis whose text is already finished keeps the better
score. The beam then holds distinct texts, and the returned hypotheses differ from each other.
The candidate list is read past `2 * num_beams` entries only to skip duplicates, so without
them the search is exactly `transformers`'.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from structgen.generate.model_io import ModelRunner
from structgen.generate.params import BeamParams
from structgen.generate.requests import Request
from structgen.generate.results import BeamHypothesis
from structgen.masks import allocate_bitmask, apply_bitmask
from structgen.matcher import Matcher, fill_bitmasks
from structgen.vocab import Vocabulary

__all__ = ["beam_search"]


@dataclass(slots=True)
class _Beam:
    tokens: list[int]
    score: float
    matcher: Matcher | None
    text: bytes = b""  # the output bytes so far (EOS excluded): what tells hypotheses apart


#: budget-aware closing reads at most this many candidates past the ones it refuses, per step
MAX_REFUSED = 4096


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
    token_text = _TokenText(vocab, eos_token_ids)
    expanded: dict[bytes, float] = {}  # text -> best log-probability of a beam that went on
    bitmask = allocate_bitmask(nb, vocab.size, device=device) if matcher is not None else None
    closing = (
        params.close_within_budget
        and matcher is not None
        and matcher.tokens_to_finish() is not None
    )
    for step in range(1, limit + 1):
        left = limit - step + 1  # tokens left, this one included
        logprobs = logits.log_softmax(dim=-1)
        if bitmask is not None:
            fill_bitmasks([beam.matcher for beam in beams], bitmask)
            apply_bitmask(logprobs, bitmask[: len(beams)])
        scores = torch.tensor([b.score for b in beams], device=device, dtype=logprobs.dtype)
        total = (logprobs + scores.unsqueeze(1)).reshape(-1)
        width = logprobs.shape[-1]
        running: list[_Beam] = []
        parents: list[int] = []
        ended: set[bytes] = set()  # texts of this step's finishing candidates
        rank = 0  # among distinct candidates, as transformers ranks its 2 * num_beams
        refused = 0
        for score, flat in _best_first(total, 2 * nb):
            if score == float("-inf") or rank >= 2 * nb:
                break
            parent, token = divmod(flat, width)
            base = beams[parent]
            ends = token in eos_token_ids or step == limit
            text = base.text + token_text(token)
            seen = text in ended if ends else expanded.get(text, float("-inf")) >= score
            if seen:
                continue  # the same text, as likely or likelier, is already in the search
            if closing and base.matcher is not None and not base.matcher.fits(token, left):
                refused += 1  # the output could not be completed in the tokens left after it
                if refused > MAX_REFUSED:
                    break
                continue
            child_matcher = base.matcher.copy() if base.matcher is not None else None
            if child_matcher is not None and not child_matcher.accept_token(token):
                continue
            rank += 1
            child = _Beam([*base.tokens, token], score, child_matcher, text)
            if ends:
                ended.add(text)
                if rank <= nb:
                    _add_finished(finished, score / (step**params.length_penalty), child)
                continue
            if len(running) < nb:
                running.append(child)
                parents.append(parent)
                expanded[text] = score
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
    return [_hypothesis(beam, score) for score, beam in finished[:count]]


def _best_first(total: torch.Tensor, k: int) -> Iterator[tuple[float, int]]:
    """(score, flat index) pairs, best first: the top `k`, then more as the caller reads on
    (it skips duplicates of a text, so it may need more than `2 * num_beams`)."""
    done = 0
    size = total.numel()
    while done < size:
        k = min(k, size)
        top_scores, top_index = torch.topk(total, k)
        yield from zip(top_scores.tolist()[done:], top_index.tolist()[done:])
        done, k = k, 2 * k


class _TokenText:
    """The bytes a token adds to the output text: EOS and ids past the vocabulary add none."""

    def __init__(self, vocab: Vocabulary, eos_token_ids: frozenset[int]) -> None:
        self._vocab = vocab
        self._eos = eos_token_ids
        self._cache: dict[int, bytes] = {}

    def __call__(self, token: int) -> bytes:
        data = self._cache.get(token)
        if data is None:
            inside = 0 <= token < self._vocab.size and token not in self._eos
            data = self._vocab.token_bytes(token) if inside else b""
            self._cache[token] = data
        return data


def _add_finished(finished: list[tuple[float, _Beam]], score: float, beam: _Beam) -> None:
    """Add a finished hypothesis; one with the same text keeps the better of the two scores."""
    for i, (other_score, other) in enumerate(finished):
        if other.text == beam.text:
            if score > other_score:
                finished[i] = (score, beam)
            return
    finished.append((score, beam))


def _cannot_improve(
    finished: list[tuple[float, _Beam]], running: list[_Beam], nb: int, step: int, penalty: float
) -> bool:
    if len(finished) < nb:
        return False
    best_running = max(b.score for b in running) / float(step**penalty)
    return best_running <= finished[-1][0]


def _hypothesis(beam: _Beam, score: float) -> BeamHypothesis:
    return BeamHypothesis(
        text=beam.text.decode("utf-8", errors="replace"),
        token_ids=tuple(beam.tokens),
        score=score,
        sum_logprobs=beam.score,
    )
