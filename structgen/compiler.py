"""`Compiler`: frontends → automata → `CompiledGrammar`, with a bounded compile cache.

Compile once, run many: a `CompiledGrammar` is immutable (its lazily built automaton and mask
cache only grow, under locks), shareable across threads and sequences, and cached by
(kind, source, options, vocabulary fingerprint, version).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from structgen import automata
from structgen.automata import AutomataLimits
from structgen.errors import StructgenError
from structgen.masks import TokenMaskWalker
from structgen.vocab import Vocabulary

__all__ = ["CompileLimits", "CompiledGrammar", "Compiler"]

_COMPILER_VERSION = "0.1"


@dataclass(frozen=True, slots=True)
class CompileLimits:
    """Limits on compile work; hitting one raises an error that names the knob.

    `max_nfa_states` bounds a regex's expanded size (counted repetitions multiply it),
    `max_dfa_states` the lazily built automaton, `max_cached_masks` the per-grammar mask cache
    (each mask costs vocab_size/8 bytes).
    """

    max_nfa_states: int = 200_000
    max_dfa_states: int = 50_000
    max_cached_masks: int = 4096

    def automata(self) -> AutomataLimits:
        return AutomataLimits(
            max_nfa_states=self.max_nfa_states, max_dfa_states=self.max_dfa_states
        )


class CompiledGrammar:
    """A constraint compiled against one vocabulary: an automaton plus its token-mask cache.

    Create `Matcher(compiled)` objects from it, one per sequence.
    """

    __slots__ = ("_dfa", "_walker", "fingerprint", "kind", "source", "vocab")

    def __init__(
        self, vocab: Vocabulary, dfa: Any, *, kind: str, source: str, limits: CompileLimits
    ) -> None:
        self.vocab = vocab
        self.kind = kind
        self.source = source
        self._dfa = dfa
        self._walker = TokenMaskWalker(vocab, dfa, max_cached_masks=limits.max_cached_masks)
        digest = hashlib.sha256(
            f"{_COMPILER_VERSION}\0{kind}\0{dfa.fingerprint}\0{vocab.fingerprint}".encode()
        )
        self.fingerprint = digest.hexdigest()

    # The engine interface the Matcher drives (states are DFA state ids).

    @property
    def initial_state(self) -> int:
        return int(self._dfa.start)

    def advance(self, state: int, data: bytes) -> int:
        """State after reading `data` from `state`; -1 when it dies."""
        dfa = self._dfa
        for byte in data:
            state = int(dfa.next_state(state, byte))
            if state < 0:
                return -1
        return state

    def is_accepting(self, state: int) -> bool:
        return bool(self._dfa.is_accepting(state))

    def token_mask(self, state: int) -> npt.NDArray[np.int32]:
        """Packed mask of the text tokens allowed in `state` (EOS not included)."""
        return self._walker.mask(state)

    def forced_bytes(self, state: int, limit: int = 4096) -> bytes:
        """The bytes every continuation from `state` starts with (empty when there is a choice)."""
        out = bytearray()
        dfa = self._dfa
        while len(out) < limit and not dfa.is_accepting(state):
            alive = np.flatnonzero(dfa.row(state) >= 0)
            if len(alive) != 1:
                break
            out.append(int(alive[0]))
            state = int(dfa.next_state(state, int(alive[0])))
        return bytes(out)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CompiledGrammar) and other.fingerprint == self.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        return f"CompiledGrammar(kind={self.kind!r}, source={self.source[:60]!r})"


_CACHE: OrderedDict[tuple[Any, ...], CompiledGrammar] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 128


class Compiler:
    """Compiles constraints against one vocabulary; results are cached and shareable."""

    def __init__(self, vocab: Vocabulary, *, limits: CompileLimits | None = None) -> None:
        if not isinstance(vocab, Vocabulary):
            raise StructgenError(
                f"Compiler needs a structgen.Vocabulary, got {type(vocab).__name__}; "
                "build one with Vocabulary.from_hf(tokenizer)"
            )
        self.vocab = vocab
        self.limits = limits or CompileLimits()

    def regex(
        self, pattern: str, *, ignore_case: bool = False, dotall: bool = False
    ) -> CompiledGrammar:
        """Full-match constraint for a Python-syntax regular expression."""
        key = ("regex", pattern, ignore_case, dotall)
        return self._cached(
            key,
            lambda: automata.compile_regex(
                pattern, ignore_case=ignore_case, dotall=dotall, limits=self.limits.automata()
            ),
            kind="regex",
            source=pattern,
        )

    def choice(self, options: Sequence[str]) -> CompiledGrammar:
        """Exactly one of `options` (for classification)."""
        if isinstance(options, str) or not options:
            raise StructgenError("choice() needs a non-empty list of strings")
        encoded = tuple(str(o).encode("utf-8") for o in options)
        key = ("choice", encoded)
        return self._cached(
            key,
            lambda: automata.alternatives(list(encoded), limits=self.limits.automata()),
            kind="choice",
            source=repr(list(options)),
        )

    def _cached(
        self, key: tuple[Any, ...], build: Any, *, kind: str, source: str
    ) -> CompiledGrammar:
        full_key = (*key, self.vocab.fingerprint, self.limits, _COMPILER_VERSION)
        with _CACHE_LOCK:
            hit = _CACHE.get(full_key)
            if hit is not None:
                _CACHE.move_to_end(full_key)
                return hit
        compiled = CompiledGrammar(
            self.vocab, build(), kind=kind, source=source, limits=self.limits
        )
        with _CACHE_LOCK:
            compiled = _CACHE.setdefault(full_key, compiled)
            _CACHE.move_to_end(full_key)
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
        return compiled
