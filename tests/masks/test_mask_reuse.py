"""Mask sharing between DFA states and the C walk's root skipping: masks must stay exact."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from structgen import Compiler
from structgen.compiler import CompileLimits
from structgen.masks import _walker
from structgen.masks._kernel import Events, equality_available, native_available
from structgen.masks._walker import TokenMaskWalker, native_walk
from tests.conftest import load_vocab

pytestmark = pytest.mark.skipif(
    not (native_available() and equality_available()), reason="the C trie walk is not built"
)


@pytest.fixture
def always_share(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Check every candidate, however fast its walk was (timings must not decide tests)."""
    monkeypatch.setattr(_walker, "_SHARE_MIN_SECONDS", 0.0)
    monkeypatch.setattr(_walker, "_SHARE_FREE_MISSES", 10**9)
    yield


def states_along(compiled: object, text: bytes) -> list[int]:
    """The DFA state after every prefix of `text` (the start state first)."""
    state = compiled.initial_state  # type: ignore[attr-defined]
    out = [state]
    for byte in text:
        state = compiled.advance(state, bytes([byte]))  # type: ignore[attr-defined]
        assert state is not None
        out.append(state)
    return out


CASES = [
    # counters far from their end share; the last L states (L = longest token) must not
    (".{0,300}", "The quick brown fox — jumps over the lazy dog. " * 6, True),
    ("[a-z]{1,200}", "abcdefghijklmnopqrstuvwxyz" * 7 + "abcd", True),
    (r"(ab|cd){0,150}x", "abcd" * 70 + "x", True),
    # the comma is a \S too: before and after it the same strings stay alive
    (r"\S+,\S+", "required_with_all:billing,shipping,more", False),
    (r"\d{3}-\d{4}|[a-z]{0,140}", "abcdefghijklmnopqrstuvwxyz" * 5, False),
]


@pytest.mark.parametrize("name", ["llama3_1", "gpt2"])
@pytest.mark.parametrize(("pattern", "text", "expect_hits"), CASES)
def test_shared_masks_equal_walked_masks(
    always_share: None, name: str, pattern: str, text: str, expect_hits: bool
) -> None:
    vocab = load_vocab(name)
    native = native_walk(vocab)
    assert native is not None
    compiled = Compiler(vocab).regex(pattern)
    dfa = compiled._engine._dfa  # type: ignore[attr-defined]
    walker = TokenMaskWalker(vocab, dfa)
    states = states_along(compiled, text.encode())
    for state in states:
        got = walker.mask(state)
        want, _ = native.walk(dfa, state)
        assert np.array_equal(got.view(np.uint32), want), (pattern, state)
    if expect_hits:
        assert walker._share_hits > 0


def test_same_mask_on_a_counter(always_share: None) -> None:
    vocab = load_vocab("llama3_1")
    native = native_walk(vocab)
    assert native is not None
    longest = native.max_depth
    compiled = Compiler(vocab).regex("a{0,400}")
    dfa = compiled._engine._dfa  # type: ignore[attr-defined]
    states = states_along(compiled, b"a" * 400)
    tables = native.class_positions(dfa.byte_classes)
    masks = {s: native.walk(dfa, s)[0] for s in states[::7] + states[-longest - 3 :]}
    for i in masks:
        for j in masks:
            same = native.same_mask(dfa, tables, i, j, max_builds=10**6)
            if same:  # sound: "same" is never said of two different masks
                assert np.array_equal(masks[i], masks[j])
    # far from the end, every counter state is provably alike
    assert native.same_mask(dfa, tables, states[3], states[200], max_builds=10**6)
    # one step before the end differs from the start (a token "aa" is allowed only there)
    assert not native.same_mask(dfa, tables, states[0], states[399], max_builds=10**6)


def test_same_mask_gives_up_within_its_row_budget() -> None:
    vocab = load_vocab("llama3_1")
    native = native_walk(vocab)
    assert native is not None
    compiled = Compiler(vocab, limits=CompileLimits(eager_dfa_states=0)).regex("[a-z]{0,300}")
    dfa = compiled._engine._dfa  # type: ignore[attr-defined]
    p = compiled.initial_state
    q = compiled.advance(p, b"ab")
    tables = native.class_positions(dfa.byte_classes)
    built = sum(dfa._built)
    assert not native.same_mask(dfa, tables, p, q, max_builds=2)  # needs ~130 rows: gives up
    assert sum(dfa._built) <= built + 2
    assert native.same_mask(dfa, tables, p, q, max_builds=10**6)


@pytest.mark.parametrize("pattern", [r"[a-z]+\d{2}", r"(\w+ ){2,}", r"\d+(\.\d+)?", r"[^a]*b"])
def test_root_walk_equals_whole_range_walk(pattern: str) -> None:
    vocab = load_vocab("llama3_1")
    native = native_walk(vocab)
    assert native is not None
    compiled = Compiler(vocab).regex(pattern)
    dfa = compiled._engine._dfa  # type: ignore[attr-defined]
    whole = Events(
        np.zeros(1, dtype=np.int64),
        np.full(1, native.plain_nodes, dtype=np.int64),
        np.zeros(1, dtype=np.int32),
        np.zeros(1, dtype=np.int32),
    )
    for state in range(min(dfa.num_states, 12)):
        root_words, root_events = native.walk(dfa, state, boundaries=True)
        range_words, range_events = native.walk(dfa, state, ranges=whole, boundaries=True)
        assert np.array_equal(root_words, range_words)
        for a, b in zip(root_events, range_events):
            assert np.array_equal(a, b)
