"""Beam search tells hypotheses apart by their text: two tokenizations of one text are one beam.

Unit tests drive `beam_search` with a scripted model over a five-token vocabulary (exact
log-probabilities, no torch model); the slow ones run the default model, own loop and
`transformers`' beam search through the logits processor, on a choice whose options the model
spells in several tokenizations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

from structgen import BeamParams, Compiler, SamplingParams, Vocabulary
from structgen.generate.beam import beam_search
from structgen.generate.requests import Request

A, B, AB, C, EOS = range(5)
VOCAB = Vocabulary.from_tokens([b"a", b"b", b"ab", b"c", None], eos_token_ids=[EOS])
RARE = 1e-4  # what every token not named in a step's distribution gets

Distribution = Callable[[tuple[int, ...]], dict[int, float]]


def toy(history: tuple[int, ...]) -> dict[int, float]:
    """The text "ab" is likely as one token or as "a" + "b"; "c" is the runner-up."""
    text = b"".join(VOCAB.token_bytes(t) for t in history)
    if not history:
        return {AB: 0.40, A: 0.35, C: 0.24}
    if text == b"a":
        return {B: 0.95}
    return {EOS: 0.9}


class ScriptedRunner:
    """A `ModelRunner` stand-in: next-token log-probabilities from `dist(generated tokens)`."""

    device = torch.device("cpu")

    def __init__(self, dist: Distribution, prompt_len: int) -> None:
        self.dist = dist
        self.prompt_len = prompt_len
        self.feeds = 0

    def new_cache(self) -> Any:
        return ScriptedCache()

    def feed(
        self,
        chunks: Sequence[Sequence[int]],
        cache: ScriptedCache,
        attention_mask: torch.Tensor,
        next_positions: list[int],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.feeds += 1
        if not cache.rows:
            cache.rows = [[] for _ in chunks]
        for row, chunk in zip(cache.rows, chunks):
            row.extend(chunk)
        logits = torch.empty((len(chunks), VOCAB.size))
        for i, row in enumerate(cache.rows):
            probs = self.dist(tuple(row[self.prompt_len :]))
            rare = (1.0 - sum(probs.values())) / (VOCAB.size - len(probs))
            for token in range(VOCAB.size):
                logits[i, token] = math.log(probs.get(token, max(rare, RARE)))
        width = attention_mask.shape[1] + max(len(c) for c in chunks)
        return logits, torch.ones((len(chunks), width), dtype=torch.long)


class ScriptedCache:
    def __init__(self) -> None:
        self.rows: list[list[int]] = []

    def reorder_cache(self, index: torch.Tensor) -> None:
        self.rows = [list(self.rows[i]) for i in index.tolist()]


def search(dist: Distribution = toy, *, grammar: Any = None, **params: Any) -> list[Any]:
    prompt = (C,)
    return beam_search(
        ScriptedRunner(dist, len(prompt)),  # type: ignore[arg-type]
        VOCAB,
        Request(prompt, grammar, SamplingParams()),
        BeamParams(**{"max_new_tokens": 4, **params}),
        eos_token_ids=frozenset({EOS}),
        context_length=None,
    )


def logp(*probs: float) -> float:
    return sum(math.log(p) for p in probs)


class TestTextsAreDistinct:
    def test_two_tokenizations_of_one_text_are_one_hypothesis(self) -> None:
        beams = search(num_beams=3)
        texts = [b.text for b in beams]
        assert len(texts) == len(set(texts)), texts
        assert texts[:2] == ["ab", "c"] or texts[:2] == ["c", "ab"]
        (ab,) = [b for b in beams if b.text == "ab"]
        # the likelier spelling is kept (one token: 0.40 * 0.9 beats 0.35 * 0.95 * 0.9)
        assert ab.token_ids == (AB, EOS)
        assert ab.sum_logprobs == pytest.approx(logp(0.40, 0.9))
        assert ab.score == pytest.approx(logp(0.40, 0.9) / 2)

    def test_a_later_spelling_of_a_text_already_searched_is_dropped(self) -> None:
        # two beams: "ab" and "a" go on at step 1; at step 2 "a" + "b" is the text "ab" again
        # (less likely than the one token was), so the second slot goes to another text
        beams = search(num_beams=2)
        texts = [b.text for b in beams]
        assert len(set(texts)) == 2 and texts[0] == "ab", texts
        assert beams[0].token_ids == (AB, EOS)
        assert all(b.token_ids[:2] != (A, B) for b in beams)

    def test_the_likelier_spelling_wins_when_it_is_the_longer_one(self) -> None:
        def dist(history: tuple[int, ...]) -> dict[int, float]:
            if not history:
                return {A: 0.6, AB: 0.2, C: 0.19}
            text = b"".join(VOCAB.token_bytes(t) for t in history)
            return {B: 0.9} if text == b"a" else {EOS: 0.9}

        beams = search(dist, num_beams=3)
        (ab,) = [b for b in beams if b.text == "ab"]
        assert ab.token_ids == (A, B, EOS)  # 0.6 * 0.9 beats 0.2
        assert ab.sum_logprobs == pytest.approx(logp(0.6, 0.9, 0.9))

    def test_without_duplicates_the_search_is_unchanged(self) -> None:
        # distinct texts only: every hypothesis of the plain search comes back, in order
        def dist(history: tuple[int, ...]) -> dict[int, float]:
            if not history:
                return {A: 0.5, B: 0.3, C: 0.19}
            return {EOS: 0.8, C: 0.15} if len(history) < 3 else {EOS: 0.99}

        beams = search(dist, num_beams=3, max_new_tokens=3)
        assert [b.token_ids for b in beams] == [(A, EOS), (B, EOS), (C, EOS)]
        assert [b.sum_logprobs for b in beams] == pytest.approx(
            [logp(0.5, 0.8), logp(0.3, 0.8), logp(0.19, 0.8)]
        )

    def test_under_a_grammar(self) -> None:
        grammar = Compiler(VOCAB).choice(["ab", "abc", "c"])
        beams = search(grammar=grammar, num_beams=4)
        texts = [b.text for b in beams]
        assert len(texts) == len(set(texts)) and set(texts) <= {"ab", "abc", "c"}
        assert "ab" in texts and "c" in texts


# ---------------------------------------------------------------------------------- the model


CITIES = ["New York", "Los Angeles", "Chicago", "Newark"]


@pytest.mark.slow
class TestDefaultModel:
    """ "Los Angeles" is "Los" + " Angeles" or "L" + "os" + ...: without merging, all four beams
    of this prompt held that one text."""

    def test_own_loop_returns_distinct_texts(self) -> None:
        from tests.generate.test_generator import chat_ids, generator

        gen = generator()
        grammar = Compiler(gen.vocab).choice(CITIES)
        prompt = chat_ids("Name a big city in the USA.", None)
        # four beams: the spellings of "Los Angeles" ("Los", "L", "Lo", ...) fill them at the
        # first step, and merge into one hypothesis (transformers returns it four times)
        beams = gen.beam_search(prompt, BeamParams(num_beams=4, max_new_tokens=8), grammar=grammar)
        texts = [b.text for b in beams]
        assert texts[0] == "Los Angeles" and len(texts) == len(set(texts)), texts
        # eight beams: room for every city, each once, best first
        beams = gen.beam_search(prompt, BeamParams(num_beams=8, max_new_tokens=8), grammar=grammar)
        texts = [b.text for b in beams]
        assert sorted(texts) == sorted(CITIES), texts
        assert texts[0] == "Los Angeles"
        scores = [b.score for b in beams]
        assert scores == sorted(scores, reverse=True)


class TestBudget:
    """A hypothesis never ends cut off by `max_new_tokens`: beams close within the budget."""

    @staticmethod
    def loops(history: tuple[int, ...]) -> dict[int, float]:
        return {C: 0.9}  # the model wants to go on writing "c" forever

    def test_every_hypothesis_is_complete_at_the_budget(self) -> None:
        grammar = Compiler(VOCAB).regex(r"c*ab")
        beams = search(self.loops, grammar=grammar, num_beams=2, max_new_tokens=4)
        assert beams
        for beam in beams:
            assert beam.text.endswith("ab") and set(beam.text[:-2]) <= {"c"}, beam.text
            assert len(beam.token_ids) <= 4

    def test_without_closing_a_hypothesis_may_be_cut(self) -> None:
        grammar = Compiler(VOCAB).regex(r"c*ab")
        beams = search(
            self.loops, grammar=grammar, num_beams=2, max_new_tokens=4, close_within_budget=False
        )
        assert any(not b.text.endswith("ab") for b in beams)
