"""The grammar emitter: rules and terminals as the schema compiler builds them, the layout's
punctuation, keys, and the finished `Grammar` (rules through unproductive states dropped).

Terminals are interned by language, so equal strings, keys and numbers share one terminal (and
one automaton); the rule counter enforces `SchemaOptions.max_rules`."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from structgen.automata import (
    AutomataLimits,
    CharClass,
    Difference,
    Empty,
    Node,
    Pattern,
    Repeat,
    String,
    concat,
    repeat,
)
from structgen.errors import LimitExceededError, SchemaError
from structgen.grammar.earley import known_closure
from structgen.grammar.ir import Grammar, Rule, TerminalDef
from structgen.grammar.terminals import terminal_dfa
from structgen.schema._recent import Recent
from structgen.schema._strings import any_string_body, literal_body

__all__ = ["GrammarEmitter"]

#: the one instance of each recent terminal language (see `GrammarEmitter.terminal`)
_CANONICAL: Recent[tuple[Pattern, tuple[Pattern, ...]], tuple[Pattern, tuple[Pattern, ...]]] = (
    Recent(4096)
)
_QUOTE = String('"')


class GrammarEmitter:
    """The rules and terminals of one compilation, in the layout `options` asks for."""

    def __init__(self, options: Any, limits: AutomataLimits) -> None:
        self.opts = options
        self.limits = limits
        self.rules: list[Rule] = []
        self.terminals: dict[tuple[Pattern, tuple[Pattern, ...]], str] = {}
        self.term_defs: list[TerminalDef] = []
        self.key_rules: dict[str, str] = {}
        self._puncts: dict[str, str] = {}  # `punct`'s terminal per text (asked per rule)
        self.counter = 0
        self.layout = options.layout

    def new_rule(self, prefix: str) -> str:
        self.counter += 1
        if self.counter > self.opts.max_rules:
            raise LimitExceededError(
                "the schema needs too many grammar rules",
                limit="SchemaOptions.max_rules",
                value=self.opts.max_rules,
            )
        return f"{prefix}{self.counter}"

    def add(self, lhs: str, *rhs: str) -> None:
        self.rules.append(Rule(lhs, tuple(rhs)))

    def terminal(self, node: Pattern, extra: tuple[Pattern, ...] = ()) -> str:
        """The terminal of `node` (intersected with `extra`), one per language. Its pattern
        is the one instance of that AST made recently (schema after schema the same strings,
        numbers and keys are built afresh): every cache keyed by a terminal's AST downstream
        (automata, digests, programs) then finds it by identity, not by comparing trees."""
        key = (node, extra)
        name = self.terminals.get(key)
        if name is None:
            key = _CANONICAL.get(key) or _CANONICAL.put(key, key)
            name = f"T{len(self.terminals)}"
            self.terminals[key] = name
            self.term_defs.append(TerminalDef(name, *key))
        return name

    def punct(self, text: str) -> str:
        """`{`, `}`, `[`, `]`, `,`, `:` with the whitespace the layout allows around them:
        any run (flexible), none (compact), json.dumps' `", "` and `": "` (spaced), or those of
        `json.dumps(indent=...)` (indented: a newline after `{ [ ,` and before `} ]`, optional
        around the brackets so that empty ones stay `{}`)."""
        name = self._puncts.get(text)
        if name is None:
            name = self._puncts[text] = self._punct_terminal(text)
        return name

    def _punct_terminal(self, text: str) -> str:
        return self.terminal(_punct_node(self.layout, self.opts.max_whitespace, text))

    def key_terminal(self, body: Pattern, extra: tuple[Pattern, ...] = ()) -> str:
        """A rule `key: "name" COLON` — the quoted key, then the shared `ws : ws` terminal.

        Keeping the colon and its whitespace out of the key terminal keeps the union lexer of
        the keys expected at one position a small trie, and the colon lexer is one automaton
        shared by every key: new lexer states (built in Python) are what masks cost most.
        """
        term = self.string_terminal(body, extra)
        rule = self.key_rules.get(term)
        if rule is None:
            rule = self.new_rule("key")
            self.add(rule, term, self.punct(":"))
            self.key_rules[term] = rule
        return rule

    def string_terminal(self, body: Pattern, extra: tuple[Pattern, ...] = ()) -> str:
        return self.terminal(_quoted(body), tuple(_quoted(e) for e in extra))

    def grammar(self, start: str) -> Grammar:
        """The grammar with `start` as its start symbol; raises `SchemaError` when no text
        derives from it. Rules through dead states (an object state below `minProperties` with
        no property left to add) derive nothing and are dropped: a rule with no productions
        left must not be referenced."""
        self.add("start", start)
        grammar = Grammar("start", tuple(self.rules), tuple(self.term_defs))
        dead = self._dead_rules(grammar)
        kept = (
            tuple(r for i, r in enumerate(self.rules) if i not in dead) if dead else grammar.rules
        )
        # (what is left derives text when every terminal does, which the engine checks)
        return Grammar("start", kept, tuple(self.term_defs), productive=True)

    def _dead_rules(self, grammar: Grammar) -> set[int]:
        """Unsatisfiable schemas must fail here, not inside the engine; returns the indices of
        the rules that derive no text (one of their symbols does not)."""
        productive: set[str] = set()  # (the usable terminals, then what derives from them)
        for t in grammar.terminals:
            if not t.intersect:
                productive.add(t.name)
                continue
            # The same cached automaton the engine will use (same limits): built once, not
            # twice; a limit it hits is the compile's.
            if not terminal_dfa(t, self.limits).is_empty:
                productive.add(t.name)
        dead = known_closure(list(grammar.rules), productive)
        if "start" not in productive:
            raise SchemaError("the schema is unsatisfiable: no JSON value satisfies it")
        return set(dead)


@lru_cache(maxsize=4096)
def quoted(body: Node) -> Node:
    """A JSON string of `body`'s language, quotes included: one instance per body (the same
    bodies, any string's above all, come back property after property)."""
    return concat([_QUOTE, body, _QUOTE])


def _quoted(body: Pattern) -> Pattern:
    """`quoted`, where a `Difference` (`strings_except`) is quoted already."""
    return body if isinstance(body, Difference) else quoted(body)


def strings_except(words: Iterable[str], *, canonical: bool = False) -> Difference:
    """Quoted strings whose decoded text is none of `words` — an object's other keys, a
    string's excluded values: any quoted string less each word's quoted spellings
    (`automata.difference`, beside the words' own key automata). Every spelling of a word is
    that word's, so this is exact; with `canonical`, json.dumps' spellings only. Recent sets
    are kept (one object's keys, asked per position)."""
    key = (frozenset(words), canonical)
    found = _STRINGS_EXCEPT.get(key)
    if found is None:
        found = _STRINGS_EXCEPT.put(key, _strings_except(key[0], canonical))
    return found


def _strings_except(words: frozenset[str], canonical: bool) -> Difference:
    names = tuple(quoted(literal_body(w, canonical=canonical)) for w in sorted(words))
    return Difference(quoted(any_string_body(canonical=canonical)), names)


_STRINGS_EXCEPT: Recent[tuple[frozenset[str], bool], Difference] = Recent(256)


@lru_cache(maxsize=64)
def _layout_nodes(layout: str, max_whitespace: int) -> tuple[Node, Node]:
    """The whitespace a layout allows between tokens (flexible: any run), and the indented
    layout's newline and indent (any depth up to `max_whitespace` spaces): one instance each
    for every compile."""
    ws = CharClass(((9, 10), (13, 13), (32, 32)))
    between = Repeat(ws, 0, max_whitespace) if layout == "flexible" else Empty()
    return between, concat([String("\n"), Repeat(String(" "), 0, max_whitespace)])


@lru_cache(maxsize=256)
def _punct_node(layout: str, max_whitespace: int, text: str) -> Node:
    """The language of punctuation `text` with the whitespace the layout allows around it
    (`GrammarEmitter.punct`): built once per layout, not per compile."""
    if layout == "compact":
        return String(text)
    if layout == "spaced":
        return String(text + " " if text in ",:" else text)
    ws, nl = _layout_nodes(layout, max_whitespace)
    if layout == "indented":
        if text == ":":
            return String(": ")
        if text == ",":
            return concat([String(","), nl])
        if text in "{[":
            return concat([String(text), repeat(nl, 0, 1)])
        return concat([repeat(nl, 0, 1), String(text)])
    if text in "{[":
        return concat([String(text), ws])
    if text in "}]":
        return concat([ws, String(text)])
    return concat([ws, String(text), ws])
