"""structgen as a vLLM (V1) structured-output backend (``backend=structgen``).

vLLM has no backend registry: the backend name is a ``Literal`` on ``StructuredOutputsConfig``,
requests are validated per backend in ``SamplingParams._validate_structured_outputs`` and the
engine core picks the backend class in ``StructuredOutputManager.grammar_init`` from a fixed
list. vLLM loads general plugins (entry-point group ``vllm.general_plugins``) in every process
before it builds its argument parser, and structgen registers `register` there; it adds
``"structgen"`` to that ``Literal`` and wraps those three places (and offline beam search) so
that, when the user selects structgen, structgen validates and compiles the request. With any
other backend selected, vLLM runs exactly as before.

Because the hooks reach into vLLM internals, they are verified against the versions in
`VERIFIED_VLLM_VERSIONS`. On any other version selecting structgen fails loudly (engine start
and every request raise, naming the versions) unless ``STRUCTGEN_VLLM_UNVERIFIED=1`` is set.
See docs/guide/vllm.md.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import typing
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from vllm.v1.structured_output.backend_types import (
    StructuredOutputBackend,
    StructuredOutputGrammar,
    StructuredOutputOptions,
)

from structgen.compiler import SERVING_PREFETCH_SAMPLES, CompiledGrammar, Compiler
from structgen.errors import StructgenError
from structgen.grammar.ebnf import looks_like_ebnf
from structgen.masks._bitmask import numpy_rows, warm_numpy_bridge
from structgen.matcher import Matcher
from structgen.vocab import Vocabulary

__all__ = [
    "BACKEND_NAME",
    "VERIFIED_VLLM_VERSIONS",
    "StructgenBackend",
    "StructgenGrammar",
    "check_vllm_version",
    "register",
]

BACKEND_NAME = "structgen"
VERIFIED_VLLM_VERSIONS = ("0.33.0",)
UNVERIFIED_ENV = "STRUCTGEN_VLLM_UNVERIFIED"

logger = logging.getLogger(__name__)
_registered = False


# ----------------------------------------------------------------------------- backend


@dataclass
class StructgenGrammar(StructuredOutputGrammar):  # type: ignore[misc]
    """One request's grammar state for vLLM: a `Matcher` behind vLLM's grammar interface."""

    matcher: Matcher = field(repr=False)
    num_processed_tokens: int = field(default=0, repr=False)

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        """Advance by `tokens`; False when one is refused. Tokens after EOS are ignored."""
        for token in tokens:
            if self.matcher.is_terminated():
                break
            if not self.matcher.accept_token(int(token)):
                logger.error(
                    "structgen refused token %s for request %s%s",
                    token,
                    request_id,
                    f" ({self.matcher.error})" if self.matcher.error else "",
                )
                return False
            self.num_processed_tokens += 1
        return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        """The longest prefix of `tokens` the grammar accepts; the state does not change."""
        matcher = self.matcher
        accepted: list[int] = []
        for token in tokens:
            if matcher.is_terminated() or not matcher.accept_token(int(token)):
                break
            accepted.append(token)
        if accepted:
            matcher.rollback(len(accepted))  # advance and roll back: no copy of the history
        return accepted

    def rollback(self, num_tokens: int) -> None:
        if num_tokens > 0:
            self.matcher.rollback(num_tokens)
            self.num_processed_tokens -= num_tokens

    def fill_bitmask(self, bitmask: torch.Tensor, batch_index: int) -> None:
        self.matcher.fill_bitmask(numpy_rows(bitmask), batch_index)

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    def reset(self) -> None:
        self.matcher.reset()
        self.num_processed_tokens = 0


@dataclass
class StructgenBackend(StructuredOutputBackend):  # type: ignore[misc]
    """vLLM's engine-level backend: one `Compiler` over the model's vocabulary.

    ``grammar`` requests may be GBNF-style EBNF (``root ::= ...``) or Lark (``start: ...``);
    ``choice`` compiles to an exact alternation; ``json_object`` is any JSON object. A request's
    stop-token ids (EOS and the user's) end the output and are allowed only where the grammar
    is complete.
    """

    def __post_init__(self) -> None:
        check_vllm_version()
        tokenizer = self.tokenizer
        if getattr(tokenizer, "is_tekken", None) is not None:
            raise ValueError(
                "structgen reads Hugging Face tokenizers; start vLLM with --tokenizer-mode hf "
                "for this Mistral model"
            )
        size = max(int(self.vocab_size), len(tokenizer))
        self.vocab = Vocabulary.from_hf(tokenizer, size)
        self.compiler = Compiler(self.vocab)
        # What the first requests' masks would build inside batch steps, built at the start:
        # the vocabulary's tables, and torch's numpy bridge (vLLM allocates its bitmask inside
        # the first batch step; see `warm_numpy_bridge`)
        self.compiler.warm_up()
        warm_numpy_bridge()
        # vLLM's batch bitmask (`allocate_token_bitmask`), made now at the size vLLM asks for:
        # fresh memory, faulted in page by page, cost ~115 us of the first batch step
        self._bitmask: torch.Tensor | None = None
        config = getattr(self.vllm_config, "scheduler_config", None)
        rows = getattr(config, "max_num_seqs", None)
        speculative = getattr(self.vllm_config, "num_speculative_tokens", 0)
        if isinstance(rows, int) and isinstance(speculative, int) and rows > 0:
            self._bitmask = self._new_bitmask(rows * (1 + speculative))

    def compile(self, request_type: StructuredOutputOptions, grammar_spec: str) -> CompiledGrammar:
        """The compiled constraint of one request (errors are structgen's, with positions)."""
        return _compile(self.compiler, request_type, grammar_spec)

    def compile_grammar(
        self,
        request_type: StructuredOutputOptions,
        grammar_spec: str,
        stop_token_ids: set[int] | None = None,
    ) -> StructgenGrammar:
        compiled = self.compile(request_type, grammar_spec)
        stops = sorted(stop_token_ids) if stop_token_ids else None
        matcher = Matcher(compiled, stop_token_ids=stops)
        # The first masks now, on vLLM's compile thread (the request waits for it anyway), not
        # in the first batch steps that every running request shares: the first state's,
        # those along the text every output starts with, and those along a few random outputs
        # (up to 20 ms: most states of a model's text do not depend on its words); a cached
        # grammar has them.
        matcher.allowed_mask()
        with contextlib.suppress(StructgenError):  # (a limit met: the request's steps report it)
            compiled.prefetch_masks(samples=SERVING_PREFETCH_SAMPLES)
        return StructgenGrammar(matcher=matcher)

    def allocate_token_bitmask(self, max_num_seqs: int) -> torch.Tensor:
        made, self._bitmask = self._bitmask, None  # (handed out once: vLLM keeps it)
        if made is None or made.shape[0] != max_num_seqs:
            made = self._new_bitmask(max_num_seqs)
        return made

    def _new_bitmask(self, rows: int) -> torch.Tensor:
        # (numpy's memory, which the tensor shares: `torch.full` cost ~250 us inside vLLM's first
        # batch step, numpy's and the tensor's making ~180 more)
        made = torch.from_numpy(np.full((rows, (self.vocab_size + 31) // 32), -1, np.int32))
        numpy_rows(made)  # (its numpy view, for the fills)
        return made

    def destroy(self) -> None:
        pass


def _compile(compiler: Compiler, request_type: Any, spec: str) -> CompiledGrammar:
    kind = request_type.name
    if kind == "JSON":
        return compiler.json_schema(json.loads(spec))
    if kind == "JSON_OBJECT":
        return compiler.json_schema({"type": "object"})
    if kind == "REGEX":
        return compiler.regex(spec)
    if kind == "CHOICE":
        options = json.loads(spec)
        if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
            raise ValueError("choice must be a list of strings")
        return compiler.choice(options)
    if kind == "GRAMMAR":
        return compiler.ebnf(spec) if looks_like_ebnf(spec) else compiler.grammar(spec)
    if kind == "STRUCTURAL_TAG":
        return compiler.structural_tag(spec)
    raise ValueError(
        f"structgen does not support {kind.lower()} requests; use a JSON schema, regex, "
        "choice, grammar or structural tag"
    )


def _check_syntax(structured: Any) -> None:
    """Cheap front-end checks so a malformed request is a 400, not an engine-side failure."""
    from structgen.automata import parse_regex
    from structgen.grammar.ebnf import ebnf_to_ir
    from structgen.grammar.lark_frontend import lark_to_ir

    if structured.structural_tag is not None:
        tag = json.loads(structured.structural_tag)  # (the rest needs the vocabulary)
        if not isinstance(tag, dict):
            raise ValueError("a structural tag is a JSON object")
    if structured.json is not None and isinstance(structured.json, str):
        json.loads(structured.json)
    if structured.regex is not None:
        parse_regex(structured.regex)
    if structured.choice is not None and not all(isinstance(c, str) for c in structured.choice):
        raise ValueError("choice must be a list of strings")
    grammar = structured.grammar
    if isinstance(grammar, str):
        if looks_like_ebnf(grammar):
            ebnf_to_ir(grammar)
        else:
            lark_to_ir(grammar)


# ----------------------------------------------------------------------------- version gate


def check_vllm_version() -> None:
    """Raise unless this vLLM is one the hooks are verified against (or the user opted in)."""
    import vllm

    found = str(getattr(vllm, "__version__", "unknown"))
    if found in VERIFIED_VLLM_VERSIONS or os.environ.get(UNVERIFIED_ENV) == "1":
        return
    raise RuntimeError(
        f"structgen's vLLM backend is verified against vLLM {', '.join(VERIFIED_VLLM_VERSIONS)} "
        f"and this is vLLM {found}: it patches vLLM internals that change between releases. "
        f"Install a verified vLLM, or set {UNVERIFIED_ENV}=1 to try it anyway."
    )


# ----------------------------------------------------------------------------- the hooks


def register() -> None:
    """The plugin entry point: make ``structgen`` a structured-output backend vLLM accepts.

    Idempotent (vLLM loads plugins once per process, but several times per deployment).
    """
    global _registered
    if _registered:
        return
    try:
        _allow_backend_name()
        _hook_request_validation()
        _hook_manager()
        _hook_beam_search()
    except Exception as exc:  # never take vLLM down for users who do not select structgen
        import vllm

        logger.error(
            "structgen could not add its structured-output backend to vLLM %s (verified: %s): "
            "%s: %s. The 'structgen' backend is unavailable in this process.",
            getattr(vllm, "__version__", "unknown"),
            ", ".join(VERIFIED_VLLM_VERSIONS),
            type(exc).__name__,
            exc,
        )
        return
    _registered = True


def _allow_backend_name() -> None:
    from pydantic.dataclasses import rebuild_dataclass
    from vllm.config import structured_outputs as config_module

    cls = config_module.StructuredOutputsConfig
    names = typing.get_args(cls.__annotations__["backend"])
    if BACKEND_NAME in names:
        return
    widened = typing.Literal[(*names, BACKEND_NAME)]  # type: ignore[valid-type]
    cls.__annotations__["backend"] = widened
    cls.__dataclass_fields__["backend"].type = widened
    config_module.StructuredOutputsBackend = widened
    rebuild_dataclass(cls, force=True)
    # VllmConfig's validator embeds the nested config's schema: rebuild it from the new one.
    from vllm.config import VllmConfig

    rebuild_dataclass(VllmConfig, force=True)


def _hook_request_validation() -> None:
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingParams

    original = SamplingParams._validate_structured_outputs
    if getattr(original, "__structgen_hook__", False):
        return

    def _validate_structured_outputs(
        self: Any, model_config: Any, structured_outputs_config: Any, tokenizer: Any
    ) -> None:
        if (
            structured_outputs_config is None
            or self.structured_outputs is None
            or structured_outputs_config.backend != BACKEND_NAME
        ):
            original(self, model_config, structured_outputs_config, tokenizer)
            return
        try:
            check_vllm_version()
        except RuntimeError as exc:
            raise VLLMValidationError(str(exc)) from None
        structured = self.structured_outputs
        if getattr(model_config, "is_diffusion", False):
            raise VLLMValidationError(
                "structured outputs need left-to-right decoding; diffusion models are not supported"
            )
        if tokenizer is None:
            raise VLLMValidationError(
                "structured outputs need a tokenizer (skip_tokenizer_init is set)"
            )
        if structured._backend and structured._backend != BACKEND_NAME:
            raise VLLMValidationError(
                f"Request-level structured output backend selection is not supported: the "
                f"request asks for {structured._backend!r} and vLLM runs {BACKEND_NAME!r}"
            )
        structured._backend = BACKEND_NAME
        for name in ("json", "grammar", "structural_tag"):
            value = getattr(structured, name)
            if isinstance(value, str) and not value.strip():
                raise VLLMValidationError(f"structured_outputs.{name} cannot be an empty string")
        if isinstance(structured.choice, list) and not structured.choice:
            raise VLLMValidationError("structured_outputs.choice cannot be an empty list")
        if structured.json_object is False:
            raise VLLMValidationError("structured_outputs.json_object must be True if set")
        try:
            _check_syntax(structured)
        except (StructgenError, ValueError) as exc:
            raise VLLMValidationError(f"structgen: {exc}") from None
        structured.__post_init__()

    _validate_structured_outputs.__structgen_hook__ = True  # type: ignore[attr-defined]
    SamplingParams._validate_structured_outputs = _validate_structured_outputs


def _hook_manager() -> None:
    from vllm.v1.structured_output import StructuredOutputManager

    original_init = StructuredOutputManager.__init__
    original_grammar_init = StructuredOutputManager.grammar_init
    if getattr(original_grammar_init, "__structgen_hook__", False):
        return

    def __init__(self: Any, vllm_config: Any) -> None:
        config = getattr(vllm_config, "structured_outputs_config", None)
        if getattr(config, "backend", None) == BACKEND_NAME:
            check_vllm_version()  # fail at engine start, not at the first request
        original_init(self, vllm_config)

    def grammar_init(self: Any, request: Any) -> None:
        params = request.sampling_params
        structured = getattr(params, "structured_outputs", None) if params else None
        if (
            request.structured_output_request is not None
            and self.backend is None
            and structured is not None
            and structured._backend == BACKEND_NAME
        ):
            self.backend = StructgenBackend(
                self.vllm_config,
                tokenizer=self.tokenizer,
                vocab_size=self.vllm_config.model_config.get_vocab_size(),
            )
            self.backend_name = BACKEND_NAME
        original_grammar_init(self, request)

    grammar_init.__structgen_hook__ = True  # type: ignore[attr-defined]
    StructuredOutputManager.__init__ = __init__
    StructuredOutputManager.grammar_init = grammar_init


def _hook_beam_search() -> None:
    try:
        from vllm.entrypoints.generate.beam_search import offline
    except ImportError:  # the offline beam-search path moved: only that path loses structgen
        logger.warning("structgen: vLLM's offline beam search was not found; not hooked")
        return
    owner = next(
        (
            obj
            for obj in vars(offline).values()
            if isinstance(obj, type) and hasattr(obj, "_init_beam_search_structured_output")
        ),
        None,
    )
    if owner is None:
        logger.warning("structgen: vLLM's offline beam search was not found; not hooked")
        return
    original = owner._init_beam_search_structured_output
    if getattr(original, "__structgen_hook__", False):
        return

    def _init_beam_search_structured_output(
        self: Any, structured_outputs: Any, tokenizer: Any
    ) -> Any:
        vllm_config = self.llm_engine.vllm_config
        config = vllm_config.structured_outputs_config
        name = structured_outputs._backend or getattr(config, "backend", None)
        if name != BACKEND_NAME:
            return original(self, structured_outputs, tokenizer)
        from vllm.v1.structured_output.request import get_structured_output_key

        structured_outputs._backend = BACKEND_NAME
        backend = StructgenBackend(
            vllm_config, tokenizer=tokenizer, vocab_size=self.model_config.get_vocab_size()
        )
        key = get_structured_output_key(structured_outputs)
        return backend, key, backend.allocate_token_bitmask(1)

    _init_beam_search_structured_output.__structgen_hook__ = True  # type: ignore[attr-defined]
    owner._init_beam_search_structured_output = _init_beam_search_structured_output
