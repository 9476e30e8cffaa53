"""`LogitsProcessor`: structgen's masks inside `transformers`' `model.generate()`.

One matcher per sequence, found by the tokens that sequence has generated so far: each call looks
up the matcher of the row's previous prefix, copies it and accepts the newest token. That keeps
greedy search, sampling and beam search (whose rows are reordered between steps) on one code path.
The processor resets itself when a new `generate` call starts, so it can be reused.

With `num_beams=` (the value given to `generate`) it also merges beams by text, as structgen's
own beam search does: `transformers` tells beams apart by their tokens, so two tokenizations of
one text ("ab" and "a" + "b"; under a grammar the model is often pushed into odd spellings) take
two beams and come back as two identical answers. The processor follows each beam's
log-probability (the sum of the scores it returned along the beam's tokens) and gives a beam no
allowed token when another beam of the same prompt with the same text and at least that score
went on before (in this step or an earlier one), so its place goes to another text.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from structgen.compiler import CompiledGrammar
from structgen.errors import StructgenError
from structgen.masks import allocate_bitmask, apply_bitmask
from structgen.matcher import Matcher, fill_bitmasks

__all__ = ["LogitsProcessor"]

#: budget-aware closing checks at most this many tokens of a row per step, best first ...
CLOSING_CHECKS = 64
#: ... or until the unchecked ones hold less than this share of the probability
CLOSING_TAIL = 1e-6


class LogitsProcessor:
    """A `transformers` logits processor that allows only tokens the grammar accepts.

    Pass one compiled grammar for every row, or a list with one per row of the batch.
    `num_beams`: for beam search, the `num_beams` given to `generate`; beams of one prompt with
    the same text are then merged (see the module docstring). Leave it out otherwise: rows of
    different prompts, or sampled rows of one prompt, must never be merged.

    `max_new_tokens`: the budget given to `generate`; the output then ends complete within it
    (budget-aware closing). Each step the row's best tokens are checked, best first, until the
    checked ones hold all but `1e-6` of the masked probability or `CLOSING_CHECKS` were checked:
    those that fit stay, the rest (unchecked ones too) are masked. Greedy search takes the best
    token that fits; sampling loses at most the unchecked tail. A budget below the grammar's
    shortest output warns when the first step sees it.
    """

    def __init__(
        self,
        grammar: CompiledGrammar | list[CompiledGrammar],
        *,
        num_beams: int | None = None,
        max_new_tokens: int | None = None,
    ) -> None:
        if num_beams is not None and (
            isinstance(num_beams, bool) or not isinstance(num_beams, int) or num_beams < 1
        ):
            raise StructgenError(f"num_beams must be an integer >= 1, got {num_beams!r}")
        if max_new_tokens is not None and (
            isinstance(max_new_tokens, bool)
            or not isinstance(max_new_tokens, int)
            or max_new_tokens < 1
        ):
            raise StructgenError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
        self._max_new_tokens = max_new_tokens
        #: steps where closing masked a token the grammar allows (a metric)
        self.closing_narrowed = 0
        self._grammars = grammar if isinstance(grammar, list) else None
        self._grammar = grammar if isinstance(grammar, CompiledGrammar) else None
        self._num_beams = num_beams
        self._prompt_len: int | None = None
        self._matchers: dict[tuple[int, tuple[int, ...]], Matcher] = {}
        self._bitmask: Any = None
        self._merge = _BeamMerge() if num_beams is not None and num_beams > 1 else None

    def _grammar_for(self, row: int) -> CompiledGrammar:
        if self._grammar is not None:
            return self._grammar
        assert self._grammars is not None
        return self._grammars[row % len(self._grammars)]

    def reset(self) -> None:
        """Forget all sequences (done automatically when a new generation starts)."""
        self._prompt_len = None
        self._matchers = {}
        if self._merge is not None:
            self._merge = _BeamMerge()

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        batch, length = int(input_ids.shape[0]), int(input_ids.shape[1])
        if self._prompt_len is None or length <= self._prompt_len:
            self.reset()
            self._prompt_len = length
        prompt_len = self._prompt_len
        rows = input_ids[:, prompt_len:].tolist()
        beams_per_grammar = max(1, batch // len(self._grammars)) if self._grammars else batch
        fresh: dict[tuple[int, tuple[int, ...]], Matcher] = {}
        if self._bitmask is None or self._bitmask.shape[0] < batch:
            self._bitmask = allocate_bitmask(batch, scores.shape[-1])
        bitmask = self._bitmask[:batch]
        row_matchers: list[Matcher] = []
        for row, generated in enumerate(rows):
            group = row // beams_per_grammar if self._grammars else 0
            key = (group, tuple(generated))
            matcher = fresh.get(key) or self._matchers.get(key)
            if matcher is None:
                matcher = self._advance(group, row, generated)
            fresh[key] = matcher
            row_matchers.append(matcher)
        fill_bitmasks(row_matchers, bitmask)
        self._matchers = fresh
        apply_bitmask(scores, bitmask)
        if self._max_new_tokens is not None:
            for row, generated in enumerate(rows):
                group = row // beams_per_grammar if self._grammars else 0
                matcher = fresh[(group, tuple(generated))]
                left = self._max_new_tokens - len(generated)
                if left > 0 and not matcher.is_terminated():
                    self._close(matcher, scores[row], left, first=not generated)
        if self._merge is not None:
            assert self._num_beams is not None
            vocab = self._grammar_for(0).vocab
            self._merge.step(rows, scores, self._num_beams, vocab)
        return scores

    def _close(self, matcher: Matcher, scores: Any, left: int, *, first: bool) -> None:
        """Mask the tokens of one row after which the output cannot be completed in time."""
        import torch

        need = matcher.tokens_to_finish()
        if need is None:
            return  # no completion known: closing cannot help this row
        if first and need > left:
            warnings.warn(
                f"the grammar's shortest output takes {need} tokens, more than max_new_tokens="
                f"{left}: the output will be cut off; raise max_new_tokens",
                stacklevel=3,
            )
            return
        probs = torch.softmax(scores.float(), dim=-1)
        order = torch.argsort(probs, descending=True)[:CLOSING_CHECKS].tolist()
        values = probs[order].tolist()
        keep: list[int] = []
        checked = 0.0
        narrowed = False
        for token, p in zip(order, values):
            if p <= 0.0 or checked >= 1.0 - CLOSING_TAIL:
                break
            checked += p
            if matcher.fits(token, left):
                keep.append(token)
            else:
                narrowed = True
        if not keep:
            plan = matcher.completion_tokens()
            keep = plan[:1] if plan else []
            narrowed = True
        if keep:  # unchecked tokens go too: only checked ones are known to fit
            kept = scores[keep].clone()
            scores.fill_(float("-inf"))
            scores[keep] = kept
        if narrowed:
            self.closing_narrowed += 1

    def _advance(self, group: int, row: int, generated: list[int]) -> Matcher:
        parent = self._matchers.get((group, tuple(generated[:-1]))) if generated else None
        if parent is None:  # first step, or an unknown history: replay from the start
            matcher = Matcher(self._grammar_for(row if self._grammars is None else group))
            history = generated
        else:
            matcher = parent.copy()
            history = generated[-1:]
        for token in history:
            if matcher.is_terminated():
                break  # finished rows are padded; keep them terminated
            matcher.accept_token(int(token))
        return matcher


class _BeamMerge:
    """Per-beam log-probabilities and texts across steps, and which beams repeat a text."""

    def __init__(self) -> None:
        # (prompt, tokens) -> (log-probability, text) of the beams of the last step
        self._beams: dict[tuple[int, tuple[int, ...]], tuple[float, bytes]] = {}
        self._rows: dict[tuple[int, tuple[int, ...]], int] = {}  # ... and their rows
        self._scores: Any = None  # the scores returned at the last step
        # (prompt, text) -> (best log-probability, tokens) of a beam that went on
        self._best: dict[tuple[int, bytes], tuple[float, tuple[int, ...]]] = {}

    def step(self, rows: list[list[int]], scores: Any, num_beams: int, vocab: Any) -> None:
        eos = set(vocab.eos_token_ids)
        beams: dict[tuple[int, tuple[int, ...]], tuple[float, bytes]] = {}
        order: list[tuple[float, int, tuple[int, tuple[int, ...]]]] = []
        for row, generated in enumerate(rows):
            key = (row // num_beams, tuple(generated))
            if key in beams:
                continue  # the same tokens twice (the first step's copies of the prompt)
            parent = (key[0], key[1][:-1])
            if not generated:
                score, text = 0.0, b""
            elif parent in self._beams:
                token = generated[-1]
                base, text = self._beams[parent]
                score = base + float(self._scores[self._rows[parent], token])
                if 0 <= token < vocab.size and token not in eos:
                    text += vocab.token_bytes(token)
            else:  # an unknown history (a processor shared across calls): never merged
                continue
            beams[key] = (score, text)
            order.append((score, row, key))
        order.sort(key=lambda item: (-item[0], item[1]))
        killed = []
        for score, row, key in order:
            if math.isinf(score):
                continue
            place = (key[0], beams[key][1])
            best = self._best.get(place)
            if best is not None and best[1] != key[1] and best[0] >= score:
                killed.append(row)
            elif best is None or score > best[0]:
                self._best[place] = (score, key[1])
        if killed:
            scores[killed] = float("-inf")
        self._beams = beams
        self._rows = {key: row for _, row, key in order}
        self._scores = scores.detach().clone()
