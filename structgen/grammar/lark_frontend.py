"""Lark grammar text -> the grammar IR, with Lark's own loader doing the heavy lifting.

Lark parses the grammar, resolves ``%import``/``%ignore``/templates and expands EBNF
(``? * + ~ n..m [..]``) into helper rules; we translate its BNF rules one to one and turn each
terminal's pattern into a regex AST (``PatternStr`` -> ``literal_node``, ``PatternRE`` ->
``parse_regex`` with the pattern's flags). Every terminal a rule mentions is kept, including the
anonymous and ``_filtered`` ones Lark drops from its trees, so every byte of a sentence is
matched by some terminal. See docs/design/grammars.md for what is supported and why.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import lark
import lark.exceptions

from structgen.automata import Node, parse_regex
from structgen.errors import GrammarError
from structgen.grammar.ir import Grammar, Rule, TerminalDef
from structgen.grammar.lark_literals import (
    UnsupportedPattern,
    nullable,
    regex_leaf,
    string_leaf,
)

__all__ = ["builtin_names", "lark_to_ir", "load_builtin"]

_LOCATION = re.compile(r"line (\d+),? col(?:umn)? (\d+)")
_UNDEFINED = re.compile(r"(?:Rule|Terminal) '([^']+)' used but not defined")
_DEFINED_TWICE = re.compile(r"(?:Rule|Terminal) '([^']+)' defined more than once")


def lark_to_ir(text: str, start: str = "start") -> Grammar:
    """The IR of a Lark grammar (``start`` names the start rule).

    The grammar is loaded exactly as ``lark.Lark(text, parser="earley")`` loads it, so anything
    Lark rejects is rejected here, as ``GrammarError`` with the line and column when known.
    Constructs the IR cannot express exactly (``%declare``d terminals, lookaround, anchors or
    lazy quantifiers in terminal regexes, terminals that match the empty string) raise
    ``GrammarError`` naming the terminal. Terminal priorities are ignored.

    Most grammars are read without Lark (`lark_reader`, the same language, a fraction of the
    time); the rest, and every grammar with an error, go through Lark.
    """
    from structgen.grammar.lark_reader import read_lark

    fast = read_lark(text, start)
    if fast is not None:
        return fast
    return lark_to_ir_with_lark(text, start)


def lark_to_ir_with_lark(text: str, start: str = "start") -> Grammar:
    """`lark_to_ir` through Lark's own loader (every grammar; the reference for `lark_reader`)."""
    parser = _load_with_lark(text, start)
    terminal_defs = {str(t.name): t for t in parser.terminals}
    rules: list[Rule] = []
    used: dict[str, None] = {}  # insertion-ordered set of terminal names
    for lark_rule in parser.rules:
        rhs: list[str] = []
        for symbol in lark_rule.expansion:
            name = str(symbol.name)
            if symbol.is_term:
                used[name] = None
            rhs.append(name)
        rules.append(Rule(str(lark_rule.origin.name), tuple(rhs)))
    ignore = tuple(dict.fromkeys(str(name) for name in parser.ignore_tokens))
    for name in ignore:
        used[name] = None
    terminals: list[TerminalDef] = []
    for name in used:
        definition = terminal_defs.get(name)
        if definition is None:
            raise GrammarError(
                f"terminal {name} has no pattern (declared with %declare?); every terminal "
                "needs a pattern because structgen matches the text itself",
                **_where(text, _terminal_position(text, name, None)),
            )
        terminals.append(TerminalDef(name, _terminal_node(text, name, definition.pattern)))
    return Grammar(start=start, rules=tuple(rules), terminals=tuple(terminals), ignore=ignore)


# ----------------------------------------------------------------------------- shipped grammars


def builtin_names() -> list[str]:
    """Names of the shipped grammars (``load_builtin`` accepts them), sorted."""
    return sorted(path.name[: -len(".lark")] for path in _builtin_files())


def load_builtin(name: str) -> str:
    """The text of a shipped grammar, by name (``"json"`` or ``"json.lark"``)."""
    stem = name[: -len(".lark")] if name.endswith(".lark") else name
    for path in _builtin_files():
        if path.name == f"{stem}.lark":
            return str(path.read_text(encoding="utf-8"))
    raise GrammarError(
        f"no shipped grammar named {name!r}; available: {', '.join(builtin_names())}"
    )


def _builtin_dir() -> Any:
    """``structgen.grammars`` package data when installed so, else the repository's grammars/."""
    try:
        folder = importlib.resources.files("structgen.grammars")
        if any(p.name.endswith(".lark") for p in folder.iterdir()):
            return folder
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        pass
    return Path(__file__).resolve().parents[2] / "grammars"


def _builtin_files() -> list[Any]:
    folder = _builtin_dir()
    if not folder.is_dir():
        return []
    return [p for p in folder.iterdir() if p.name.endswith(".lark") and p.is_file()]


def _import_paths() -> list[str]:
    """Lets grammars ``%import json (value)`` from the shipped library when it is on disk."""
    folder = _builtin_dir()
    return [str(folder)] if isinstance(folder, Path) and folder.is_dir() else []


# ----------------------------------------------------------------------------- loading


class _LarkLoader(lark.Lark):  # type: ignore[misc]
    """`lark.Lark` without its Earley parser: structgen parses with its own, and Lark's
    construction (FIRST sets, prediction tables) was most of a grammar's compile (SQL: 23 ms).
    What that construction refuses is still refused, with Lark's own errors (`_lark_checks`)."""

    def _build_parser(self) -> Any:
        _lark_checks(self.rules, self.lexer_conf, self.options.start)
        return None


def _lark_checks(rules: list[Any], lexer_conf: Any, starts: list[str]) -> None:
    """What building Lark's dynamic Earley parser checks: no rule twice, every nonterminal
    used (the start rules among them) defined, every terminal's regexp readable by Python's
    `re` and never empty (lark.parsers.grammar_analysis, lark.parser_frontends)."""
    from lark.exceptions import GrammarError as LarkGrammarError
    from lark.grammar import NonTerminal
    from lark.utils import get_regexp_width

    if len(rules) != len(set(rules)):
        twice = sorted({str(r) for r in rules if rules.count(r) > 1})
        raise LarkGrammarError(f"Rules defined twice: {', '.join(twice)}")
    defined = {rule.origin for rule in rules}
    for start in starts:
        if NonTerminal(start) not in defined:
            raise LarkGrammarError(f"Using an undefined rule: {NonTerminal(start)}")
    for rule in rules:
        for symbol in rule.expansion:
            if not symbol.is_term and symbol not in defined:
                raise LarkGrammarError(f"Using an undefined rule: {symbol}")
    for terminal in lexer_conf.terminals:
        regexp = terminal.pattern.to_regexp()
        try:
            width = get_regexp_width(regexp)[0]
        except ValueError:
            raise LarkGrammarError(f"Bad regexp in token {terminal.name}: {regexp}") from None
        if width == 0:
            raise LarkGrammarError("Dynamic Earley doesn't allow zero-width regexps", terminal)
        lexer_conf.re_module.compile(regexp, lexer_conf.g_regex_flags)


def _load_with_lark(text: str, start: str) -> Any:
    try:
        return _LarkLoader(
            text,
            parser="earley",
            lexer="dynamic",
            start=start,
            keep_all_tokens=True,
            import_paths=_import_paths(),
        )
    except lark.exceptions.UnexpectedInput as exc:
        reason = _strip_location(str(exc).split("\n", 1)[0])
        raise GrammarError(
            f"Lark grammar syntax error: {reason}",
            line=_positive(getattr(exc, "line", None)),
            column=_positive(getattr(exc, "column", None)),
        ) from exc
    except lark.exceptions.LarkError as exc:
        raise _translate_lark_error(text, start, exc) from exc
    except Exception as exc:  # re.error / regex.error from a terminal, assertion in lark
        raise _translate_other_error(text, exc) from exc


def _translate_lark_error(text: str, start: str, exc: Exception) -> GrammarError:
    args = exc.args
    if len(args) == 2 and "zero-width" in str(args[0]):
        name = str(getattr(args[1], "name", "?"))
        raw = getattr(getattr(args[1], "pattern", None), "raw", None)
        return GrammarError(
            f"terminal {name} can match the empty string; a terminal must consume text "
            "(make it non-empty and mark its use optional with ? or [..])",
            **_where(text, _terminal_position(text, name, raw)),
        )
    message = str(args[0]) if args else str(exc)
    first_line = message.split("\n", 1)[0]
    found = _LOCATION.search(message)
    if found:
        return GrammarError(
            f"Lark rejected the grammar: {_strip_location(first_line)}",
            line=int(found.group(1)),
            column=int(found.group(2)),
        )
    if "undefined rule" in message and f"'{start}'" in message:
        return GrammarError(f"the start rule {start!r} is not defined")
    undefined = _UNDEFINED.search(message)
    if undefined:
        position = _first_use(text, undefined.group(1))
        return GrammarError(f"Lark rejected the grammar: {first_line}", **_where(text, position))
    twice = _DEFINED_TWICE.search(message)
    if twice:
        definitions = list(_definitions(text, twice.group(1)))
        position = definitions[1] if len(definitions) > 1 else None
        return GrammarError(f"Lark rejected the grammar: {first_line}", **_where(text, position))
    return GrammarError(f"Lark rejected the grammar: {first_line}")


def _translate_other_error(text: str, exc: Exception) -> GrammarError:
    pattern = getattr(exc, "pattern", None)
    position = None
    if isinstance(pattern, str) and pattern:
        position = text.find(f"/{pattern}/")
        if position < 0:
            position = text.find(pattern)
    reason = str(exc).split("\n", 1)[0] or type(exc).__name__
    detail = f" in regex /{pattern}/" if isinstance(pattern, str) else ""
    return GrammarError(
        f"Lark could not load the grammar: {reason}{detail}",
        **_where(text, position if position is not None and position >= 0 else None),
    )


# ----------------------------------------------------------------------------- terminals


def _terminal_node(text: str, name: str, pattern: Any) -> Node:
    value = str(pattern.value)
    flags = frozenset(str(f) for f in pattern.flags)
    raw = getattr(pattern, "raw", None)
    if getattr(pattern, "type", None) == "str":
        if not value:
            raise _terminal_error(text, name, raw, "it is the empty string")
        return string_leaf(value, flags)
    rewrite = _known_rewrites().get((value, flags))
    if rewrite is not None:
        return rewrite
    try:
        node = regex_leaf(value, flags)
    except UnsupportedPattern as exc:
        raise _terminal_error(text, name, raw, str(exc)) from exc
    if nullable(node):
        raise _terminal_error(
            text, name, raw, "it can match the empty string; a terminal must consume text"
        )
    return node


def _terminal_error(text: str, name: str, raw: Any, reason: str) -> GrammarError:
    return GrammarError(
        f"terminal {name} is not supported: {reason}",
        **_where(text, _terminal_position(text, name, raw if isinstance(raw, str) else None)),
    )


#: exact lazy-free equivalents of the ``common.lark`` terminals that use lookbehind or ``*?``
REWRITES = {
    "ESCAPED_STRING": r'"(?:[^"\\\n]|\\[^\n])*"',
    "C_COMMENT": r"/\*(?:[^*]|\*+[^*/])*\*+/",
}


@functools.cache
def _known_rewrites() -> dict[tuple[str, frozenset[str]], Node]:
    """Exact lazy-free equivalents of ``common.lark`` terminals that use lookbehind or ``*?``.

    Lark matches ``ESCAPED_STRING`` / ``C_COMMENT`` with the *shortest* match (``.*?``), i.e. up
    to the first unescaped closing quote / the first ``*/``; the rewrites describe exactly those
    strings. The keys are taken from the installed Lark, so they follow its ``common.lark``.
    """
    source = "start: " + " ".join(REWRITES) + "\n"
    source += "".join(f"%import common.{name}\n" for name in REWRITES)
    loaded = lark.Lark(source, parser="earley", lexer="dynamic")
    out: dict[tuple[str, frozenset[str]], Node] = {}
    for terminal in loaded.terminals:
        replacement = rewrite_nodes().get(str(terminal.name))
        if replacement is not None:
            key = (str(terminal.pattern.value), frozenset(str(f) for f in terminal.pattern.flags))
            out[key] = replacement
    return out


@functools.cache
def rewrite_nodes() -> dict[str, Node]:
    """The rewrites' ASTs by common terminal name (`lark_reader` looks them up by name)."""
    return {name: parse_regex(regex) for name, regex in REWRITES.items()}


# ----------------------------------------------------------------------------- positions


def _where(text: str, position: int | None) -> dict[str, int]:
    """``line``/``column`` keyword arguments (1-based) for an offset in ``text``."""
    if position is None:
        return {}
    line = text.count("\n", 0, position) + 1
    column = position - (text.rfind("\n", 0, position) + 1) + 1
    return {"line": line, "column": column}


def _strip_location(message: str) -> str:
    """Lark's message without its own "at line X col Y in <string>" (GrammarError adds it)."""
    stripped = re.sub(r"\s*(?:at )?line \d+,? col(?:umn)? \d+(?: in <string>)?[.:]?", "", message)
    return stripped.rstrip(" .:") or message


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and value > 0 else None


def _definitions(text: str, name: str) -> Iterable[int]:
    """Offsets of the lines defining ``name`` (``name:``, ``?name:``, ``NAME.2:``)."""
    pattern = rf"^[ \t]*[?!]?({re.escape(name)})[ \t]*(?:\.[ \t]*-?\d+[ \t]*)?:"
    for found in re.finditer(pattern, text, re.MULTILINE):
        yield found.start(1)


def _terminal_position(text: str, name: str, raw: str | None) -> int | None:
    """Where a terminal is defined (``NAME:``), written (its literal) or first mentioned."""
    for position in _definitions(text, name):
        return position
    if raw:
        found = text.find(raw)
        if found >= 0:
            return found
    return _first_use(text, name)


def _first_use(text: str, name: str) -> int | None:
    """Offset of the first mention of ``name`` as a symbol (not in a literal or comment)."""
    for offset, word in _grammar_words(text):
        if word == name or word.endswith(f".{name}"):
            return offset + (len(word) - len(name))
    return None


def _grammar_words(text: str) -> Iterable[tuple[int, str]]:
    """Names in Lark grammar text with their offsets, skipping strings, regexes and comments."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif c == '"':
            i += 1
            while i < n and text[i] != '"' and text[i] != "\n":
                i += 2 if text[i] == "\\" else 1
            i += 1
        elif c == "/":
            i += 1
            while i < n and text[i] != "/" and text[i] != "\n":
                i += 2 if text[i] == "\\" else 1
            i += 1
        elif c.isalpha() or c == "_":
            j = i
            while j < n and (text[j].isalnum() or text[j] in "_."):
                j += 1
            yield i, text[i:j]
            i = j
        else:
            i += 1
