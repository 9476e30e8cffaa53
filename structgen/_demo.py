"""The README's demo: the embedded default model (SmolLM2-135M-Instruct) under constraints.

It asks the model a few questions three ways — free, as a choice among labels, and as a regex —
through `model.generate(..., logits_processor=[structgen.LogitsProcessor(...)])`, and checks the
constrained answers with Python's `re`.
"""

from __future__ import annotations

import re
import time
from typing import Any

__all__ = ["run_demo"]

_EXAMPLES: list[tuple[str, str, str | list[str]]] = [
    ("free", "What is the capital of France? Answer in one sentence.", ""),
    (
        "choice",
        "Classify the sentiment of this review: 'The battery died after two days.'",
        ["positive", "negative", "neutral"],
    ),
    (
        "regex",
        "Give the date of the first Moon landing in ISO format (YYYY-MM-DD).",
        r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])",
    ),
    (
        "regex",
        "Write a US phone number for a pizza place.",
        r"\(\d{3}\) \d{3}-\d{4}",
    ),
]


def _chat_ids(tokenizer: Any, prompt: str) -> Any:
    messages = [{"role": "user", "content": prompt}]
    encoded = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    return encoded["input_ids"]


def run_demo(*, prompt: str | None = None, max_new_tokens: int = 48) -> None:
    """Print the default model's answers, free and constrained."""
    import torch

    from structgen import Compiler, LogitsProcessor, Vocabulary
    from structgen._assets import load_default_model

    started = time.perf_counter()
    model, tokenizer = load_default_model()
    vocab = Vocabulary.from_hf(
        tokenizer, size=model.config.vocab_size, generation_config=model.generation_config
    )
    compiler = Compiler(vocab)
    print(f"loaded SmolLM2-135M-Instruct in {time.perf_counter() - started:.1f}s; {vocab}")
    examples = [("free", prompt, "")] if prompt else _EXAMPLES
    for kind, text, constraint in examples:
        input_ids = _chat_ids(tokenizer, text)
        processors = []
        if kind == "choice":
            assert isinstance(constraint, list)
            processors.append(LogitsProcessor(compiler.choice(constraint)))
        elif kind == "regex":
            assert isinstance(constraint, str)
            processors.append(LogitsProcessor(compiler.regex(constraint)))
        tick = time.perf_counter()
        with torch.no_grad():
            output = model.generate(
                input_ids,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                logits_processor=processors,
                pad_token_id=tokenizer.eos_token_id,
            )
        elapsed = time.perf_counter() - tick
        answer = tokenizer.decode(output[0, input_ids.shape[1] :], skip_special_tokens=True)
        print(f"\n> {text}")
        if kind == "free":
            print(f"  free:   {answer.strip()}")
            continue
        pattern = "|".join(map(re.escape, constraint)) if kind == "choice" else str(constraint)
        valid = re.fullmatch(pattern, answer) is not None
        label = "choice" if kind == "choice" else "regex"
        print(f"  {label}: {answer!r}  ({'valid' if valid else 'INVALID'}, {elapsed:.2f}s)")
        print(f"          constraint: {constraint}")
    if prompt is None:
        _json_schema_demo(model, tokenizer, compiler, max_new_tokens=max(max_new_tokens, 160))


_PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "languages": {
            "type": "array",
            "items": {"type": "string", "maxLength": 16},
            "maxItems": 3,
        },
    },
    "required": ["name", "age", "languages"],
    "additionalProperties": False,
}


def _json_schema_demo(model: Any, tokenizer: Any, compiler: Any, *, max_new_tokens: int) -> None:
    """A JSON Schema constraint in structgen's own KV-cached loop, checked with jsonschema."""
    import json

    import jsonschema

    from structgen.generate import Generator, SamplingParams

    generator = Generator(model, tokenizer)
    grammar = compiler.json_schema(_PERSON)
    question = "Describe Ada Lovelace as a JSON object with her name, age and languages."
    result = generator.generate(
        question, SamplingParams(max_new_tokens=max_new_tokens), grammar=grammar, chat=True
    )
    try:
        jsonschema.validate(json.loads(result.text), _PERSON)
        verdict = "valid"
    except (ValueError, jsonschema.ValidationError) as exc:
        verdict = f"INVALID ({exc.__class__.__name__})"
    metrics = result.metrics
    print(f"\n> {question}")
    print(f"  json schema (own loop): {result.text}")
    print(
        f"          {verdict}; {metrics.output_tokens} tokens, "
        f"time to first token {metrics.time_to_first_token * 1e3:.0f} ms, "
        f"{metrics.time_per_output_token * 1e3:.1f} ms per token"
    )
