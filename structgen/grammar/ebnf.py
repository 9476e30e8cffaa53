"""GBNF-style EBNF (llama.cpp, XGrammar, SGLang's `ebnf`, vLLM's `grammar`) -> the grammar IR.

Serving engines pass grammars in this dialect: ``name ::= expression`` rules, ``"literals"``,
``[character classes]``, ``.``, grouping, ``|``, and the postfix operators ``* + ?`` and
``{m}``, ``{m,}``, ``{m,n}``; ``#`` starts a comment; the start rule is ``root``. We parse it
ourselves (so errors carry the line and column) and build the IR directly. Quantifiers and
groups become helper rules. XGrammar's extensions (lookahead assertions ``(= ...)``,
``TagDispatch``) are refused by name.

EBNF denotes the exact context-free language, and the engine's lexer is greedy (a lexeme ends
only when the next byte cannot extend it). Terminals of one character each are always exact;
*lexeme inference* folds the regular parts of the grammar (rules without recursion, and
right-linear recursion such as a string body) into multi-character terminals, then unfolds
again every terminal the greedy lexer could read past the end the grammar needs
(`structgen.grammar.greedy`), until none is left. See docs/design/grammars.md.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from structgen.automata import (
    AutomataLimits,
    ByteDFA,
    CharClass,
    Concat,
    Empty,
    Node,
    Repeat,
    String,
    alternation,
    concat,
    literal_node,
    repeat,
)
from structgen.automata import intervals as iv
from structgen.errors import GrammarError, LimitExceededError, RegexError
from structgen.grammar.ir import Grammar, Rule, TerminalDef
from structgen.grammar.lark_literals import nullable

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
            # an operator may follow after spaces (`rule {2, 3}`, `[bc] {4,}`), as in llama.cpp
            ahead = self.pos
            while ahead < len(self.text) and self.text[ahead] in " \t":
                ahead += 1
            if ahead < len(self.text) and self.text[ahead] in "*+?{":
                self.pos = ahead
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
    """Builds IR rules from the parsed EBNF, folding regular expressions into terminals.

    Without `regular` every terminal matches exactly one character (exact: a one-character
    lexeme cannot run past anything, and UTF-8 is prefix-free). With `regular` (the regex of
    each rule that derives a regular language) each regular expression that is not a single
    character and not in `unfolded` becomes one terminal, at each place it is used (so that the
    analysis sees each use in its own context); `origins` says which expressions made each
    terminal, for `ebnf_to_ir` to unfold those the greedy lexer could read past.
    """

    def __init__(self, regular: dict[str, Node] | None, unfolded: set[int]) -> None:
        self.rules: list[Rule] = []
        self.terminals: dict[tuple[Node, bool], str] = {}
        self.origins: dict[str, list[int]] = {}  # terminal -> the fold keys that made it
        self.helpers = 0
        self.regular = regular
        self.unfolded = unfolded

    def helper(self, alternatives: list[list[str]]) -> str:
        name = f"<ebnf {self.helpers}>"
        self.helpers += 1
        for rhs in alternatives:
            self.rules.append(Rule(name, tuple(rhs)))
        return name

    def terminal(self, node: Node, *, nonempty: bool = False, origin: int | None = None) -> str:
        key = (node, nonempty)
        name = self.terminals.get(key)
        if name is None:
            name = f"<ebnf terminal {len(self.terminals)}>"
            self.terminals[key] = name
        if origin is not None:
            self.origins.setdefault(name, []).append(origin)
        return name

    def ir_terminals(self) -> tuple[TerminalDef, ...]:
        return tuple(
            TerminalDef(n, node, (_NONEMPTY,) if nonempty else ())
            for (node, nonempty), n in self.terminals.items()
        )

    # -- folding

    def is_regular(self, expr: _Expr) -> bool:
        return self.regular is not None and all(r.name in self.regular for r in _refs(expr))

    def foldable(self, expr: _Expr) -> bool:
        return (
            self.is_regular(expr) and id(expr) not in self.unfolded and not isinstance(expr, _Class)
        )

    def folded(self, expr: _Expr) -> list[str]:
        """One terminal for a regular expression, made optional when the expression may be
        empty (a terminal never matches the empty string)."""
        assert self.regular is not None
        node = _regex(expr, self.regular)
        key = id(expr)
        if isinstance(node, Empty):
            return []
        if not nullable(node):
            return [self.terminal(node, origin=key)]
        return [self.helper([[], [self.terminal(node, nonempty=True, origin=key)]])]

    # -- symbols

    def body(self, name: str, expr: _Expr) -> None:
        """The IR rules of EBNF rule `name`."""
        if self.foldable(expr):
            self.rules.append(Rule(name, tuple(self.folded(expr))))
        elif isinstance(expr, _Alt):
            for alternative in expr.items:
                self.rules.append(Rule(name, tuple(self.symbols(alternative))))
        else:
            self.rules.append(Rule(name, tuple(self.symbols(expr))))

    def symbols(self, expr: _Expr) -> list[str]:
        """Symbols deriving exactly the language of `expr` (helper rules added as needed)."""
        one = _single_char(expr)
        if one is not None:
            return [self.terminal(one)]
        if self.foldable(expr):
            return self.folded(expr)
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


# Any non-empty text: intersected with a folded terminal whose expression may be empty.
_NONEMPTY = Repeat(CharClass(((0, iv.MAX_CODE_POINT),)), 1, None)
#: rounds of unfolding, and seconds, before `ebnf_to_ir` gives up folding (and builds the
#: one-character terminals, which are always exact); each round unfolds at least one terminal
MAX_FOLD_ROUNDS = 64
MAX_FOLD_SECONDS = 2.0


def _regex(expr: _Expr, regular: dict[str, Node]) -> Node:
    """The regex AST of a regular expression (rule references inlined)."""
    if isinstance(expr, _Lit):
        return literal_node(expr.text)
    if isinstance(expr, _Class):
        return expr.node
    if isinstance(expr, _Ref):
        return regular[expr.name]
    if isinstance(expr, _Seq):
        return concat([_regex(x, regular) for x in expr.items])
    if isinstance(expr, _Alt):
        return alternation([_regex(x, regular) for x in expr.items])
    return repeat(_regex(expr.item, regular), expr.min, expr.max)


def _regular_rules(parsed: list[tuple[str, int, _Expr]]) -> dict[str, Node]:
    """The regex of every rule that derives a regular language: rules outside every cycle of
    references whose references are all regular, and groups of mutually recursive rules that
    refer to each other only at the end of an alternative (right-linear, like
    ``chars ::= "\\"" | [^"] chars``) or only at the start (left-linear, like
    ``list ::= list "," item | item``), solved by Arden's rule."""
    bodies = {name: body for name, _, body in parsed}
    out: dict[str, Node] = {}
    for group in _components(bodies):
        members = set(group)
        recursive = len(group) > 1 or any(r.name in members for r in _refs(bodies[group[0]]))
        outside = [r.name for n in group for r in _refs(bodies[n]) if r.name not in members]
        if not all(name in out for name in outside):
            continue  # refers to a rule that is not regular
        if not recursive:
            out[group[0]] = _regex(bodies[group[0]], out)
            continue
        solved = _solve_linear(group, bodies, out)
        if solved is not None:
            out.update(solved)
    return out


def _components(bodies: dict[str, _Expr]) -> list[list[str]]:
    """Strongly connected components of the rule references, each after those it refers to
    (Tarjan's algorithm, iterative)."""
    graph = {name: [r.name for r in _refs(body)] for name, body in bodies.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            edges = graph[node]
            if i < len(edges):
                work.append((node, i + 1))
                nxt = edges[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                out.append(group)
    return out


def _solve_linear(
    group: list[str], bodies: dict[str, _Expr], regular: dict[str, Node]
) -> dict[str, Node] | None:
    """Regexes of mutually recursive rules that refer to each other only at the end of their
    alternatives (right-linear) or only at the start (left-linear); None: neither.

    Right-linear: `X = A·X | B` gives `X = A*·B` (Arden's rule); each rule is solved for and
    substituted into the others in turn (Gaussian elimination over regexes). A left-linear
    group is the right-linear one of the reversed texts: solved so, and the answers reversed.
    """
    for left in (False, True):
        equations = _linear_equations(group, bodies, regular, left=left)
        if equations is not None:
            solved = _eliminate(group, equations)
            return {name: _reverse(node, {}) for name, node in solved.items()} if left else solved
    return None


def _linear_equations(
    group: list[str], bodies: dict[str, _Expr], regular: dict[str, Node], *, left: bool
) -> dict[str, tuple[dict[str, Node], Node]] | None:
    """Each rule as `X = Σ C_j·X_j | B` (texts reversed when `left`); None: not of that form."""
    members = set(group)
    out: dict[str, tuple[dict[str, Node], Node]] = {}
    for name in group:
        body = bodies[name]
        alternatives = body.items if isinstance(body, _Alt) else (body,)
        coefficients: dict[str, list[Node]] = {}
        constants: list[Node] = []
        for alternative in alternatives:
            items = alternative.items if isinstance(alternative, _Seq) else (alternative,)
            if not items:
                constants.append(Empty())
                continue
            if left:
                edge, rest = items[0], items[1:]
            else:
                edge, rest = items[-1], items[:-1]
            if any(r.name in members for x in rest for r in _refs(x)):
                return None
            if isinstance(edge, _Ref) and edge.name in members:
                part = concat([_regex(x, regular) for x in rest])
                coefficients.setdefault(edge.name, []).append(_reverse(part, {}) if left else part)
            elif any(r.name in members for r in _refs(edge)):
                return None
            else:
                whole = _regex(alternative, regular)
                constants.append(_reverse(whole, {}) if left else whole)
        out[name] = ({k: alternation(v) for k, v in coefficients.items()}, alternation(constants))
    return out


def _eliminate(
    group: list[str], solved: dict[str, tuple[dict[str, Node], Node]]
) -> dict[str, Node]:
    """Solve right-linear equations `X_i = Σ C_ij·X_j | B_i` by Gaussian elimination."""
    for k in group:
        coeffs, const = solved[k]
        loop = coeffs.pop(k, None)
        if loop is not None:
            star = repeat(loop, 0, None)
            coeffs = {j: concat([star, c]) for j, c in coeffs.items()}
            const = concat([star, const])
        solved[k] = (coeffs, const)
        for i in group:
            if i == k:
                continue
            coeffs_i, const_i = solved[i]
            via = coeffs_i.pop(k, None)
            if via is None:
                continue
            for j, c in coeffs.items():
                joined = concat([via, c])
                coeffs_i[j] = alternation([coeffs_i[j], joined]) if j in coeffs_i else joined
            solved[i] = (coeffs_i, alternation([const_i, concat([via, const])]))
    return {name: const for name, (_, const) in solved.items()}


def _reverse(node: Node, memo: dict[int, Node]) -> Node:
    """The regex of the reversed texts (characters in reverse order), sharing sub-trees."""
    hit = memo.get(id(node))
    if hit is not None:
        return hit
    if isinstance(node, String):
        out: Node = String(node.text[::-1])
    elif isinstance(node, Concat):
        out = concat([_reverse(x, memo) for x in reversed(node.items)])
    elif isinstance(node, Repeat):
        out = repeat(_reverse(node.item, memo), node.min, node.max)
    elif isinstance(node, (Empty, CharClass)):
        out = node
    else:  # Alternation
        out = alternation([_reverse(x, memo) for x in node.items])  # type: ignore[attr-defined]
    memo[id(node)] = out
    return out


def ebnf_to_ir(text: str, start: str = "root", *, limits: AutomataLimits | None = None) -> Grammar:
    """The IR of a GBNF-style EBNF grammar whose start rule is `start` (``root`` by default).

    IR rules keep the EBNF rule names; helper rules and terminals get names EBNF cannot spell.
    With `limits`, regular parts become multi-character terminals wherever the greedy lexer is
    proved exact for them (see `_Builder`); without, every terminal is one character.
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
    if limits is None:
        return _build(parsed, start, None, set())[0]
    regular = _regular_rules(parsed)
    deadline = time.perf_counter() + MAX_FOLD_SECONDS
    unfolded: set[int] = set()
    memo: dict[tuple[object, ...], Any] = {}
    keep: list[ByteDFA] = []  # the automata `memo` refers to by id
    for _ in range(MAX_FOLD_ROUNDS):
        grammar, builder = _build(parsed, start, regular, unfolded)
        bad = _conflicting_folds(grammar, builder, limits, memo, keep, deadline)
        if bad is None:
            break
        if not bad:
            return grammar
        unfolded |= bad
    return _build(parsed, start, None, set())[0]  # one character per terminal: always exact


def _build(
    parsed: list[tuple[str, int, _Expr]],
    start: str,
    regular: dict[str, Node] | None,
    unfolded: set[int],
) -> tuple[Grammar, _Builder]:
    builder = _Builder(regular, unfolded)
    for name, _, body in parsed:
        builder.body(name, body)
    grammar = Grammar(start=start, rules=tuple(builder.rules), terminals=builder.ir_terminals())
    return grammar, builder


def _conflicting_folds(
    grammar: Grammar,
    builder: _Builder,
    limits: AutomataLimits,
    memo: dict[tuple[object, ...], Any],
    keep: list[ByteDFA],
    deadline: float,
) -> set[int] | None:
    """Fold keys to undo: for each conflict `(A, B)` (the lexer may read past an `A` lexeme
    into `B`), the folds that made `B` (longer than one character, so a fold made it). None:
    the deadline passed."""
    from structgen.grammar.greedy import greedy_conflicts
    from structgen.grammar.terminals import terminal_dfa

    every = {key for keys in builder.origins.values() for key in keys}
    try:
        dfas = [terminal_dfa(t, limits) for t in grammar.terminals]
    except (LimitExceededError, RegexError):
        return every
    keep.extend(dfas)
    conflicts = greedy_conflicts(grammar, dfas, limits, memo, deadline)
    if conflicts is None:
        return None
    out: set[int] = set()
    for _, b in conflicts:
        origins = builder.origins.get(b)
        if not origins:  # a one-character terminal cannot be read past: cannot happen
            return every
        out.update(origins)
    return out


def _refs(expr: _Expr) -> list[_Ref]:
    if isinstance(expr, _Ref):
        return [expr]
    if isinstance(expr, _Rep):
        return _refs(expr.item)
    if isinstance(expr, (_Seq, _Alt)):
        return [r for x in expr.items for r in _refs(x)]
    return []
