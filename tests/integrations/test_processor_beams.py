"""`LogitsProcessor(num_beams=...)` merges beams with the same text inside `transformers`' beam
search: scripted calls on a five-token vocabulary, then the default model."""

from __future__ import annotations

import math

import pytest
import torch

from structgen import Compiler, LogitsProcessor, StructgenError, Vocabulary

A, B, AB, C, EOS = range(5)
VOCAB = Vocabulary.from_tokens([b"a", b"b", b"ab", b"c", None], eos_token_ids=[EOS])
PROMPT = [C, C]
LOG = math.log


def step(
    proc: LogitsProcessor, rows: list[list[int]], probs: list[dict[int, float]]
) -> torch.Tensor:
    """One call as beam search makes it: the prompt plus each beam's tokens, log-probabilities."""
    ids = torch.tensor([PROMPT + row for row in rows])
    scores = torch.full((len(rows), VOCAB.size), LOG(1e-3))
    for i, p in enumerate(probs):
        for token, value in p.items():
            scores[i, token] = LOG(value)
    out: torch.Tensor = proc(ids, scores)
    return out


def killed(scores: torch.Tensor) -> list[int]:
    return [i for i in range(scores.shape[0]) if bool(torch.isinf(scores[i]).all())]


class TestScripted:
    grammar = Compiler(VOCAB).regex("[abc]*")

    def test_a_later_spelling_of_a_text_gets_no_token(self) -> None:
        proc = LogitsProcessor(self.grammar, num_beams=2)
        first = {AB: 0.40, A: 0.35, C: 0.2}
        assert killed(step(proc, [[], []], [first, first])) == []
        # step 2: beams "ab" (one token) and "a"; step 3: "a" + "b" is "ab" again, less likely
        assert killed(step(proc, [[AB], [A]], [{C: 0.5}, {B: 0.95}])) == []
        out = step(proc, [[AB, C], [A, B]], [{EOS: 0.9}, {EOS: 0.9}])
        assert killed(out) == [1]
        assert not torch.isinf(out[0, EOS])

    def test_the_likelier_spelling_is_kept_even_when_it_comes_later(self) -> None:
        proc = LogitsProcessor(self.grammar, num_beams=2)
        first = {A: 0.6, AB: 0.2, C: 0.1}
        step(proc, [[], []], [first, first])
        step(proc, [[A], [AB]], [{B: 0.9}, {C: 0.5}])
        out = step(proc, [[A, B], [AB, C]], [{EOS: 0.9}, {EOS: 0.9}])
        assert killed(out) == []  # 0.6 * 0.9 beats the 0.2 that "ab" had at step 2

    def test_beams_of_one_step_with_one_text(self) -> None:
        # "ab" + "c" and "a" + "bc" are "abc" at the same step: the likelier one stays
        BC = 5
        vocab = Vocabulary.from_tokens([b"a", b"b", b"ab", b"c", None, b"bc"], eos_token_ids=[4])
        proc = LogitsProcessor(Compiler(vocab).regex("[abc]*"), num_beams=2)

        def call(rows: list[list[int]], probs: list[dict[int, float]]) -> torch.Tensor:
            scores = torch.full((len(rows), vocab.size), LOG(1e-3))
            for i, p in enumerate(probs):
                for token, value in p.items():
                    scores[i, token] = LOG(value)
            out: torch.Tensor = proc(torch.tensor([PROMPT + r for r in rows]), scores)
            return out

        call([[], []], [{AB: 0.3, A: 0.3}] * 2)
        call([[AB], [A]], [{C: 0.5}, {BC: 0.2}])
        assert killed(call([[A, BC], [AB, C]], [{EOS: 0.9}] * 2)) == [0]

    def test_prompts_are_never_merged_with_each_other(self) -> None:
        proc = LogitsProcessor(self.grammar, num_beams=2)
        first = {AB: 0.4, A: 0.35}
        step(proc, [[]] * 4, [first] * 4)
        step(proc, [[AB], [A], [AB], [A]], [{C: 0.5}, {B: 0.9}] * 2)
        out = step(proc, [[AB, C], [A, B], [A, B], [AB, C]], [{EOS: 0.9}] * 4)
        assert killed(out) == [1, 2]  # each prompt's own "a" + "b"

    def test_without_num_beams_nothing_is_merged(self) -> None:
        proc = LogitsProcessor(self.grammar)
        step(proc, [[], []], [{AB: 0.4, A: 0.35}] * 2)
        step(proc, [[AB], [A]], [{C: 0.5}, {B: 0.95}])
        assert killed(step(proc, [[AB, C], [A, B]], [{EOS: 0.9}] * 2)) == []

    def test_bad_num_beams(self) -> None:
        for bad in (0, -1, 2.0, True):
            with pytest.raises(StructgenError, match="num_beams"):
                LogitsProcessor(self.grammar, num_beams=bad)  # type: ignore[arg-type]


CITIES = ["New York", "Los Angeles", "Chicago", "Newark"]


@pytest.mark.slow
def test_transformers_beam_search_returns_distinct_texts() -> None:
    from tests.integrations.test_logits_processor import answers, model_and_tokenizer, prompts

    model, tokenizer, vocab = model_and_tokenizer()
    grammar = Compiler(vocab).choice(CITIES)
    inputs = prompts("Name a city in Illinois.")

    def beams(proc: LogitsProcessor) -> list[tuple[str, float]]:
        with torch.no_grad():
            out = model.generate(
                **inputs,
                logits_processor=[proc],
                max_new_tokens=8,
                num_beams=8,
                num_return_sequences=4,
                do_sample=False,
                output_scores=True,
                return_dict_in_generate=True,
                pad_token_id=tokenizer.eos_token_id,
            )
        texts = answers(out.sequences, inputs["input_ids"].shape[1])
        return list(zip(texts, [float(s) for s in out.sequences_scores]))

    plain = [text for text, _ in beams(LogitsProcessor(grammar))]
    assert len(set(plain)) < len(plain), plain  # transformers alone: one text, several beams
    merged = beams(LogitsProcessor(grammar, num_beams=8))
    found = [text for text, score in merged if score > -1e8]  # -1e9: no hypothesis was left
    assert sorted(found) == sorted(CITIES), merged
