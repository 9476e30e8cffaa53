"""Docstrings → a tool description and per-parameter descriptions.

A tool's JSON Schema is what the model reads about it, so the prose in a function's docstring is
worth keeping: the first paragraph becomes the tool's description and the documented parameters
become `description`s of the argument properties. Google (`Args:`), NumPy (`Parameters` with an
underline), reST/Sphinx (`:param x:`) and Epydoc (`@param x:`) styles are understood; anything
else leaves the descriptions empty rather than guessing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["ParsedDocstring", "parse_docstring"]

_GOOGLE_PARAMS = frozenset(
    {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments", "kwargs"}
)
_GOOGLE_ANY = re.compile(
    r"^(args|arguments|parameters|params|keyword args|keyword arguments|kwargs|returns?|yields?|"
    r"raises?|exceptions?|examples?|notes?|warnings?|see also|references?|attributes?|todo|"
    r"methods?|other parameters)\s*:\s*$",
    re.IGNORECASE,
)
_NUMPY_PARAMS = frozenset({"parameters", "other parameters", "keyword arguments"})
_UNDERLINE = re.compile(r"^\s*[-=~]{3,}\s*$")
_FIELD = re.compile(r"^\s*[:@]")
_REST_PARAM = re.compile(
    r"^\s*[:@](?:param|parameter|arg|argument|key|keyword)\s+"
    r"(?:[^:]*?\s)?(?P<name>\*{0,2}[A-Za-z_]\w*)\s*:\s?(?P<text>.*)$"
)
_GOOGLE_ENTRY = re.compile(r"^(?P<name>\*{0,2}[A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*:\s?(?P<text>.*)$")
_NUMPY_ENTRY = re.compile(
    r"^(?P<names>\*{0,2}[A-Za-z_]\w*(?:\s*,\s*\*{0,2}[A-Za-z_]\w*)*)\s*(:.*)?$"
)


@dataclass(frozen=True, slots=True)
class ParsedDocstring:
    """The first paragraph (`summary`) and the documented parameters (name → text)."""

    summary: str = ""
    params: dict[str, str] = field(default_factory=dict)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _join(lines: list[str]) -> str:
    return " ".join(part.strip() for part in lines if part.strip())


def parse_docstring(doc: str | None) -> ParsedDocstring:
    """Split a cleaned docstring (`inspect.getdoc`) into its summary and parameter texts."""
    if not doc or not doc.strip():
        return ParsedDocstring()
    lines = doc.expandtabs().splitlines()
    summary: list[str] = []
    for i, line in enumerate(lines):
        if not line.strip():
            if summary:
                break
            continue
        if _section_starts(lines, i):
            break
        summary.append(line)
    params: dict[str, str] = {}
    _google(lines, params)
    _numpy(lines, params)
    _rest(lines, params)
    return ParsedDocstring(_join(summary), {k.lstrip("*"): v for k, v in params.items() if v})


def _section_starts(lines: list[str], i: int) -> bool:
    line = lines[i]
    if _GOOGLE_ANY.match(line.strip()) or _FIELD.match(line):
        return True
    return i + 1 < len(lines) and bool(_UNDERLINE.match(lines[i + 1])) and bool(line.strip())


def _google(lines: list[str], params: dict[str, str]) -> None:
    i = 0
    while i < len(lines):
        header = lines[i].strip().rstrip(":").strip().lower()
        if not (lines[i].strip().endswith(":") and header in _GOOGLE_PARAMS):
            i += 1
            continue
        base = _indent(lines[i])
        i += 1
        entry_indent: int | None = None
        name: str | None = None
        text: list[str] = []
        while i < len(lines):
            line = lines[i]
            if line.strip():
                ind = _indent(line)
                if ind <= base:
                    break
                if entry_indent is None:
                    entry_indent = ind
                match = _GOOGLE_ENTRY.match(line.strip()) if ind <= entry_indent else None
                if match:
                    if name is not None:
                        params.setdefault(name, _join(text))
                    name, text = match["name"], [match["text"]]
                elif name is not None:
                    text.append(line)
            i += 1
        if name is not None:
            params.setdefault(name, _join(text))


def _numpy(lines: list[str], params: dict[str, str]) -> None:
    i = 0
    while i + 1 < len(lines):
        header = lines[i].strip().lower()
        if header not in _NUMPY_PARAMS or not _UNDERLINE.match(lines[i + 1]):
            i += 1
            continue
        base = _indent(lines[i])
        i += 2
        names: list[str] = []
        text: list[str] = []
        while i < len(lines):
            line = lines[i]
            if line.strip() and i + 1 < len(lines) and _UNDERLINE.match(lines[i + 1]):
                break  # the next section
            if line.strip() and _indent(line) <= base:
                match = _NUMPY_ENTRY.match(line.strip())
                if not match:
                    break
                for n in names:
                    params.setdefault(n, _join(text))
                names = [n.strip() for n in match["names"].split(",")]
                text = []
            elif names:
                text.append(line)
            i += 1
        for n in names:
            params.setdefault(n, _join(text))


def _rest(lines: list[str], params: dict[str, str]) -> None:
    name: str | None = None
    text: list[str] = []
    base = 0
    for line in lines:
        match = _REST_PARAM.match(line)
        if match:
            if name is not None:
                params.setdefault(name, _join(text))
            name, text, base = match["name"], [match["text"]], _indent(line)
            continue
        if name is None:
            continue
        if line.strip() and _indent(line) > base and not _FIELD.match(line):
            text.append(line)
        else:
            params.setdefault(name, _join(text))
            name, text = None, []
    if name is not None:
        params.setdefault(name, _join(text))
