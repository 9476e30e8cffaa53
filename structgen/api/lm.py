"""`LM`: a model made ready for structured generation — one object, one call per mode.

It bundles what every helper needs: the own generation loop (`Generator`), a `Compiler` over the
model's vocabulary, and the chat template. Each mode (free text, regex, choice, grammar, JSON,
JSON Schema) is one call that builds the messages, compiles (cached), generates and returns the
text or the parsed value. Higher layers (the Pydantic decorator, tools, validators) build on
`LM.run`. See docs/design/api.md.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any, Literal

from structgen._args import describe, expect_bool, expect_str
from structgen.compiler import CompiledGrammar, Compiler
from structgen.errors import GenerationError

if TYPE_CHECKING:
    from structgen.generate import GenerationResult, Generator, SamplingParams
    from structgen.schema import SchemaOptions

__all__ = ["LM", "Message", "Prompt", "default_lm"]

Message = Mapping[str, Any]
Prompt = str | Sequence[Message]

# Structured answers are longer than chat replies; a grammar that is cut short is an error.
DEFAULT_MAX_NEW_TOKENS = 512


def split_think(text: str) -> tuple[str, str]:
    """(the think block, the answer) of an output that may start with `<think>…</think>`
    (and Qwen3's blank line after it); ("", text) without a block."""
    thought, sep, answer = text.partition("</think>")
    if not sep:
        return "", text
    return thought.removeprefix("<think>").strip("\n"), answer.removeprefix("\n\n")


_ANALYSIS = "<|channel|>analysis<|message|>"
_FINAL = "<|channel|>final<|message|>"


def split_harmony(text: str) -> tuple[str, str]:
    """(the analysis message, the rest) of a gpt-oss output in Harmony's form (special tokens
    written as their names): the answer is what follows `<|channel|>final<|message|>`, or the
    message after the analysis (a tool call) when there is no final one."""
    thought = ""
    rest = text
    if text.startswith(_ANALYSIS):
        thought, _, rest = text[len(_ANALYSIS) :].partition("<|end|>")
        rest = rest.removeprefix("<|start|>assistant")
    return thought, rest.removeprefix(_FINAL)


class LM:
    """A `transformers` causal LM and its tokenizer, ready for constrained generation.

    `system`: a system prompt put before every conversation this object starts (None: none).
    `quantize`: "int8" (or "int4") quantizes the model's weights in place; `kv_cache`: "int8"
    stores the KV cache as int8 (see `Generator`).
    Prompts are text (one user message) or a list of chat messages; they go through the
    tokenizer's chat template when it has one, else the text is used as is.
    Sampling options are `SamplingParams` fields given as keywords (`temperature=0.7`,
    `max_new_tokens=256`, `seed=1`, ...); the default is greedy with 512 new tokens.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        system: str | None = None,
        prefix_cache: int = 4,
        compiler: Compiler | None = None,
        quantize: str | None = None,
        kv_cache: str | None = None,
    ) -> None:
        from structgen.generate import Generator

        self.model = model
        self.tokenizer = tokenizer
        self.system = system
        self.generator: Generator = Generator(
            model, tokenizer, prefix_cache=prefix_cache, quantize=quantize, kv_cache=kv_cache
        )
        self.compiler = compiler or Compiler(self.generator.vocab)
        self.has_chat_template = bool(getattr(tokenizer, "chat_template", None))

    # ------------------------------------------------------------------ construction

    @classmethod
    def default(cls, *, device: str | None = None) -> LM:
        """The embedded default model (SmolLM2-135M-Instruct), loaded once per process."""
        return default_lm(device=device)

    @classmethod
    def from_pretrained(
        cls,
        path: str,
        *,
        device: str | None = None,
        system: str | None = None,
        quantize: str | None = None,
    ) -> LM:
        """Load a local `transformers` model folder (or a Hub name when the Hub is reachable)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer: Any = AutoTokenizer.from_pretrained(path)
        model: Any = AutoModelForCausalLM.from_pretrained(path)
        if device is not None:
            model = model.to(device)
        model.eval()
        return cls(model, tokenizer, system=system, quantize=quantize)

    # ------------------------------------------------------------------ the core call

    def messages(self, prompt: Prompt, *, system: str | None = None) -> list[dict[str, Any]]:
        """The conversation a prompt stands for, with the system prompt first (if any)."""
        if isinstance(prompt, str):
            items: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        else:
            if not isinstance(prompt, (list, tuple)) or not all(
                isinstance(m, Mapping) and "role" in m for m in prompt
            ):
                raise GenerationError(
                    "a prompt is text or a non-empty list of chat messages"
                    f" ({{'role': ..., 'content': ...}}), got {describe(prompt)}"
                )
            items = [dict(m) for m in prompt]
            if not items:
                raise GenerationError("a prompt is text or a non-empty list of chat messages")
        system = system if system is not None else self.system
        if system and items[0].get("role") != "system":
            items.insert(0, {"role": "system", "content": system})
        return items

    def params(self, params: SamplingParams | None = None, **options: Any) -> SamplingParams:
        """`SamplingParams` from keywords (unknown names raise `GenerationError`)."""
        from structgen.generate import SamplingParams

        if params is not None and options:
            raise GenerationError("give either params=SamplingParams(...) or keywords, not both")
        if params is not None:
            return params
        names = {f.name for f in fields(SamplingParams)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise GenerationError(
                f"unknown sampling option(s) {unknown}; valid: {', '.join(sorted(names))}"
            )
        options.setdefault("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        return SamplingParams(**options)

    def run(
        self,
        prompt: Prompt,
        grammar: CompiledGrammar | None = None,
        *,
        system: str | None = None,
        params: SamplingParams | None = None,
        reasoning: bool = False,
        max_think_tokens: int | None = None,
        **options: Any,
    ) -> GenerationResult:
        """Generate once under `grammar` (None: free text); a grammar cut short raises.

        Raises `GenerationError` when the output ends before the constraint is complete
        (`max_new_tokens` or the context ran out), so callers never get a partial value.
        `reasoning`: the model thinks freely in a `<think>…</think>` block first
        (`Compiler.reasoning`; the block opens by itself when the vocabulary has no `<think>`
        token; gpt-oss: an analysis message, then the answer in the final channel), and
        budget-aware closing ends it in time for the answer; `text` is then the answer and
        `GenerationResult.reasoning` the block; `max_think_tokens` bounds a `<think>` block.
        `regex`, `choice`, `grammar` and `json` take both too.
        """
        expect_bool(reasoning, "reasoning")
        if reasoning and grammar is not None:
            grammar = self.reasoning_grammar(grammar, max_think_tokens=max_think_tokens)
        sampling = self.params(params, **options)
        model_input, chat = self.model_input(prompt, system=system)
        result = self.generator.generate(model_input, sampling, grammar=grammar, chat=chat)
        if grammar is not None and not (result.finish_reason in ("eos", "stop") or result.complete):
            raise GenerationError(
                f"the output stopped ({result.finish_reason}) after "
                f"{result.metrics.output_tokens} tokens before the {grammar.kind} constraint was "
                f"complete; raise max_new_tokens (now {sampling.max_new_tokens}). "
                f"Partial output: {result.text[:200]!r}"
            )
        if reasoning and grammar is not None:
            result = self.split_reasoning(result)
        return result

    @property
    def reasoning_style(self) -> Literal["think", "harmony"]:
        """How this model thinks: "harmony" (gpt-oss: an analysis message, then the answer in
        the final channel) where its tokenizer is Harmony's, else "think" (`<think>…</think>`)."""
        from structgen.api.tools.formats import resolve_tool_format

        return "harmony" if resolve_tool_format(self, "auto") == "harmony" else "think"

    def reasoning_grammar(
        self, grammar: CompiledGrammar, *, max_think_tokens: int | None = None
    ) -> CompiledGrammar:
        """`grammar` after a free think block (`Compiler.reasoning`) in the model's own style:
        `<think>…</think>` (open from the start when the vocabulary has no `<think>` token), or
        for gpt-oss an optional analysis message and the final channel."""
        return self.compiler.reasoning(
            grammar, max_think_tokens=max_think_tokens, style=self.reasoning_style
        )

    def split_reasoning(self, result: GenerationResult) -> GenerationResult:
        """`result` with `text` the answer and `reasoning` the think block before it."""
        if self.reasoning_style == "harmony":
            from structgen.api.tools.formats import render_tokens

            written = render_tokens(self.generator.vocab, result.token_ids)
            thought, answer = split_harmony(written)
        else:
            thought, answer = split_think(result.text)
        return replace(result, text=answer, reasoning=thought)

    def model_input(
        self, prompt: Prompt, *, system: str | None = None
    ) -> tuple[list[dict[str, Any]] | str, bool]:
        """What `Generator.generate`/`stream` take for `prompt`, and their `chat` flag.

        Chat messages when the tokenizer has a chat template; otherwise the messages' contents
        joined as plain text (a base model continues it).
        """
        messages = self.messages(prompt, system=system)
        if self.has_chat_template:
            return messages, True
        return "\n\n".join(str(m.get("content", "")) for m in messages) + "\n", False

    # ------------------------------------------------------------------ one call per mode

    def text(self, prompt: Prompt, **options: Any) -> str:
        """Free text (no constraint)."""
        return self.run(prompt, None, **options).text

    def regex(self, prompt: Prompt, pattern: str, **options: Any) -> str:
        """Text that fully matches `pattern` (Python `re` syntax)."""
        return self.run(prompt, self.compiler.regex(pattern), **options).text

    def choice(self, prompt: Prompt, options: Sequence[str], **sampling: Any) -> str:
        """Exactly one of `options` (classification)."""
        return self.run(prompt, self.compiler.choice(options), **sampling).text

    def grammar(
        self, prompt: Prompt, grammar: str, *, start: str | None = None, **options: Any
    ) -> str:
        """A sentence of a grammar: Lark text, a shipped name ("json", "sql_select"...), or
        GBNF-style EBNF (``root ::= ...``). `start` defaults to ``start`` (Lark) / ``root``."""
        from structgen.grammar.ebnf import looks_like_ebnf
        from structgen.grammar.lark_frontend import builtin_names, load_builtin

        expect_str(grammar, "grammar")
        if grammar in builtin_names():
            compiled = self.compiler.grammar(load_builtin(grammar), start=start or "start")
        elif looks_like_ebnf(grammar):
            compiled = self.compiler.ebnf(grammar, start=start or "root")
        else:
            compiled = self.compiler.grammar(grammar, start=start or "start")
        return self.run(prompt, compiled, **options).text

    def json(
        self,
        prompt: Prompt,
        schema: Any = None,
        *,
        schema_options: SchemaOptions | None = None,
        **options: Any,
    ) -> Any:
        """A parsed JSON value, valid against `schema` (dict, JSON text, Pydantic class) if any.

        Without a schema: a JSON object (OpenAI's `json_object`); `schema={}` allows any value.
        """
        if schema is None:
            grammar = self.compiler.json(options=schema_options)
        else:
            grammar = self.compiler.json_schema(schema, options=schema_options)
        return json.loads(self.run(prompt, grammar, **options).text)

    def __repr__(self) -> str:
        name = getattr(self.model.config, "_name_or_path", "") or type(self.model).__name__
        return f"LM({name!r}, vocab={self.generator.vocab.size}, device={self.generator.device})"


_DEFAULT: dict[str | None, LM] = {}
_DEFAULT_LOCK = threading.Lock()


def default_lm(*, device: str | None = None) -> LM:
    """The embedded default model as an `LM`, loaded on first use and then shared."""
    with _DEFAULT_LOCK:
        lm = _DEFAULT.get(device)
        if lm is None:
            from structgen._assets import load_default_model

            model, tokenizer = load_default_model(device=device)
            lm = _DEFAULT[device] = LM(model, tokenizer)
        return lm
