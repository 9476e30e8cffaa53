"""GBNF-style EBNF (llama.cpp, XGrammar, SGLang's `ebnf`, vLLM's `grammar`) -> the grammar IR.

Serving engines pass grammars in this dialect: ``name ::= expression`` rules, ``"literals"``,
``[character classes]``, ``.``, grouping, ``|``, and the postfix operators ``* + ?`` and
``{m}``, ``{m,}``, ``{m,n}``; ``#`` starts a comment; the start rule is ``root``. We parse it
ourselves (so errors carry the line and column) and build the IR directly: every maximal
sub-expression that mentions no rule becomes one terminal (its regular language, exactly), so a
string body such as ``([^"\\\\] | "\\\\" ["nt])*`` is one lexer automaton and not a parser step per
character; quantifiers over rule references become helper rules. XGrammar's extensions
(lookahead assertions ``(= ...)``, ``TagDispatch``) are refused by name. See
docs/design/grammars.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from structgen.automata import (
    CharClass,
    Empty,
    Node,
    Repeat,
    alternation,
    concat,
    literal_node,
    repeat,
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


def _nullable(node: Node) -> bool:
    if isinstance(node, Empty):
        return True
    if isinstance(node, Repeat):
        return node.min == 0 or _nullable(node.item)
    items = getattr(node, "items", None)
    if items is None:  # String, CharClass
        return False
    from structgen.automata import Concat

    if isinstance(node, Concat):
        return all(_nullable(x) for x in items)
    return any(_nullable(x) for x in items)


MAX_INLINED_SIZE = 4000  # regex AST nodes (repeats counted) a rule inlined as a terminal may have


def _regex(expr: _Expr, known: dict[str, Node]) -> Node | None:
    """The regex AST of `expr`, with references to `known` regular rules substituted; None when
    it mentions any other rule."""
    if isinstance(expr, _Lit):
        return literal_node(expr.text)
    if isinstance(expr, _Class):
        return expr.node
    if isinstance(expr, _Ref):
        return known.get(expr.name)
    if isinstance(expr, _Rep):
        item = _regex(expr.item, known)
        return None if item is None else repeat(item, expr.min, expr.max)
    parts = [_regex(x, known) for x in expr.items]
    if any(p is None for p in parts):
        return None
    nodes = [p for p in parts if p is not None]
    return concat(nodes) if isinstance(expr, _Seq) else alternation(nodes)


def _linear_rule(name: str, body: _Expr, known: dict[str, Node]) -> Node | None:
    """The regular language of a rule that refers to itself only at the end of alternatives
    (``A ::= x A | y`` is ``x* y``) or only at their start (``A ::= A x | y`` is ``y x*``)."""
    alternatives = body.items if isinstance(body, _Alt) else (body,)
    loops: list[Node] = []
    bases: list[Node] = []
    side = ""
    for alternative in alternatives:
        items = list(alternative.items) if isinstance(alternative, _Seq) else [alternative]
        at_end = bool(items) and isinstance(items[-1], _Ref) and items[-1].name == name
        at_start = bool(items) and isinstance(items[0], _Ref) and items[0].name == name
        if at_end and len(items) > 1 and side in ("", "right"):
            side, rest = "right", items[:-1]
        elif at_start and len(items) > 1 and side in ("", "left"):
            side, rest = "left", items[1:]
        else:
            rest = items
            node = _regex(_Seq(tuple(rest)), known)
            if node is None:
                return None
            bases.append(node)
            continue
        node = _regex(_Seq(tuple(rest)), known)
        if node is None:
            return None
        loops.append(node)
    if not bases:
        return None  # no way out of the recursion: leave it to the rule (it derives nothing)
    loop = repeat(alternation(loops), 0, None)
    base = alternation(bases)
    return concat([loop, base]) if side == "right" else concat([base, loop])


def _size(node: Node, memo: dict[int, int]) -> int:
    key = id(node)
    found = memo.get(key)
    if found is None:
        if isinstance(node, Repeat):
            found = 1 + _size(node.item, memo) * max(1, min(node.max or node.min, 64))
        else:
            found = 1 + sum(_size(x, memo) for x in getattr(node, "items", ()))
        memo[key] = found
    return found


def _regular_rules(bodies: dict[str, _Expr]) -> dict[str, Node]:
    """Rules whose language is regular, as regex ASTs: rule-free bodies, bodies over other
    regular rules, and left- or right-linear self-recursion (a fixpoint over all rules)."""
    known: dict[str, Node] = {}
    memo: dict[int, int] = {}
    changed = True
    while changed:
        changed = False
        for name, body in bodies.items():
            if name in known:
                continue
            mentions_self = any(ref.name == name for ref in _refs(body))
            node = _linear_rule(name, body, known) if mentions_self else _regex(body, known)
            if node is not None and _size(node, memo) <= MAX_INLINED_SIZE:
                known[name] = node
                changed = True
    return known


class _Builder:
    def __init__(self, names: dict[str, str], inlined: dict[str, Node] | None = None) -> None:
        self.names = names  # EBNF rule name -> IR rule name
        self.inlined = inlined or {}  # rules whose (regular) language replaces their uses
        self.rules: list[Rule] = []
        self.terminals: dict[Node, str] = {}
        self.helpers = 0

    def regular(self, expr: _Expr) -> Node | None:
        """The regex AST of `expr` when it mentions no rule (but inlined ones), else None."""
        if isinstance(expr, _Lit):
            return literal_node(expr.text)
        if isinstance(expr, _Class):
            return expr.node
        if isinstance(expr, _Ref):
            return self.inlined.get(expr.name)
        if isinstance(expr, _Rep):
            item = self.regular(expr.item)
            return None if item is None else repeat(item, expr.min, expr.max)
        parts = [self.regular(x) for x in expr.items]
        if any(p is None for p in parts):
            return None
        nodes = [p for p in parts if p is not None]
        return concat(nodes) if isinstance(expr, _Seq) else alternation(nodes)

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
        node = self.regular(expr)
        if node is not None:
            if not _nullable(node):
                return [self.terminal(node)]
            if isinstance(node, Empty):
                return []
            if isinstance(node, Repeat) and node.min == 0 and not _nullable(node.item):
                # x*, x?, x{0,n}: one non-empty terminal, made optional by a helper rule
                return [self.helper([[], [self.terminal(repeat(node.item, 1, node.max))]])]
            # any other nullable regular expression: split it structurally below
        if isinstance(expr, _Ref):
            return [self.names[expr.name]]
        if isinstance(expr, _Seq):
            out: list[str] = []
            chunk: list[_Expr] = []
            for item in (*expr.items, None):
                if item is not None and self.regular(item) is not None:
                    chunk.append(item)
                    continue
                if chunk:  # consecutive rule-free items fold into one terminal when possible
                    folded = self.regular(_Seq(tuple(chunk)))
                    if folded is not None and not _nullable(folded):
                        out.append(self.terminal(folded))
                    else:
                        for part in chunk:
                            out.extend(self.symbols(part))
                    chunk = []
                if item is not None:
                    out.extend(self.symbols(item))
            return out
        if isinstance(expr, _Alt):
            return [self.helper([self.symbols(x) for x in expr.items])]
        if isinstance(expr, _Rep):
            return self.repetition(expr)
        raise AssertionError(expr)  # _Lit and _Class are always regular

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


def _rule_name(name: str) -> str:
    return name


def ebnf_to_ir(text: str, start: str = "root") -> Grammar:
    """The IR of a GBNF-style EBNF grammar whose start rule is `start` (``root`` by default)."""
    parser = _Parser(text)
    parsed = parser.rules()
    names: dict[str, str] = {}
    first: dict[str, int] = {}
    for name, offset, _ in parsed:
        if name in names:
            raise parser.error(f"rule {name!r} is defined twice", offset)
        names[name] = _rule_name(name)
        first[name] = offset
    if start not in names:
        raise GrammarError(
            f"EBNF grammar: there is no rule named {start!r} (the start rule); define it or "
            "pass start=..."
        )
    for _, _, body in parsed:
        for ref in _refs(body):
            if ref.name not in names:
                raise parser.error(f"rule {ref.name!r} is used but never defined", ref.offset)
    inlined = _regular_rules({name: body for name, _, body in parsed})
    builder = _Builder(names, inlined)
    for name, _, body in parsed:
        if name in inlined and name != start:
            continue  # every use of it became part of a terminal
        if isinstance(body, _Alt):
            for alternative in body.items:
                builder.rules.append(Rule(names[name], tuple(builder.symbols(alternative))))
        else:
            builder.rules.append(Rule(names[name], tuple(builder.symbols(body))))
    terminals = tuple(TerminalDef(n, node) for node, n in builder.terminals.items())
    return Grammar(start=names[start], rules=tuple(builder.rules), terminals=terminals)


def _refs(expr: _Expr) -> list[_Ref]:
    if isinstance(expr, _Ref):
        return [expr]
    if isinstance(expr, _Rep):
        return _refs(expr.item)
    if isinstance(expr, (_Seq, _Alt)):
        return [r for x in expr.items for r in _refs(x)]
    return []
