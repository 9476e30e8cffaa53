"""The README's demo: the embedded default model (SmolLM2-135M-Instruct) answers prompts."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["run_demo"]


def _chat_ids(tokenizer: Any, prompt: str) -> Any:
    messages = [{"role": "user", "content": prompt}]
    encoded = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    return encoded["input_ids"]


def run_demo(*, prompt: str | None = None, max_new_tokens: int = 48) -> None:
    """Print the default model's answers to a few prompts."""
    import torch

    from structgen import Vocabulary
    from structgen._assets import load_default_model

    started = time.perf_counter()
    model, tokenizer = load_default_model()
    vocab = Vocabulary.from_hf(tokenizer, size=model.config.vocab_size)
    print(f"loaded SmolLM2-135M-Instruct in {time.perf_counter() - started:.1f}s; {vocab}")
    prompts = [prompt] if prompt else ["What is the capital of France? Answer in one sentence."]
    for text in prompts:
        input_ids = _chat_ids(tokenizer, text)
        with torch.no_grad():
            output = model.generate(input_ids, max_new_tokens=max_new_tokens, do_sample=False)
        answer = tokenizer.decode(output[0, input_ids.shape[1] :], skip_special_tokens=True)
        print(f"\n> {text}\n{answer.strip()}")
