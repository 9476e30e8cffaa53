"""Warming up for serving: `Compiler.warm_up` builds a vocabulary's tables before the first
request, `CompiledGrammar.prefetch_masks` computes the masks along the forced prefix on the
compile thread. Both only move work earlier: the masks a matcher then meets are the ones a
cold compile computes."""

from __future__ import annotations

import numpy as np
import pytest

import structgen
from structgen import ArgumentError, Compiler, Matcher
from structgen.engines import grammar as grammar_engine
from structgen.grammar.lark_frontend import load_builtin
from structgen.masks import _walker
from tests.conftest import load_tokenizer, load_vocab

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def _masks_along(compiled: structgen.CompiledGrammar, ids: list[int]) -> list[np.ndarray]:
    matcher = Matcher(compiled)
    out = []
    for token in ids:
        out.append(matcher.allowed_mask().copy())
        assert matcher.accept_token(token)
    return out


def _cold_masks_and_a_new_compile(
    build: object, text: str
) -> tuple[list[int], list[np.ndarray], structgen.CompiledGrammar]:
    """`text`'s tokens, the masks along them from a cold compile, and another cold compile
    (every cache cleared before each)."""
    vocab = load_vocab("llama3_1")
    ids = load_tokenizer("llama3_1").encode(text, add_special_tokens=False)
    structgen.clear_caches()
    cold = _masks_along(build(Compiler(vocab)), ids)  # type: ignore[operator]
    structgen.clear_caches()
    return ids, cold, build(Compiler(vocab))  # type: ignore[operator]


@pytest.mark.parametrize(
    ("build", "text", "forced"),
    [
        (lambda c: c.json_schema(PERSON), '{"name": "Ada", "age": 36}', b'{"name": "'),
        (lambda c: c.regex(r"\(\d{3}\) \d{3}-\d{4}"), "(555) 123-4567", b"("),
        (lambda c: c.grammar('start: "SELECT " NAME\nNAME: /[a-z_]+/\n'), "SELECT name", None),
    ],
)
def test_prefetched_masks_are_cached_and_exact(build: object, text: str, forced: bytes) -> None:
    """Every state along the forced prefix has its mask cached after `prefetch_masks`, and the
    masks a matcher meets along a valid text are a cold compile's."""
    ids, cold, compiled = _cold_masks_and_a_new_compile(build, text)
    prefix = compiled.forced_bytes(compiled.initial_state)
    if forced is not None:
        assert prefix == forced
    assert compiled.prefetch_masks() == len(prefix) + 1
    state = compiled.initial_state
    for byte in prefix:
        assert compiled.cached_token_mask(state) is not None
        state = compiled.advance(state, bytes((byte,)))
    assert compiled.cached_token_mask(state) is not None
    warm = _masks_along(compiled, ids)
    assert all(np.array_equal(a, b) for a, b in zip(cold, warm, strict=True))


def test_prefetch_limit() -> None:
    compiled = Compiler(load_vocab("llama3_1")).json_schema(PERSON)
    assert compiled.prefetch_masks(limit=0) == 1
    assert compiled.prefetch_masks(limit=3) == 4
    with pytest.raises(ArgumentError):
        compiled.prefetch_masks(limit=-1)


def test_warm_up_builds_the_vocabulary_tables() -> None:
    vocab = load_vocab("gpt2")
    structgen.clear_caches()
    _walker._NATIVE.pop(vocab.fingerprint, None)
    compiler = Compiler(vocab)
    compiler.warm_up()
    assert vocab.fingerprint in _walker._NATIVE or not _walker.native_available()
    assert vocab.fingerprint in _walker._FIRST_BYTE
    limits = compiler.limits
    key = (vocab.fingerprint, limits.automata(), limits.max_cached_masks)
    assert grammar_engine._EMPTY_UNIONS.get(key) is not None
    compiler.warm_up()  # (again: nothing to do)


def _start_row_built(dfa: object) -> bool:
    """Whether the automaton's start row is built (Python's flags, or C's table)."""
    start = dfa.start  # type: ignore[attr-defined]
    if dfa._native is None:  # type: ignore[attr-defined]
        built = dfa._built  # type: ignore[attr-defined]
        return start < len(built) and bool(built[start])
    return bool(dfa._table[start, 0] != -2)  # type: ignore[attr-defined]


def test_compile_leaves_unread_terminal_rows_to_first_use_and_prefetch_builds_them() -> None:
    """A compile builds only what the first mask reads: the terminals the first lexer does not
    expect keep their start rows unbuilt (a first visit builds them when it reads them);
    `prefetch_masks`, on a server's compile thread, builds them all. The masks along a valid
    text are a cold compile's either way."""
    vocab = load_vocab("llama3_1")
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "minLength": 2, "pattern": "^[A-Z]"}},
        "additionalProperties": True,
    }
    text = '{"name": "Ada", "tags": [1, "x"]}'
    ids = load_tokenizer("llama3_1").encode(text, add_special_tokens=False)
    structgen.clear_caches()
    compiled = Compiler(vocab).json_schema(schema)
    engine = compiled._engine
    eager = [d for d in engine.terminal_dfas if not (d._source.deferred or d._source.laid_out)]
    assert eager  # (a pattern with a length: a product; "any other key": a difference)
    assert not all(_start_row_built(d) for d in eager)
    cold = _masks_along(compiled, ids)
    structgen.clear_caches()
    warm = Compiler(vocab).json_schema(schema)
    warm.prefetch_masks()
    assert all(
        _start_row_built(d)
        for d in warm._engine.terminal_dfas
        if not (d._source.deferred or d._source.laid_out)
    )
    assert engine.build_first_rows() >= len(eager)  # (and the NFAs materialised since)
    masks = _masks_along(warm, ids)
    assert all(np.array_equal(a, b) for a, b in zip(cold, masks, strict=True))


SAMPLED = [
    (lambda c: c.json_schema(PERSON), '{"name": "Ada Lovelace", "age": 36}'),
    (lambda c: c.regex(r"\(\d{3}\) \d{3}-\d{4}"), "(555) 123-4567"),
    (lambda c: c.grammar(load_builtin("json")), '{"a": [1, 2.5, "x"], "b": null}'),
    (lambda c: c.ebnf('root ::= "SELECT " name (", " name)*\nname ::= [a-z_]+\n'), "SELECT a, bc"),
]


@pytest.mark.parametrize(("build", "text"), SAMPLED)
def test_prefetched_samples_are_cached_and_exact(build: object, text: str) -> None:
    """`prefetch_masks(samples=...)` computes the masks at every byte of a few random outputs
    (`sample_texts`: a grammar's plain sentences, a regex's walks): they are cached afterwards,
    and the masks a matcher meets along a valid text are still a cold compile's."""
    ids, cold, compiled = _cold_masks_and_a_new_compile(build, text)
    prefix = compiled.forced_bytes(compiled.initial_state)
    texts = compiled._engine.sample_texts(3, seed=0, max_bytes=4096)
    assert len(texts) == 3 and any(texts)
    count = compiled.prefetch_masks(samples=3, max_bytes=4096, max_seconds=None)
    walked = 0
    for k, sample in enumerate(texts):  # (each its share of the bytes left)
        state = compiled.initial_state
        for byte in sample[: (4096 - walked) // (len(texts) - k)]:
            state = compiled.advance(state, bytes((byte,)))
            if state is None:
                break
            assert compiled.cached_token_mask(state) is not None
            walked += 1
    assert walked > 0 and count == len(prefix) + 1 + walked
    warm = _masks_along(compiled, ids)
    assert all(np.array_equal(a, b) for a, b in zip(cold, warm, strict=True))


def test_prefetched_samples_stop_at_their_limits() -> None:
    compiled = Compiler(load_vocab("llama3_1")).json_schema(PERSON)
    first = compiled.prefetch_masks()
    assert compiled.prefetch_masks(samples=4, max_bytes=10, max_seconds=None) == first + 10
    assert compiled.prefetch_masks(samples=4, max_bytes=0) == first
    assert compiled.prefetch_masks(samples=0, max_bytes=500) == first
    assert compiled.prefetch_masks(samples=4, max_seconds=0) == first + 1  # (one, then time)
    for bad in ({"samples": -1}, {"max_bytes": -1}, {"max_seconds": -1}, {"max_seconds": "1"}):
        with pytest.raises(ArgumentError):
            compiled.prefetch_masks(**bad)  # type: ignore[arg-type]


def test_samples_are_reproducible_and_in_the_language() -> None:
    """The sampled outputs are the same on every call (seeded) and the constraint accepts them
    whole where they were not cut at `max_bytes`."""
    vocab = load_vocab("llama3_1")
    for build, _ in SAMPLED:
        compiled = build(Compiler(vocab))  # type: ignore[operator]
        texts = compiled._engine.sample_texts(4, seed=0, max_bytes=100_000)
        assert texts == compiled._engine.sample_texts(4, seed=0, max_bytes=100_000)
        for sample in texts:
            state = compiled.advance(compiled.initial_state, sample)
            regex_walk = compiled.kind == "regex" and not compiled.is_accepting(state)
            assert state is not None and (compiled.is_accepting(state) or regex_walk)
