"""A Lark terminal's literals as regex ASTs, meaning what Lark's matcher means: string and
regex literals with their flags, the constructs refused where Lark's ``re.match`` semantics
differ from a full match, and whether an AST matches the empty string.

Shared by both Lark loaders (`lark_reader`, `lark_frontend`), and compiled with mypyc
(`structgen/_compiled.py`): every regex literal of a grammar is scanned here character by
character at each compile.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from structgen.automata import (
    Alternation,
    CharClass,
    Concat,
    Empty,
    Node,
    Repeat,
    String,
    literal_node,
    parse_regex,
)
from structgen.errors import RegexError

__all__ = ["UnsupportedPattern", "lark_semantics_issue", "nullable", "regex_leaf", "string_leaf"]

_COUNTED = re.compile(r"\{(\d*)(?:,(\d*))?\}")


class UnsupportedPattern(Exception):
    """A Lark regex literal the IR cannot express exactly (the reason is the message)."""


def string_leaf(value: str, flags: Iterable[str]) -> Node:
    """The AST of a Lark string literal (non-empty) with its flags."""
    # `"select"i`: ASCII case folding, so keywords never match `ſ`/`İ`/Kelvin-sign spellings
    return literal_node(value, ignore_case="i" in flags, ascii_case=True)


def regex_leaf(value: str, flags: Iterable[str]) -> Node:
    """The AST of a Lark regex literal with its flags, meaning what Lark's matcher means;
    `UnsupportedPattern` when it cannot (lazy quantifiers, anchors, what `parse_regex`
    refuses). Used by both loaders (`lark_reader` too), so they read literals alike."""
    flags = frozenset(flags)
    issue = lark_semantics_issue(value, flags)
    if issue is not None:
        offset, reason = issue
        raise UnsupportedPattern(f"{reason} (at offset {offset} of /{value}/)")
    try:
        # /.../i folds case in ASCII unless the terminal asks for Unicode with the `u` flag
        return parse_regex(
            value,
            flags="".join(sorted(flags)),
            ascii_case="u" not in flags,
            word_boundaries=False,
        )
    except RegexError as exc:
        raise UnsupportedPattern(f"{exc.reason} in /{value}/") from exc


def lark_semantics_issue(pattern: str, flags: Iterable[str]) -> tuple[int, str] | None:
    """A construct whose meaning under Lark's ``re.match`` differs from a full match, if any.

    Lark's lexer runs ``regex.match(text, pos)``: lazy quantifiers pick the shortest match and
    anchors test the surrounding text, while the IR terminal is the set of full matches. Rather
    than accept strings Lark rejects, these are refused (lookaround etc. fail in parse_regex).
    """
    verbose = "x" in set(flags)
    i, n = 0, len(pattern)
    after_quantifier = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 < n and pattern[i + 1] in "AZ":
                return i, f"anchor \\{pattern[i + 1]} (it tests the text around the terminal)"
            i += 2
            after_quantifier = False
            continue
        if c == "[":
            i = _skip_class(pattern, i)
            after_quantifier = False
            continue
        if verbose and c == "#":
            end = pattern.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if verbose and c.isspace():
            i += 1
            continue
        if c in "^$":
            return i, f"anchor {c} (it tests the text around the terminal, not the terminal)"
        if c == "(":
            i += 2 if pattern.startswith("(?", i) else 1
            after_quantifier = False
            continue
        if c in "*+?":
            if c == "?" and after_quantifier:
                return i - 1, "lazy quantifier (Lark takes the shortest match; write it greedily)"
            after_quantifier = True
            i += 1
            continue
        if c == "{":
            counted = _COUNTED.match(pattern, i)
            if counted and (counted.group(1) or counted.group(2) is not None):
                i = counted.end()
                lazy = i < n and pattern[i] == "?"
                fixed = counted.group(2) is None or counted.group(1) == counted.group(2)
                if lazy and not fixed:
                    return i - 1, "lazy quantifier (Lark takes the shortest match)"
                after_quantifier = not lazy
                i += 1 if lazy else 0
                continue
        after_quantifier = False
        i += 1
    return None


def _skip_class(pattern: str, i: int) -> int:
    """Index just past the character class starting at ``pattern[i] == "["``."""
    j = i + 1
    if j < len(pattern) and pattern[j] == "^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    return j + 1


def nullable(node: Node) -> bool:
    """Whether the AST matches the empty string."""
    if isinstance(node, Empty):
        return True
    if isinstance(node, String):
        return not node.text
    if isinstance(node, CharClass):
        return False
    if isinstance(node, Concat):
        return all(nullable(item) for item in node.items)
    if isinstance(node, Alternation):
        return any(nullable(item) for item in node.items)
    if isinstance(node, Repeat):
        return node.min == 0 or nullable(node.item)
    raise TypeError(f"unknown regex node {node!r}")
