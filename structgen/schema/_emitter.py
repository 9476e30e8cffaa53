"""The grammar emitter: rules and terminals as the schema compiler builds them, the layout's
punctuation, keys, and the finished `Grammar` (rules through unproductive states dropped).

Terminals are interned by language, so equal strings, keys and numbers share one terminal (and
one automaton); the rule counter enforces `SchemaOptions.max_rules`."""

from __future__ import annotations

from typing import Any

from structgen.automata import (
    AutomataLimits,
    CharClass,
    Empty,
    Node,
    Repeat,
    String,
    concat,
    repeat,
)
from structgen.errors import LimitExceededError, SchemaError
from structgen.grammar.earley import known_closure
from structgen.grammar.ir import Grammar, Rule, TerminalDef
from structgen.grammar.terminals import terminal_dfa

__all__ = ["GrammarEmitter"]


class GrammarEmitter:
    """The rules and terminals of one compilation, in the layout `options` asks for."""

    def __init__(self, options: Any, limits: AutomataLimits) -> None:
        self.opts = options
        self.limits = limits
        self.rules: list[Rule] = []
        self.terminals: dict[tuple[Node, tuple[Node, ...]], str] = {}
        self.term_defs: list[TerminalDef] = []
        self.key_rules: dict[str, str] = {}
        self._puncts: dict[str, str] = {}  # `punct`'s terminal per text (asked per rule)
        self.counter = 0
        self.layout = options.layout
        ws = CharClass(((9, 10), (13, 13), (32, 32)))
        self.ws: Node = (
            Repeat(ws, 0, options.max_whitespace) if self.layout == "flexible" else Empty()
        )
        # indented: a newline and an indent (any depth up to max_whitespace spaces)
        self.newline: Node = concat([String("\n"), Repeat(String(" "), 0, options.max_whitespace)])

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

    def terminal(self, node: Node, extra: tuple[Node, ...] = ()) -> str:
        key = (node, extra)
        name = self.terminals.get(key)
        if name is None:
            name = f"T{len(self.terminals)}"
            self.terminals[key] = name
            self.term_defs.append(TerminalDef(name, node, extra))
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
        if self.layout == "compact":
            return self.terminal(String(text))
        if self.layout == "spaced":
            return self.terminal(String(text + " " if text in ",:" else text))
        if self.layout == "indented":
            nl = self.newline
            if text == ":":
                return self.terminal(String(": "))
            if text == ",":
                return self.terminal(concat([String(","), nl]))
            if text in "{[":
                return self.terminal(concat([String(text), repeat(nl, 0, 1)]))
            return self.terminal(concat([repeat(nl, 0, 1), String(text)]))
        ws = self.ws
        if text in "{[":
            return self.terminal(concat([String(text), ws]))
        if text in "}]":
            return self.terminal(concat([ws, String(text)]))
        return self.terminal(concat([ws, String(text), ws]))

    def key_terminal(self, body: Node, extra: tuple[Node, ...] = ()) -> str:
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

    def string_terminal(self, body: Node, extra: tuple[Node, ...] = ()) -> str:
        def wrap(n: Node) -> Node:
            return concat([String('"'), n, String('"')])

        return self.terminal(wrap(body), tuple(wrap(e) for e in extra))

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
