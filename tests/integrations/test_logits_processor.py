"""structgen.LogitsProcessor inside transformers' generate(), on the real default model."""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import pytest
import torch

from structgen import Compiler, LogitsProcessor, Vocabulary
from tests.conftest import default_model_dir

PHONE = r"\(\d{3}\) \d{3}-\d{4}"
DATE = r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"


@functools.cache
def model_and_tokenizer() -> tuple[Any, Any, Vocabulary]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = default_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    vocab = Vocabulary.from_hf(tokenizer, size=model.config.vocab_size)
    return model, tokenizer, vocab


def prompts(*questions: str) -> dict[str, torch.Tensor]:
    _, tokenizer, _ = model_and_tokenizer()
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False
        )
        for q in questions
    ]
    return dict(tokenizer(texts, return_tensors="pt", padding=True))


def answers(output: torch.Tensor, prompt_len: int) -> list[str]:
    _, tokenizer, _ = model_and_tokenizer()
    return [tokenizer.decode(row[prompt_len:], skip_special_tokens=True) for row in output]


def generate(
    processor: LogitsProcessor,
    inputs: dict[str, torch.Tensor],
    max_new_tokens: int = 30,
    **kwargs: Any,
) -> list[str]:
    model, tokenizer, _ = model_and_tokenizer()
    with torch.no_grad():
        out = model.generate(
            **inputs,
            logits_processor=[processor],
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.eos_token_id,
            **kwargs,
        )
    return answers(out, inputs["input_ids"].shape[1])


@pytest.mark.slow
class TestGenerate:
    def test_greedy_batch_with_one_grammar(self) -> None:
        _, _, vocab = model_and_tokenizer()
        proc = LogitsProcessor(Compiler(vocab).regex(PHONE))
        inputs = prompts("A phone number for a bakery?", "Call whom? Give a number.")
        for text in generate(proc, inputs, do_sample=False):
            assert re.fullmatch(PHONE, text), text

    def test_per_row_grammars(self) -> None:
        _, _, vocab = model_and_tokenizer()
        compiler = Compiler(vocab)
        proc = LogitsProcessor([compiler.regex(PHONE), compiler.regex(DATE)])
        inputs = prompts("A phone number?", "When did Apollo 11 land?")
        phone, date = generate(proc, inputs, do_sample=False)
        assert re.fullmatch(PHONE, phone), phone
        assert re.fullmatch(DATE, date), date

    def test_sampling_is_reproducible_and_valid(self) -> None:
        _, _, vocab = model_and_tokenizer()
        proc = LogitsProcessor(Compiler(vocab).choice(["red", "green", "blue", "ultraviolet"]))
        inputs = prompts("Name a colour.")
        results = []
        for _ in range(2):
            torch.manual_seed(7)
            results.append(generate(proc, inputs, do_sample=True, temperature=1.5, top_k=0))
        assert results[0] == results[1]  # the processor is reusable and resets itself
        assert results[0][0] in {"red", "green", "blue", "ultraviolet"}

    def test_beam_search(self) -> None:
        _, _, vocab = model_and_tokenizer()
        proc = LogitsProcessor(Compiler(vocab).regex(DATE))
        inputs = prompts("When was the Eiffel Tower finished? Give the date.")
        model, tokenizer, _ = model_and_tokenizer()
        with torch.no_grad():
            out = model.generate(
                **inputs,
                logits_processor=[proc],
                max_new_tokens=20,
                num_beams=3,
                num_return_sequences=3,
                do_sample=False,
                pad_token_id=tokenizer.eos_token_id,
            )
        for text in answers(out, inputs["input_ids"].shape[1]):
            assert re.fullmatch(DATE, text), text


STORY = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "story": {"type": "string"}},
    "required": ["title", "story"],
}


@pytest.mark.slow
class TestBudget:
    """`LogitsProcessor(max_new_tokens=N)`: the output ends complete within `generate`'s N."""

    def test_greedy_and_beam_outputs_close_in_time(self) -> None:
        import jsonschema

        _, _, vocab = model_and_tokenizer()
        grammar = Compiler(vocab).json_schema(STORY)
        inputs = prompts("Tell a very long story about a dragon, as JSON.")
        for kwargs in ({"do_sample": False}, {"do_sample": False, "num_beams": 2}):
            plain = generate(LogitsProcessor(grammar), inputs, 16, **kwargs)[0]
            closing = LogitsProcessor(grammar, max_new_tokens=16)
            (text,) = generate(closing, inputs, 16, **kwargs)
            jsonschema.validate(json.loads(text), STORY)
            assert closing.closing_narrowed > 0
            with pytest.raises(ValueError):
                json.loads(plain)  # without the budget, the story runs past the end

    def test_sampled_outputs_close_in_time(self) -> None:
        _, _, vocab = model_and_tokenizer()
        grammar = Compiler(vocab).json_schema(STORY)
        inputs = prompts("Tell a very long story about a dragon, as JSON.")
        torch.manual_seed(0)
        for _ in range(3):
            closing = LogitsProcessor(grammar, max_new_tokens=20)
            (text,) = generate(closing, inputs, 20, do_sample=True)
            assert set(json.loads(text)) == {"title", "story"}

    def test_a_budget_below_the_shortest_output_warns(self) -> None:
        _, _, vocab = model_and_tokenizer()
        grammar = Compiler(vocab).json_schema(STORY)
        with pytest.warns(UserWarning, match="raise max_new_tokens"):
            generate(
                LogitsProcessor(grammar, max_new_tokens=3), prompts("A story?"), 3, do_sample=False
            )
