"""A regex AST written back as pattern text, for people: `Grammar.to_text`, `structgen inspect`.

The text reads as a Python/ECMA regex (`[0-9]`, `(?:a|b)`, `x{2,4}`, `\\u00e9` escapes for
what is not printable ASCII); long patterns are cut at `limit` characters with `…`. It is a
view, not a round trip: number ranges and JSON string bodies come out as the large expansions
they are.
"""

from __future__ import annotations

from collections.abc import Callable

from structgen.automata import intervals as iv
from structgen.automata.regex_syntax import (
    Alternation,
    CharClass,
    Concat,
    Difference,
    Empty,
    Node,
    Pattern,
    Repeat,
    String,
)
from structgen.automata.utf8 import TOKEN_BASE

__all__ = ["regex_text"]

_SPECIAL = set("\\.^$|?*+()[]{}/")
_CLASS_SPECIAL = set("\\]^-[")


def regex_text(node: Pattern, *, limit: int = 400) -> str:
    """`node` as pattern text, at most `limit` characters (then cut, ending in `…`)."""
    out: list[str] = []
    size = [0]

    def emit(text: str) -> None:
        if size[0] <= limit:
            out.append(text)
            size[0] += len(text)

    _write(node, emit, size, limit)
    text = "".join(out)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _char(cp: int, special: set[str]) -> str:
    if cp > iv.MAX_CODE_POINT:  # a token terminal (grammar/tokens.py): written as its id
        return f"<[{cp - TOKEN_BASE}]>"
    ch = chr(cp)
    if ch in special:
        return "\\" + ch
    if 0x20 <= cp < 0x7F:
        return ch
    named = {9: "\\t", 10: "\\n", 13: "\\r"}.get(cp)
    if named:
        return named
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}"


def _class(ranges: iv.Ranges) -> str:
    if not ranges:
        return "[^\\x00-\\U0010ffff]"  # nothing
    if ranges == ((0, iv.MAX_CODE_POINT),):
        return "[\\s\\S]"
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return _char(ranges[0][0], _SPECIAL)
    negated = iv.complement(ranges)
    body, caret = (negated, "^") if len(negated) < len(ranges) else (ranges, "")
    parts = []
    for lo, hi in body:
        if lo == hi:
            parts.append(_char(lo, _CLASS_SPECIAL))
        else:
            sep = "" if hi == lo + 1 else "-"
            parts.append(_char(lo, _CLASS_SPECIAL) + sep + _char(hi, _CLASS_SPECIAL))
    return f"[{caret}{''.join(parts)}]"


def _atomic(node: Node) -> bool:
    return isinstance(node, (CharClass, Empty)) or (
        isinstance(node, String) and len(node.text) == 1
    )


def _write(node: Pattern, put: Callable[[str], None], size: list[int], limit: int) -> None:
    if size[0] > limit:
        return
    if isinstance(node, Empty):
        put("(?:)")
    elif isinstance(node, String):
        put("".join(_char(ord(c), _SPECIAL) for c in node.text))
    elif isinstance(node, CharClass):
        put(_class(node.ranges))
    elif isinstance(node, Concat):
        for item in node.items:
            group = isinstance(item, Alternation)
            if group:
                put("(?:")
            _write(item, put, size, limit)
            if group:
                put(")")
    elif isinstance(node, Alternation):
        for i, item in enumerate(node.items):
            if i:
                put("|")
            _write(item, put, size, limit)
    elif isinstance(node, Difference):  # (as a lookahead: what Python's re would read)
        put("(?!(?:")
        for i, item in enumerate(node.subtrahends):
            if i:
                put("|")
            _write(item, put, size, limit)
        put(")\\Z)(?:")
        _write(node.minuend, put, size, limit)
        put(")")
    elif isinstance(node, Repeat):
        group = not _atomic(node.item)
        if group:
            put("(?:")
        _write(node.item, put, size, limit)
        if group:
            put(")")
        lo, hi = node.min, node.max
        suffix = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((lo, hi))
        if suffix is None:
            suffix = f"{{{lo},}}" if hi is None else f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}"
        put(suffix)
