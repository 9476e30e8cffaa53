"""`Compiler.reasoning`: a free think block, then the constraint — on Qwen3's real tokenizer
(`<think>` and `</think>` are tokens there), and with a text closing tag on Llama-3."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import numpy as np
import pytest

from structgen import Compiler, Matcher, Vocabulary
from structgen.masks import unpack_bitmask
from tests.conftest import load_tokenizer, load_vocab

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}},
    "required": ["answer"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def qwen3() -> Vocabulary:
    return load_vocab("qwen3")


def allowed(m: Matcher) -> set[int]:
    vocab = m.grammar.vocab
    return set(np.flatnonzero(unpack_bitmask(m.allowed_mask(), vocab.size)).tolist())


def walk_to_an_end(g: Any, vocab: Vocabulary, rng: random.Random, *, plan_after: int) -> list[int]:
    """Random allowed tokens (no EOS), then after `plan_after` steps the completion plan's,
    until the output may end; the tokens taken."""
    m = Matcher(g)
    out: list[int] = []
    for step in range(60):
        if m.can_terminate():
            break
        plan = m.completion_tokens() or []
        if step > plan_after and plan:
            token = plan[0]
        else:
            token = rng.choice(sorted(t for t in allowed(m) if t not in vocab.eos_token_ids))
        assert m.accept_token(token)
        out.append(token)
    assert m.can_terminate()
    return out


def think_grammar(vocab: Vocabulary, **kw: object) -> object:
    c = Compiler(vocab)
    return c.reasoning(c.json_schema(SCHEMA), **kw)  # type: ignore[arg-type]


class TestQwen3:
    def test_the_templates_thinking_turn_is_accepted(self, qwen3: Vocabulary) -> None:
        tok = load_tokenizer("qwen3")
        messages = [
            {"role": "user", "content": "6 times 7?"},
            {"role": "assistant", "content": '{"answer": 42}', "reasoning_content": "6*7=42"},
        ]
        full = tok.apply_chat_template(messages, tokenize=False)
        prompt = tok.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
        out = full[len(prompt) :].split("<|im_end|>")[0]
        assert out.startswith("<think>") and "</think>" in out
        m = Matcher(think_grammar(qwen3))
        ids = tok(out, add_special_tokens=False)["input_ids"]
        assert all(m.accept_token(i) for i in ids) and m.can_terminate()

    def test_think_freely_then_the_constraint(self, qwen3: Vocabulary) -> None:
        begin, end = qwen3.token_id("<think>"), qwen3.token_id("</think>")
        g = think_grammar(qwen3)
        m = Matcher(g)
        assert begin in allowed(m)  # think, or answer straight away
        assert m.copy().accept_bytes(b'{"answer": 1}')
        assert m.accept_token(begin)
        think = allowed(m)
        assert end in think and len(think) > qwen3.size * 0.9  # nearly everything: free text
        assert not m.can_terminate()
        assert m.accept_bytes(b"Let me think { not json")
        spelled = m.copy()  # the closing tag is the token only: spelled, it is more thinking
        assert spelled.accept_bytes(b'</think>{"answer": 1}') and not spelled.can_terminate()
        assert m.accept_token(end)
        assert not m.copy().accept_bytes(b"hello")  # now the constraint holds
        assert m.accept_bytes(b'\n\n{"answer": 42}') and m.can_terminate()

    def test_budgets_close_the_think_block_in_time(self, qwen3: Vocabulary) -> None:
        g = think_grammar(qwen3)
        m = Matcher(g)
        m.accept_token(qwen3.token_id("<think>"))
        m.accept_bytes(b"hmm")
        plan = m.completion_tokens()
        assert plan and plan[0] == qwen3.token_id("</think>")
        left = len(plan)
        text_tokens = [t for t in sorted(allowed(m)) if qwen3.token_bytes(t)][:50]
        assert not any(m.fits(t, left) for t in text_tokens if t not in plan[:1])
        assert m.fits(plan[0], left)

    def test_random_walks_end_in_a_valid_answer(self, qwen3: Vocabulary) -> None:
        g = think_grammar(qwen3)
        end = qwen3.token_id("</think>")
        rng = random.Random(0)
        for _ in range(4):
            out = walk_to_an_end(g, qwen3, rng, plan_after=20)
            answer = out[out.index(end) + 1 :] if end in out else out
            text = b"".join(qwen3.token_bytes(t) for t in answer).decode()
            jsonschema.validate(json.loads(text), SCHEMA)

    def test_every_budget_from_the_shortest_up_ends_in_a_valid_answer(
        self, qwen3: Vocabulary
    ) -> None:
        """Walks that draw random tokens and keep only those that fit (the loop's rule)."""
        g = think_grammar(qwen3)
        begin, end = qwen3.token_id("<think>"), qwen3.token_id("</think>")
        opened = Matcher(g)
        opened.accept_token(begin)
        rest = opened.tokens_to_finish()
        assert rest is not None
        shortest = 1 + rest  # the opening tag, then the shortest close and answer
        rng = random.Random(3)
        for budget in range(shortest, shortest + 12, 3):
            m = Matcher(g)
            assert m.accept_token(begin)  # think first
            out = [begin]
            while not m.can_terminate() or (len(out) < budget and rng.random() < 0.5):
                left = budget - len(out)
                assert left > 0, (budget, out)
                choices = sorted(t for t in allowed(m) if t not in qwen3.eos_token_ids)
                for _ in range(64):
                    token = rng.choice(choices)
                    if m.fits(token, left):
                        break
                else:
                    plan = m.completion_tokens()
                    assert plan
                    token = plan[0]
                assert m.accept_token(token)
                out.append(token)
            assert len(out) <= budget and end in out
            answer = b"".join(qwen3.token_bytes(t) for t in out[out.index(end) + 1 :])
            jsonschema.validate(json.loads(answer.decode()), SCHEMA)

    def test_an_opened_block_starts_inside(self, qwen3: Vocabulary) -> None:
        m = Matcher(think_grammar(qwen3, opened=True))
        early = m.copy()  # already thinking: an answer now is more thinking
        assert early.accept_bytes(b'{"answer": 1}') and not early.can_terminate()
        assert m.accept_bytes(b"thinking") and m.accept_token(qwen3.token_id("</think>"))


class TestTextTags:
    def test_a_text_closing_tag_ends_the_block_at_its_first_occurrence(self) -> None:
        vocab = load_vocab("llama3_1")
        g = think_grammar(vocab, opened=True)
        m = Matcher(g)
        assert m.accept_bytes(b"so the answer is 42 </thi")
        assert not m.copy().accept_bytes(b"nk> prose")  # after the tag: the constraint
        assert m.accept_bytes(b'nk>\n\n{"answer": 42}') and m.can_terminate()
        fresh = Matcher(g)
        fresh.accept_bytes(b"x</think>")
        ok = allowed(fresh)
        assert ok == {t for t in range(vocab.size) if fresh.is_allowed(t)}

    def test_masks_in_the_block_match_brute_force(self) -> None:
        vocab = load_vocab("llama3_1")
        m = Matcher(think_grammar(vocab, opened=True))
        m.accept_bytes(b"ok </th")
        assert allowed(m) == {t for t in range(vocab.size) if m.is_allowed(t)}


class TestLM:
    def test_lm_thinks_then_answers_within_the_budget(self) -> None:
        from structgen.api import LM

        lm = LM.default()  # SmolLM2: no <think> token, so the block opens by itself
        grammar = lm.compiler.json_schema(SCHEMA)
        result = lm.run("6 times 7? Answer as JSON.", grammar, reasoning=True, max_new_tokens=30)
        assert result.complete and len(result.token_ids) <= 30
        assert result.reasoning is not None and "</think>" not in result.text
        jsonschema.validate(json.loads(result.text), SCHEMA)
        value = lm.json("6 times 7?", SCHEMA, reasoning=True, max_new_tokens=30)
        jsonschema.validate(value, SCHEMA)

    def test_generate_object_and_run_tools_think_first(self) -> None:
        from pydantic import BaseModel

        import structgen as sg
        from structgen.api import LM
        from structgen.api.structured import generate_object

        lm = LM.default()

        class Answer(BaseModel):
            answer: int

        results: list[object] = []
        value = generate_object(
            lm, Answer, "6 times 7?", reasoning=True, max_new_tokens=40, results=results
        )
        assert isinstance(value, Answer)
        assert all(getattr(r, "reasoning", None) is not None for r in results)

        @sg.tool
        def get_weather(city: str) -> str:
            """The weather in a city."""
            return f"Sunny in {city}"

        run = sg.run_tools(
            lm,
            "Weather in Lyon?",
            [get_weather],
            tool_choice="required",
            reasoning=True,
            max_new_tokens=60,
        )
        assert run.calls and run.calls[0].name == "get_weather" and run.answer is not None


class TestMaxThinkTokens:
    def test_the_block_closes_after_at_most_n_tokens(self, qwen3: Vocabulary) -> None:
        c = Compiler(qwen3)
        g = c.reasoning(c.json_schema(SCHEMA), max_think_tokens=3)
        begin, end = qwen3.token_id("<think>"), qwen3.token_id("</think>")
        m = Matcher(g)
        assert m.accept_token(begin)
        for word in (b"one", b" two", b" three"):
            assert m.accept_bytes(word)  # (one token each)
        assert allowed(m) == {end} == {t for t in range(qwen3.size) if m.is_allowed(t)}
        assert m.accept_token(end) and m.accept_bytes(b'{"answer": 3}') and m.can_terminate()

    def test_a_text_tag_may_still_be_finished_when_the_block_is_full(self) -> None:
        vocab = load_vocab("llama3_1")
        c = Compiler(vocab)
        g = c.reasoning(c.json_schema(SCHEMA), opened=True, max_think_tokens=1)
        m = Matcher(g)
        assert m.accept_bytes(b"hm")
        full = allowed(m)
        assert full == {t for t in range(vocab.size) if m.is_allowed(t)}
        assert full and all(b"<" in vocab.token_bytes(t) for t in full)  # (the tag, or nothing)
        assert not m.copy().accept_bytes(b" more")
        assert m.accept_bytes(b"</think>") and m.accept_bytes(b'{"answer": 1}')

    def test_lm_takes_max_think_tokens(self) -> None:
        from structgen.api import LM

        lm = LM.default()
        result = lm.run(
            "6 times 7?",
            lm.compiler.json_schema(SCHEMA),
            reasoning=True,
            max_think_tokens=4,
            max_new_tokens=60,
        )
        jsonschema.validate(json.loads(result.text), SCHEMA)
        assert result.reasoning is not None

    def test_generate_object_and_run_tools_bound_the_block(self) -> None:
        from pydantic import BaseModel

        import structgen as sg
        from structgen.api import LM
        from structgen.api.structured import generate_object

        lm = LM.default()  # (a text closing tag: at most 3 tokens in the block, then the tag)

        class Answer(BaseModel):
            answer: int

        results: list[sg.GenerationResult] = []
        value = generate_object(
            lm, Answer, "6 times 7?", reasoning=True, max_think_tokens=3, max_new_tokens=40,
            results=results,
        )  # fmt: skip
        assert isinstance(value, Answer)
        tag = b"</think>"
        for result in results:
            pieces = [lm.generator.vocab.token_bytes(t) for t in result.token_ids]
            text = b"".join(pieces)
            assert tag in text
            # at most 3 tokens, then only tokens of the closing tag (byte for byte)
            at, taken = 0, 0
            while at < text.index(tag):
                at += len(pieces[taken])
                taken += 1
            block_tokens = [p for p in pieces[:taken]]
            assert len(block_tokens) <= 3 + len(tag)
            tail = b"".join(block_tokens[3:])
            assert tag.startswith(tail) or tail.startswith(tag), tail

        @sg.tool
        def get_weather(city: str) -> str:
            """The weather in a city."""
            return f"Sunny in {city}"

        run = sg.run_tools(
            lm, "Weather in Lyon?", [get_weather], tool_choice="required", reasoning=True,
            max_think_tokens=2, max_new_tokens=60,
        )  # fmt: skip
        assert run.calls and run.answer is not None


class TestMaxThinkTokensInToolFormats:
    def test_a_think_block_format_takes_the_bound(self) -> None:
        from structgen.api.tools.formats import tool_format

        vocab = load_vocab("qwen3")
        grammar = tool_format("hermes").grammar(
            Compiler(vocab), [_weather_tool()], "required", None, reasoning=True,
            max_think_tokens=2,
        )  # fmt: skip
        m = Matcher(grammar)
        assert m.accept_token(vocab.token_id("<think>"))
        assert m.accept_bytes(b"one") and m.accept_bytes(b" two")
        assert allowed(m) == {vocab.token_id("</think>")}

    def test_harmony_refuses_a_bound_it_cannot_keep(self) -> None:
        from structgen.api.tools.formats import tool_format
        from structgen.errors import StructgenError

        with pytest.raises(StructgenError, match="max_think_tokens"):
            tool_format("harmony").grammar(
                Compiler(load_vocab("gptoss")), [_weather_tool()], "required", None,
                reasoning=True, max_think_tokens=5,
            )  # fmt: skip

    def test_tool_call_grammar_passes_it_on(self) -> None:
        from structgen.api.tools.guard import tool_call_grammar

        vocab = load_vocab("qwen3")
        grammar = tool_call_grammar(
            Compiler(vocab), [_weather_tool()], "required", tool_format="json",
            reasoning=True, max_think_tokens=1,
        )  # fmt: skip
        m = Matcher(grammar)
        assert m.accept_token(vocab.token_id("<think>")) and m.accept_bytes(b"hm")
        assert allowed(m) == {vocab.token_id("</think>")}


def _weather_tool() -> Any:
    from structgen.api import Tool

    def get_weather(city: str) -> str:
        """The weather in a city."""
        return city

    return Tool.from_function(get_weather)


class TestHarmonyStyle:
    """gpt-oss: an optional analysis message, then the answer in the final channel."""

    THOUGHT = "<|channel|>analysis<|message|>Six times seven.<|end|><|start|>assistant"
    FINAL = "<|channel|>final<|message|>"

    def grammar(self) -> Any:
        c = Compiler(load_vocab("gptoss"))
        return c.reasoning(c.json_schema(SCHEMA), style="harmony")

    def accepts(self, text: str) -> bool:
        tok = load_tokenizer("gptoss")
        m = Matcher(self.grammar())
        ids = tok(text, add_special_tokens=False)["input_ids"]
        return all(m.accept_token(i) for i in ids) and m.can_terminate()

    def test_the_documented_messages_are_accepted(self) -> None:
        answer = '{"answer": 42}'
        assert self.accepts(self.THOUGHT + self.FINAL + answer)
        assert self.accepts(self.FINAL + answer)  # (thinking is optional)
        assert not self.accepts(answer)  # the answer is in the final channel
        assert not self.accepts(self.THOUGHT + self.FINAL + "forty-two")
        assert not self.accepts(self.THOUGHT + answer)

    def test_tags_are_tokens_and_masks_match_brute_force(self) -> None:
        vocab = load_vocab("gptoss")
        channel, message = vocab.token_id("<|channel|>"), vocab.token_id("<|message|>")
        m = Matcher(self.grammar())
        assert allowed(m) == {channel}  # (no text spells a tag)
        assert m.accept_token(channel) and m.accept_bytes(b"analysis")
        assert m.accept_token(message) and m.accept_bytes(b"Let me think <|end|> about it")
        inside = allowed(m)
        assert vocab.token_id("<|end|>") in inside and channel not in inside
        assert inside == {t for t in range(vocab.size) if m.is_allowed(t)}

    def test_random_walks_end_in_a_valid_answer(self) -> None:
        from structgen.api.lm import split_harmony
        from structgen.api.tools.formats import render_tokens

        vocab = load_vocab("gptoss")
        g = self.grammar()
        rng = random.Random(5)
        for _ in range(4):
            out = walk_to_an_end(g, vocab, rng, plan_after=12)
            _, answer = split_harmony(render_tokens(vocab, out))
            jsonschema.validate(json.loads(answer), SCHEMA)

    def test_a_think_tag_vocabulary_refuses_the_style(self) -> None:
        from structgen.errors import ArgumentError

        c = Compiler(load_vocab("qwen3"))
        with pytest.raises(ArgumentError, match="special tokens"):
            c.reasoning(c.json_schema(SCHEMA), style="harmony")
        gptoss = Compiler(load_vocab("gptoss"))
        with pytest.raises(ArgumentError, match="max_think_tokens"):
            gptoss.reasoning(gptoss.json_schema(SCHEMA), style="harmony", max_think_tokens=3)

    def test_the_split_reads_the_analysis_and_the_final_answer(self) -> None:
        from structgen.api.lm import split_harmony

        assert split_harmony(self.THOUGHT + self.FINAL + "42") == ("Six times seven.", "42")
        assert split_harmony(self.FINAL + "42") == ("", "42")
        call = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>"
        assert split_harmony(self.THOUGHT + call) == ("Six times seven.", call)
