"""Integrations with other libraries (transformers; later serving engines)."""

from structgen.integrations.transformers import LogitsProcessor

__all__ = ["LogitsProcessor"]
