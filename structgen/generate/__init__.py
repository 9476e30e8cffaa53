"""structgen's own decoding loop: `Generator`, the sampling rules, the prefix cache.

Needs torch and transformers (imported by this subpackage, not by `import structgen`).
See docs/design/generation.md.
"""

from structgen.generate.loop import Generator, TextStream
from structgen.generate.params import BeamParams, SamplingParams
from structgen.generate.prefix_cache import PrefixCache
from structgen.generate.results import (
    BeamHypothesis,
    FinishReason,
    GenerationResult,
    RequestMetrics,
)

__all__ = [
    "BeamHypothesis",
    "BeamParams",
    "FinishReason",
    "GenerationResult",
    "Generator",
    "PrefixCache",
    "RequestMetrics",
    "SamplingParams",
    "TextStream",
]
