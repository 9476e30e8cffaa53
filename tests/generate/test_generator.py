"""`structgen.Generator` on the real default model (SmolLM2-135M-Instruct), on the CPU.

Short generations only (10-30 tokens): the loop against `model.generate`, constraints against
their oracles, stop strings, jump forward, the prefix cache, beam search, streaming, errors.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import jsonschema
import lark
import pytest
import torch

from structgen import (
    BeamParams,
    Compiler,
    GenerationError,
    Generator,
    Matcher,
    PrefixCache,
    SamplingParams,
    StructgenError,
    Vocabulary,
)
from tests.conftest import default_model_dir

pytestmark = pytest.mark.slow

SYSTEM = (
    "You are a terse assistant for a small bakery in Lyon. You answer questions about opening "
    "hours, bread, pastries and prices in one short sentence, politely, without emojis."
)
QUESTIONS = [
    "When do you open?",
    "Do you sell croissants on Sunday mornings, and how much is one?",
    "Hi",
    "What is your best bread?",
]
PHONE = r"\(\d{3}\) \d{3}-\d{4}"
NAME_JSON = r'\{"name": "[a-z]+"\}'
PAIR_GRAMMAR = (
    'start: "(" pair ")"\npair: NAME "=" NUMBER\nNAME: /[a-z]{1,8}/\nNUMBER: /[0-9]{1,4}/\n'
)
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


@functools.cache
def model_and_tokenizer() -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = default_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    return model, tokenizer


@functools.cache
def generator(prefix_entries: int = 0, jump_forward: bool = True) -> Generator:
    model, tokenizer = model_and_tokenizer()
    cache = PrefixCache(prefix_entries, min_tokens=16) if prefix_entries else None
    return Generator(model, tokenizer, prefix_cache=cache, jump_forward=jump_forward)


def chat_ids(question: str, system: str | None = SYSTEM) -> list[int]:
    messages = [{"role": "user", "content": question}]
    if system:
        messages.insert(0, {"role": "system", "content": system})
    return generator().encode(messages)


def hf_greedy(prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """`model.generate` greedy with left padding; each row cut after its first EOS."""
    model, tokenizer = model_and_tokenizer()
    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=pad,
        )
    rows = []
    for row in out[:, width:].tolist():
        if tokenizer.eos_token_id in row:
            row = row[: row.index(tokenizer.eos_token_id) + 1]
        rows.append(row)
    return rows


class TestMatchesModelGenerate:
    def test_batch_1(self) -> None:
        prompt = chat_ids(QUESTIONS[1])
        (expected,) = hf_greedy([prompt], 20)
        result = generator().generate(prompt, SamplingParams(max_new_tokens=20))
        assert list(result.token_ids) == expected
        assert result.metrics.prompt_tokens == len(prompt)
        assert result.metrics.output_tokens == len(expected)
        assert result.metrics.time_to_first_token > 0

    def test_batch_4_different_lengths(self) -> None:
        prompts = [chat_ids(q) for q in QUESTIONS]
        assert len({len(p) for p in prompts}) == 4
        expected = hf_greedy(prompts, 16)
        results = generator().generate_batch(prompts, SamplingParams(max_new_tokens=16))
        assert [list(r.token_ids) for r in results] == expected

    def test_with_the_prefix_cache(self) -> None:
        gen = generator(prefix_entries=4)
        gen.prefix_cache.clear()  # type: ignore[union-attr]
        prompts = [chat_ids(q) for q in QUESTIONS]
        expected = hf_greedy(prompts, 12)
        params = SamplingParams(max_new_tokens=12)
        first = gen.generate(prompts[0], params)  # miss: stores the prompt's prefix
        second = gen.generate(prompts[1], params)  # hit on the shared system prompt
        assert list(first.token_ids) == expected[0]
        assert list(second.token_ids) == expected[1]
        assert first.metrics.cached_prompt_tokens == 0
        shared = len(SYSTEM) // 8  # the system prompt is far more than this many tokens
        assert second.metrics.cached_prompt_tokens > shared
        batch = gen.generate_batch(prompts, params)  # a batch on top of the cached prefix
        assert [list(r.token_ids) for r in batch] == expected
        assert all(r.metrics.cached_prompt_tokens > shared for r in batch)


class TestConstrained:
    def check(self, grammar: Any, accepts: Any, question: str) -> None:
        gen = generator()
        params = [
            SamplingParams(max_new_tokens=30),
            SamplingParams(max_new_tokens=30, temperature=1.0, seed=1),
            SamplingParams(max_new_tokens=30, temperature=1.3, top_p=0.95, seed=2),
        ]
        results = gen.generate_batch(
            [chat_ids(question, None)] * len(params), params, grammars=grammar
        )
        for r in results:
            assert r.finish_reason == "eos", r
            assert accepts(r.text), r.text

    def test_regex(self) -> None:
        grammar = Compiler(generator().vocab).regex(PHONE)
        self.check(grammar, lambda t: re.fullmatch(PHONE, t), "A phone number for a bakery?")

    def test_lark_grammar(self) -> None:
        grammar = Compiler(generator().vocab).grammar(PAIR_GRAMMAR)
        parser = lark.Lark(PAIR_GRAMMAR)

        def accepts(text: str) -> bool:
            try:
                parser.parse(text)
            except lark.exceptions.LarkError:
                return False
            return True

        self.check(grammar, accepts, "Write a key=value pair in parentheses.")

    def test_json_schema(self) -> None:
        compiler = Compiler(generator().vocab)
        if not hasattr(compiler, "json_schema"):
            pytest.skip("Compiler.json_schema is not implemented yet")
        try:
            grammar = compiler.json_schema(PERSON)
        except (StructgenError, ImportError, NotImplementedError) as exc:
            pytest.skip(f"Compiler.json_schema does not compile the test schema yet: {exc}")

        def accepts(text: str) -> bool:
            jsonschema.validate(json.loads(text), PERSON)
            return True

        self.check(grammar, accepts, "Describe a person as JSON with name and age.")

    def test_mixed_batch_rows_keep_their_own_grammar(self) -> None:
        gen = generator()
        compiler = Compiler(gen.vocab)
        prompts = [chat_ids("A phone number?", None), chat_ids("Say hi.", None)]
        phone, free = gen.generate_batch(
            prompts, SamplingParams(max_new_tokens=16), grammars=[compiler.regex(PHONE), None]
        )
        assert re.fullmatch(PHONE, phone.text)
        assert free.text and not re.fullmatch(PHONE, free.text)


class TestJumpForward:
    def test_saves_forward_passes_with_the_same_greedy_output(self) -> None:
        # A prompt that shows the format, so greedy decoding picks the same tokenization of the
        # forced text as jump forward does (`{"` `name` `":` ` "`); with another tokenization
        # the model conditions on different tokens and may continue differently.
        prompt = chat_ids('Output {"name": "..."} for the capital of France.', None)
        params = SamplingParams(max_new_tokens=30)
        with_jump = generator().generate(
            prompt, params, grammar=Compiler(generator().vocab).regex(NAME_JSON)
        )
        plain_gen = generator(jump_forward=False)
        plain = plain_gen.generate(
            prompt, params, grammar=Compiler(plain_gen.vocab).regex(NAME_JSON)
        )
        assert re.fullmatch(NAME_JSON, with_jump.text)
        assert with_jump.token_ids == plain.token_ids
        assert with_jump.metrics.forced_tokens > 0
        assert plain.metrics.forced_tokens == 0
        assert with_jump.metrics.forward_passes < plain.metrics.forward_passes


class TestStopsAndStreaming:
    def test_stop_string_split_across_tokens(self) -> None:
        gen = generator()
        prompt = chat_ids(QUESTIONS[1])
        full = gen.generate(prompt, SamplingParams(max_new_tokens=20))
        pieces = [gen.vocab.token_bytes(t).decode() for t in full.token_ids[:-1]]
        # a stop string made of the end of one token and the start of the next
        k = next(i for i in range(2, len(pieces) - 1) if len(pieces[i]) > 1 < len(pieces[i + 1]))
        stop = pieces[k][-2:] + pieces[k + 1][:2]
        cut = full.text.index(stop)
        result = gen.generate(prompt, SamplingParams(max_new_tokens=20, stop=(stop,)))
        assert result.finish_reason == "stop"
        assert result.text == full.text[:cut]

    def test_stream_deltas_join_to_the_result(self) -> None:
        gen = generator()
        params = SamplingParams(max_new_tokens=15, temperature=0.9, seed=5)
        prompt = chat_ids("Tell me a joke about bread.")
        stream = gen.stream(prompt, params)
        deltas = list(stream)
        assert stream.result is not None
        assert "".join(deltas) == stream.result.text
        assert len(deltas) > 1
        assert gen.generate(prompt, params).text == stream.result.text  # seeded: reproducible


class TestPenalties:
    def test_large_presence_penalty_never_repeats_a_token(self) -> None:
        params = SamplingParams(max_new_tokens=20, presence_penalty=100.0, ignore_eos=True)
        result = generator().generate(chat_ids("Count from one to ten."), params)
        assert len(set(result.token_ids)) == len(result.token_ids) == 20


class TestBeamSearch:
    def test_matches_transformers_and_scores_are_consistent(self) -> None:
        model, tokenizer = model_and_tokenizer()
        prompt = chat_ids(QUESTIONS[0])
        beams = generator().beam_search(
            prompt, BeamParams(num_beams=3, max_new_tokens=8, length_penalty=1.0)
        )
        assert len(beams) == 3
        scores = [b.score for b in beams]
        assert scores == sorted(scores, reverse=True)
        with torch.no_grad():
            out = model.generate(
                torch.tensor([prompt]),
                num_beams=3,
                num_return_sequences=3,
                max_new_tokens=8,
                do_sample=False,
                length_penalty=1.0,
                output_scores=True,
                return_dict_in_generate=True,
                pad_token_id=tokenizer.pad_token_id,
            )
        hf_best = out.sequences[0, len(prompt) :].tolist()
        if tokenizer.eos_token_id in hf_best:
            hf_best = hf_best[: hf_best.index(tokenizer.eos_token_id) + 1]
        assert list(beams[0].token_ids) == hf_best
        assert beams[0].score == pytest.approx(float(out.sequences_scores[0]), abs=1e-3)
        # each score is the model's own log-probability of the beam, length-normalised
        for beam in beams:
            ids = torch.tensor([prompt + list(beam.token_ids)])
            with torch.no_grad():
                logprobs = model(ids).logits[0].log_softmax(-1)
            total = sum(
                float(logprobs[len(prompt) + i - 1, t]) for i, t in enumerate(beam.token_ids)
            )
            assert beam.sum_logprobs == pytest.approx(total, abs=1e-3)
            assert beam.score == pytest.approx(total / len(beam.token_ids), abs=1e-3)

    def test_constrained_beams(self) -> None:
        gen = generator()
        beams = gen.beam_search(
            chat_ids("A phone number?", None),
            BeamParams(num_beams=2, max_new_tokens=16),
            grammar=Compiler(gen.vocab).regex(PHONE),
        )
        for beam in beams:
            assert re.fullmatch(PHONE, beam.text), beam.text


class TestErrors:
    def test_grammar_for_another_vocabulary(self) -> None:
        other = Vocabulary.from_tokens([b"a", b"b", None], eos_token_ids=[2])
        with pytest.raises(GenerationError, match="another vocabulary"):
            generator().generate("hi", grammar=Compiler(other).regex("a+"))

    def test_prompt_longer_than_the_context(self) -> None:
        gen = generator()
        assert gen.context_length is not None
        with pytest.raises(GenerationError, match="context"):
            gen.generate([1] * gen.context_length)

    def test_bad_prompts_and_params(self) -> None:
        gen = generator()
        with pytest.raises(GenerationError, match="empty"):
            gen.generate([])
        with pytest.raises(GenerationError, match="outside the vocabulary"):
            gen.generate([10**7])
        with pytest.raises(GenerationError, match="params"):
            gen.generate_batch(["a", "b"], [SamplingParams()])
        with pytest.raises(GenerationError, match="top_p"):
            gen.generate("hi", SamplingParams(top_p=1.2))


STORY = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "story": {"type": "string"}},
    "required": ["title", "story"],
}


class TestBudgetAwareClosing:
    """With a grammar, outputs end complete within max_new_tokens (docs/design/budgets.md)."""

    def test_tight_budgets_end_complete_and_valid(self) -> None:
        gen = generator()
        grammar = Compiler(gen.vocab).json_schema(STORY)
        need = Matcher(grammar).tokens_to_finish()
        assert need is not None and need > 4
        question = chat_ids("Tell a very long story about a dragon, as JSON.", None)
        budgets = [need, need + 3, 24]
        params = [SamplingParams(max_new_tokens=n) for n in budgets]
        params.append(SamplingParams(max_new_tokens=24, temperature=1.2, seed=3))
        results = gen.generate_batch([question] * len(params), params, grammars=grammar)
        for r, p in zip(results, params):
            assert r.complete and len(r.token_ids) <= p.max_new_tokens, r
            jsonschema.validate(json.loads(r.text), STORY)
        assert any(r.metrics.closing_redraws for r in results)  # closing did narrow draws

    def test_a_budget_below_the_shortest_output_fails_up_front(self) -> None:
        gen = generator()
        grammar = Compiler(gen.vocab).json_schema(STORY)
        with pytest.raises(GenerationError, match="raise max_new_tokens to at least"):
            gen.generate(
                chat_ids("A story?", None), SamplingParams(max_new_tokens=3), grammar=grammar
            )

    def test_closing_can_be_turned_off(self) -> None:
        gen = generator()
        grammar = Compiler(gen.vocab).json_schema(STORY)
        r = gen.generate(
            chat_ids("Tell a very long story about a dragon, as JSON.", None),
            SamplingParams(max_new_tokens=12, close_within_budget=False),
            grammar=grammar,
        )
        assert r.finish_reason == "length" and not r.complete
