"""A tolerant parser for the *prefix* of a JSON text, for showing objects while they stream.

`parse_partial('{"name": "Ad')` is `{"name": "Ad"}`: open strings, arrays and objects are closed;
what could still change meaning is left out — a key whose value has not started (or a key still
being written), a number at the very end (`12` may become `125`), a literal being typed (`tr`),
an escape cut in half. So for two prefixes `a` of `b` of the same JSON text, the value of `a` is
a structural prefix of the value of `b` (strings grow, containers gain items): a user interface
can redraw without flicker. Pure Python and iterative (no eval, no recursion limit); it never
raises: on text that is not a JSON prefix it returns what it read before the first bad character.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["parse_partial"]

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_PLAIN = re.compile(r'[^"\\]*')  # a run of string content without a quote or an escape
_NUMBER_CHARS = re.compile(r"[-+0-9.eE]+")
_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_CUT_ESCAPE = re.compile(r"(?:\\(?:u[0-9a-fA-F]{0,3})?)?")  # what may start "\\uXXXX"
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_LITERALS: dict[str, Any] = {
    "true": True,
    "false": False,
    "null": None,
    "NaN": math.nan,  # what json.dumps writes for non-finite floats
    "Infinity": math.inf,
    "-Infinity": -math.inf,
}

# Parser states of the innermost open container.
_KEY_OR_END = 0  # after "{": a key or "}"
_KEY = 1  # after "," in an object
_COLON = 2  # after a key
_VALUE = 3  # after ":" in an object or "," in an array
_VALUE_OR_END = 4  # after "[": a value or "]"
_COMMA_OR_END = 5  # after a value


class _Frame:
    """An open object or array: the container (already linked into its parent) and its state."""

    __slots__ = ("container", "key", "state")

    def __init__(self, container: dict[str, Any] | list[Any], state: int) -> None:
        self.container = container
        self.key = ""
        self.state = state


def parse_partial(text: str, default: Any = None) -> Any:
    """The JSON value that the prefix `text` shows so far; `default` when none has started.

    Closes open strings, arrays and objects; leaves out an incomplete key (or a key without a
    value yet), a number or literal at the very end, and a cut escape. A top-level number is
    therefore never shown (parse the finished text with `json.loads`). Never raises.
    """
    root: Any = default
    stack: list[_Frame] = []
    n = len(text)
    i = _skip(text, 0)

    def attach(value: Any) -> None:
        nonlocal root
        if not stack:
            root = value
            return
        frame = stack[-1]
        if isinstance(frame.container, list):
            frame.container.append(value)
        else:
            frame.container[frame.key] = value
        frame.state = _COMMA_OR_END

    while i < n:
        char = text[i]
        if stack:
            frame = stack[-1]
            state = frame.state
            is_object = isinstance(frame.container, dict)
            if (
                state == _COMMA_OR_END
                or (state == _KEY_OR_END and char == "}")
                or (state == _VALUE_OR_END and char == "]")
            ):
                if char == "," and state == _COMMA_OR_END:
                    frame.state = _KEY if is_object else _VALUE
                elif char == ("}" if is_object else "]"):
                    stack.pop()
                    if not stack:
                        break  # the top-level value is complete; what follows is ignored
                    stack[-1].state = _COMMA_OR_END
                else:
                    break
                i = _skip(text, i + 1)
                continue
            if state in (_KEY_OR_END, _KEY):
                if char != '"':
                    break
                key, i, closed = _string(text, i + 1)
                if not closed:
                    break  # an incomplete key is left out
                frame.key = key
                frame.state = _COLON
                i = _skip(text, i)
                continue
            if state == _COLON:
                if char != ":":
                    break
                frame.state = _VALUE
                i = _skip(text, i + 1)
                continue
        # A value starts at i.
        if char == "{" or char == "[":
            container: dict[str, Any] | list[Any] = {} if char == "{" else []
            attach(container)
            stack.append(_Frame(container, _KEY_OR_END if char == "{" else _VALUE_OR_END))
            i += 1
        elif char == '"':
            value, i, closed = _string(text, i + 1)
            attach(value)  # an open string value is shown as far as it goes
            if not closed:
                break
        else:
            literal = _literal(text, i)
            if literal is not None:
                if literal[1] < 0:
                    break  # a literal still being typed
                attach(literal[0])
                i = literal[1]
            else:
                match = _NUMBER_CHARS.match(text, i)
                if match is None or match.end() == n:
                    break  # not a value, or a number that may still grow
                number = _number(match.group())
                if number is None:
                    break
                attach(number)
                i = match.end()
        if not stack:
            break  # a complete top-level scalar
        i = _skip(text, i)
    return root


def _skip(text: str, i: int) -> int:
    """The index of the first non-whitespace character at or after `i`."""
    match = _WHITESPACE.match(text, i)
    return match.end() if match is not None else i


def _string(text: str, i: int) -> tuple[str, int, bool]:
    """The string content starting at `i` (after the quote), the index after it, and closed?"""
    parts: list[str] = []
    n = len(text)
    while True:
        match = _PLAIN.match(text, i)
        end = match.end() if match is not None else i
        parts.append(text[i:end])
        i = end
        if i >= n:
            return "".join(parts), i, False
        if text[i] == '"':
            return "".join(parts), i + 1, True
        # An escape.
        kind = text[i + 1 : i + 2]
        if kind in _ESCAPES:
            parts.append(_ESCAPES[kind])
            i += 2
            continue
        if kind != "u" or _HEX4.fullmatch(text, i + 2, i + 6) is None:
            return "".join(parts), n, False  # cut (or not JSON): show the string up to here
        code = int(text[i + 2 : i + 6], 16)
        i += 6
        if 0xD800 <= code <= 0xDBFF:  # a high surrogate: pair it with the low one after it
            if text.startswith("\\u", i) and _HEX4.fullmatch(text, i + 2, i + 6):
                low = int(text[i + 2 : i + 6], 16)
                if 0xDC00 <= low <= 0xDFFF:
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    i += 6
            elif _CUT_ESCAPE.fullmatch(text, i):
                return "".join(parts), n, False  # its partner may still come
        parts.append(chr(code))


def _literal(text: str, i: int) -> tuple[Any, int] | None:
    """(value, end) for a literal at `i`; (None, -1) for one cut by the end; None if none."""
    rest = text[i : i + 9]
    for word, value in _LITERALS.items():
        if rest.startswith(word):
            return value, i + len(word)
        if word.startswith(rest) and i + len(rest) == len(text) and rest != "-":
            return None, -1
    return None


def _number(token: str) -> int | float | None:
    if _INTEGER.fullmatch(token):
        return int(token)
    if _FLOAT.fullmatch(token):
        return float(token)
    return None
