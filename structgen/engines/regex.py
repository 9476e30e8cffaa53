"""`RegexEngine`: a regular constraint (`Compiler.regex`, `Compiler.choice`) run as one lazy
byte DFA; a state is a DFA state id, masks come from the DFA's token walker."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import numpy.typing as npt

from structgen.automata.dfa import shortest_paths
from structgen.masks import TokenMaskWalker
from structgen.vocab import Vocabulary

__all__ = ["RegexEngine"]


class RegexEngine:
    """A single lazy DFA: states are DFA state ids."""

    def __init__(
        self,
        vocab: Vocabulary,
        dfa: Any,
        *,
        max_cached_masks: int,
        eager_states: int = 0,
        eager_seconds: float = 0.0,
    ) -> None:
        self._dfa = dfa
        dfa.build_first(eager_states, eager_seconds)
        self._walker = TokenMaskWalker(vocab, dfa, max_cached_masks=max_cached_masks)
        self.fingerprint = dfa.fingerprint

    @property
    def initial_state(self) -> int:
        return int(self._dfa.start)

    def advance(self, state: int, data: bytes) -> int | None:
        dfa = self._dfa
        for byte in data:
            state = int(dfa.next_state(state, byte))
            if state < 0:
                return None
        return state

    def is_accepting(self, state: int) -> bool:
        return bool(self._dfa.is_accepting(state))

    def token_mask(self, state: int) -> npt.NDArray[np.int32]:
        return self._walker.mask(state)

    def cached_token_mask(self, state: int) -> npt.NDArray[np.int32] | None:
        return self._walker.cached_mask(state)

    def shortest_completion(self, state: int, *, spaced: bool = False) -> bytes | None:
        """The shortest bytes from `state` to a match (None: none found within the search)."""
        found = shortest_paths(self._dfa, state, self._dfa.is_accepting)
        return found[0][0] if found else None

    def sample_texts(self, count: int, *, seed: int, max_bytes: int) -> list[bytes]:
        """`count` random walks of the automaton from its start (seeded; printable ASCII
        where it can; each stops at a match one time in five, at a dead end, or after its
        share of `max_bytes`), for `CompiledGrammar.prefetch_masks` to walk."""
        rng = random.Random(seed)
        dfa = self._dfa
        share = max(1, max_bytes // max(count, 1))
        out: list[bytes] = []
        for _ in range(count):
            state, text = int(dfa.start), bytearray()
            while len(text) < share:
                if dfa.is_accepting(state) and rng.random() < 0.2:
                    break
                row = dfa.row(state)
                live = np.flatnonzero(row >= 0)
                if not len(live):
                    break
                printable = live[(live >= 0x20) & (live < 0x7F)]
                pool = printable if len(printable) and rng.random() < 0.9 else live
                byte = int(pool[rng.randrange(len(pool))])
                text.append(byte)
                state = int(row[byte])
            out.append(bytes(text))
        return out

    def memory_parts(self, known: dict[int, int] | None = None) -> dict[int, int]:
        return {id(self._dfa): self._dfa.memory_bytes() + self._walker.memory_bytes()}

    def forced_bytes(self, state: int, limit: int = 4096) -> bytes:
        out = bytearray()
        dfa = self._dfa
        while len(out) < limit and not dfa.is_accepting(state):
            alive = np.flatnonzero(dfa.row(state) >= 0)
            if len(alive) != 1:
                break
            out.append(int(alive[0]))
            state = int(dfa.next_state(state, int(alive[0])))
        return bytes(out)
