"""GBNF-style EBNF (llama.cpp, XGrammar, SGLang's `ebnf`, vLLM's `grammar`) -> the grammar IR.

Serving engines pass grammars in this dialect: ``name ::= expression`` rules, ``"literals"``,
``[character classes]``, ``.``, grouping, ``|``, and the postfix operators ``* + ?`` and
``{m}``, ``{m,}``, ``{m,n}``; ``#`` starts a comment; the start rule is ``root``. We parse it
ourselves (so errors carry the line and column) and build the IR directly, with terminals of
exactly one character each (a literal is a sequence of them, alternatives of single characters
merge into one class): EBNF denotes the exact context-free language, and the engine's greedy
lexer is exact only when no lexeme can run past the end the grammar needs. Quantifiers and
groups become helper rules. XGrammar's extensions (lookahead assertions ``(= ...)``,
``TagDispatch``) are refused by name. See docs/design/grammars.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from structgen.automata import (
    CharClass,
    Node,
    alternation,
    literal_node,
)
from structgen.automata import intervals as iv
from structgen.errors import GrammarError
from structgen.grammar.ir import Grammar, Rule, TerminalDef

__all__ = ["ebnf_to_ir", "looks_like_ebnf"]

MAX_REPEAT = 10_000  # {m,n} bounds above this are refused (the IR would grow without need)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_DEFINE = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*\s*::=")


def looks_like_ebnf(text: str) -> bool:
    """True when `text` reads as GBNF-style EBNF (``name ::= ...``) rather than Lark."""
    return any(_DEFINE.match(line.strip()) for line in text.splitlines())


# ----------------------------------------------------------------------------- syntax tree


@dataclass(frozen=True, slots=True)
class _Lit:
    text: str


@dataclass(frozen=True, slots=True)
class _Class:
    node: Node


@dataclass(frozen=True, slots=True)
class _Ref:
    name: str
    offset: int


@dataclass(frozen=True, slots=True)
class _Seq:
    items: tuple[_Expr, ...]


@dataclass(frozen=True, slots=True)
class _Alt:
    items: tuple[_Expr, ...]


@dataclass(frozen=True, slots=True)
class _Rep:
    item: _Expr
    min: int
    max: int | None


_Expr = _Lit | _Class | _Ref | _Seq | _Alt | _Rep


# ----------------------------------------------------------------------------- parser


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    # -- positions and errors

    def error(self, reason: str, offset: int | None = None) -> GrammarError:
        at = self.pos if offset is None else offset
        line = self.text.count("\n", 0, at) + 1
        column = at - (self.text.rfind("\n", 0, at) + 1) + 1
        return GrammarError(f"EBNF grammar: {reason}", line=line, column=column)

    def skip(self) -> None:
        text = self.text
        while self.pos < len(text):
            ch = text[self.pos]
            if ch in " \t\r\n":
                self.pos += 1
            elif ch == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end + 1
            else:
                break

    def at_rule_start(self) -> bool:
        return _DEFINE.match(self.text, self.pos) is not None

    # -- grammar

    def rules(self) -> list[tuple[str, int, _Expr]]:
        out: list[tuple[str, int, _Expr]] = []
        self.skip()
        while self.pos < len(self.text):
            start = self.pos
            m = _NAME.match(self.text, self.pos)
            if m is None:
                raise self.error(f"expected a rule name, found {self.text[self.pos]!r}")
            self.pos = m.end()
            self.skip()
            if not self.text.startswith("::=", self.pos):
                raise self.error(f"expected '::=' after the rule name {m.group()!r}")
            self.pos += 3
            body = self.alternation()
            out.append((m.group(), start, body))
            self.skip()
        if not out:
            raise self.error("the grammar has no rules", 0)
        return out

    def alternation(self) -> _Expr:
        items = [self.sequence()]
        while True:
            self.skip()
            if self.pos < len(self.text) and self.text[self.pos] == "|":
                self.pos += 1
                items.append(self.sequence())
            else:
                break
        return items[0] if len(items) == 1 else _Alt(tuple(items))

    def sequence(self) -> _Expr:
        items: list[_Expr] = []
        while True:
            self.skip()
            if self.pos >= len(self.text) or self.text[self.pos] in "|)" or self.at_rule_start():
                break
            items.append(self.postfix())
        return items[0] if len(items) == 1 else _Seq(tuple(items))

    def postfix(self) -> _Expr:
        item = self.primary()
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == "*":
                item, self.pos = _Rep(item, 0, None), self.pos + 1
            elif ch == "+":
                item, self.pos = _Rep(item, 1, None), self.pos + 1
            elif ch == "?":
                item, self.pos = _Rep(item, 0, 1), self.pos + 1
            elif ch == "{":
                item = self.braces(item)
            else:
                break
        return item

    def braces(self, item: _Expr) -> _Expr:
        start = self.pos
        end = self.text.find("}", start)
        m = re.fullmatch(r"\{\s*(\d+)\s*(,\s*(\d*)\s*)?\}", self.text[start : end + 1])
        if end < 0 or m is None:
            raise self.error("a repetition is written {m}, {m,} or {m,n}", start)
        low = int(m.group(1))
        high = low if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
        if high is not None and high < low:
            raise self.error(
                f"repetition {{{low},{high}}} has its maximum below its minimum", start
            )
        if max(low, high or 0) > MAX_REPEAT:
            raise self.error(f"repetition bounds above {MAX_REPEAT} are not supported", start)
        self.pos = end + 1
        return _Rep(item, low, high)

    def primary(self) -> _Expr:
        text, start = self.text, self.pos
        ch = text[start]
        if ch in "\"'":
            return _Lit(self.string(ch))
        if ch == "[":
            return _Class(self.char_class())
        if ch == ".":
            self.pos += 1
            return _Class(CharClass(((0, iv.MAX_CODE_POINT),)))
        if ch == "(":
            self.pos += 1
            self.skip()
            if text.startswith("=", self.pos):
                raise self.error(
                    "lookahead assertions (= ...) are an XGrammar extension structgen does not "
                    "support; rewrite the rule without them",
                    start,
                )
            inner = self.alternation()
            self.skip()
            if self.pos >= len(text) or text[self.pos] != ")":
                raise self.error("'(' is never closed", start)
            self.pos += 1
            return inner
        m = _NAME.match(text, start)
        if m is not None:
            self.pos = m.end()
            if text.startswith("(", self.pos):
                raise self.error(
                    f"{m.group()}(...) is a macro (an XGrammar extension such as TagDispatch); "
                    "structgen supports plain EBNF rules only",
                    start,
                )
            return _Ref(m.group(), start)
        raise self.error(f"unexpected {ch!r}")

    def escape(self, in_class: bool) -> int:
        """The code point of the escape at `self.pos` (just after the backslash)."""
        text, start = self.text, self.pos - 1
        if self.pos >= len(text):
            raise self.error("a backslash ends the grammar", start)
        ch = text[self.pos]
        self.pos += 1
        simple = {"n": 10, "r": 13, "t": 9, "\\": 92, '"': 34, "'": 39, "0": 0, "f": 12, "v": 11}
        if in_class:
            simple.update({"[": 91, "]": 93, "-": 45, "^": 94})
        if ch in simple:
            return simple[ch]
        width = {"x": 2, "u": 4, "U": 8}.get(ch)
        if width is not None:
            digits = text[self.pos : self.pos + width]
            if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise self.error(f"\\{ch} needs {width} hex digits", start)
            self.pos += width
            value = int(digits, 16)
            if value > iv.MAX_CODE_POINT:
                raise self.error(f"\\{ch}{digits} is not a Unicode code point", start)
            return value
        raise self.error(f"unknown escape \\{ch}", start)

    def string(self, quote: str) -> str:
        text, start = self.text, self.pos
        self.pos += 1
        out: list[str] = []
        while True:
            if self.pos >= len(text):
                raise self.error("the string literal is never closed", start)
            ch = text[self.pos]
            if ch == quote:
                self.pos += 1
                return "".join(out)
            if ch == "\\":
                self.pos += 1
                out.append(chr(self.escape(in_class=False)))
            elif ch == "\n":
                raise self.error("a string literal cannot span lines (write \\n)", start)
            else:
                out.append(ch)
                self.pos += 1

    def char_class(self) -> Node:
        text, start = self.text, self.pos
        self.pos += 1
        negated = text.startswith("^", self.pos)
        if negated:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        while True:
            if self.pos >= len(text):
                raise self.error("'[' is never closed", start)
            if text[self.pos] == "]":
                self.pos += 1
                break
            low = self.class_char()
            if text.startswith("-", self.pos) and not text.startswith("-]", self.pos):
                self.pos += 1
                high = self.class_char()
                if high < low:
                    raise self.error(f"range {chr(low)!r}-{chr(high)!r} is reversed", start)
                ranges.append((low, high))
            else:
                ranges.append((low, low))
        normal = iv.normalize(ranges)
        if negated:
            normal = iv.complement(normal)
        if not normal:
            raise self.error("the character class matches nothing", start)
        return CharClass(normal)

    def class_char(self) -> int:
        if self.pos >= len(self.text):
            raise self.error("'[' is never closed", self.text.rfind("[", 0, self.pos))
        ch = self.text[self.pos]
        self.pos += 1
        if ch == "\\":
            return self.escape(in_class=True)
        return ord(ch)


# ----------------------------------------------------------------------------- IR builder


def _single_char(expr: _Expr) -> Node | None:
    """The character class of `expr` when it always matches exactly one character."""
    if isinstance(expr, _Lit):
        return literal_node(expr.text) if len(expr.text) == 1 else None
    if isinstance(expr, _Class):
        return expr.node
    if isinstance(expr, _Alt):
        parts = [_single_char(x) for x in expr.items]
        if any(p is None for p in parts):
            return None
        return alternation([p for p in parts if p is not None])
    if isinstance(expr, _Seq) and len(expr.items) == 1:
        return _single_char(expr.items[0])
    return None


class _Builder:
    """Builds IR rules whose terminals each match exactly one character.

    The grammar engine lexes greedily (a lexeme ends only when the next byte cannot extend it;
    see docs/design/context-free.md). EBNF means the exact context-free language, and a terminal
    longer than one character could run past the end the grammar needs (`name " "? "("` against
    `name " FROM"`). One-character terminals cannot: every lexeme is one character, so the
    language is exact.
    """

    def __init__(self) -> None:
        self.rules: list[Rule] = []
        self.terminals: dict[Node, str] = {}
        self.helpers = 0

    def helper(self, alternatives: list[list[str]]) -> str:
        name = f"<ebnf {self.helpers}>"
        self.helpers += 1
        for rhs in alternatives:
            self.rules.append(Rule(name, tuple(rhs)))
        return name

    def terminal(self, node: Node) -> str:
        name = self.terminals.get(node)
        if name is None:
            name = f"<ebnf terminal {len(self.terminals)}>"
            self.terminals[node] = name
        return name

    def symbols(self, expr: _Expr) -> list[str]:
        """Symbols deriving exactly the language of `expr` (helper rules added as needed)."""
        one = _single_char(expr)
        if one is not None:
            return [self.terminal(one)]
        if isinstance(expr, _Lit):
            return [self.terminal(literal_node(ch)) for ch in expr.text]
        if isinstance(expr, _Ref):
            return [expr.name]
        if isinstance(expr, _Seq):
            return [symbol for item in expr.items for symbol in self.symbols(item)]
        if isinstance(expr, _Alt):
            return [self.helper([self.symbols(x) for x in expr.items])]
        if isinstance(expr, _Rep):
            return self.repetition(expr)
        raise AssertionError(expr)  # _Class is a single character

    def repetition(self, expr: _Rep) -> list[str]:
        body = self.symbols(expr.item)
        out: list[str] = []
        for _ in range(expr.min):
            out.extend(body)
        if expr.max is None:
            loop = f"<ebnf {self.helpers}>"
            self.helpers += 1
            self.rules.append(Rule(loop, ()))
            self.rules.append(Rule(loop, (loop, *body)))
            out.append(loop)
        else:
            tail: list[str] = []
            for _ in range(expr.max - expr.min):  # x? (x (x ...)?)? nested from the inside
                tail = [self.helper([[], [*body, *tail]])]
            out.extend(tail)
        return out


def ebnf_to_ir(text: str, start: str = "root") -> Grammar:
    """The IR of a GBNF-style EBNF grammar whose start rule is `start` (``root`` by default).

    IR rules keep the EBNF rule names; helper rules and terminals get names EBNF cannot spell.
    """
    parser = _Parser(text)
    parsed = parser.rules()
    names: set[str] = set()
    for name, offset, _ in parsed:
        if name in names:
            raise parser.error(f"rule {name!r} is defined twice", offset)
        names.add(name)
    if start not in names:
        raise GrammarError(
            f"EBNF grammar: there is no rule named {start!r} (the start rule); define it or "
            "pass start=..."
        )
    for _, _, body in parsed:
        for ref in _refs(body):
            if ref.name not in names:
                raise parser.error(f"rule {ref.name!r} is used but never defined", ref.offset)
    builder = _Builder()
    for name, _, body in parsed:
        if isinstance(body, _Alt):
            for alternative in body.items:
                builder.rules.append(Rule(name, tuple(builder.symbols(alternative))))
        else:
            builder.rules.append(Rule(name, tuple(builder.symbols(body))))
    terminals = tuple(TerminalDef(n, node) for node, n in builder.terminals.items())
    return Grammar(start=start, rules=tuple(builder.rules), terminals=terminals)


def _refs(expr: _Expr) -> list[_Ref]:
    if isinstance(expr, _Ref):
        return [expr]
    if isinstance(expr, _Rep):
        return _refs(expr.item)
    if isinstance(expr, (_Seq, _Alt)):
        return [r for x in expr.items for r in _refs(x)]
    return []
