"""What the engines that put something before a constraint share (`ReasoningEngine`,
`FramedEngine`): their states are tuples whose phase `"a"` holds the inner engine's state, and
there everything is the inner engine's."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["BeforeInner", "cached_mask_of"]


def cached_mask_of(engine: Any, state: Any) -> npt.NDArray[np.int32] | None:
    """`engine`'s cached mask of `state`, or None (not cached, or an engine that keeps none)."""
    peek = getattr(engine, "cached_token_mask", None)
    found: npt.NDArray[np.int32] | None = None if peek is None else peek(state)
    return found


class BeforeInner:
    """The answering phase `("a", inner state)`, delegated to `self.inner`."""

    inner: Any

    def is_accepting(self, state: Any) -> bool:
        return state[0] == "a" and bool(self.inner.is_accepting(state[1]))

    def forced_bytes(self, state: Any, limit: int = 4096) -> bytes:
        if state[0] == "a":
            forced: bytes = self.inner.forced_bytes(state[1], limit)
            return forced
        return b""  # (nothing is forced before the answer: it may be thought or skipped)

    def inner_completion(self, state: Any | None, *, spaced: bool) -> bytes | None:
        """The inner engine's shortest completion from `state` (None: from its start)."""
        finder = getattr(self.inner, "shortest_completion", None)
        if finder is None:
            return None if state is not None else b""
        found: bytes | None = finder(
            self.inner.initial_state if state is None else state, spaced=spaced
        )
        return found
