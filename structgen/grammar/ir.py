"""The grammar IR every frontend builds: rules over terminals, each terminal a regular language.

Lark grammars, JSON Schemas (recursive parts) and tool-call formats all become a `Grammar`.
Terminals are regex ASTs (`structgen.automata` nodes) so that the compiler turns each into a lazy
byte DFA; rules are plain context-free productions (EBNF operators already expanded).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from structgen._lru import LRU
from structgen.automata import Difference, Node, Pattern
from structgen.automata.nfa import node_program
from structgen.automata.regex_text import regex_text

__all__ = ["Grammar", "Rule", "TerminalDef", "node_digest"]


class TerminalDef:
    """A named regular language over text; `pattern` is a regex AST.

    `intersect` lists more regex ASTs the text must match too (JSON Schema: `pattern` ∩ length
    ∩ `format` on one string); the terminal's language is the intersection of all of them.

    Immutable by convention, compared and hashed by value. (Not a frozen dataclass: compiled
    with mypyc, a frozen dataclass keeps its generated `__init__` in Python, ~0.4 µs a call,
    and a schema compile makes hundreds of rules; this one is native.)
    """

    __slots__ = ("intersect", "name", "pattern")

    def __init__(self, name: str, pattern: Pattern, intersect: tuple[Pattern, ...] = ()) -> None:
        self.name = name
        self.pattern = pattern
        self.intersect = intersect

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TerminalDef):
            return NotImplemented
        return (
            self.name == other.name
            and self.pattern == other.pattern
            and self.intersect == other.intersect
        )

    def __hash__(self) -> int:
        return hash((self.name, self.pattern, self.intersect))

    def __repr__(self) -> str:
        return (
            f"TerminalDef(name={self.name!r}, pattern={self.pattern!r},"
            f" intersect={self.intersect!r})"
        )

    def __reduce__(self) -> tuple[type[TerminalDef], tuple[str, Pattern, tuple[Pattern, ...]]]:
        return (TerminalDef, (self.name, self.pattern, self.intersect))


class Rule:
    """`lhs → rhs`; `rhs` names rules or terminals; an empty `rhs` derives the empty string.
    Immutable by convention, compared and hashed by value (native when compiled: see
    `TerminalDef`)."""

    __slots__ = ("lhs", "rhs")

    def __init__(self, lhs: str, rhs: tuple[str, ...]) -> None:
        self.lhs = lhs
        self.rhs = rhs

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Rule):
            return NotImplemented
        return self.lhs == other.lhs and self.rhs == other.rhs

    def __hash__(self) -> int:
        return hash((self.lhs, self.rhs))

    def __repr__(self) -> str:
        return f"Rule(lhs={self.lhs!r}, rhs={self.rhs!r})"

    def __reduce__(self) -> tuple[type[Rule], tuple[str, tuple[str, ...]]]:
        return (Rule, (self.lhs, self.rhs))


@dataclass(frozen=True, slots=True)
class Grammar:
    """A context-free grammar over terminals; `ignore` terminals may appear between any two."""

    start: str
    rules: tuple[Rule, ...]
    terminals: tuple[TerminalDef, ...]
    ignore: tuple[str, ...] = ()
    #: every rule derives some text when every terminal matches some text (checked by the
    #: maker, the schema frontend: the parser then skips its own check); not part of equality
    productive: bool = field(default=False, compare=False, repr=False)

    def __reduce__(self) -> tuple[type[Grammar], tuple[Any, ...]]:
        # (by its fields: compiled, a frozen dataclass cannot be unpickled field by field)
        return (Grammar, (self.start, self.rules, self.terminals, self.ignore, self.productive))

    def to_text(self, *, limit: int = 200) -> str:
        """The grammar as GBNF-like text, for reading: one line per rule (`a ::= b C | ""`,
        the start rule first), then each terminal as a regex (cut at `limit` characters; `&`
        joins the patterns it must also match) and the `%ignore` terminals."""
        by_lhs: dict[str, list[tuple[str, ...]]] = {}
        for rule in self.rules:
            by_lhs.setdefault(rule.lhs, []).append(rule.rhs)
        order = [self.start, *(lhs for lhs in by_lhs if lhs != self.start)]
        lines = []
        for lhs in order:
            bodies = [" ".join(rhs) if rhs else '""' for rhs in by_lhs.get(lhs, [])]
            lines.append(f"{lhs} ::= {' | '.join(bodies)}")
        for terminal in self.terminals:
            parts = [terminal.pattern, *terminal.intersect]
            text = " & ".join(f"/{regex_text(p, limit=limit)}/" for p in parts)
            lines.append(f"{terminal.name} ::= {text}")
        if self.ignore:
            lines.append(f"%ignore {' '.join(self.ignore)}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()

    def fingerprint(self) -> str:
        """Stable sha256 of the whole grammar (cache key).

        Each terminal's AST is digested through its flat program (`node_digest`), in which
        equal sub-trees appear once.
        """
        digest = hashlib.sha256(b"structgen-grammar-3\0")
        # (JSON text of the rules: unambiguous, and a few times faster than their reprs)
        rules = [(r.lhs, r.rhs) for r in self.rules]
        digest.update(json.dumps([self.start, rules, self.ignore]).encode())
        for terminal in self.terminals:
            digest.update(terminal.name.encode() + b"\0")
            digest.update(node_digest(terminal.pattern))
            for extra in terminal.intersect:
                digest.update(b"&" + node_digest(extra))
        return digest.hexdigest()


def node_digest(node: Pattern) -> bytes:
    """A 16-byte digest of a regex AST (stable across processes): its NFA program's, so the
    walk that fingerprints a terminal also serves its NFA (a `Difference`, which has no
    program: its parts' digests)."""
    if isinstance(node, Difference):
        digest = hashlib.blake2b(node_digest(node.minuend), digest_size=16, person=b"sg-diff-1")
        for part in node.subtrahends:
            digest.update(node_digest(part))
        return digest.digest()
    return _DIGESTS.get_or_make(node, lambda: node_program(node).digest)


# Digests of recent terminal patterns, keyed by structure (nodes cache their hash): the same
# big pattern (a number range, a format) recurs across schemas and need not be walked again.
_DIGESTS: LRU[Node, bytes] = LRU(4096)
