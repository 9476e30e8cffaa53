"""`GrammarBuilder`: IR grammars put together from pieces — literal text, token terminals,
regexes, text that avoids or ends at given strings, and whole grammars embedded (a JSON Schema's,
a Lark grammar's) — for tool-call formats and structural tags.

Embedded grammars keep their language exactly: their symbols are renamed apart, and a grammar
with `%ignore` terminals has them made explicit (an optional run of them between every two
symbols of its rules and around its start), since the IR's `ignore` is global.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from structgen.automata import CharClass, Concat, Node, Repeat, literal_node
from structgen.automata import intervals as iv
from structgen.automata.codepoint_dfa import complement
from structgen.errors import GrammarError
from structgen.grammar.ir import Grammar, Rule, TerminalDef
from structgen.grammar.tokens import token_terminal

__all__ = [
    "ANY_CHAR",
    "NON_EMPTY",
    "GrammarBuilder",
    "any_text",
    "text_ending_at",
    "text_without",
]

#: any one character (code point)
ANY_CHAR: Node = CharClass(((0, iv.MAX_CODE_POINT),))
#: intersect a terminal with this to leave out the empty text (terminals must not match it)
NON_EMPTY: Node = Repeat(ANY_CHAR, 1, None)


def any_text() -> Node:
    """Any text (code points of valid UTF-8, newlines included), possibly empty."""
    return Repeat(ANY_CHAR, 0, None)


def _containing(strings: Sequence[str], *, at_end: bool = False) -> Node:
    """Texts holding one of `strings` (`at_end`: ... with more text after it)."""
    from structgen.automata import Alternation

    options = [literal_node(s) for s in strings]
    middle = options[0] if len(options) == 1 else Alternation(tuple(options))
    tail = Repeat(ANY_CHAR, 1 if at_end else 0, None)
    return Concat((any_text(), middle, tail))


def text_without(strings: Sequence[str]) -> Node:
    """Any text in which none of `strings` occurs (possibly empty)."""
    if not strings or any(not s for s in strings):
        raise GrammarError("text_without needs non-empty strings to avoid")
    return complement(_containing(strings))


def text_ending_at(
    trigger: str, triggers: Sequence[str], *, avoid: Sequence[str] = ()
) -> tuple[Node, tuple[Node, ...]]:
    """(pattern, intersect) of the texts that end with `trigger` and hold no string of
    `triggers` before that end: free text up to and including the first trigger, as one lexeme
    (a greedy lexer cannot end free text where a trigger begins; this lexeme ends right after
    it, where nothing can extend it). The text before the trigger holds no string of `avoid`."""
    if not trigger:
        raise GrammarError("a trigger must be non-empty")
    end = literal_node(trigger)
    ends = Concat((any_text(), end))
    no_earlier = complement(_containing(list(dict.fromkeys([*triggers, trigger])), at_end=True))
    if not avoid:
        return ends, (no_earlier,)
    return ends, (no_earlier, Concat((text_without(avoid), end)))


class GrammarBuilder:
    """Rules and terminals collected under fresh names; `grammar(start)` returns the IR."""

    def __init__(self, prefix: str = "g") -> None:
        self._prefix = prefix
        self._rules: list[Rule] = []
        self._terminals: dict[str, TerminalDef] = {}
        self._by_pattern: dict[tuple[Node, tuple[Node, ...]], str] = {}
        self._count = 0

    def rule(self, hint: str = "r") -> str:
        """A fresh nonterminal name."""
        self._count += 1
        return f"{self._prefix}_{hint}{self._count}"

    def add(self, lhs: str, *rhs: str) -> None:
        """The production `lhs -> rhs` (no symbols: the empty string)."""
        self._rules.append(Rule(lhs, tuple(rhs)))

    def alternatives(self, options: Iterable[Sequence[str]], hint: str = "alt") -> str:
        """A nonterminal deriving each symbol sequence of `options`."""
        lhs = self.rule(hint)
        for option in options:
            self.add(lhs, *option)
        return lhs

    def sequence(self, *symbols: str) -> str:
        lhs = self.rule("seq")
        self.add(lhs, *symbols)
        return lhs

    def optional(self, symbol: str) -> str:
        return self.alternatives([[], [symbol]], "opt")

    def repeat(self, item: str, *, separator: str | None = None, at_least_one: bool = False) -> str:
        """`item` repeated (`separator` between two), zero or more times (`at_least_one`)."""
        more = self.rule("more")
        self.add(more)
        self.add(more, *([separator] if separator else []), item, more)
        some = self.sequence(item, more)
        return some if at_least_one else self.optional(some)

    def terminal(self, pattern: Node, intersect: tuple[Node, ...] = (), hint: str = "T") -> str:
        """A terminal of `pattern` (∩ `intersect`), one per distinct pattern."""
        key = (pattern, intersect)
        name = self._by_pattern.get(key)
        if name is None:
            self._count += 1
            name = f"{self._prefix.upper()}_{hint}{self._count}"
            self._terminals[name] = TerminalDef(name, pattern, intersect)
            self._by_pattern[key] = name
        return name

    def literal(self, text: str) -> str:
        """The exact text (`""`: a nonterminal deriving the empty string)."""
        if not text:
            lhs = self.rule("empty")
            self.add(lhs)
            return lhs
        return self.terminal(literal_node(text), hint="L")

    def token(self, token_id: int) -> str:
        """The one token `token_id`, never its text (grammar/tokens.py)."""
        terminal = token_terminal(token_id)
        self._terminals.setdefault(terminal.name, terminal)
        return terminal.name

    def embed(self, grammar: Grammar, hint: str = "sub") -> str:
        """`grammar`'s language as a nonterminal (its symbols renamed apart)."""
        self._count += 1
        tag = f"{self._prefix}{self._count}{hint}_"
        names = {t.name: f"{tag}{t.name}" for t in grammar.terminals}

        def rename(symbol: str) -> str:
            return names.get(symbol) or f"{tag}{symbol}"

        for terminal in grammar.terminals:
            if terminal.name.startswith("__TOKEN_"):
                names[terminal.name] = terminal.name  # token terminals are shared
                self._terminals.setdefault(terminal.name, terminal)
                continue
            self._terminals[names[terminal.name]] = TerminalDef(
                names[terminal.name], terminal.pattern, terminal.intersect
            )
        gap: str | None = None
        if grammar.ignore:
            gap = f"{tag}__ignored"
            self.add(gap)
            for name in grammar.ignore:
                self.add(gap, names[name], gap)
        for rule in grammar.rules:
            rhs = [rename(s) for s in rule.rhs]
            if gap is not None and len(rhs) > 1:
                rhs = [part for s in rhs for part in (s, gap)][:-1]
            self.add(rename(rule.lhs), *rhs)
        start = rename(grammar.start)
        if gap is None:
            return start
        return self.sequence(gap, start, gap)

    def grammar(self, start: str) -> Grammar:
        return Grammar(
            start=start, rules=tuple(self._rules), terminals=tuple(self._terminals.values())
        )
