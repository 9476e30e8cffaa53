"""A wall-clock budget for one compile: long loops call `check_budget()`, which raises
`LimitExceededError` naming `CompileLimits.max_compile_seconds` once the budget is spent.

The budget is per thread and only active inside `compile_budget(...)`, so the lazy automaton
work done later, while generating, is never cut short by it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from structgen.errors import LimitExceededError

__all__ = ["check_budget", "compile_budget"]

_LOCAL = threading.local()


@contextlib.contextmanager
def compile_budget(seconds: float | None) -> Iterator[None]:
    """Run the body with a deadline `seconds` from now (None: no limit); nests (the outer wins)."""
    outer = getattr(_LOCAL, "deadline", None)
    if seconds is None or outer is not None:
        yield
        return
    _LOCAL.deadline = time.perf_counter() + seconds
    _LOCAL.seconds = seconds
    try:
        yield
    finally:
        _LOCAL.deadline = None


def check_budget() -> None:
    """Raise `LimitExceededError` if the current compile ran past its budget."""
    deadline = getattr(_LOCAL, "deadline", None)
    if deadline is not None and time.perf_counter() > deadline:
        # (the deadline stays: code that swallows the error meets it again at the next check)
        seconds = _LOCAL.seconds
        raise LimitExceededError(
            f"compiling took longer than {seconds:g} s",
            limit="CompileLimits.max_compile_seconds",
            value=seconds,
        )
