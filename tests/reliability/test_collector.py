"""The cyclic garbage collector around compiles: paused while compiling, enabled after; what a
compile leaves goes to the oldest generation; a process's own frozen objects stay frozen."""

from __future__ import annotations

import gc
import weakref

import pytest

from structgen import Compiler, _gc, compiler
from tests.conftest import load_tokenizer, load_vocab

#: freezing is skipped where the collector has no generations (free-threaded builds)
_GENERATIONAL_ONLY = pytest.mark.skipif(
    not _gc._GENERATIONAL, reason="a free-threaded build: no generations, nothing is frozen"
)


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


def test_a_large_schema_compiles_without_a_collection() -> None:
    # Copying and fingerprinting a schema's data allocates a container per object in it: with
    # the collector running, a schema of a thousand properties set off collections (a full one
    # scanned everything the process holds: ~100 ms beside a Llama-3.1 vocabulary).
    compiler._CACHE.clear()
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"type": "integer", "description": "x"} for i in range(3000)},
    }
    seen: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    compiling = Compiler(load_vocab("gpt2"))
    gc.collect()
    gc.callbacks.append(count)
    try:
        compiling.json_schema(schema)
    finally:
        gc.callbacks.remove(count)
    assert seen == []
    assert gc.isenabled()


@_GENERATIONAL_ONLY
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
        _gc._PROCESS_FREEZES = False


@_GENERATIONAL_ONLY
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
        _gc._PROCESS_FREEZES = False


def test_disabled_collector_stays_disabled() -> None:
    gc.disable()
    try:
        _compile(4)
        assert not gc.isenabled()
    finally:
        gc.enable()


def _compile_and_walk(n: int) -> None:
    """A compile that meets what made reference cycles: branches that cannot be valid (caught
    `Unsat`s kept, then raised), `uniqueItems`, number ranges and "other key" languages (recursive
    closures), a bad pattern (a cached error), and masks with boundary events."""
    from structgen import Matcher, allocate_bitmask
    from structgen.errors import StructgenError

    compiler._CACHE.clear()
    vocab = load_vocab("gpt2")
    schema = {
        "type": "object",
        "properties": {
            f"key{n}": {"anyOf": [{"type": "integer", "minimum": 5, "maximum": 3}, {"enum": [n]}]},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "size": {"type": "number", "minimum": 0.25 * n, "maximum": 1000.5},
            "never": {"allOf": [{"type": "string"}, {"type": "integer"}]},
        },
        "additionalProperties": {"type": "integer", "maximum": 10 * n},
    }
    grammar = Compiler(vocab).json_schema(schema)
    matcher = Matcher(grammar)
    bitmask = allocate_bitmask(1, vocab.size, backend="numpy")
    text = f'{{"key{n}": {n}, "tags": ["a"], "x": 1}}'
    for token in load_tokenizer("gpt2").encode(text)[:12]:
        matcher.fill_bitmask(bitmask, 0)
        if not matcher.accept_token(token):
            break
    with pytest.raises(StructgenError):
        Compiler(vocab).json_schema({"type": "string", "pattern": "a(" + "b" * n})


def test_compiles_and_masks_leave_no_reference_cycles() -> None:
    """What a compile and its masks drop is freed by reference counting. Cycles waited for a
    full collection, and compiles moved them straight to the oldest generation: after a few
    thousand schemas a collection freed a million objects, stalling a mask for 2.5 s."""
    _compile_and_walk(0)  # (first use: imports, one-time tables)
    gc.collect()
    gc.disable()
    try:
        for n in range(1, 4):
            _compile_and_walk(n)
        compiler._CACHE.clear()
        found = gc.collect()
    finally:
        gc.enable()
    assert found < 50, f"{found} objects in reference cycles"


def test_a_free_threaded_build_only_pauses_the_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    """Free-threaded builds have no generations, and there freezing walks the whole heap (a
    first-visit fill took 20x as long): the collector is paused and resumed, nothing more."""
    calls: list[str] = []
    for name in ("freeze", "unfreeze", "get_freeze_count"):
        monkeypatch.setattr(gc, name, lambda name=name: calls.append(name) or 0)
    monkeypatch.setattr(_gc, "_GENERATIONAL", False)
    _compile(9)
    assert calls == []
    assert gc.isenabled()
