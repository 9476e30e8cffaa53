"""The engines: what runs a compiled constraint, state by state, over one vocabulary.

Frontends (regex, Lark/EBNF, JSON Schema) produce data — a byte DFA, a grammar IR, the arrays
a `uniqueItems` guard must watch — and `Compiler` wraps it in one of these:

- `RegexEngine` (`regex.py`): one lazy byte DFA (regexes, choices);
- `GrammarEngine` (`grammar.py`, driving the Earley parser of `structgen/grammar/earley.py`): a
  context-free grammar, Earley parser × terminal lexer;
- `UniqueItemsEngine` (`unique_items.py`): a guard around a grammar engine for `uniqueItems`.

Each satisfies `Engine`, the contract `CompiledGrammar`, `Matcher` and the closing planner rely
on. States are opaque values the engine alone interprets.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from structgen.engines.grammar import GrammarEngine
from structgen.engines.regex import RegexEngine
from structgen.engines.unique_items import UniqueItemsEngine

__all__ = ["Engine", "GrammarEngine", "RegexEngine", "UniqueItemsEngine"]


@runtime_checkable
class Engine(Protocol):
    """What an engine provides (every method is safe to call from several threads)."""

    @property
    def fingerprint(self) -> str:
        """Stable digest of what the engine runs (part of `CompiledGrammar.fingerprint`)."""

    @property
    def initial_state(self) -> Any:
        """The state before any output."""

    def advance(self, state: Any, data: bytes) -> Any:
        """The state after `data`, or None when the constraint refuses it (never raises on
        text; a lazily hit automaton limit raises `LimitExceededError`)."""

    def is_accepting(self, state: Any) -> bool:
        """Whether the output so far is complete."""

    def token_mask(self, state: Any) -> npt.NDArray[np.int32]:
        """Packed mask of the text tokens allowed in `state` (read-only; EOS not included)."""

    def forced_bytes(self, state: Any, limit: int = 4096) -> bytes:
        """Bytes every continuation from `state` starts with (empty when there is a choice)."""

    def shortest_completion(self, state: Any, *, spaced: bool = False) -> bytes | None:
        """A short text that completes the output (b"": complete; None: none found)."""

    def memory_parts(self, known: dict[int, int] | None = None) -> dict[int, int]:
        """Estimated bytes held, by object id (shared parts under the same id everywhere).
        `known`: the sizes measured so far in one measurement of many grammars, by id — read
        and added to, so an automaton shared by many grammars is measured once."""
