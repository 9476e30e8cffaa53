"""What a request returns: its text, tokens, why it ended, and its serving metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["BeamHypothesis", "FinishReason", "GenerationResult", "RequestMetrics"]

FinishReason = Literal["eos", "stop", "length", "grammar", "cancelled"]


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    """Per-request timings (seconds) and counts.

    `time_to_first_token` runs from the call to the first output token being known on the host;
    `time_per_output_token` is the mean gap between later output tokens (0 with one token).
    `forward_passes` counts the model calls that involved this request (prefill included);
    `forced_tokens` the tokens fed by jump forward, each one a decode pass saved;
    `cached_prompt_tokens` the prompt tokens taken from the prefix cache;
    `closing_redraws` the draws refused because the output could not have been completed in the
    tokens left after them (budget-aware closing narrowed the choice).
    """

    prompt_tokens: int
    output_tokens: int
    time_to_first_token: float
    time_per_output_token: float
    total_time: float
    forward_passes: int
    forced_tokens: int
    cached_prompt_tokens: int
    closing_redraws: int = 0

    @property
    def tokens_per_second(self) -> float:
        decode = self.total_time - self.time_to_first_token
        return (self.output_tokens - 1) / decode if decode > 0 and self.output_tokens > 1 else 0.0


@dataclass(frozen=True, slots=True)
class GenerationResult:
    """One finished request.

    `text` is cut before a matched stop string; `token_ids` are all generated ids (an EOS that
    ended the output included). `finish_reason`: "eos" (an EOS token, or the grammar completed),
    "stop" (a stop string), "length" (`max_new_tokens` or the model's context), "grammar" (the
    constraint allowed no token: a grammar that cannot be completed), "cancelled"
    (`RequestHandle.cancel()`, or its handle dropped: the text so far). `complete`: the output is
    a whole sentence of its constraint (always True without one) — with budget-aware closing a
    constrained output cut by `max_new_tokens` ("length") is complete too.
    """

    text: str
    token_ids: tuple[int, ...]
    finish_reason: FinishReason
    metrics: RequestMetrics
    complete: bool = True
    #: the think block's text, when `LM.run(..., reasoning=True)` split it from `text`
    reasoning: str | None = None


@dataclass(frozen=True, slots=True)
class BeamHypothesis:
    """A finished beam: `score = sum(logprobs) / len(token_ids) ** length_penalty`."""

    text: str
    token_ids: tuple[int, ...]
    score: float
    sum_logprobs: float
