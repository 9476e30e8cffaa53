"""structgen as SGLang's grammar backend: ``--grammar-backend structgen``.

SGLang loads general plugins from the ``sglang.srt.plugins`` entry-point group in every process
(launcher, scheduler, workers) before it parses its arguments; structgen's pyproject registers
`register` there. It adds ``structgen`` to the ``--grammar-backend`` choices and to SGLang's
grammar-backend registry, so ``sglang serve --grammar-backend structgen`` or
``sglang.Engine(grammar_backend="structgen")`` compile every ``json_schema``, ``regex`` and
``ebnf`` request with structgen. The grammar object is a thin shell around a `Matcher`; masks use
the shared packed-int32 bitmask layout, so SGLang's buffers, speculative tree walk and
``apply_vocab_mask`` work unchanged. Verified against the SGLang versions in
`VERIFIED_SGLANG_VERSIONS`; see docs/guide/sglang.md.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any

import torch
from sglang.srt.constrained.base_grammar_backend import (
    BaseGrammarBackend,
    BaseGrammarObject,
    InvalidGrammarObject,
    register_grammar_backend,
)

from structgen.compiler import SERVING_PREFETCH_SAMPLES, CompiledGrammar, Compiler
from structgen.errors import StructgenError
from structgen.grammar.ebnf import looks_like_ebnf
from structgen.masks import apply_bitmask
from structgen.masks._bitmask import numpy_rows, warm_numpy_bridge
from structgen.matcher import Matcher
from structgen.schema import SchemaOptions
from structgen.vocab import Vocabulary

__all__ = [
    "BACKEND_NAME",
    "VERIFIED_SGLANG_VERSIONS",
    "StructgenGrammar",
    "StructgenGrammarBackend",
    "register",
]

BACKEND_NAME = "structgen"
VERIFIED_SGLANG_VERSIONS = ("0.5.23",)

logger = logging.getLogger(__name__)


def register() -> None:
    """The plugin entry point: make ``structgen`` a grammar backend SGLang can be started with."""
    from sglang.srt.arg_groups.choices import GRAMMAR_BACKEND_CHOICES, add_grammar_backend_choices

    if BACKEND_NAME not in GRAMMAR_BACKEND_CHOICES:
        add_grammar_backend_choices([BACKEND_NAME])
    register_grammar_backend(BACKEND_NAME, _create_backend)
    try:
        from importlib.metadata import version

        found = version("sglang")
    except Exception:  # an uninstalled source checkout: nothing to compare
        return
    if found not in VERIFIED_SGLANG_VERSIONS:
        logger.warning(
            "structgen's SGLang backend is verified against SGLang %s; this is %s. SGLang's "
            "grammar-backend interface is public, so it should work; report it if not.",
            ", ".join(VERIFIED_SGLANG_VERSIONS),
            found,
        )


def _create_backend(server_args: Any, tokenizer: Any, vocab_size: int, eos_token_ids: Any) -> Any:
    from sglang.srt.runtime_context import get_serving

    serving = get_serving()
    compact = bool(getattr(serving, "constrained_json_disable_any_whitespace", False))
    max_ws = getattr(serving, "constrained_json_max_whitespace_cnt", None)
    if getattr(serving, "constrained_json_whitespace_pattern", None):
        logger.warning(
            "structgen ignores --constrained-json-whitespace-pattern: its JSON is written in "
            "json.dumps' layout (--constrained-json-disable-any-whitespace makes it compact)"
        )
    backend: Any = StructgenGrammarBackend(
        tokenizer,
        vocab_size=vocab_size,
        eos_token_ids=eos_token_ids,
        compact_json=compact,
        max_whitespace=max_ws,
    )
    return _with_reasoning(backend, serving, tokenizer)


def _with_reasoning(backend: Any, serving: Any, tokenizer: Any) -> Any:
    """With `--reasoning-parser`, the backend inside SGLang's `ReasonerGrammarBackend`, as
    SGLang wraps its built-in backends (a registered backend is returned before that step): the
    think block stays free and the grammar starts after it, as the parser reads it."""
    parser_name = getattr(serving, "reasoning_parser", None)
    if not parser_name:
        return backend
    from sglang.srt.constrained.reasoner_grammar_backend import ReasonerGrammarBackend
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    parser = ReasoningParser(model_type=parser_name, stream_reasoning=False, tokenizer=tokenizer)
    return ReasonerGrammarBackend(
        backend,
        parser,
        tokenizer,
        enable_strict_thinking=bool(getattr(serving, "enable_strict_thinking", False)),
    )


class StructgenGrammar(BaseGrammarObject):  # type: ignore[misc]
    """One request's grammar state for SGLang: a `Matcher` behind SGLang's grammar interface."""

    def __init__(self, matcher: Matcher) -> None:
        super().__init__()
        self.matcher = matcher

    def accept_token(self, token: int) -> None:
        """Advance by `token`; SGLang expects a ValueError when the grammar refuses it."""
        if self.matcher.is_terminated():
            return  # SGLang may feed tokens after EOS; the output is already complete
        if not self.matcher.accept_token(int(token)):
            error = self.matcher.error
            raise ValueError(
                f"structgen: token {int(token)} is not allowed by the grammar at this point"
                + (f" ({error})" if error is not None else "")
            )

    def rollback(self, k: int) -> None:
        if k > 0:
            self.matcher.rollback(k)

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> torch.Tensor:
        """An all-allowed packed int32 mask (rows nobody fills stay unconstrained)."""
        return StructgenGrammarBackend.allocate_vocab_mask(vocab_size, batch_size, device)

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        self.matcher.fill_bitmask(numpy_rows(vocab_mask), idx)  # (one view for the batch's rows)

    @staticmethod
    def reset_vocab_mask(vocab_mask: torch.Tensor) -> None:
        vocab_mask.fill_(-1)

    @staticmethod
    def move_vocab_mask(vocab_mask: torch.Tensor, device: Any) -> torch.Tensor:
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
        apply_bitmask(logits, vocab_mask)

    def copy(self) -> StructgenGrammar:
        """An independent grammar in the same state (SGLang copies its cached templates)."""
        return StructgenGrammar(self.matcher.copy())

    def try_jump_forward(self, tokenizer: Any) -> tuple[list[int], str] | None:
        forced = self.matcher.forced_tokens()
        return (forced, "") if forced else None

    def jump_forward_str_state(self, helper: tuple[list[int], str]) -> tuple[str, int]:
        return "", -1

    def jump_and_retokenize(
        self, old_output_ids: list[int], new_output_ids: list[int], next_state: int
    ) -> None:
        pass

    def __repr__(self) -> str:
        return f"StructgenGrammar({self.matcher!r})"


class StructgenGrammarBackend(BaseGrammarBackend):  # type: ignore[misc]
    """Compiles SGLang's ``json``, ``regex`` and ``ebnf`` requests with one shared `Compiler`.

    ``ebnf`` requests may be GBNF-style EBNF (``root ::= ...``, what SGLang documents) or Lark
    (``start: ...``); structgen reads both. Compile errors come back as SGLang's
    ``InvalidGrammarObject`` carrying structgen's message (with its line, column or JSON pointer).
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        vocab_size: int,
        eos_token_ids: Any = None,
        compact_json: bool = False,
        max_whitespace: int | None = None,
    ) -> None:
        super().__init__()
        size = max(int(vocab_size), len(tokenizer))
        eos = sorted(int(e) for e in eos_token_ids) if eos_token_ids else None
        self.vocab = Vocabulary.from_hf(tokenizer, size, eos_token_ids=eos)
        self.compiler = Compiler(self.vocab)
        # what the first requests' masks would build inside batch steps, built at the start
        self.compiler.warm_up()
        warm_numpy_bridge()
        # generate mode's layout (json.dumps' separators), or none with compact_json
        options: dict[str, Any] = {"whitespace": "compact" if compact_json else "auto"}
        if max_whitespace is not None:
            options["max_whitespace"] = int(max_whitespace)
        self.schema_options = SchemaOptions(**options)

    # the mask functions at backend level too, as SGLang's ReasonerGrammarBackend takes them
    @staticmethod
    def allocate_vocab_mask(vocab_size: int, batch_size: int, device: Any) -> torch.Tensor:
        return torch.full((batch_size, (vocab_size + 31) // 32), -1, dtype=torch.int32)

    move_vocab_mask = staticmethod(StructgenGrammar.move_vocab_mask)
    apply_vocab_mask = staticmethod(StructgenGrammar.apply_vocab_mask)

    def _grammar(self, build: Any, kind: str) -> Any:
        try:
            compiled: CompiledGrammar = build()
        except (StructgenError, ValueError, TypeError) as exc:
            logger.info("structgen refused a %s grammar: %s", kind, exc)
            return InvalidGrammarObject(f"{type(exc).__name__}: {exc}")
        matcher = Matcher(compiled)
        # the first masks now, on SGLang's grammar thread (as vLLM's backend does): the first
        # state's, those along the text every output starts with, and along a few random outputs
        matcher.allowed_mask()
        with contextlib.suppress(StructgenError):  # (a limit met: the request's steps report it)
            compiled.prefetch_masks(samples=SERVING_PREFETCH_SAMPLES)
        return StructgenGrammar(matcher)

    def dispatch_json(self, key_string: str) -> Any:
        if key_string == "$$ANY$$":  # SGLang's spelling of JSON mode (any JSON value)
            return self._grammar(
                lambda: self.compiler.json(options=self.schema_options, any_value=True), "json"
            )
        return self._grammar(
            lambda: self.compiler.json_schema(json.loads(key_string), options=self.schema_options),
            "json",
        )

    def dispatch_regex(self, key_string: str) -> Any:
        return self._grammar(lambda: self.compiler.regex(key_string), "regex")

    def dispatch_ebnf(self, key_string: str) -> Any:
        if looks_like_ebnf(key_string):
            return self._grammar(lambda: self.compiler.ebnf(key_string), "ebnf")
        return self._grammar(lambda: self.compiler.grammar(key_string), "lark")

    def dispatch_structural_tag(self, key_string: str) -> Any:
        return self._grammar(
            lambda: self.compiler.structural_tag(key_string, options=self.schema_options),
            "structural_tag",
        )
