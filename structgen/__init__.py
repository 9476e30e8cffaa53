"""structgen: constrained decoding and structured output.

The public front: re-exports only (see DESIGN.md §2 for the contract).
"""

from structgen.compiler import CompiledGrammar, CompileLimits, Compiler
from structgen.errors import (
    GenerationError,
    GrammarError,
    LimitExceededError,
    RegexError,
    SchemaError,
    StructgenError,
    TokenizerError,
    UnsupportedSchemaError,
)
from structgen.integrations import LogitsProcessor
from structgen.masks import allocate_bitmask, apply_bitmask
from structgen.matcher import Matcher
from structgen.vocab import Vocabulary

__version__ = "0.1.0.dev0"

__all__ = [
    "CompileLimits",
    "CompiledGrammar",
    "Compiler",
    "GenerationError",
    "GrammarError",
    "LimitExceededError",
    "LogitsProcessor",
    "Matcher",
    "RegexError",
    "SchemaError",
    "StructgenError",
    "TokenizerError",
    "UnsupportedSchemaError",
    "Vocabulary",
    "__version__",
    "allocate_bitmask",
    "apply_bitmask",
]
