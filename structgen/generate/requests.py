"""Turning user input into a checked request: prompt token ids, grammar, sampling rules.

Everything that can be wrong with a request is found here, before any forward pass, and raised
as `GenerationError` naming the request and the problem.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from structgen._args import describe
from structgen.compiler import CompiledGrammar
from structgen.errors import GenerationError
from structgen.generate.params import SamplingParams
from structgen.matcher import Matcher
from structgen.vocab import Vocabulary

__all__ = ["Prompt", "Request", "VocabularyCheck", "check_budget", "encode_prompt"]

# Text, token ids, or chat messages ([{"role": ..., "content": ...}, ...]).
Prompt = str | Sequence[int] | Sequence[Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class Request:
    """One checked request: prompt ids, its constraint (or None) and its sampling rules."""

    prompt_ids: tuple[int, ...]
    grammar: CompiledGrammar | None
    params: SamplingParams


def encode_prompt(tokenizer: Any, prompt: Prompt, *, chat: bool, where: str) -> list[int]:
    """Token ids of a prompt; messages (or text with `chat=True`) go through the chat template."""
    if isinstance(prompt, str):
        if not chat:
            ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
            return _checked_ids(ids, where)
        prompt = [{"role": "user", "content": prompt}]
    if isinstance(prompt, (bytes, bytearray)):
        raise GenerationError(
            f"{where}: the prompt is bytes; decode it to text first (token ids are a list of ints)"
        )
    if hasattr(prompt, "tolist") and not isinstance(prompt, (list, tuple)):
        prompt = prompt.tolist()  # a 1-D numpy array or torch tensor of token ids
    if not isinstance(prompt, Sequence) or isinstance(prompt, Mapping):
        raise GenerationError(
            f"{where}: a prompt is text, a list of token ids, or a list of chat messages; got"
            f" {describe(prompt)}"
        )
    items = list(prompt)
    if not items:
        raise GenerationError(f"{where}: the prompt is empty")
    if all(isinstance(i, Mapping) for i in items):
        try:
            encoded = tokenizer.apply_chat_template(
                items, add_generation_prompt=True, tokenize=True, return_dict=True
            )
        except Exception as exc:  # no template, malformed messages
            raise GenerationError(f"{where}: cannot apply the chat template: {exc}") from exc
        return _checked_ids(encoded["input_ids"], where)
    if all(isinstance(i, int) and not isinstance(i, bool) for i in items):
        return _checked_ids(items, where)
    raise GenerationError(
        f"{where}: a prompt is text, a list of token ids, or a list of chat messages"
    )


def _checked_ids(ids: Any, where: str) -> list[int]:
    out = [int(i) for i in ids]
    if not out:
        raise GenerationError(f"{where}: the prompt has no tokens")
    return out


class VocabularyCheck:
    """Accepts grammars compiled for this model's vocabulary, rejects the others by name.

    The canonical vocabulary includes the generation config's EOS ids; a grammar compiled
    against `Vocabulary.from_hf(tokenizer, size=model.config.vocab_size)` without it is accepted
    too (built lazily, once) — both describe the same tokens.
    """

    def __init__(self, vocab: Vocabulary, tokenizer: Any) -> None:
        self.vocab = vocab
        self._tokenizer = tokenizer
        self._accepted = {vocab.fingerprint}
        self._plain_checked = False

    def check(self, grammar: CompiledGrammar, where: str) -> None:
        if not isinstance(grammar, CompiledGrammar):
            raise GenerationError(
                f"{where}: grammar must be a CompiledGrammar (from structgen.Compiler), "
                f"got {type(grammar).__name__}"
            )
        fingerprint = grammar.vocab.fingerprint
        if fingerprint in self._accepted:
            return
        if not self._plain_checked:
            self._plain_checked = True
            plain = Vocabulary.from_hf(self._tokenizer, size=self.vocab.size)
            self._accepted.add(plain.fingerprint)
            if fingerprint in self._accepted:
                return
        raise GenerationError(
            f"{where}: the grammar was compiled for another vocabulary "
            f"(size {grammar.vocab.size}, fingerprint {fingerprint[:12]}) than this model's "
            f"(size {self.vocab.size}, fingerprint {self.vocab.fingerprint[:12]}); compile it "
            "with Compiler(generator.vocab)"
        )


def check_budget(grammar: CompiledGrammar | None, params: Any, where: str) -> None:
    """Refuse, before generating, a budget below the grammar's shortest output (with
    `close_within_budget`: such an output could never end complete)."""
    if grammar is None or not getattr(params, "close_within_budget", False):
        return
    need = Matcher(grammar).tokens_to_finish()
    budget = int(params.max_new_tokens)
    if need is not None and need > budget:
        raise GenerationError(
            f"{where}: the shortest output of the grammar takes {need} tokens, more than "
            f"max_new_tokens={budget}; raise max_new_tokens to at least {need} (or relax the "
            "constraint)"
        )
