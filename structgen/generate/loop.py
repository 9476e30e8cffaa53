"""`Generator`: structgen's own decoding loop around a `transformers` causal LM.

Prefill once, decode with the KV cache, batch requests with left padding, one grammar and one set
of sampling rules per request, masks applied on the model's device, jump forward over forced
text, a prefix cache for shared system prompts, streaming, and per-request metrics. The step
itself lives in `batch.py`; this module checks requests and offers the entry points.
See docs/design/generation.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from structgen._args import describe
from structgen.compiler import CompiledGrammar
from structgen.errors import GenerationError
from structgen.generate.batch import DecodeBatch
from structgen.generate.beam import beam_search
from structgen.generate.model_io import ModelRunner
from structgen.generate.params import BeamParams, SamplingParams
from structgen.generate.prefix_cache import PrefixCache
from structgen.generate.quantize import quantize_weights
from structgen.generate.requests import (
    Prompt,
    Request,
    VocabularyCheck,
    check_budget,
    encode_prompt,
)
from structgen.generate.results import BeamHypothesis, GenerationResult
from structgen.vocab import Vocabulary

__all__ = ["Generator", "TextStream"]


class Generator:
    """Generate with `model` (a `transformers` causal LM, on any device) and its `tokenizer`.

    `prefix_cache`: a `PrefixCache`, a number of entries (0 turns it off), or None (off).
    `jump_forward`: feed tokens the grammar forces in one forward pass instead of sampling each.
    `quantize`: "int8" quantizes the model's weights in place (a quarter of the weight bytes,
    faster decoding on the CPU; on a GPU through torchao, the `gpu` extra), "int4" its linear
    layers in 4 bits (the embedding stays int8; on a GPU the model becomes bf16);
    `kv_cache`: "int8" stores keys and values as int8 with a scale per token and head (about
    27% of the bytes; see docs/guide/quantization.md).
    Compile grammars against `generator.vocab`.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        prefix_cache: PrefixCache | int | None = 4,
        jump_forward: bool = True,
        quantize: str | None = None,
        kv_cache: str | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        config = model.config
        size = int(
            getattr(config, "vocab_size", 0) or model.get_output_embeddings().weight.shape[0]
        )
        if quantize is not None and getattr(model, "structgen_quantized", None) != quantize:
            quantize_weights(model, quantize)  # (in place; docs/guide/quantization.md)
        #: the weight quantization the model runs with (None: as loaded)
        self.quantize: str | None = getattr(model, "structgen_quantized", None)
        self.vocab = Vocabulary.from_hf(
            tokenizer, size=size, generation_config=getattr(model, "generation_config", None)
        )
        self._vocab_check = VocabularyCheck(self.vocab, tokenizer)
        self.eos_token_ids = frozenset(self.vocab.eos_token_ids)
        pad = getattr(tokenizer, "pad_token_id", None)
        if pad is None:
            pad = self.vocab.eos_token_ids[0]
        self._runner = ModelRunner(model, int(pad), kv_cache=kv_cache)
        #: how the KV cache stores keys and values (None: the model's dtype; "int8")
        self.kv_cache = kv_cache
        context = getattr(config, "max_position_embeddings", None)
        self.context_length: int | None = int(context) if context else None
        if isinstance(prefix_cache, int):
            prefix_cache = PrefixCache(prefix_cache)
        self.prefix_cache = prefix_cache
        self.jump_forward = jump_forward

    @property
    def device(self) -> torch.device:
        device: torch.device = self._runner.device
        return device

    # ------------------------------------------------------------------ requests

    def encode(self, prompt: Prompt, *, chat: bool = False) -> list[int]:
        """The token ids a prompt becomes (chat messages through the chat template)."""
        return encode_prompt(self.tokenizer, prompt, chat=chat, where="prompt")

    def _requests(
        self,
        prompts: Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None,
        grammars: CompiledGrammar | Sequence[CompiledGrammar | None] | None,
        chat: bool,
    ) -> list[Request]:
        n = len(prompts)
        if n == 0:
            raise GenerationError("no prompts given")
        param_list = _per_request(params, n, "params", SamplingParams)
        grammar_list = _per_request(grammars, n, "grammars", CompiledGrammar)
        requests = []
        for i, (prompt, p, g) in enumerate(zip(prompts, param_list, grammar_list)):
            where = f"request {i}"
            if p is None:
                p = SamplingParams()
            elif isinstance(p, Mapping):
                raise GenerationError(
                    f"{where}: params must be SamplingParams, got a dict; write"
                    f" SamplingParams(**{dict(p)!r})"
                )
            elif not isinstance(p, SamplingParams):
                raise GenerationError(f"{where}: params must be SamplingParams, got {describe(p)}")
            if g is not None and not isinstance(g, CompiledGrammar):
                raise GenerationError(
                    f"{where}: grammar must be a CompiledGrammar (from generator.vocab's"
                    f" Compiler), got {describe(g)}"
                )
            if g is not None:
                self._vocab_check.check(g, where)
                check_budget(g, p, where)
            ids = encode_prompt(self.tokenizer, prompt, chat=chat, where=where)
            if self.context_length is not None and len(ids) >= self.context_length:
                raise GenerationError(
                    f"{where}: the prompt has {len(ids)} tokens; the model's context is "
                    f"{self.context_length} (max_position_embeddings)"
                )
            bad = [t for t in ids if not 0 <= t < self.vocab.size]
            if bad:
                raise GenerationError(f"{where}: token ids {bad[:5]} are outside the vocabulary")
            requests.append(Request(tuple(ids), g, p))
        return requests

    def _batch(self, requests: list[Request], use_prefix_cache: bool) -> DecodeBatch:
        return DecodeBatch(
            self._runner,
            self.vocab,
            requests,
            eos_token_ids=self.eos_token_ids,
            context_length=self.context_length,
            prefix_cache=self.prefix_cache if use_prefix_cache else None,
            jump_forward=self.jump_forward,
        )

    # ------------------------------------------------------------------ entry points

    @torch.inference_mode()
    def generate(
        self,
        prompt: Prompt,
        params: SamplingParams | None = None,
        *,
        grammar: CompiledGrammar | None = None,
        chat: bool = False,
        use_prefix_cache: bool = True,
    ) -> GenerationResult:
        """Generate for one prompt (text, token ids or chat messages)."""
        requests = self._requests([prompt], params, [grammar], chat)
        return self._batch(requests, use_prefix_cache).run()[0]

    @torch.inference_mode()
    def generate_batch(
        self,
        prompts: Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        grammars: CompiledGrammar | Sequence[CompiledGrammar | None] | None = None,
        chat: bool = False,
        use_prefix_cache: bool = True,
    ) -> list[GenerationResult]:
        """Generate for several prompts in one batch; `params`/`grammars`: one, or one each."""
        requests = self._requests(list(prompts), params, grammars, chat)
        return self._batch(requests, use_prefix_cache).run()

    def stream(
        self,
        prompt: Prompt,
        params: SamplingParams | None = None,
        *,
        grammar: CompiledGrammar | None = None,
        chat: bool = False,
        use_prefix_cache: bool = True,
    ) -> TextStream:
        """An iterator of text deltas; its `result` is set once it is exhausted."""
        requests = self._requests([prompt], params, [grammar], chat)
        with torch.inference_mode():
            return TextStream(self._batch(requests, use_prefix_cache))

    @torch.inference_mode()
    def beam_search(
        self,
        prompt: Prompt,
        params: BeamParams | None = None,
        *,
        grammar: CompiledGrammar | None = None,
        chat: bool = False,
    ) -> list[BeamHypothesis]:
        """Beam search for one prompt; the best hypotheses first (see `BeamParams`)."""
        params = params or BeamParams()
        if not isinstance(params, BeamParams):
            raise GenerationError(f"params must be BeamParams, got {params!r}")
        budget = SamplingParams(
            max_new_tokens=params.max_new_tokens, close_within_budget=params.close_within_budget
        )  # (checks the grammar's shortest output against the beams' budget)
        request = self._requests([prompt], budget, [grammar], chat)[0]
        return beam_search(
            self._runner,
            self.vocab,
            request,
            params,
            eos_token_ids=self.eos_token_ids,
            context_length=self.context_length,
        )


class TextStream:
    """Text deltas of one request as they are decoded; `result` once the stream is exhausted.

    A delta never ends inside a UTF-8 character or inside a possible stop string.
    """

    def __init__(self, batch: DecodeBatch) -> None:
        self._batch = batch
        self.result: GenerationResult | None = None

    def __iter__(self) -> Iterator[str]:
        batch = self._batch
        while not batch.done:
            with torch.inference_mode():  # not across the yield: the caller's code runs between
                batch.step()
            piece = batch.row_text_delta(0, final=batch.done)
            if piece:
                yield piece
        self.result = batch.results[0]


def _per_request(value: Any, n: int, name: str, kind: type) -> list[Any]:
    if value is None or isinstance(value, (kind, Mapping)):
        return [value] * n
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        raise GenerationError(
            f"{name}: expected a {kind.__name__}, or one per prompt, got {describe(value)}"
        )
    items = list(value)
    if len(items) != n:
        raise GenerationError(f"{name}: got {len(items)} for {n} prompts (give one, or one each)")
    return items
