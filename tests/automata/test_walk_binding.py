"""The C walk's link back to Python (rows built there) is per call and per thread: interleaved
DFAs, a failed row build and a walk nested in a row build must all give exact masks; and its
packed trie nodes hold every token, within limits that fall back to the numpy walk past them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from structgen import Compiler, Matcher, Vocabulary, allocate_bitmask
from structgen.automata import ByteDFA, alternatives, compile_regex
from structgen.masks._kernel import NativeWalk, TrieTooLarge, native_available
from structgen.masks._walker import native_walk
from tests.conftest import load_vocab

pytestmark = pytest.mark.skipif(not native_available(), reason="the C trie walk is not built")

WORDS = [b"tral", b"test", b"us", b"nil", b"the", b"there", b"a", b"ab", b" x", b"\xc3\xa9t"]


def brute_mask(vocab: Any, dfa: ByteDFA, state: int) -> np.ndarray:
    """Packed words of the tokens whose bytes all keep `state` alive (one byte at a time)."""
    words = np.zeros((vocab.size + 31) // 32, dtype=np.uint32)
    for token in range(vocab.size):
        data = vocab.token_bytes(token)
        if not data:
            continue
        s = state
        for byte in data:
            s = dfa.next_state(s, byte)
            if s < 0:
                break
        else:
            words[token >> 5] |= np.uint32(1 << (token & 31))
    return words


class Flaky:
    """A DFA whose rows fail to build while `fail` is set, optionally walking `nested` first."""

    def __init__(self, dfa: ByteDFA) -> None:
        self.dfa = dfa
        self.fail = False
        self.nested: tuple[Any, ByteDFA, int] | None = None
        self.nested_words: np.ndarray | None = None

    @property
    def table_address(self) -> int:
        return self.dfa.table_address

    @property
    def accepting_address(self) -> int:
        return self.dfa.accepting_address

    def row(self, state: int) -> Any:
        if self.nested is not None:
            native, other, other_state = self.nested
            self.nested = None
            self.nested_words, _ = native.walk(other, other_state)
        if self.fail and not (self.dfa.table[state, 0] != -2):
            raise RuntimeError("row build failed")
        return self.dfa.row(state)


def test_interleaved_dfas_failure_and_nesting() -> None:
    vocab = load_vocab("gpt2")
    native = native_walk(vocab)
    assert native is not None
    trie = alternatives(WORDS)  # rows come through the Python callback
    regex = compile_regex("(tr|te|t)[a-z]{0,3}|nil")
    checks: list[tuple[ByteDFA, int]] = []
    for dfa in (trie, regex):
        state = dfa.start
        checks.append((dfa, state))
        for byte in b"tr":
            state = dfa.next_state(state, byte)
            if state < 0:
                break
            checks.append((dfa, state))
    expected = {(id(d), s): brute_mask(vocab, d, s) for d, s in checks}
    # interleave the two DFAs on one thread (each walk rebinds the thread's binding)
    for _ in range(2):
        for dfa, state in checks:
            words, _ = native.walk(dfa, state)
            assert np.array_equal(words, expected[(id(dfa), state)])

    # a failed row build raises, and the next walk on this thread is exact again
    fresh = alternatives(WORDS)
    flaky = Flaky(fresh)
    fresh.row(fresh.start)
    flaky.fail = True
    with pytest.raises(RuntimeError, match="row build failed"):
        native.walk(flaky, fresh.start)
    flaky.fail = False
    words, _ = native.walk(flaky, fresh.start)
    assert np.array_equal(words, brute_mask(vocab, fresh, fresh.start))
    words, _ = native.walk(regex, regex.start)
    assert np.array_equal(words, expected[(id(regex), regex.start)])

    # a walk nested in a row build (same thread) gets its own binding
    outer = alternatives(WORDS)
    flaky = Flaky(outer)
    outer.row(outer.start)
    flaky.nested = (native, regex, regex.start)
    words, _ = native.walk(flaky, outer.start)
    assert flaky.nested_words is not None
    assert np.array_equal(flaky.nested_words, expected[(id(regex), regex.start)])
    assert np.array_equal(words, brute_mask(vocab, outer, outer.start))


def test_several_tokens_at_one_node_are_all_set() -> None:
    """Two ids with the same bytes end at one trie node (its packed record points at both)."""
    vocab = Vocabulary.from_tokens([b"ab", b"a", b"ab", b"abc", b"b", b"ab"], eos_token_ids=[1])
    native = native_walk(vocab)
    assert native is not None
    dfa = compile_regex("ab|a")
    words, _ = native.walk(dfa, dfa.start)
    assert np.array_equal(words, brute_mask(vocab, dfa, dfa.start))
    assert int(words[0]) == 0b100111


def test_a_trie_past_the_packed_limits_takes_the_numpy_walk() -> None:
    """A token over 255 bytes does not fit a packed node: the C walk refuses the vocabulary
    with a typed error, and masks come from the numpy walk, still exact."""
    long_token = b"x" * 300
    tokens = [b"x", b"xx", b"y", long_token, b"xy"]
    vocab = Vocabulary.from_tokens(tokens, eos_token_ids=[2])
    with pytest.raises(TrieTooLarge, match="packed limits"):
        NativeWalk(vocab.trie, vocab.size)
    assert native_walk(vocab) is None
    compiled = Compiler(vocab).regex("x{1,400}")
    matcher = Matcher(compiled)
    bitmask = allocate_bitmask(1, vocab.size, backend="numpy")
    matcher.fill_bitmask(bitmask, 0)
    allowed = {t for t in range(len(tokens)) if bitmask[0, t >> 5] >> (t & 31) & 1}
    assert allowed == {0, 1, 3}


def test_a_whole_walk_builds_its_start_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole-vocabulary walk reads its start's row to skip dead first bytes: C builds it
    first — through Python for an automaton still in Python mode (its NFA built in Python:
    its first row moves it to C), in C for one there already (an NFA built in C starts
    there) — and the mask is exact either way."""
    from structgen.automata import nfa as nfa_module

    vocab = load_vocab("gpt2")
    native = native_walk(vocab)
    assert native is not None
    with monkeypatch.context() as patch:
        patch.setattr(nfa_module, "NATIVE_ABOVE", 1 << 30)  # (the NFA built in Python)
        dfa = compile_regex("(tr|te|t)[a-z]{0,3}|nil")
    assert dfa._native is None and dfa.table[dfa.start, 0] == -2
    words, _ = native.walk(dfa, dfa.start)
    assert np.array_equal(words, brute_mask(vocab, dfa, dfa.start))
    assert dfa._native is not None
    dfa = compile_regex("(tr|te|t)[a-z]{0,3}|nil")
    dfa.row(dfa.start)  # (in C from here on)
    state = dfa.next_state(dfa.start, ord("t"))  # (created, its row not built yet)
    assert dfa._native is not None and state >= 0 and dfa.table[state, 0] == -2
    words, _ = native.walk(dfa, state)
    assert dfa.table[state, 0] != -2
    assert np.array_equal(words, brute_mask(vocab, dfa, state))
