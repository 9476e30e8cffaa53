"""What users touch: the `LM` handle and its one-call modes, the Pydantic decorator, tools and
the tool loop, semantic validators. Imports torch and transformers (unlike the compiler core)."""

from structgen.api.lm import LM, default_lm

__all__ = ["LM", "default_lm"]
