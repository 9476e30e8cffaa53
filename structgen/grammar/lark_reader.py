"""Lark grammar text -> the grammar IR without loading Lark, for the grammars users write.

Loading a grammar through Lark (its LALR parse of the grammar text, its tree transforms, EBNF
expansion and terminal compilation) was most of a grammar's compile: 17 of 23 ms for the shipped
SQL grammar, 3.8 of 7.7 ms for JSON. This reader covers Lark's grammar syntax as it is usually
written — rules and terminals with ``| ( ) [ ] ? * + ~ n..m``, string and regex literals with
their flags, ``"a".."z"`` ranges, rule modifiers, priorities and aliases (both without effect on
the language), ``%ignore`` and ``%import common.NAME`` — and builds the same language as
``lark_frontend`` does from Lark's output. Everything else returns None and Lark loads the text:
templates, ``%declare``/``%override``/``%extend``, imports other than common terminals, and every
grammar that is wrong in any way, so Lark's own checks and error messages stay the ones users
get. See docs/design/grammars.md.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import lark.load_grammar

from structgen.automata import (
    CharClass,
    Node,
    alternation,
    concat,
    repeat,
)
from structgen.automata.nfa import extension_module
from structgen.grammar.ir import Grammar, Rule, TerminalDef
from structgen.grammar.lark_frontend import rewrite_nodes
from structgen.grammar.lark_literals import (
    UnsupportedPattern,
    nullable,
    regex_leaf,
    string_leaf,
)

__all__ = ["read_lark"]


class _Fallback(Exception):
    """Outside what this reader handles: Lark loads the grammar (and reports what is wrong)."""


#: repetition counts past this are left to Lark (its own limits and messages apply)
MAX_REPEAT = 1000

# --------------------------------------------------------------------------- tokens

# The grammar language's tokens, as Lark's own lexer reads them (lark/load_grammar.py
# TERMINALS): comments swallow the whitespace before them, newlines are significant except
# before a `|`, and a backslash at a line's end continues it. Each match takes the spaces and
# tabs before its token too (half of a grammar's matches were those runs alone, and a match
# costs more than what it reads); the kinds are tried most frequent first, where two can start
# alike in the order Lark's lexer gives them.
_TOKENS = re.compile(
    r"""[ \t]*(?:
    (?P<term>_?[A-Z][_A-Z0-9]*)
  | (?P<rule>_?[a-z][_a-z0-9]*)
  | (?P<dotdot>\.\.)
  | (?P<punct>[()\[\]{}:,|~.])
  | (?P<string>"(?:\\"|\\\\|[^"\n])*?"i?)
  | (?P<skip>\s*(?://|\#)[^\n]*|\\[ ]*\n|\Z)
  | (?P<nl_or>(?:\r?\n)+\s*\|)
  | (?P<nl>(?:\r?\n)+\s*)
  | (?P<to>->)
  | (?P<op>[+*]|\?(?![a-z_]))
  | (?P<mod>(?:!|!\??|\?!?)(?=[_a-z]))
  | (?P<regexp>/(?!/)(?:\\/|\\\\|[^/])*?/[imslux]*)
  | (?P<directive>%[a-z]+)
  | (?P<number>[+-]?\d+)
    )""",
    re.VERBOSE,
)


def _token_lists(text: str) -> tuple[list[str], list[str]]:
    """The tokens' kinds and texts (the punctuation is its own kind), the last ("nl", "");
    `_Fallback` where some text is no token. Scanned in C (`_lark_lexer.c`) where it can tell,
    else by the regex."""
    if _LEXER is not None:
        found = _LEXER.tokens(text)
        if found is not None:
            kinds: list[str] = found[0]
            texts: list[str] = found[1]
            return kinds, texts
    return _regex_tokens(text)


def _regex_tokens(text: str) -> tuple[list[str], list[str]]:
    # One scan (`finditer`: no Python call per position tried); every token kind is
    # non-empty, so a gap between two matches is text no token reads: Lark decides.
    kinds: list[str] = []
    texts: list[str] = []
    pos = 0
    end = len(text)
    for found in _TOKENS.finditer(text):
        if found.start() != pos:
            raise _Fallback
        kind = found.lastgroup
        assert kind is not None  # (every match is one of the named kinds)
        pos = found.end()
        if kind != "skip":
            value = found.group(kind)
            kinds.append(value if kind == "punct" else kind)
            texts.append(value)
        if pos == end:
            break
    if pos != end:
        raise _Fallback
    kinds.append("nl")
    texts.append("")
    return kinds, texts


#: the C scan of the tokens (`_lark_lexer.c`), or None
_LEXER: Any = extension_module("structgen.grammar._lark_lexer")


# --------------------------------------------------------------------------- syntax tree


# The syntax tree's nodes are immutable by convention; literals and ranges compare and hash by
# value (they key the anonymous terminals), the others are never compared. Not frozen
# dataclasses: compiled with mypyc, their generated `__init__` stays in Python (~0.6 µs a node,
# where a native one costs ~0.05), and the shipped SQL grammar makes ~470 nodes (most of its
# read).


class _Literal:
    """A string (`regex` False) or regex literal, its escapes evaluated as Lark does."""

    __slots__ = ("flags", "regex", "value")

    def __init__(self, value: str, flags: str, regex: bool) -> None:
        self.value = value
        self.flags = flags
        self.regex = regex

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, _Literal)
            and self.value == other.value
            and self.flags == other.flags
            and self.regex == other.regex
        )

    def __hash__(self) -> int:
        return hash((self.value, self.flags, self.regex))


class _Range:
    __slots__ = ("hi", "lo")

    def __init__(self, lo: str, hi: str) -> None:
        self.lo = lo
        self.hi = hi

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Range) and self.lo == other.lo and self.hi == other.hi

    def __hash__(self) -> int:
        return hash((self.lo, self.hi))


class _Name:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class _Seq:
    __slots__ = ("items",)

    def __init__(self, items: tuple[_Expr, ...]) -> None:
        self.items = items


class _Alt:
    __slots__ = ("options",)

    def __init__(self, options: tuple[_Seq, ...]) -> None:
        self.options = options


class _Rep:
    __slots__ = ("hi", "item", "lo")

    def __init__(self, item: _Expr, lo: int, hi: int | None) -> None:
        self.item = item
        self.lo = lo
        self.hi = hi


_Expr = _Literal | _Range | _Name | _Seq | _Alt | _Rep


def _unescape(body: str, regex: bool) -> str:
    """A literal's body as Lark evaluates it (`eval_escaping`): ``\\n \\t \\r \\f \\xhh \\uhhhh
    \\Uhhhhhhhh`` are characters, ``\\"`` is a quote, ``\\\\`` stays two characters in a regex
    (one in a string), any other escape stays as written (a regex escape)."""
    out: list[str] = []
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= n:
            raise _Fallback
        e = body[i + 1]
        if e in "Uux":
            width = {"x": 2, "u": 4, "U": 8}[e]
            digits = body[i + 2 : i + 2 + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise _Fallback
            code = int(digits, 16)
            if code > 0x10FFFF:
                raise _Fallback
            out.append(chr(code))
            i += 2 + width
        elif e in "nftr":
            out.append({"n": "\n", "f": "\f", "t": "\t", "r": "\r"}[e])
            i += 2
        elif e == '"':
            out.append('"')
            i += 2
        elif e == "\\":
            if body.startswith('"', i + 2):
                raise _Fallback  # (Lark's evaluation then drops one of the backslashes)
            out.append("\\\\")
            i += 2
        else:
            out.append("\\" + e)
            i += 2
    text = "".join(out)
    # (Lark then turns every double backslash of a string into one, escaped or not)
    return text if regex else text.replace("\\\\", "\\")


def _literal(kind: str, text: str) -> _Literal:
    if kind == "string":
        flags = "i" if text.endswith("i") else ""
        body = text[1 : -1 - len(flags)]
        value = _unescape(body, regex=False)
        regex = False
    else:
        end = text.rfind("/")
        flags = text[end + 1 :]
        body = text[1:end]
        if "\n" in body:
            raise _Fallback  # (only with the verbose flag, and rare: Lark decides)
        value = _unescape(body, regex=True)
        regex = True
    if not value:
        raise _Fallback  # (an empty terminal: Lark's error)
    return _Literal(value, "".join(sorted(flags)), regex)


class _Parser:
    """Recursive descent over the tokens (Lark's grammar-of-grammars, `lark.lark`)."""

    def __init__(self, tokens: tuple[list[str], list[str]]) -> None:
        self.kinds, self.texts = tokens
        self.i = 0
        self.rules: dict[str, _Alt] = {}
        self.terminals: dict[str, _Alt] = {}
        self.ignore: list[_Expr] = []
        self.imports: dict[str, str] = {}  # local name -> name in common.lark

    def peek(self) -> str:
        return self.kinds[self.i]

    def take(self, kind: str) -> str:
        """The next token's text, which must be of `kind`."""
        i = self.i
        if self.kinds[i] != kind:
            raise _Fallback
        self.i = i + 1
        return self.texts[i]

    def file(self) -> None:
        while self.i < len(self.kinds):
            kind = self.peek()
            if kind == "nl":
                self.i += 1
            elif kind in ("mod", "rule"):
                self.definition(self.rules, rule=True)
            elif kind == "term":
                self.definition(self.terminals, rule=False)
            elif kind == "directive":
                self.directive()
            else:
                raise _Fallback

    def definition(self, into: dict[str, _Alt], *, rule: bool) -> None:
        modifiers = ""
        if rule and self.peek() == "mod":
            modifiers = self.take("mod")  # ?, ! (and _) change Lark's trees, not the language
        name = self.take("rule" if rule else "term")
        if "?" in modifiers and name.startswith("_"):
            raise _Fallback  # (Lark's error)
        if self.peek() == ".":  # a priority (ignored, as by lark_frontend)
            self.i += 1
            self.take("number")
        self.take(":")
        # aliases name tree nodes: allowed on the alternatives of a rule Lark keeps in its trees
        body = self.expansions(aliases=rule and not name.startswith("_"))
        self.take("nl")
        if not rule and len(body.options) == 1 and not body.options[0].items:
            raise _Fallback  # an empty terminal: Lark's error
        if name in self.rules or name in self.terminals or name in self.imports:
            raise _Fallback  # (defined twice: Lark's error)
        into[name] = body

    def directive(self) -> None:
        word = self.take("directive")
        if word == "%ignore":
            self.ignore.append(self.expansions())
        elif word == "%import":
            self.import_()
        else:
            raise _Fallback  # %declare, %override, %extend
        self.take("nl")

    def import_(self) -> None:
        if self.take("rule") != "common":
            raise _Fallback
        if self.peek() == "(":
            self.i += 1
            names = [self.take("term")]
            while self.peek() == ",":
                self.i += 1
                names.append(self.take("term"))
            self.take(")")
            for name in names:
                self._import(name, name)
            return
        self.take(".")
        name = self.take("term")
        alias = name
        if self.peek() == "to":
            self.i += 1
            alias = self.take("term")
        self._import(alias, name)

    def _import(self, alias: str, name: str) -> None:
        if alias in self.imports or alias in self.terminals or name not in _common_terminals():
            raise _Fallback
        self.imports[alias] = name

    def expansions(self, *, aliases: bool = False) -> _Alt:
        options = [self.alias(aliases)]
        while self.peek() in ("|", "nl_or"):
            self.i += 1
            options.append(self.alias(aliases))
        return _Alt(tuple(options))

    def alias(self, allowed: bool) -> _Seq:
        items: list[_Expr] = []
        while self.peek() in ("(", "[", "string", "regexp", "rule", "term"):
            items.append(self.expr())
        if self.peek() == "to":  # an alias names the tree node only
            if not allowed:
                raise _Fallback
            self.i += 1
            self.take("rule")
        return _Seq(tuple(items))

    def expr(self) -> _Expr:
        atom = self.atom()
        kind = self.peek()
        if kind == "op":
            op = self.take("op")
            return _Rep(atom, 0 if op != "+" else 1, 1 if op == "?" else None)
        if kind == "~":
            self.i += 1
            lo = int(self.take("number"))
            hi = lo
            if self.peek() == "dotdot":
                self.i += 1
                hi = int(self.take("number"))
            if not 0 <= lo <= hi <= MAX_REPEAT:
                raise _Fallback
            return _Rep(atom, lo, hi)
        return atom

    def atom(self) -> _Expr:
        kind = self.peek()
        if kind == "(":
            self.i += 1
            inner = self.expansions()
            self.take(")")
            return inner
        if kind == "[":
            self.i += 1
            inner = self.expansions()
            self.take("]")
            return _Rep(inner, 0, 1)
        text = self.texts[self.i]
        self.i += 1
        if kind in ("rule", "term"):
            if self.peek() == "{":
                raise _Fallback  # a template
            return _Name(text)
        literal = _literal(kind, text)
        if kind == "string" and self.peek() == "dotdot":
            self.i += 1
            end = _literal("string", self.take("string"))
            if literal.flags or end.flags or len(literal.value) != 1 or len(end.value) != 1:
                raise _Fallback
            if literal.value > end.value:
                raise _Fallback
            return _Range(literal.value, end.value)
        return literal


@functools.cache
def _common_terminals() -> dict[str, _Alt]:
    """The terminal definitions of Lark's ``common.lark`` (read with this reader)."""
    path = Path(lark.__file__).resolve().parent / "grammars" / "common.lark"
    parser = _Parser(_token_lists(path.read_text(encoding="utf-8")))
    parser.file()
    if parser.rules or parser.ignore or parser.imports:
        raise _Fallback
    return parser.terminals


# --------------------------------------------------------------------------- terminals


#: readable names Lark gives anonymous punctuation terminals (cosmetic: any name would do)
_PUNCTUATION: dict[str, str] = getattr(lark.load_grammar, "_TERMINAL_NAMES", {})


class _Terminals:
    """Terminal ASTs by name: the grammar's own definitions, then imported ones."""

    def __init__(self, parser: _Parser) -> None:
        self.defs = parser.terminals
        self.imports = parser.imports
        self.nodes: dict[str, Node] = {}
        self.building: set[str] = set()

    def node(self, name: str, *, whole: bool = True) -> Node:
        """`name`'s AST (a terminal of the grammar or imported from common.lark). A rewritten
        common terminal stands only as a whole terminal (`lark_frontend` rewrites Lark's
        compiled pattern, which inside another terminal is no longer that pattern)."""
        if not whole and self.imports.get(name) in rewrite_nodes():
            raise _Fallback
        found = self.nodes.get(name)
        if found is not None:
            return found
        if name in self.defs:
            body, scope = self.defs[name], self.defs
        elif name in self.imports:
            original = self.imports[name]
            rewrite = rewrite_nodes().get(original)
            if rewrite is not None:  # (common terminals written with lookbehind or `*?`)
                self.nodes[name] = rewrite
                return rewrite
            body, scope = _common_terminals()[original], _common_terminals()
        else:
            raise _Fallback  # undefined
        if name in self.building:
            raise _Fallback  # recursive terminals: Lark's error
        self.building.add(name)
        node = self.expr(body, scope)
        self.building.discard(name)
        self.nodes[name] = node
        return node

    def expr(self, expr: _Expr, scope: dict[str, _Alt]) -> Node:
        if isinstance(expr, _Literal):
            return _leaf(expr)
        if isinstance(expr, _Range):
            return CharClass(((ord(expr.lo), ord(expr.hi)),))
        if isinstance(expr, _Name):
            if expr.name[0].islower():
                raise _Fallback  # a rule inside a terminal: Lark's error
            if scope is self.defs:
                return self.node(expr.name, whole=False)
            # inside common.lark: its own names (not rewritten: only whole imports are)
            return self._common(expr.name)
        if isinstance(expr, _Seq):
            return concat(self.expr(item, scope) for item in expr.items)
        if isinstance(expr, _Alt):
            return alternation(self.expr(option, scope) for option in expr.options)
        return repeat(self.expr(expr.item, scope), expr.lo, expr.hi)

    def _common(self, name: str) -> Node:
        key = f"common.{name}"
        found = self.nodes.get(key)
        if found is not None:
            return found
        body = _common_terminals().get(name)
        if body is None or key in self.building:
            raise _Fallback
        self.building.add(key)
        node = self.expr(body, _common_terminals())
        self.building.discard(key)
        self.nodes[key] = node
        return node


def _leaf(literal: _Literal) -> Node:
    """A literal's AST, built as `lark_frontend` builds it from Lark's pattern."""
    if not literal.regex:
        return string_leaf(literal.value, literal.flags)
    value, flags = literal.value, literal.flags
    if "l" in flags:
        raise _Fallback  # (LOCALE needs bytes patterns: Lark's error)
    try:
        re.compile(value, _python_flags(flags))  # Lark refuses what Python's `re` does
        return regex_leaf(value, flags)
    except (re.error, UnsupportedPattern):
        raise _Fallback from None


def _python_flags(flags: str) -> int:
    out = 0
    for flag in flags:
        out |= {"i": re.I, "m": re.M, "s": re.S, "u": re.U, "x": re.X}[flag]
    return out


# --------------------------------------------------------------------------- rules


#: a rule alternative is written out at most this many ways (options, groups and `*` expanded
#: inline, as Lark does); grammars past it are left to Lark
MAX_SPELLINGS = 512
#: `x~lo..hi` with more counts than this is a chain of optional helper rules, not spelled out
#: (Lark's REPEAT_BREAK_THRESHOLD)
SPELLED_REPEATS = 50


class _Builder:
    """BNF rules from EBNF bodies, shaped as Lark shapes them: options (`x?`, `[x]`, `x*`) and
    groups are spelled out as alternatives, repetitions become left-recursive helper rules."""

    def __init__(self, parser: _Parser, terminals: _Terminals) -> None:
        self.parser = parser
        self.terminals = terminals
        self.rules: list[Rule] = []
        self.anonymous: dict[_Literal | _Range, str] = {}
        self.names = set(parser.terminals) | set(parser.imports)
        self.helpers = 0
        self.repeats: dict[tuple[tuple[str, ...], ...], str] = {}
        # literals written as a whole terminal definition: a rule's equal literal is that one
        self.defined_as: dict[_Literal, str] = {}
        for name, body in parser.terminals.items():
            if len(body.options) == 1 and len(body.options[0].items) == 1:
                only = body.options[0].items[0]
                if isinstance(only, _Literal):
                    self.defined_as.setdefault(only, name)

    def rule(self, name: str, body: _Alt) -> None:
        self.add(name, self.alternatives(name, body))

    def add(self, lhs: str, spellings: list[tuple[str, ...]]) -> None:
        """`lhs`'s rules; two equal non-empty spellings are Lark's "Rules defined twice"
        (colliding options), and equal empty ones count once, as in Lark."""
        unique = dict.fromkeys(spellings)
        if len(unique) != len(spellings) and sum(1 for s in spellings if s) != len(
            [s for s in unique if s]
        ):
            raise _Fallback
        for spelling in unique:
            self.rules.append(Rule(lhs, spelling))

    def alternatives(self, owner: str, expr: _Expr) -> list[tuple[str, ...]]:
        """The ways `expr` is spelled as a sequence of symbols."""
        if isinstance(expr, _Name):
            return [(self.name(expr.name),)]
        if isinstance(expr, _Literal | _Range):
            return [(self.anonymous_terminal(expr),)]
        if isinstance(expr, _Alt):
            out: list[tuple[str, ...]] = []
            for option in expr.options:
                out.extend(self.alternatives(owner, option))
            return out
        if isinstance(expr, _Seq):
            spellings: list[tuple[str, ...]] = [()]
            for item in expr.items:
                ways = self.alternatives(owner, item)
                if len(spellings) * len(ways) > MAX_SPELLINGS:
                    raise _Fallback  # (Lark spells every combination out; so few grammars)
                spellings = [left + right for left in spellings for right in ways]
            return spellings
        assert isinstance(expr, _Rep)
        ways = self.alternatives(owner, expr.item)
        if expr.hi is None:  # x+ (x* is optional x+): h -> x | h x
            key = tuple(ways)
            helper = self.repeats.get(key)  # (one helper per repeated item, as in Lark)
            if helper is None:
                helper = self.repeats[key] = self.helper(owner, "plus" if expr.lo else "star")
                self.add(helper, ways + [(helper, *way) for way in ways])
            return [(helper,)] if expr.lo else [(helper,), ()]
        if expr.lo == 0 and expr.hi == 1:  # x? and [x]: with and without
            return [*ways, ()]
        counts = range(expr.lo, expr.hi + 1)
        if len(counts) > SPELLED_REPEATS:
            if len(ways) != 1 or not ways[0]:
                raise _Fallback
            # item~lo..hi with a wide range: lo copies, then nested options up to hi
            (way,) = ways
            return [way * expr.lo + (self.optional_chain(owner, way, expr.hi - expr.lo),)]
        repeated: list[tuple[str, ...]] = []
        for k in counts:
            copies: list[tuple[str, ...]] = [()]
            for _ in range(k):
                if len(copies) * len(ways) + len(repeated) > MAX_SPELLINGS:
                    raise _Fallback
                copies = [left + right for left in copies for right in ways]
            repeated.extend(copies)
        return repeated

    def name(self, name: str) -> str:
        if name[0].islower() or (name[0] == "_" and name[1:2].islower()):
            if name not in self.parser.rules:
                raise _Fallback  # undefined rule: Lark's error
            return name
        self.terminals.node(name)  # (defined? built)
        return name

    def optional_chain(self, owner: str, item: tuple[str, ...], count: int) -> str:
        """A rule deriving `item` 0 to `count` times."""
        nxt: str | None = None
        for _ in range(count):
            helper = self.helper(owner, "opt")
            self.rules.append(Rule(helper, ()))
            self.rules.append(Rule(helper, (*item, nxt) if nxt else item))
            nxt = helper
        assert nxt is not None
        return nxt

    def helper(self, owner: str, kind: str) -> str:
        self.helpers += 1
        return f"__{owner.lstrip('_')}_{kind}_{self.helpers - 1}"

    def anonymous_terminal(self, literal: _Literal | _Range) -> str:
        name = self.anonymous.get(literal)
        if name is not None:
            return name
        if isinstance(literal, _Literal) and literal in self.defined_as:
            name = self.defined_as[literal]
            self.terminals.node(name)
        else:
            name = self._new_name(literal)
            node = self.terminals.expr(literal, self.parser.terminals)
            self.terminals.nodes[name] = node
        self.anonymous[literal] = name
        return name

    def _new_name(self, literal: _Literal | _Range) -> str:
        name = None
        if isinstance(literal, _Literal) and not literal.regex:
            value = literal.value
            name = _PUNCTUATION.get(value)
            if name is None and value.isidentifier() and value.isascii():
                name = value.upper()
        if name is None or name in self.names:
            name = f"__ANON_{len(self.names)}"
            while name in self.names:
                name += "_"
        self.names.add(name)
        return name


# --------------------------------------------------------------------------- entry point


def read_lark(text: str, start: str = "start") -> Grammar | None:
    """The IR of Lark grammar `text`, or None when it is outside this reader's subset (then
    `lark_frontend` loads it with Lark, which also reports every error)."""
    try:
        return _read(text, start)
    except (_Fallback, RecursionError, ValueError):
        return None


def _read(text: str, start: str) -> Grammar:
    parser = _Parser(_token_lists(text))
    parser.file()
    if start not in parser.rules:
        raise _Fallback
    terminals = _Terminals(parser)
    builder = _Builder(parser, terminals)
    for name, body in parser.rules.items():  # (in definition order)
        builder.rule(name, body)
    ignore: list[str] = []
    for number, expr in enumerate(parser.ignore):
        if isinstance(expr, _Alt) and len(expr.options) == 1 and len(expr.options[0].items) == 1:
            only = expr.options[0].items[0]
            if isinstance(only, _Name) and not only.name[0].islower():
                terminals.node(only.name)
                ignore.append(only.name)
                continue
        name = f"__IGNORE_{number}"
        if name in builder.names:
            raise _Fallback
        builder.names.add(name)
        terminals.nodes[name] = terminals.expr(expr, parser.terminals)
        ignore.append(name)
    ignore = list(dict.fromkeys(ignore))
    # every terminal definition is built (Lark compiles them all, used or not)
    for name in parser.terminals:
        terminals.node(name)
    # Lark drops the rules no other rule mentions (until none is left to drop), then the
    # terminals only they used
    rules = builder.rules
    while True:
        mentioned = {start}
        for rule in rules:
            mentioned.update(symbol for symbol in rule.rhs if symbol != rule.lhs)
        kept = [rule for rule in rules if rule.lhs in mentioned]
        if len(kept) == len(rules):
            break
        rules = kept
    lhs = {rule.lhs for rule in rules}
    order = {name: None for rule in rules for name in rule.rhs if name not in lhs}
    order.update(dict.fromkeys(ignore))
    defs = []
    for name in order:
        node = terminals.nodes[name]
        if nullable(node):
            raise _Fallback  # Lark's error names the terminal
        defs.append(TerminalDef(name, node))
    return Grammar(start=start, rules=tuple(rules), terminals=tuple(defs), ignore=tuple(ignore))
