"""Token terminals: grammar terminals that match one token id, never its text.

Checked against brute force (every id of a real vocabulary through `Matcher.is_allowed`), on
Qwen2.5's added `<tool_call>` tokens (text tokens the grammar must read as tokens) and on a
small synthetic vocabulary with byte tokens from F5 up (which could otherwise spell a marker).
"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from structgen import Compiler, Matcher, Vocabulary
from structgen.grammar.compose import NON_EMPTY, GrammarBuilder, text_without
from structgen.grammar.tokens import token_id_at, token_marker
from structgen.masks import unpack_bitmask
from tests.conftest import load_vocab


def allowed(matcher: Matcher) -> set[int]:
    vocab = matcher.grammar.vocab
    return set(np.flatnonzero(unpack_bitmask(matcher.allowed_mask(), vocab.size)).tolist())


def brute_force(matcher: Matcher) -> set[int]:
    return {t for t in range(matcher.grammar.vocab.size) if matcher.is_allowed(t)}


def call_grammar(vocab: Vocabulary) -> Compiler:
    """`text? <tool_call> "\\n{" [a-z]+ "}\\n" </tool_call>` with both tags as tokens."""
    begin, end = vocab.token_id("<tool_call>"), vocab.token_id("</tool_call>")
    assert begin is not None and end is not None
    b = GrammarBuilder()
    free = b.terminal(text_without(["<tool_call>"]), (NON_EMPTY,))
    from structgen.automata import parse_regex

    body = b.terminal(parse_regex(r"\n\{[a-z]+\}\n"))
    call = b.sequence(b.token(begin), body, b.token(end))
    start = b.rule("start")
    b.add(start, call)
    b.add(start, free, call)
    return Compiler(vocab).grammar_ir(b.grammar(start))


class TestMarkers:
    @pytest.mark.parametrize("token_id", [0, 1, 151657, 262144])
    def test_round_trip(self, token_id: int) -> None:
        marker = token_marker(token_id)
        assert len(marker) == 4 and marker[0] >= 0xF5
        assert token_id_at(b"ab" + marker, 2) == token_id
        with pytest.raises(UnicodeDecodeError):
            marker.decode("utf-8")  # no valid text holds a marker

    def test_no_marker_in_text(self) -> None:
        assert token_id_at("é🯱".encode(), 0) is None


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocab("qwen2_5")


class TestQwenToolCallTokens:
    def test_masks_match_brute_force(self, vocab: Vocabulary) -> None:
        grammar = call_grammar(vocab)
        begin = vocab.token_id("<tool_call>")
        end = vocab.token_id("</tool_call>")
        m = Matcher(grammar)
        states = [m.copy()]
        assert m.accept_bytes(b"Sure. ")
        states.append(m.copy())
        assert m.accept_token(begin)
        states.append(m.copy())
        assert m.accept_bytes(b"\n{ab}\n")
        states.append(m.copy())
        for state in states:
            assert allowed(state) == brute_force(state)
        assert allowed(states[2]) and begin not in allowed(states[2])
        assert allowed(states[3]) == {end}

    def test_the_tag_is_the_token_never_its_text(self, vocab: Vocabulary) -> None:
        grammar = call_grammar(vocab)
        begin = vocab.token_id("<tool_call>")
        assert vocab.token_bytes(begin) == b"<tool_call>"  # an added text token in Qwen2.5
        m = Matcher(grammar)
        assert not m.accept_bytes(b"<tool_call>")  # spelled as text: refused
        assert begin in allowed(m)
        pieces = [t for t in range(vocab.size) if vocab.token_bytes(t) in (b"<", b"<tool")]
        assert pieces and all(m.is_allowed(t) for t in pieces)  # "<" alone is free text ...
        m.accept_bytes(b"<tool")
        assert not m.accept_bytes(b"_call>")  # ... but it never completes the tag's text

    def test_text_tokens_that_could_spell_a_marker_are_refused(self, vocab: Vocabulary) -> None:
        grammar = call_grammar(vocab)
        clashes = [t for t in range(vocab.size) if max(vocab.token_bytes(t) or b"\0") >= 0xF5]
        assert clashes  # the byte-level tokens of bytes F5..FF
        m = Matcher(grammar)
        assert not any(m.is_allowed(t) for t in clashes)
        assert not m.accept_bytes(token_marker(vocab.token_id("<tool_call>"))[:1])

    def test_forced_tokens_and_plans_use_the_token(self, vocab: Vocabulary) -> None:
        grammar = call_grammar(vocab)
        begin, end = vocab.token_id("<tool_call>"), vocab.token_id("</tool_call>")
        m = Matcher(grammar)
        plan = m.completion_tokens()
        assert plan is not None and plan[0] == begin and plan[-1] == end
        replay = m.copy()
        assert replay.accept_tokens(plan) == len(plan) and replay.can_terminate()
        m.accept_token(begin)
        m.accept_bytes(b"\n{x}\n")
        assert m.forced_tokens() == [end]
        assert m.fits(end, 1)

    def test_random_walks_parse(self, vocab: Vocabulary) -> None:
        grammar = call_grammar(vocab)
        begin, end = vocab.token_id("<tool_call>"), vocab.token_id("</tool_call>")
        rng = random.Random(0)
        for _ in range(20):
            m = Matcher(grammar)
            out: list[int] = []
            while not m.can_terminate() and len(out) < 60:
                choices = sorted(allowed(m))
                plan = m.completion_tokens() or []
                token = plan[0] if len(out) > 40 and plan else rng.choice(choices)
                assert m.accept_token(token)
                out.append(token)
            assert m.can_terminate(), out
            assert out.count(begin) == 1 and out[-1] == end
            text = b"".join(
                b"<B>" if t == begin else b"<E>" if t == end else vocab.token_bytes(t) for t in out
            ).decode("utf-8")
            assert re.fullmatch(r"(?s)(.*)<B>\n\{[a-z]+\}\n<E>", text), text
            assert "<tool_call>" not in text.split("<B>")[0]


class TestSyntheticByteVocabulary:
    def test_brute_force_with_high_byte_tokens(self) -> None:
        tokens: list[bytes | None] = [bytes([b]) for b in range(256)]
        tokens += [b"ab", b"<s>", None, None]  # 256, 257 (an added text token), 258, EOS 259
        vocab = Vocabulary.from_tokens(tokens, eos_token_ids=[259], names={"<s>": 257, "<x>": 258})
        b = GrammarBuilder()
        start = b.rule("start")
        b.add(start, b.literal("a"), b.token(258), b.literal("b"))
        b.add(start, b.token(257), b.literal("ab"))
        grammar = Compiler(vocab).grammar_ir(b.grammar(start))
        m = Matcher(grammar)
        assert allowed(m) == brute_force(m) == {ord("a"), 257}
        assert m.accept_bytes(b"a")
        assert allowed(m) == brute_force(m) == {258}
        assert m.accept_token(258)
        assert allowed(m) == brute_force(m) == {ord("b")}
        other = Matcher(grammar)
        assert not other.accept_bytes(b"<s>")  # the token's text spelled in bytes
        assert other.accept_token(257) and allowed(other) == brute_force(other) == {97, 256}
        assert other.accept_token(256) and other.can_terminate()

    def test_eos_as_a_token_terminal_is_refused(self) -> None:
        vocab = Vocabulary.from_tokens([b"a", None], eos_token_ids=[1])
        b = GrammarBuilder()
        start = b.sequence(b.literal("a"), b.token(1))
        with pytest.raises(Exception, match="EOS"):
            Compiler(vocab).grammar_ir(b.grammar(start))
