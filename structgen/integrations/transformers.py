"""`LogitsProcessor`: structgen's masks inside `transformers`' `model.generate()`.

One matcher per sequence, found by the tokens that sequence has generated so far: each call looks
up the matcher of the row's previous prefix, copies it and accepts the newest token. That keeps
greedy search, sampling and beam search (whose rows are reordered between steps) on one code path.
The processor resets itself when a new `generate` call starts, so it can be reused.
"""

from __future__ import annotations

from typing import Any

from structgen.compiler import CompiledGrammar
from structgen.masks import allocate_bitmask, apply_bitmask
from structgen.matcher import Matcher

__all__ = ["LogitsProcessor"]


class LogitsProcessor:
    """A `transformers` logits processor that allows only tokens the grammar accepts.

    Pass one compiled grammar for every row, or a list with one per row of the batch.
    """

    def __init__(self, grammar: CompiledGrammar | list[CompiledGrammar]) -> None:
        self._grammars = grammar if isinstance(grammar, list) else None
        self._grammar = grammar if isinstance(grammar, CompiledGrammar) else None
        self._prompt_len: int | None = None
        self._matchers: dict[tuple[int, tuple[int, ...]], Matcher] = {}
        self._bitmask: Any = None

    def _grammar_for(self, row: int) -> CompiledGrammar:
        if self._grammar is not None:
            return self._grammar
        assert self._grammars is not None
        return self._grammars[row % len(self._grammars)]

    def reset(self) -> None:
        """Forget all sequences (done automatically when a new generation starts)."""
        self._prompt_len = None
        self._matchers = {}

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
        for row, generated in enumerate(rows):
            group = row // beams_per_grammar if self._grammars else 0
            key = (group, tuple(generated))
            matcher = fresh.get(key) or self._matchers.get(key)
            if matcher is None:
                matcher = self._advance(group, row, generated)
            fresh[key] = matcher
            matcher.fill_bitmask(bitmask, row)
        self._matchers = fresh
        apply_bitmask(scores, bitmask)
        return scores

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
