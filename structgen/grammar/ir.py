"""The grammar IR every frontend builds: rules over terminals, each terminal a regular language.

Lark grammars, JSON Schemas (recursive parts) and tool-call formats all become a `Grammar`.
Terminals are regex ASTs (`structgen.automata` nodes) so that the compiler turns each into a lazy
byte DFA; rules are plain context-free productions (EBNF operators already expanded).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from structgen.automata import Node

__all__ = ["Grammar", "Rule", "TerminalDef"]


@dataclass(frozen=True, slots=True)
class TerminalDef:
    """A named regular language over text; `pattern` is a regex AST.

    `intersect` lists more regex ASTs the text must match too (JSON Schema: `pattern` ∩ length
    ∩ `format` on one string); the terminal's language is the intersection of all of them.
    """

    name: str
    pattern: Node
    intersect: tuple[Node, ...] = ()


@dataclass(frozen=True, slots=True)
class Rule:
    """`lhs → rhs`; `rhs` names rules or terminals; an empty `rhs` derives the empty string."""

    lhs: str
    rhs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Grammar:
    """A context-free grammar over terminals; `ignore` terminals may appear between any two."""

    start: str
    rules: tuple[Rule, ...]
    terminals: tuple[TerminalDef, ...]
    ignore: tuple[str, ...] = ()

    def fingerprint(self) -> str:
        """Stable sha256 of the whole grammar (cache key)."""
        digest = hashlib.sha256(b"structgen-grammar-1\0")
        digest.update(repr((self.start, self.rules, self.terminals, self.ignore)).encode())
        return digest.hexdigest()
