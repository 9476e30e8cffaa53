"""`SamplingParams` and `BeamParams`: the per-request decoding rules, validated up front.

Frozen and small: one object per request, checked once when the request is submitted (a bad
value raises `GenerationError` naming the field), never inside the token loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from structgen.errors import GenerationError

__all__ = ["BeamParams", "SamplingParams"]


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How one request picks its tokens.

    `temperature == 0` is greedy decoding (the default; the filters below are then unused).
    Otherwise logits are processed in this order: repetition penalty (CTRL style, over the prompt
    and the output: a seen token's positive logit is divided by it, a negative one multiplied),
    frequency and presence penalties (OpenAI style, over the output: `logit -= frequency * count
    + presence * (count > 0)`), the grammar mask, temperature, top-k, top-p (the smallest set of
    most likely tokens whose probability reaches `top_p`), min-p (tokens below `min_p` times the
    top probability are dropped), then one draw from the request's own `torch.Generator`
    (seeded with `seed`, or from torch's global generator when `seed` is None).

    Generation ends at an EOS id, when a `stop` string appears in the decoded text (the text is
    cut before it; matched across token boundaries), or after `max_new_tokens` tokens.

    `close_within_budget` (with a grammar): a token is drawn only if the output can still be
    completed in the tokens left after it, so a constrained output ends complete within
    `max_new_tokens`; a budget below the grammar's shortest output is a `GenerationError` before
    generating. Draws that do not fit are drawn again without them (the distribution is the
    masked one restricted to the tokens that fit). See docs/design/budgets.md.
    """

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    close_within_budget: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):  # a single string is a common slip: accept it
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop))
        self.validate()

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def uses_penalties(self) -> bool:
        return (
            self.repetition_penalty != 1.0
            or self.frequency_penalty != 0.0
            or self.presence_penalty != 0.0
        )

    def validate(self) -> None:
        """Raise `GenerationError` naming the first invalid field."""
        _integer("max_new_tokens", self.max_new_tokens, minimum=1)
        _integer("top_k", self.top_k, minimum=0)
        _number("temperature", self.temperature)
        if self.temperature < 0:
            raise GenerationError(f"temperature must be >= 0 (0 is greedy), got {self.temperature}")
        _number("top_p", self.top_p)
        if not 0 < self.top_p <= 1:
            raise GenerationError(f"top_p must be in (0, 1], got {self.top_p}")
        _number("min_p", self.min_p)
        if not 0 <= self.min_p <= 1:
            raise GenerationError(f"min_p must be in [0, 1], got {self.min_p}")
        _number("repetition_penalty", self.repetition_penalty)
        if self.repetition_penalty <= 0:
            raise GenerationError(
                f"repetition_penalty must be > 0 (1 is off), got {self.repetition_penalty}"
            )
        _number("frequency_penalty", self.frequency_penalty)
        _number("presence_penalty", self.presence_penalty)
        if self.seed is not None:
            _integer("seed", self.seed, minimum=0)
        for s in self.stop:
            if not isinstance(s, str) or not s:
                raise GenerationError(f"stop sequences must be non-empty strings, got {s!r}")


@dataclass(frozen=True, slots=True)
class BeamParams:
    """Beam search: `num_beams` hypotheses, scored by `sum(logprob) / length ** length_penalty`.

    `length_penalty > 0` favours longer outputs, `< 0` shorter ones (as in `transformers`).
    Returns the `num_return` best finished hypotheses (default: all `num_beams`).
    `close_within_budget` (with a grammar): only tokens after which the output can still be
    completed in the tokens left extend a beam, so every hypothesis is complete (as in
    `SamplingParams`).
    """

    num_beams: int = 4
    max_new_tokens: int = 32
    length_penalty: float = 1.0
    num_return: int | None = None
    close_within_budget: bool = True

    def __post_init__(self) -> None:
        _integer("num_beams", self.num_beams, minimum=1)
        _integer("max_new_tokens", self.max_new_tokens, minimum=1)
        _number("length_penalty", self.length_penalty)
        if self.num_return is not None:
            _integer("num_return", self.num_return, minimum=1)
            if self.num_return > self.num_beams:
                raise GenerationError(
                    f"num_return ({self.num_return}) must not exceed num_beams ({self.num_beams})"
                )


def _integer(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise GenerationError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise GenerationError(f"{name} must be >= {minimum}, got {value}")


def _number(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise GenerationError(f"{name} must be a finite number, got {value!r}")
