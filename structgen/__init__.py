"""structgen: constrained decoding and structured output.

The public front: re-exports only (the contract: docs/design/api.md).
"""

from structgen import _compiled  # noqa: F401  (first: picks compiled or source modules)
from structgen.caches import cache_budget, cache_usage, clear_caches, set_cache_budget
from structgen.compiler import CompiledGrammar, CompileLimits, Compiler
from structgen.errors import (
    ArgumentError,
    GenerationError,
    GrammarError,
    LimitExceededError,
    RegexError,
    SchemaError,
    StructgenError,
    TokenizerError,
    UnsupportedSchemaError,
    ValidationAttempt,
    ValidationFailedError,
)
from structgen.integrations import LogitsProcessor
from structgen.masks import allocate_bitmask, apply_bitmask
from structgen.matcher import Matcher, fill_bitmasks
from structgen.schema import SchemaOptions
from structgen.vocab import Vocabulary

__version__ = "0.1.0.dev0"

# The generation loop needs torch: imported on first use, so `import structgen` stays light.
_GENERATE_NAMES = frozenset(
    {
        "BeamParams",
        "GenerationResult",
        "Generator",
        "PrefixCache",
        "PromptLookupDraft",
        "RequestMetrics",
        "SamplingParams",
        "Scheduler",
        "SpeculativeGenerator",
    }
)


# The user layer needs pydantic (and torch once a model runs): also imported on first use.
_API_NAMES = frozenset(
    {
        "LM",
        "Partial",
        "Tool",
        "ToolRun",
        "generate_object",
        "run_tools",
        "stream_object",
        "structured",
        "tool",
        "tool_call_grammar",
    }
)


def __getattr__(name: str) -> object:
    if name in _GENERATE_NAMES:
        from structgen import generate

        return getattr(generate, name)
    if name in _API_NAMES:
        from structgen import api

        return getattr(api, name)
    raise AttributeError(f"module 'structgen' has no attribute {name!r}")


__all__ = [
    "LM",
    "ArgumentError",
    "BeamParams",
    "CompileLimits",
    "CompiledGrammar",
    "Compiler",
    "GenerationError",
    "GenerationResult",
    "Generator",
    "GrammarError",
    "LimitExceededError",
    "LogitsProcessor",
    "Matcher",
    "Partial",
    "PrefixCache",
    "PromptLookupDraft",
    "RegexError",
    "RequestMetrics",
    "SamplingParams",
    "Scheduler",
    "SchemaError",
    "SchemaOptions",
    "SpeculativeGenerator",
    "StructgenError",
    "TokenizerError",
    "Tool",
    "ToolRun",
    "UnsupportedSchemaError",
    "ValidationAttempt",
    "ValidationFailedError",
    "Vocabulary",
    "__version__",
    "allocate_bitmask",
    "apply_bitmask",
    "cache_budget",
    "cache_usage",
    "clear_caches",
    "fill_bitmasks",
    "generate_object",
    "run_tools",
    "set_cache_budget",
    "stream_object",
    "structured",
    "tool",
    "tool_call_grammar",
]
