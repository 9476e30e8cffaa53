"""The error family: every error structgen raises says *where* and *what to do*.

Nothing in this module is raised inside the per-token loop: `Matcher.accept_token` returns
False instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "ArgumentError",
    "GenerationError",
    "GrammarError",
    "LimitExceededError",
    "RegexError",
    "SchemaError",
    "StructgenError",
    "TokenizerError",
    "UnsupportedSchemaError",
    "ValidationAttempt",
    "ValidationFailedError",
]


class StructgenError(Exception):
    """Base of every error raised by structgen.

    Picklable with its fields (an error raised in a worker process reaches the parent whole):
    Python's default rebuilds an exception by calling its class with the message alone, which
    the errors with keyword-only fields (`RegexError`'s `pattern`, `LimitExceededError`'s
    `limit`) refused, and the others answered with their fields lost and the message wrapped
    a second time."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (type(self), self.args, dict(self.__dict__)))


def _rebuilt(cls: type[StructgenError], args: tuple[Any, ...], fields: dict[str, Any]) -> Any:
    """An unpickled error: its message and fields as they were, without running `__init__`."""
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(fields)
    return error


class ArgumentError(StructgenError, TypeError, ValueError):
    """A call got an argument of the wrong type or value; the message names the argument and
    what was expected. (A `TypeError` and a `ValueError` too, for callers that catch those.)"""


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


class UnsupportedRegexError(RegexError):
    """A valid pattern (in its dialect) that structgen does not turn into an automaton
    (importable from `structgen.automata.regex_syntax` too)."""


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
        super().__init__(f"{reason} (limit {limit}={value}; raise {limit} if intended)")


class GenerationError(StructgenError):
    """The generation loop cannot proceed (bad arguments, model/tokenizer mismatch)."""


@dataclass(frozen=True, slots=True)
class ValidationAttempt:
    """One answer that was rejected: the model's raw `text` and why (`error`)."""

    text: str
    error: str


class ValidationFailedError(StructgenError):
    """No answer passed validation within the allowed re-asks; `attempts` holds every try.

    Raised by the Pydantic layer (`generate_object`, `@structured`) instead of ever returning an
    invalid object; `model` names the class that was asked for.
    """

    def __init__(self, model: str, attempts: tuple[ValidationAttempt, ...]) -> None:
        self.model = model
        self.attempts = attempts
        lines = [f"no valid {model} after {len(attempts)} attempt(s):"]
        for i, attempt in enumerate(attempts, 1):
            text = attempt.text if len(attempt.text) <= 300 else attempt.text[:300] + "..."
            error = attempt.error.replace("\n", "\n    ")
            lines.append(f"  attempt {i}: {error}\n    output: {text!r}")
        super().__init__("\n".join(lines))


_E = TypeVar("_E", bound=BaseException)


def detached(exc: _E) -> _E:
    """`exc` without its traceback and chained exceptions, to be kept in a local or a cache:
    caught, its traceback holds the frame that keeps it, a reference cycle that keeps every
    frame of it and their locals until a full collection (internal; not exported)."""
    exc.__traceback__ = exc.__context__ = exc.__cause__ = None
    return exc
