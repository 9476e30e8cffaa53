"""What users touch: the `LM` handle and its one-call modes, the Pydantic decorator, tools and
the tool loop, semantic validators. Imports torch and transformers (unlike the compiler core)."""

from structgen.api.lm import LM, default_lm
from structgen.api.partial import parse_partial
from structgen.api.structured import (
    Partial,
    generate_object,
    generation_schema,
    stream_object,
    structured,
)

__all__ = [
    "LM",
    "Partial",
    "default_lm",
    "generate_object",
    "generation_schema",
    "parse_partial",
    "stream_object",
    "structured",
]
