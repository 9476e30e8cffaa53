"""structgen's own decoding loop: `Generator`, the sampling rules, the prefix cache,
`Scheduler` (continuous batching), `SpeculativeGenerator` (constrained speculative decoding).

Needs torch and transformers (imported by this subpackage, not by `import structgen`).
See docs/design/generation.md.
"""

from structgen.generate.loop import Generator, TextStream
from structgen.generate.params import BeamParams, SamplingParams
from structgen.generate.prefix_cache import PrefixCache
from structgen.generate.quantize import quantize_weights, weight_bytes
from structgen.generate.results import (
    BeamHypothesis,
    FinishReason,
    GenerationResult,
    RequestMetrics,
)
from structgen.generate.scheduler import RequestHandle, Scheduler, SchedulerMetrics
from structgen.generate.speculative import (
    PromptLookupDraft,
    SpeculativeGenerator,
    SpeculativeMetrics,
    SpeculativeResult,
    quantized_draft,
    truncated_draft,
)

__all__ = [
    "BeamHypothesis",
    "BeamParams",
    "FinishReason",
    "GenerationResult",
    "Generator",
    "PrefixCache",
    "PromptLookupDraft",
    "RequestHandle",
    "RequestMetrics",
    "SamplingParams",
    "Scheduler",
    "SchedulerMetrics",
    "SpeculativeGenerator",
    "SpeculativeMetrics",
    "SpeculativeResult",
    "TextStream",
    "quantize_weights",
    "quantized_draft",
    "truncated_draft",
    "weight_bytes",
]
