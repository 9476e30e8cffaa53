"""Argument checks for the front doors (`Compiler`, `Matcher`, the generation entry points):
a wrong argument is an `ArgumentError` that names it and says what was expected, never a
`TypeError` from deep inside."""

from __future__ import annotations

from structgen.errors import ArgumentError

__all__ = ["describe", "expect_bool", "expect_int", "expect_ints", "expect_str"]


def describe(value: object) -> str:
    """How an error message shows a wrong argument: its type, and a short repr."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def expect_str(value: object, name: str) -> str:
    """`value` if it is a str, else `ArgumentError` naming `name`."""
    if not isinstance(value, str):
        hint = " (decode it first)" if isinstance(value, (bytes, bytearray)) else ""
        raise ArgumentError(f"{name} must be a str, got {describe(value)}{hint}")
    return value


def expect_bool(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise ArgumentError(f"{name} must be True or False, got {describe(value)}")
    return value


def expect_int(value: object, name: str, *, minimum: int | None = None) -> int:
    """`value` if it is an int (not a bool) of at least `minimum`, else `ArgumentError`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentError(f"{name} must be an integer, got {describe(value)}")
    if minimum is not None and value < minimum:
        raise ArgumentError(f"{name} must be >= {minimum}, got {value}")
    return value


def expect_ints(value: object, name: str) -> list[int]:
    """A list of ints from an iterable of them (numpy / torch integers included)."""
    if isinstance(value, (str, bytes, bytearray)) or not hasattr(value, "__iter__"):
        raise ArgumentError(f"{name} must be a list of token ids, got {describe(value)}")
    out = []
    for item in value:  # type: ignore[attr-defined]
        if isinstance(item, bool) or not hasattr(item, "__index__"):
            raise ArgumentError(f"{name} must hold integers, got {describe(item)}")
        out.append(int(item))
    return out
