"""`FramedEngine`: a regular *frame* the output opens with, then any constraint.

gpt-oss writes its reasoning as a message of its own and its answer in a channel of its own
(OpenAI's Harmony format): `<|channel|>analysis<|message|>…<|end|><|start|>assistant`, optional,
then `<|channel|>final<|message|>` and the answer. The frame is a regular language over bytes in
which special tokens are token terminals (markers no text holds, grammar/tokens.py); it must end
with a token terminal, so that no token runs from the frame into the answer: the answer begins
exactly at a token boundary, and the text tokens allowed inside the frame are those that keep
its DFA alive (the DFA's token walker). States: `("f", dfa state)` in the frame, `("a", inner)`
answering. See docs/design/reasoning.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from structgen.engines._before import BeforeInner, cached_mask_of
from structgen.engines.regex import RegexEngine

__all__ = ["FramedEngine"]


class FramedEngine(BeforeInner):
    """`inner` after the frame `prefix` (a `RegexEngine` whose language ends with a token
    terminal and is prefix-free: once it is complete, nothing of it can follow)."""

    def __init__(self, prefix: RegexEngine, inner: Any, *, frame_tokens: frozenset[int]) -> None:
        self.prefix = prefix
        self.inner = inner
        self.token_ids = frame_tokens | getattr(inner, "token_ids", frozenset())
        self.fingerprint = f"framed:{prefix.fingerprint}:{getattr(inner, 'fingerprint', '')}"

    @property
    def initial_state(self) -> Any:
        return ("f", self.prefix.initial_state)

    def advance(self, state: Any, data: bytes) -> Any:
        if state[0] == "a":
            nxt = self.inner.advance(state[1], data)
            return None if nxt is None else ("a", nxt)
        at = self.prefix.advance(state[1], data)
        if at is None:
            return None
        if self.prefix.is_accepting(at):  # the frame is complete (it ends with a token)
            return ("a", self.inner.initial_state)
        return ("f", at)

    def token_mask(self, state: Any) -> npt.NDArray[np.int32]:
        """In the frame: the text tokens that keep it alive (its token terminals' bits are set
        by `CompiledGrammar`, which asks `advance`); then the answer's mask."""
        mask: npt.NDArray[np.int32]
        if state[0] == "a":
            mask = self.inner.token_mask(state[1])
        else:
            mask = self.prefix.token_mask(state[1])
        return mask

    def cached_token_mask(self, state: Any) -> npt.NDArray[np.int32] | None:
        return cached_mask_of(self.inner if state[0] == "a" else self.prefix, state[1])

    def shortest_completion(self, state: Any, *, spaced: bool = False) -> bytes | None:
        if state[0] == "a":
            return self.inner_completion(state[1], spaced=spaced)
        frame = self.prefix.shortest_completion(state[1])
        rest = self.inner_completion(None, spaced=spaced)
        return None if frame is None or rest is None else frame + rest

    def memory_parts(self, known: dict[int, int] | None = None) -> dict[int, int]:
        parts: dict[int, int] = dict(self.inner.memory_parts(known))
        parts.update(self.prefix.memory_parts(known))
        return parts

    def to_text(self) -> str:
        writer = getattr(self.inner, "to_text", None)
        inner = writer() if writer is not None else "<constraint>"
        return f"framed ::= FRAME answer\nanswer: {inner}"
