"""The same constraints through `LogitsProcessor` in `model.generate` (greedy, sampled)."""

from __future__ import annotations

import json

import jsonschema
import lark
import pytest
import torch

from structgen import Compiler, LogitsProcessor, StructgenError
from tests.generate.test_generator import PAIR_GRAMMAR, PERSON, chat_ids, generator

pytestmark = pytest.mark.slow


def run(grammar: object, question: str) -> list[str]:
    gen = generator()
    prompt = torch.tensor([chat_ids(question, None)])
    texts = []
    for sample in (False, True):
        torch.manual_seed(3)
        with torch.no_grad():
            out = gen.model.generate(
                prompt,
                logits_processor=[LogitsProcessor(grammar)],  # type: ignore[arg-type]
                max_new_tokens=30,
                do_sample=sample,
                temperature=1.0 if sample else None,
                top_p=None,
                top_k=None,
                pad_token_id=gen.tokenizer.pad_token_id,
            )
        ids = [t for t in out[0, prompt.shape[1] :].tolist() if t not in gen.eos_token_ids]
        texts.append(gen.vocab.decode(ids).decode())
    return texts


def test_lark_grammar() -> None:
    grammar = Compiler(generator().vocab).grammar(PAIR_GRAMMAR)
    parser = lark.Lark(PAIR_GRAMMAR)
    for text in run(grammar, "Write a key=value pair in parentheses."):
        parser.parse(text)


def test_json_schema() -> None:
    compiler = Compiler(generator().vocab)
    if not hasattr(compiler, "json_schema"):
        pytest.skip("Compiler.json_schema is not implemented yet")
    try:
        grammar = compiler.json_schema(PERSON)
    except (StructgenError, ImportError, NotImplementedError) as exc:
        pytest.skip(f"Compiler.json_schema does not compile the test schema yet: {exc}")
    for text in run(grammar, "Describe a person as JSON with name and age."):
        jsonschema.validate(json.loads(text), PERSON)


def test_a_reasoning_grammar_thinks_then_answers_within_the_budget() -> None:
    """`Compiler.reasoning` in `model.generate`: a free block (open from the start: SmolLM2 has
    no <think> token), closed in time by budget-aware closing, then valid JSON."""
    gen = generator()
    compiler = Compiler(gen.vocab)
    grammar = compiler.reasoning(compiler.json_schema(PERSON), opened=True)
    prompt = torch.tensor([chat_ids("Describe a person as JSON with name and age.", None)])
    with torch.no_grad():
        out = gen.model.generate(
            prompt,
            logits_processor=[LogitsProcessor(grammar, max_new_tokens=40)],  # type: ignore[list-item]
            max_new_tokens=40,
            do_sample=False,
            pad_token_id=gen.tokenizer.pad_token_id,
        )
    ids = [t for t in out[0, prompt.shape[1] :].tolist() if t not in gen.eos_token_ids]
    text = gen.vocab.decode(ids).decode()
    _, sep, answer = text.partition("</think>")
    assert sep, text
    jsonschema.validate(json.loads(answer.removeprefix("\n\n")), PERSON)
