"""structgen: constrained decoding and structured output.

The public front: re-exports only (see DESIGN.md §2 for the contract).
"""

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
from structgen.vocab import Vocabulary

__version__ = "0.1.0.dev0"

__all__ = [
    "GenerationError",
    "GrammarError",
    "LimitExceededError",
    "RegexError",
    "SchemaError",
    "StructgenError",
    "TokenizerError",
    "UnsupportedSchemaError",
    "Vocabulary",
    "__version__",
]
