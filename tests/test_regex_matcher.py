"""Compiler.regex / Compiler.choice and the Matcher, against real oracles.

* brute force on a small synthetic vocabulary: every token's verdict in every reached state
  equals the `regex` module's partial-match verdict on the text so far plus the token;
* real tokenizers: matching strings tokenized by the tokenizer itself are accepted to the end
  and can terminate; mutated strings are rejected;
* rollback / copy / reset invariants, EOS handling, out-of-range ids.
"""

from __future__ import annotations

import functools
import itertools
import random

import numpy as np
import pytest
import regex as regex_oracle
from hypothesis import given, settings
from hypothesis import strategies as st

from structgen import Compiler, Matcher, RegexError, StructgenError, Vocabulary, allocate_bitmask
from structgen.errors import ArgumentError
from structgen.masks import unpack_bitmask
from tests.conftest import load_tokenizer, load_vocab

ALPHABET = ["a", "b", "z", "0", "1", "9", "-", ".", "@", " ", "é", "中"]


def synthetic_vocab() -> Vocabulary:
    """Every string of 1-2 symbols, some of 3, the UTF-8 halves of é and 中, specials, padding."""
    pieces: list[bytes | None] = [None]  # id 0: EOS
    for n in (1, 2):
        pieces += ["".join(p).encode() for p in itertools.product(ALPHABET, repeat=n)]
    pieces += [b"abc", b"-01", b"0.5", b"@a.", b"aaa", b"999"]
    pieces += ["é".encode()[:1], "中".encode()[:1], "中".encode()[:2], None]
    return Vocabulary.from_tokens(pieces, eos_token_ids=[0], size=len(pieces) + 9)


VOCAB = synthetic_vocab()

PATTERNS = [
    r"[a-z]+@[a-z]+\.[a-z]{2,3}",
    r"-?\d+(\.\d+)?",
    r"(ab|ba)*z?",
    r"[^0-9]{2,4}",
    r"é+|中{1,2}a",
    r"a{3}b{0,2}",
    r"(?:19|20)\d\d-[01]\d",
    r".{0,5}",
]


def partial_ok(pattern: str, text: str) -> bool:
    return regex_oracle.fullmatch(pattern, text, partial=True) is not None


def allowed_ids(matcher: Matcher, vocab: Vocabulary) -> set[int]:
    bitmask = allocate_bitmask(1, vocab.size, backend="numpy")
    matcher.fill_bitmask(bitmask, 0)
    return set(np.flatnonzero(unpack_bitmask(bitmask[0], vocab.size)).tolist())


@pytest.mark.parametrize("pattern", PATTERNS)
def test_masks_equal_brute_force_oracle(pattern: str, kernel: str) -> None:
    compiled = Compiler(VOCAB).regex(pattern)
    start = Matcher(compiled)
    frontier = [(start, b"")]
    seen: set[bytes] = set()
    for _depth in range(3):
        nxt = []
        for matcher, text in frontier:
            allowed = allowed_ids(matcher, VOCAB)
            for tid in range(VOCAB.size):
                data = VOCAB.token_bytes(tid)
                if tid in VOCAB.eos_token_ids:
                    complete = _decode(text).encode() == text
                    expected = complete and regex_oracle.fullmatch(pattern, text.decode())
                elif not data:
                    expected = False
                else:
                    candidate = text + data
                    expected = prefix_of_match(pattern, candidate)
                assert (tid in allowed) == bool(expected), (pattern, text, data)
                assert matcher.is_allowed(tid) == bool(expected)
                if expected and data and len(nxt) < 40 and candidate not in seen:
                    seen.add(candidate)
                    child = matcher.copy()
                    assert child.accept_token(tid)
                    nxt.append((child, candidate))
        frontier = nxt


@functools.cache
def prefix_of_match(pattern: str, data: bytes) -> bool:
    """Oracle: `data` (maybe ending inside a UTF-8 character) starts some full match."""
    text = _decode(data)
    tail = data[len(text.encode()) :]
    if not tail:
        return partial_ok(pattern, text)
    if not 0xC2 <= tail[0] <= 0xEF:  # the synthetic vocabulary has 2- and 3-byte characters
        return False
    first = 0x80 if tail[0] < 0xE0 else 0x800
    last = 0x7FF if tail[0] < 0xE0 else 0xFFFF
    return any(
        partial_ok(pattern, text + chr(cp))
        for cp in range(first, last + 1)
        if not 0xD800 <= cp <= 0xDFFF and chr(cp).encode().startswith(tail)
    )


def _decode(data: bytes) -> str:
    """Complete characters of `data` (a trailing partial UTF-8 character is cut off).

    Invalid UTF-8 in the middle decodes to U+FFFD, which no test pattern matches.
    """
    for cut in range(4):
        try:
            return data[: len(data) - cut].decode("utf-8") if cut else data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", "replace")


REAL_CASES = {
    r"\(\d{3}\) \d{3}-\d{4}": ["(555) 123-4567", "(800) 000-0000"],
    r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}": ["ada@example.com", "x.y+z@mail.co.uk"],
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})": [
        "2024-02-29T13:45:00Z",
        "1999-12-31T23:59:59.123+05:30",
    ],
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}": [
        "123e4567-e89b-12d3-a456-426614174000"
    ],
    r"((25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(25[0-5]|2[0-4]\d|1?\d?\d)": ["192.168.0.1", "8.8.8.8"],
    r"(yes|no|maybe)": ["yes", "maybe"],
    r"[^\n]{0,40}\n": ["héllo wörld 中文 😀\n", "   spaces  \n"],
    r"\w+( \w+)*": ["naïve café 東京 test_1"],
}


@pytest.mark.parametrize("name", ["llama3_1", "qwen2_5", "gpt2", "mistral", "gemma3"])
def test_real_tokenizers_accept_matches_and_reject_mutations(name: str) -> None:
    tokenizer = load_tokenizer(name)
    vocab = load_vocab(name)
    compiler = Compiler(vocab)
    rng = random.Random(0)
    for pattern, samples in REAL_CASES.items():
        compiled = compiler.regex(pattern, unicode=True)  # the oracle is Unicode `regex`
        for text in samples:
            ids = tokenizer.encode(text, add_special_tokens=False)
            if vocab.decode(ids) != text.encode():  # Mistral prepends a space: not this text
                ids = [i for i in ids if vocab.token_bytes(i) != b" "]
                if vocab.decode(ids) != text.encode():
                    continue
            matcher = Matcher(compiled)
            for tid in ids:
                assert tid in allowed_ids(matcher, vocab), (name, pattern, text, tid)
                assert matcher.accept_token(tid), (name, pattern, text, tid)
            assert matcher.can_terminate()
            eos = vocab.eos_token_ids[0]
            assert matcher.accept_token(eos) and matcher.is_terminated()
            for _ in range(5):
                mutated = _mutate(text, rng)
                if regex_oracle.fullmatch(pattern, mutated):
                    continue
                m = Matcher(compiled)
                ids = tokenizer.encode(mutated, add_special_tokens=False)
                ok = all(m.accept_token(t) for t in ids) and m.can_terminate()
                assert not ok or vocab.decode(ids) != mutated.encode(), (pattern, mutated)


def _mutate(text: str, rng: random.Random) -> str:
    pos = rng.randrange(len(text) + 1)
    op = rng.choice(["insert", "delete", "replace"])
    char = rng.choice('aZ9-@. \n"{é')
    if op == "insert":
        return text[:pos] + char + text[pos:]
    if op == "delete" and text:
        pos = min(pos, len(text) - 1)
        return text[:pos] + text[pos + 1 :]
    pos = min(pos, len(text) - 1)
    return text[:pos] + char + text[pos + 1 :]


class TestMatcherContract:
    compiled = Compiler(VOCAB).regex(r"ab(a|z)9?")

    def test_disallowed_token_leaves_state_unchanged(self) -> None:
        m = Matcher(self.compiled)
        before = allowed_ids(m, VOCAB)
        assert not m.accept_token(VOCAB.size - 1)  # padding id
        assert not m.accept_token(VOCAB.size + 5)  # out of range
        assert not m.accept_token(-1)
        assert not m.accept_token(VOCAB.eos_token_ids[0])  # cannot terminate yet
        assert allowed_ids(m, VOCAB) == before

    def test_rollback_restores_masks(self) -> None:
        m = Matcher(self.compiled)
        masks = [allowed_ids(m, VOCAB)]
        for piece in (b"a", b"b", b"z"):
            assert m.accept_token(_id(piece))
            masks.append(allowed_ids(m, VOCAB))
        assert m.can_terminate()
        m.rollback(2)
        assert allowed_ids(m, VOCAB) == masks[1]
        with pytest.raises(ValueError):
            m.rollback(5)
        m.reset()
        assert allowed_ids(m, VOCAB) == masks[0]

    def test_copy_is_independent(self) -> None:
        m = Matcher(self.compiled)
        assert m.accept_token(_id(b"ab"))
        c = m.copy()
        assert c.accept_token(_id(b"z"))
        assert not m.can_terminate() and c.can_terminate()

    def test_termination(self) -> None:
        m = Matcher(self.compiled)
        assert m.accept_tokens([_id(b"ab"), _id(b"a")]) == 2
        eos = VOCAB.eos_token_ids[0]
        assert eos in allowed_ids(m, VOCAB)
        assert m.accept_token(eos) and m.is_terminated() and m.can_terminate()
        assert not m.accept_token(_id(b"9"))
        assert allowed_ids(m, VOCAB) == {eos}
        m.rollback(1)
        assert not m.is_terminated() and m.accept_token(_id(b"9"))

    def test_accept_bytes(self) -> None:
        m = Matcher(self.compiled)
        assert m.accept_bytes(b"ab") and not m.can_terminate()
        assert not m.accept_bytes(b"q")  # refused: nothing changes
        assert m.accept_bytes(b"z9") and m.can_terminate()
        m.rollback(1)
        assert not m.can_terminate() and m.accept_token(_id(b"a"))

    def test_forced_tokens(self) -> None:
        vocab = load_vocab("llama3_1")
        m = Matcher(Compiler(vocab).regex(r'\{"name": "[a-z]+"\}'))
        forced = m.forced_tokens()
        text = vocab.decode(forced)
        assert forced and b'{"name": "'.startswith(text)
        for tid in forced:
            assert m.accept_token(tid)
        assert m.forced_tokens() == [] or vocab.decode(m.forced_tokens())

    def test_torch_bitmask_rows(self) -> None:
        m = Matcher(self.compiled)
        bitmask = allocate_bitmask(3, VOCAB.size)
        m.fill_bitmask(bitmask, row=2)
        assert bitmask[0].eq(0).all() and bitmask[1].eq(0).all()
        got = set(np.flatnonzero(unpack_bitmask(bitmask[2], VOCAB.size)).tolist())
        assert got == allowed_ids(m, VOCAB)

    def test_torch_bitmask_rows_of_any_layout(self) -> None:
        """A CPU tensor's row is written through its memory as numpy (views, wider rows, rows
        of a transposed buffer), with the same words as a numpy bitmask gets."""
        import torch

        m = Matcher(self.compiled)
        expected = allocate_bitmask(1, VOCAB.size, backend="numpy")
        m.fill_bitmask(expected, 0)
        words = expected.shape[1]
        wide = torch.full((2, words + 3), -1, dtype=torch.int32)
        m.fill_bitmask(wide, 1)
        assert wide[1, :words].numpy().tolist() == expected[0].tolist()
        assert wide[1, words:].eq(0).all() and wide[0].eq(-1).all()
        strided = torch.full((words, 3), 7, dtype=torch.int32).t()  # (rows not contiguous)
        m.fill_bitmask(strided, 2)
        assert strided[2].numpy().tolist() == expected[0].tolist() and strided[0].eq(7).all()
        with pytest.raises(ArgumentError):
            m.fill_bitmask(torch.zeros((1, words), dtype=torch.int32), 1)


def _id(piece: bytes) -> int:
    return next(i for i in range(VOCAB.size) if VOCAB.token_bytes(i) == piece)


class TestCompiler:
    def test_cache_returns_the_same_object(self) -> None:
        a = Compiler(VOCAB).regex(r"a+b")
        b = Compiler(VOCAB).regex(r"a+b")
        assert a is b and a == b

    def test_regex_errors_are_typed(self) -> None:
        with pytest.raises(RegexError) as info:
            Compiler(VOCAB).regex(r"(a)\1")
        assert info.value.offset == 3

    def test_choice(self) -> None:
        compiled = Compiler(VOCAB).choice(["ab", "abz", "ba"])
        m = Matcher(compiled)
        assert m.accept_token(_id(b"ab")) and m.can_terminate()
        assert m.accept_token(_id(b"z")) and m.can_terminate()
        assert not m.accept_token(_id(b"a"))


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet="ab019-. é中", max_size=8))
def test_token_by_token_equals_fullmatch(text: str) -> None:
    pattern = r"(a|b)*[0-9]{1,2}(\.[0-9])?"
    compiled = Compiler(VOCAB).regex(pattern)
    m = Matcher(compiled)
    data = text.encode()
    ok = True
    for tid in _greedy(data):
        if not m.accept_token(tid):
            ok = False
            break
    ok = ok and m.can_terminate()
    assert ok == (regex_oracle.fullmatch(pattern, text) is not None)


def _greedy(data: bytes) -> list[int]:
    ids = []
    pos = 0
    while pos < len(data):
        found = VOCAB.trie.longest_token_prefix(data[pos:])
        assert found is not None
        ids.append(found[0])
        pos += found[1]
    return ids


class TestStopTokenIds:
    """`Matcher(stop_token_ids=...)`: a serving engine's per-request EOS and stop ids."""

    def test_stop_ids_replace_eos_and_are_allowed_only_when_complete(self) -> None:
        grammar = Compiler(VOCAB).regex(r"ab?")
        newline_free = VOCAB.size - 1  # a padding id: special, never text
        matcher = Matcher(grammar, stop_token_ids=[newline_free])
        assert not matcher.is_allowed(newline_free)
        assert not matcher.is_allowed(0)  # the vocabulary's EOS is not a stop id here
        assert matcher.accept_bytes(b"a")
        assert matcher.is_allowed(newline_free) and not matcher.is_allowed(0)
        mask = matcher.allowed_mask()
        assert (int(mask[newline_free >> 5]) >> (newline_free & 31)) & 1
        assert matcher.accept_token(newline_free) and matcher.is_terminated()

    def test_a_text_token_named_as_a_stop_id_leaves_the_text_masks(self) -> None:
        grammar = Compiler(VOCAB).regex(r"[ab]+")
        b = VOCAB.trie.longest_token_prefix(b"b")
        assert b is not None
        b_id = b[0]
        matcher = Matcher(grammar, stop_token_ids=[b_id])

        def bit(token: int) -> bool:
            return bool((int(matcher.allowed_mask()[token >> 5]) >> (token & 31)) & 1)

        assert not bit(b_id)  # `b` would be text here, but it is a stop id: not yet complete
        assert matcher.accept_bytes(b"a")
        assert bit(b_id)  # complete: `b` may end the output
        assert matcher.accept_token(b_id) and matcher.is_terminated()
        copy = matcher.copy()
        assert copy.is_terminated()

    def test_matchers_with_the_same_stops_share_one_read_only_stop_mask(self) -> None:
        grammar = Compiler(VOCAB).regex(r"[ab]+")
        b = VOCAB.trie.longest_token_prefix(b"b")
        assert b is not None
        first, second = Matcher(grammar, stop_token_ids=[b[0], 0]), Matcher(grammar)
        other = Matcher(grammar, stop_token_ids=[0, b[0]])
        assert first._eos_words is other._eos_words  # (the same stops, in any order)
        assert first._eos_words is not second._eos_words
        for words in (first._eos_words, first._keep_words, second._eos_words):
            assert words is not None and not words.flags.writeable
        # the text stop `b` is in the stop mask and out of the kept text tokens, alone
        expected = np.zeros_like(first._eos_words)
        for token in (b[0], 0):
            expected[token >> 5] |= np.int32(np.uint32(1 << (token & 31)).view(np.int32))
        assert np.array_equal(first._eos_words, expected)
        assert first._keep_words is not None
        assert np.array_equal(first._keep_words, ~expected)
        mask = first.allowed_mask()  # (a copy the caller may write)
        mask[0] = 0

    def test_stop_ids_outside_the_vocabulary_are_refused(self) -> None:
        with pytest.raises(ValueError, match="stop_token_ids"):
            Matcher(Compiler(VOCAB).regex("a"), stop_token_ids=[10**9])


def test_classes_and_case_are_ascii_by_default() -> None:
    """`Compiler.regex` reads `\\d \\w \\s` and `i` as `re.ASCII` does: a model asked for
    `\\d{4}` writes ASCII digits; `unicode=True` is Python's str-pattern reading."""
    vocab = load_vocab("llama3_1")

    def accepts(compiled: object, text: str) -> bool:
        matcher = Matcher(compiled)  # type: ignore[arg-type]
        return bool(matcher.accept_bytes(text.encode()) and matcher.can_terminate())

    ascii_default = Compiler(vocab).regex(r"\d{4}-\w+\s")
    unicode = Compiler(vocab).regex(r"\d{4}-\w+\s", unicode=True)
    for text, ascii_ok in [("2024-ab_1 ", True), ("٢٠٢٤-ab ", False), ("2024-é\u3000", False)]:
        assert accepts(ascii_default, text) == ascii_ok, text
        assert accepts(unicode, text), text
    folded = Compiler(vocab).regex("k+", ignore_case=True)
    assert accepts(folded, "kK") and not accepts(folded, "\u212a")
    assert accepts(Compiler(vocab).regex("k+", ignore_case=True, unicode=True), "\u212a")
    # any other dialect, or a tuple of them (the first one's syntax, every one's meaning)
    ecma = Compiler(vocab).regex(r"\s", dialect="ecma")
    assert accepts(ecma, "\ufeff") and not accepts(ecma, "\x1c")
    with pytest.raises(StructgenError, match="not both"):
        Compiler(vocab).regex("a", unicode=True, dialect="rust")
