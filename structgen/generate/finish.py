"""Why an output ends: the one rule the plain loop (`batch.py`) and speculative decoding
(`speculative.py`) apply after every sampled token."""

from __future__ import annotations

from collections.abc import Container

from structgen.generate.params import SamplingParams
from structgen.generate.results import FinishReason
from structgen.generate.text import TextTracker
from structgen.matcher import Matcher

__all__ = ["finish_after"]


def finish_after(
    token: int,
    token_bytes: bytes,
    *,
    matcher: Matcher | None,
    terminated: bool | None,
    eos_token_ids: Container[int],
    params: SamplingParams,
    text: TextTracker,
    output_length: int,
    context_full: bool,
) -> FinishReason | None:
    """The finish reason once `token` is the output's last (None: generation goes on).

    A constrained output ends when its matcher refuses the token ("grammar") or accepted it as
    EOS ("eos"); `terminated` says whether the matcher already holds the token and took it as
    EOS (None: it is accepted here). An unconstrained one ends at an EOS id unless
    `ignore_eos`. Then a stop string ("stop"), then the budget or the context ("length");
    `output_length` and `context_full` count the token.
    """
    if matcher is not None:
        if terminated is None:
            if not matcher.accept_token(token):
                return "grammar"
            terminated = matcher.is_terminated()
        if terminated:
            return "eos"
    elif token in eos_token_ids and not params.ignore_eos:
        return "eos"
    if text.push(token_bytes):
        return "stop"
    if output_length >= params.max_new_tokens or context_full:
        return "length"
    return None
