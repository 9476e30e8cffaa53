"""The cyclic garbage collector around compiles: paused while compiling, enabled after; what a
compile leaves goes to the oldest generation; a process's own frozen objects stay frozen."""

from __future__ import annotations

import gc
import weakref

import pytest

from structgen import Compiler, compiler
from tests.conftest import load_vocab


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def _compile(n: int) -> None:
    compiler._CACHE.clear()
    Compiler(load_vocab("gpt2")).json_schema(
        {"type": "object", "properties": {f"k{n}": {"type": "integer", "maximum": n}}}
    )


def test_collector_is_enabled_after_a_compile_and_garbage_is_still_collected() -> None:
    assert gc.isenabled()
    _compile(1)
    assert gc.isenabled()
    garbage = _Cycle()
    ref = weakref.ref(garbage)
    del garbage
    _compile(2)  # the cycle may be promoted with the compile's objects ...
    gc.collect()  # ... and a full collection still frees it
    assert ref() is None


def test_a_process_that_froze_its_objects_keeps_them_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        _compile(3)
        assert gc.isenabled()
        assert 0 < gc.get_freeze_count() <= frozen  # (some freed since: not unfrozen)
    finally:
        gc.unfreeze()
        compiler._PROCESS_FREEZES = False


def test_a_freezing_process_is_asked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """`gc.get_freeze_count()` walks every frozen object (tens of ms in a server): once it has
    said yes, later compiles do not ask again (and still leave the frozen objects frozen)."""
    calls = []
    real = gc.get_freeze_count
    monkeypatch.setattr(gc, "get_freeze_count", lambda: calls.append(1) or real())
    gc.freeze()
    try:
        for n in range(5, 9):
            _compile(n)
        assert len(calls) == 1
        assert real() > 0
    finally:
        gc.unfreeze()
        compiler._PROCESS_FREEZES = False


def test_disabled_collector_stays_disabled() -> None:
    gc.disable()
    try:
        _compile(4)
        assert not gc.isenabled()
    finally:
        gc.enable()
