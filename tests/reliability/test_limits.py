"""Limits that hold (issue 19): the slowest MaskBench schemas and pathological regexes end within
1.2x their `max_compile_seconds` (plus a bounded constant), with `LimitExceededError` naming the
knob or a compiled grammar, and a failed compile leaves nothing behind in the shared caches;
the compiled-grammar cache stays within its byte budget."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import time
from typing import Any

import numpy as np
import pytest

import structgen as sg
from structgen.compiler import CompileLimits
from structgen.engines import grammar as engine
from structgen.grammar import terminals
from tests.conftest import load_vocab, shared_dir
from tests.reliability.fuzzing import PATHOLOGICAL_REGEXES

SECONDS = 0.5
SLACK = 0.3  # the bounded constant: one uninterruptible step (a C row build, a parse)
SLOW_SCHEMAS = [
    "Handwritten---allany17.json",
    "Handwritten---allany23.json",
    "Handwritten---allany12.json",
    "JsonSchemaStore---datahub_ingestion_schema.json",
    "Github_hard---o9915.json",
]


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def _settle() -> float:
    gc.collect()
    with contextlib.suppress(OSError):  # not glibc
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return _rss_mb()


def _shared_entries() -> tuple[int, int]:
    gc.collect()
    return len(terminals._TERMINAL_DFAS), len(engine._UNIONS)


def _bounded(compile_once: Any) -> tuple[float, str]:
    started = time.perf_counter()
    try:
        compile_once()
        verdict = "compiled"
    except sg.LimitExceededError as exc:
        verdict = exc.limit
    except sg.StructgenError as exc:  # unsupported / malformed: typed, and fast
        verdict = type(exc).__name__
    return time.perf_counter() - started, verdict


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW_SCHEMAS)
def test_slow_schemas_end_within_their_compile_limit(name: str) -> None:
    data = json.loads((shared_dir("maskbench-dev") / name).read_text())
    schema = data.get("schema", data)
    vocab = load_vocab("llama3_1")
    limits = CompileLimits(max_compile_seconds=SECONDS)
    sg.clear_caches()
    before_entries = _shared_entries()
    before_rss = _settle()
    took, verdict = _bounded(lambda: sg.Compiler(vocab, limits=limits).json_schema(schema))
    assert took <= 1.2 * SECONDS + SLACK, (name, took, verdict)
    assert verdict in ("compiled", "CompileLimits.max_compile_seconds"), verdict
    if verdict != "compiled":
        assert _shared_entries() == before_entries  # nothing left in the shared caches
        assert _settle() - before_rss < 64, "memory did not return after the failed compile"


@pytest.mark.parametrize("pattern", PATHOLOGICAL_REGEXES[:16])
def test_pathological_regexes_end_within_their_compile_limit(pattern: str) -> None:
    from tests.reliability.fuzzing import byte_vocab

    limits = CompileLimits(max_compile_seconds=SECONDS)
    compiler = sg.Compiler(byte_vocab(), limits=limits)
    took, verdict = _bounded(lambda: compiler.regex(pattern))
    assert took <= 1.2 * SECONDS + SLACK, (pattern, took, verdict)


def test_an_expired_budget_stays_expired() -> None:
    from structgen._budget import check_budget, compile_budget

    with compile_budget(0.0):
        time.sleep(0.001)
        for _ in range(2):  # code that swallowed the first error meets it again
            with pytest.raises(sg.LimitExceededError, match="max_compile_seconds"):
                check_budget()
    check_budget()  # outside a compile: nothing


def test_the_compiled_grammar_cache_stays_within_its_byte_budget() -> None:
    from tests.reliability.fuzzing import byte_vocab

    vocab = byte_vocab()
    old = sg.cache_budget()
    sg.clear_caches()
    try:
        sg.set_cache_budget(2**20)  # (~38 kB a grammar: the keys read so far laid out)
        largest = 0
        for i in range(40):
            schema = {
                "type": "object",
                "properties": {
                    f"k{i}_{j}": {"type": "string", "maxLength": 5 + j} for j in range(6)
                },
                "required": [f"k{i}_0"],
            }
            grammar = sg.Compiler(vocab).json_schema(schema)
            matcher = sg.Matcher(grammar)
            mask = sg.allocate_bitmask(1, vocab.size)
            for byte in b'{"k':
                matcher.fill_bitmask(mask, 0)
                assert matcher.accept_token(byte)
            largest = max(largest, grammar.memory_bytes())
        usage = sg.cache_usage()
        assert usage["grammars"] < 40  # the oldest were evicted
        assert usage["grammar_bytes"] <= sg.cache_budget() + largest
        assert isinstance(np.int64(usage["budget"]), np.integer)
    finally:
        sg.set_cache_budget(old)
    sg.clear_caches()
    usage = sg.cache_usage()
    assert usage["grammars"] == 0 and usage["grammar_bytes"] == 0
    assert usage["recent_terminal_automata"] == 0 and usage["recent_terminal_bytes"] == 0
    with pytest.raises(sg.ArgumentError):
        sg.set_cache_budget(-1)


def _small_schema(i: int) -> dict[str, Any]:
    return {"type": "object", "properties": {f"k{i}_{j}": {"type": "integer"} for j in range(3)}}


def test_the_cache_is_measured_rarely_far_below_its_budget(monkeypatch: Any) -> None:
    """A measurement reads every cached grammar: far below the budget it runs once per 32
    insertions (it ran every eighth, inside one compile in eight), at the budget every time."""
    from structgen import compiler

    vocab = byte_vocab_for_limits()
    old = sg.cache_budget()
    sg.clear_caches()
    calls = []
    measure = compiler.CompiledGrammar.memory_parts

    def counted(self: Any, known: Any = None) -> dict[int, int]:
        calls.append(1)
        return measure(self, known)

    monkeypatch.setattr(compiler.CompiledGrammar, "memory_parts", counted)
    try:
        sg.set_cache_budget(2**30)
        for i in range(64):
            sg.Compiler(vocab).json_schema(_small_schema(i))
        # measured at the first insertion (set_cache_budget asks for it: one grammar read)
        # and the 33rd (33 read); every eighth insertion would have read 288
        assert len(calls) == 1 + 33, len(calls)
        assert compiler._next_measurement(2**30, 2**20, 64) == 32
        assert compiler._next_measurement(2**30, 2**30 - 2**20, 64) == 1  # room for < 1 more
        assert compiler._next_measurement(2**30, 2**30 - 5 * 2**24, 64) == 5  # 16 MiB average
        assert compiler._next_measurement(2**30, 2**31, 64) == 1  # over: every insertion
    finally:
        sg.set_cache_budget(old)
        sg.clear_caches()


def test_the_budget_counts_a_shared_automaton_at_its_largest() -> None:
    """A grammar's measured parts are memoised until its lexer grows; an automaton it shares
    with another grammar may have grown through the other's lexer: the cache counts it at
    the largest size any grammar reports, and a grammar's own growth shows at once."""
    from structgen import compiler

    vocab = byte_vocab_for_limits()
    sg.clear_caches()
    text = "[a-z]{1,40}@[a-z]+\\.com"
    grammar = sg.Compiler(vocab).grammar(f"start: WORD\nWORD: /{text}/\n")
    other = sg.Compiler(vocab).grammar(f'start: WORD ";"\nWORD: /{text}/\n')
    before = grammar.memory_parts()
    assert before == grammar.memory_parts()  # (memoised: equal, and a copy)
    matcher = sg.Matcher(other)
    mask = sg.allocate_bitmask(1, vocab.size)
    for byte in b"abcdefghij@example.com":
        matcher.fill_bitmask(mask, 0)
        assert matcher.accept_token(byte)
    shared = set(before) & set(other.memory_parts())
    assert shared  # the terminal automaton of WORD
    grown = {pid: other.memory_parts()[pid] for pid in shared}
    assert any(grown[pid] > before[pid] for pid in shared)
    with compiler._CACHE_LOCK:  # (the stale memo last: the last size read is not the one)
        compiler._CACHE.clear()
        for key, g in enumerate((other, grammar)):
            compiler._CACHE[(key,)] = g
    a, b = other.memory_parts(), grammar.memory_parts()
    assert any(b[pid] < a[pid] for pid in shared)  # grammar's memo predates the growth
    assert compiler.cached_bytes() == sum(max(a.get(p, 0), b.get(p, 0)) for p in {*a, *b})
    own = grammar.memory_bytes()
    matcher = sg.Matcher(grammar)
    for byte in b"xyz":
        matcher.fill_bitmask(mask, 0)
        assert matcher.accept_token(byte)
    assert grammar.memory_bytes() > own  # its own growth is measured again
    sg.clear_caches()


def byte_vocab_for_limits() -> Any:
    from tests.reliability.fuzzing import byte_vocab

    return byte_vocab()


def test_clear_caches_empties_every_module_memo() -> None:
    """`clear_caches` forgets the memos of every structgen module loaded — the schema
    compiler's encoded strings and the chains' blocks too, not only the regex and NFA ones
    (a cold benchmark run relies on it)."""
    import functools
    import sys

    from tests.reliability.fuzzing import byte_vocab

    vocab = byte_vocab()
    schema = {"type": "object", "properties": {"when": {"type": "string", "format": "date"}}}
    sg.Compiler(vocab).json_schema(schema)
    sg.Compiler(vocab).regex(r"(alpha|beta|gamma|delta|epsilon|zeta|eta|theta)-\d{2}")
    memos = [
        (name, key, value)
        for name, module in list(sys.modules.items())
        if name.startswith("structgen.")
        for key, value in vars(module).items()
        if isinstance(value, functools._lru_cache_wrapper)
    ]
    used = {(name, key) for name, key, memo in memos if memo.cache_info().currsize}
    assert ("structgen.schema._strings", "_encode_cached") in used
    assert any(name == "structgen.automata._blocks" for name, _ in used)
    sg.clear_caches()
    assert [(name, key) for name, key, memo in memos if memo.cache_info().currsize] == []
