"""A wall-clock budget for one compile: long loops call `check_budget()`, which raises
`LimitExceededError` naming `CompileLimits.max_compile_seconds` once the budget is spent.

The budget is per thread and only active inside `compile_budget(...)`, so the lazy automaton
work done later, while generating, is never cut short by it (the state limits bound that). A
compile that fails takes the shared-cache entries it added out again (`undo_on_failure`).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from structgen.errors import LimitExceededError

__all__ = [
    "check_budget",
    "compile_budget",
    "compile_number",
    "forget_on_failure",
    "keep_alive",
    "undo_on_failure",
]

_LOCAL = threading.local()
_NUMBERS = itertools.count(1)  # (`next` on a count is atomic under the GIL)


@dataclass
class _Scope:
    deadline: float | None
    seconds: float | None
    undo: list[Callable[[], None]] = field(default_factory=list)
    keep: list[object] = field(default_factory=list)
    number: int = field(default_factory=lambda: next(_NUMBERS))


@contextlib.contextmanager
def compile_budget(seconds: float | None) -> Iterator[None]:
    """Run the body as one compile: a deadline `seconds` from now (None: no limit), and shared
    cache entries it adds (`undo_on_failure`) taken out again if it fails. Nests (the outer
    scope wins)."""
    if getattr(_LOCAL, "scope", None) is not None:
        yield
        return
    deadline = None if seconds is None else time.perf_counter() + seconds
    scope = _LOCAL.scope = _Scope(deadline, seconds)
    try:
        yield
    except BaseException:
        # a failed compile leaves nothing behind: its automata would only hold memory
        for undo in reversed(scope.undo):
            undo()
        raise
    finally:
        _LOCAL.scope = None


def undo_on_failure(undo: Callable[[], None]) -> None:
    """Call `undo` if the compile running on this thread fails (no compile: never)."""
    scope: _Scope | None = getattr(_LOCAL, "scope", None)
    if scope is not None:
        scope.undo.append(undo)


def forget_on_failure(cache: Any, lock: Any, key: Any) -> None:
    """Take `key` out of a shared `cache` (guarded by `lock`) if the running compile fails:
    what a failed compile added is not left behind."""

    def forget() -> None:
        with lock:
            cache.pop(key, None)

    undo_on_failure(forget)


def keep_alive(obj: object) -> None:
    """Hold `obj` until the compile running on this thread ends (weakly cached automata that
    one phase builds and a later phase uses). No compile: nothing."""
    scope: _Scope | None = getattr(_LOCAL, "scope", None)
    if scope is not None:
        scope.keep.append(obj)


def compile_number() -> int:
    """A number of the compile running on this thread, distinct from every other compile's
    in this process; 0 outside a compile."""
    scope: _Scope | None = getattr(_LOCAL, "scope", None)
    return 0 if scope is None else scope.number


def check_budget() -> None:
    """Raise `LimitExceededError` if the current compile ran past its budget."""
    scope: _Scope | None = getattr(_LOCAL, "scope", None)
    if scope is None or scope.deadline is None or scope.seconds is None:
        return
    if time.perf_counter() > scope.deadline:
        # (the deadline stays: code that swallows the error meets it again at the next check)
        raise LimitExceededError(
            f"compiling took longer than {scope.seconds:g} s",
            limit="CompileLimits.max_compile_seconds",
            value=scope.seconds,
        )
