"""The error family: every error structgen raises says *where* and *what to do*.

Nothing in this module is raised inside the per-token loop: `Matcher.accept_token` returns
False instead.
"""

from __future__ import annotations

__all__ = [
    "GenerationError",
    "GrammarError",
    "LimitExceededError",
    "RegexError",
    "SchemaError",
    "StructgenError",
    "TokenizerError",
    "UnsupportedSchemaError",
]


class StructgenError(Exception):
    """Base of every error raised by structgen."""


class TokenizerError(StructgenError):
    """The tokenizer given to `Vocabulary.from_hf` cannot be turned into token bytes."""


class RegexError(StructgenError, ValueError):
    """A regular expression is malformed, unsupported, or too large.

    `offset` is the index in `pattern` where the problem starts (None when it is global).
    """

    def __init__(self, reason: str, *, pattern: str, offset: int | None = None) -> None:
        self.reason = reason
        self.pattern = pattern
        self.offset = offset
        super().__init__(self._render())

    def _render(self) -> str:
        if self.offset is None:
            return f"{self.reason} in regex {self.pattern!r}"
        caret = " " * self.offset + "^"
        return f"{self.reason} at offset {self.offset} in regex:\n  {self.pattern}\n  {caret}"


class GrammarError(StructgenError, ValueError):
    """A grammar is malformed or uses an unsupported construct (with line and column)."""

    def __init__(self, reason: str, *, line: int | None = None, column: int | None = None) -> None:
        self.reason = reason
        self.line = line
        self.column = column
        where = f" at line {line}, column {column}" if line is not None else ""
        super().__init__(f"{reason}{where}")


class SchemaError(StructgenError, ValueError):
    """A JSON Schema is invalid or unsatisfiable; `pointer` is its JSON pointer."""

    def __init__(self, reason: str, *, pointer: str = "") -> None:
        self.reason = reason
        self.pointer = pointer
        super().__init__(f"{reason} (at {pointer or '/'})")


class UnsupportedSchemaError(SchemaError):
    """A schema keyword cannot be enforced exactly (and lenient mode is off)."""


class LimitExceededError(StructgenError):
    """Compile work hit a configured limit; `limit` names the knob to raise."""

    def __init__(self, reason: str, *, limit: str, value: int | float) -> None:
        self.reason = reason
        self.limit = limit
        self.value = value
        super().__init__(f"{reason} (limit {limit}={value}; raise it in CompileLimits if intended)")


class GenerationError(StructgenError):
    """The generation loop cannot proceed (bad arguments, model/tokenizer mismatch)."""
