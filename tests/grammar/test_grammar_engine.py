"""`Compiler.grammar` + `Matcher` against Lark's Earley parser (the reference for grammars).

* brute force on a small synthetic vocabulary: in every reached state, every token's mask bit
  equals "the text so far plus the token is a prefix of some sentence" (Lark decides it:
  a prefix is viable iff Earley consumes all of it, i.e. parses or stops at UnexpectedEOF);
* real tokenizers: sampled sentences of every shipped grammar are accepted token by token and
  can terminate; on sampled sentences and their one-character mutations, structgen's verdict
  equals Lark's (`lexer="dynamic_complete"`: every match length of a terminal, which is the
  IR's meaning; test_grammar_library checks the shipped grammars don't depend on the choice);
* deep nesting (500 levels) of recursive grammars; the Matcher contract on grammars.

Skipped until the context-free engine provides `Compiler.grammar`.
"""

from __future__ import annotations

import functools
import itertools
import random

import lark
import numpy as np
import pytest

import structgen
from structgen import Compiler, GrammarError, Matcher, Vocabulary, allocate_bitmask
from structgen.grammar.lark_frontend import builtin_names, lark_to_ir, load_builtin
from structgen.grammar.sampler import sample_sentences
from structgen.masks import unpack_bitmask
from tests.conftest import load_tokenizer, load_vocab
from tests.grammar.test_grammar_library import INVALID, VALID, mutate

pytestmark = pytest.mark.skipif(
    not hasattr(structgen.Compiler, "grammar"),
    reason="Compiler.grammar (the context-free engine) is not implemented yet",
)

TOKENIZERS = ["llama3_1", "qwen2_5", "gpt2", "gemma3"]

# ----------------------------------------------------------------------------- synthetic vocab

ALPHABET = ["(", ")", "+", "1", "2", " ", "x", "é", "中"]


def synthetic_vocab() -> Vocabulary:
    """EOS, all 1-2 symbol strings, a few longer ones, UTF-8 fragments, a special, padding."""
    pieces: list[bytes | None] = [None]  # id 0: EOS
    for n in (1, 2):
        pieces += ["".join(p).encode() for p in itertools.product(ALPHABET, repeat=n)]
    pieces += [b"(((", b")))", b"((1", b"1))", b"1+1", b" + ", b"12)", b"(1+2)"]
    pieces += ["é".encode()[:1], "中".encode()[:1], "中".encode()[:2], "é".encode()[1:], None]
    return Vocabulary.from_tokens(pieces, eos_token_ids=[0], size=len(pieces) + 5)


VOCAB = synthetic_vocab()

SMALL_GRAMMARS = {
    "parens": 'start: group*\ngroup: "(" group* ")"\n',
    "arithmetic": (
        '?start: sum\n?sum: sum "+" atom | atom\n?atom: NUM | "(" sum ")"\n'
        'NUM: /[0-9]+/\n%ignore " "\n'
    ),
    "utf8": 'start: ("é" | "中" "1")+ ")"?\n',
}


@functools.cache
def lark_parser(text: str) -> lark.Lark:
    return lark.Lark(text, parser="earley", lexer="dynamic_complete")


def lark_complete(grammar: str, data: bytes) -> bool:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    try:
        lark_parser(grammar).parse(text)
    except lark.exceptions.UnexpectedInput:
        return False
    return True


@functools.cache
def lark_viable(grammar: str, data: bytes) -> bool:
    """`data` is a prefix of a sentence. Exact for grammars whose terminals are single
    characters or prefix-closed (as SMALL_GRAMMARS'): Earley then consumes exactly the viable
    prefixes. A trailing partial UTF-8 character is completed with every character the
    grammars and the vocabulary use (no other character can appear in a sentence)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(data) - 3 or exc.reason != "unexpected end of data":
            return False
        head, tail = data[: exc.start], data[exc.start :]
        return any(
            lark_viable(grammar, head + c.encode())
            for c in "é中"
            if c.encode().startswith(tail) and c.encode() != tail
        )
    try:
        lark_parser(grammar).parse(text)
    except lark.exceptions.UnexpectedEOF:
        return True
    except lark.exceptions.UnexpectedInput:
        return False
    return True


def allowed_ids(matcher: Matcher, vocab: Vocabulary) -> set[int]:
    bitmask = allocate_bitmask(1, vocab.size, backend="numpy")
    matcher.fill_bitmask(bitmask, 0)
    return set(np.flatnonzero(unpack_bitmask(bitmask[0], vocab.size)).tolist())


def token_id(piece: bytes) -> int:
    return next(i for i in range(VOCAB.size) if VOCAB.token_bytes(i) == piece)


@pytest.mark.parametrize("name", sorted(SMALL_GRAMMARS))
def test_prefix_oracle_is_sound(name: str) -> None:
    """The Lark prefix oracle itself: viable prefixes complete, others never do."""
    grammar = SMALL_GRAMMARS[name]
    for length in range(4):
        for letters in itertools.product(["(", ")", "+", "1", " ", "x", "é", "中"], repeat=length):
            data = "".join(letters).encode()
            if lark_viable(grammar, data):
                assert _find_completion(grammar, data, 14) is not None, data
            else:
                for extra in itertools.product(["(", ")", "1", "é"], repeat=2):
                    assert not lark_complete(grammar, data + "".join(extra).encode())


def _find_completion(grammar: str, data: bytes, budget: int) -> bytes | None:
    if lark_complete(grammar, data):
        return data
    if budget == 0:
        return None
    for c in (")", "1", "é", "中", "(", "+"):
        longer = data + c.encode()
        if lark_viable(grammar, longer):
            found = _find_completion(grammar, longer, budget - 1)
            if found is not None:
                return found
    return None


@pytest.mark.parametrize("name", sorted(SMALL_GRAMMARS))
def test_masks_equal_brute_force_oracle(name: str, kernel: str) -> None:
    grammar = SMALL_GRAMMARS[name]
    compiled = Compiler(VOCAB).grammar(grammar)
    frontier = [(Matcher(compiled), b"")]
    seen: set[bytes] = set()
    checked = 0
    for _depth in range(3):
        nxt = []
        for matcher, text in frontier:
            allowed = allowed_ids(matcher, VOCAB)
            assert matcher.can_terminate() == lark_complete(grammar, text), text
            for tid in range(VOCAB.size):
                data = VOCAB.token_bytes(tid)
                if tid in VOCAB.eos_token_ids:
                    expected = lark_complete(grammar, text)
                elif not data:  # special or padding
                    expected = False
                else:
                    expected = lark_viable(grammar, text + data)
                assert (tid in allowed) == expected, (name, text, data)
                assert matcher.copy().accept_token(tid) == expected, (name, text, data)
                checked += 1
                candidate = text + data
                if expected and data and len(nxt) < 30 and candidate not in seen:
                    seen.add(candidate)
                    child = matcher.copy()
                    assert child.accept_token(tid)
                    nxt.append((child, candidate))
        frontier = nxt
    assert checked > 10 * VOCAB.size


class TestDeepNesting:
    def test_parentheses_500_deep(self) -> None:
        m = Matcher(Compiler(VOCAB).grammar(SMALL_GRAMMARS["parens"]))
        for _ in range(500):
            assert m.accept_token(token_id(b"("))
        assert not m.can_terminate()
        assert VOCAB.eos_token_ids[0] not in allowed_ids(m, VOCAB)
        for _ in range(499):
            assert m.accept_token(token_id(b")"))
        assert not m.can_terminate()
        assert m.accept_token(token_id(b")")) and m.can_terminate()
        assert not m.accept_token(token_id(b")"))

    def test_arithmetic_500_deep(self) -> None:
        m = Matcher(Compiler(VOCAB).grammar(SMALL_GRAMMARS["arithmetic"]))
        for _ in range(500):
            assert m.accept_token(token_id(b"(("))
        assert m.accept_token(token_id(b"1+1"))
        for _ in range(1000):
            assert m.accept_token(token_id(b")"))
        assert m.can_terminate()

    def test_json_500_deep_with_a_real_tokenizer(self) -> None:
        tokenizer, vocab = load_tokenizer("llama3_1"), load_vocab("llama3_1")
        compiled = Compiler(vocab).grammar(load_builtin("json"))
        for text in ("[" * 500 + "1" + "]" * 500, '{"a": ' * 500 + "null" + "}" * 500):
            ids = tokenizer.encode(text, add_special_tokens=False)
            assert vocab.decode(ids) == text.encode()
            m = Matcher(compiled)
            assert all(m.accept_token(t) for t in ids) and m.can_terminate()
            m.rollback(1)
            assert not m.can_terminate()


# ----------------------------------------------------------------------------- real tokenizers


def encode_exactly(tokenizer: object, vocab: Vocabulary, text: str) -> list[int] | None:
    """Token ids that decode to exactly `text` (None when the tokenizer changes the text)."""
    ids: list[int] = tokenizer.encode(text, add_special_tokens=False)  # type: ignore[attr-defined]
    if vocab.decode(ids) == text.encode():
        return ids
    ids = [i for i in ids if vocab.token_bytes(i) != b" "]  # SentencePiece's prefix space
    return ids if vocab.decode(ids) == text.encode() else None


def structgen_accepts(compiled: object, ids: list[int]) -> bool:
    m = Matcher(compiled)  # type: ignore[arg-type]
    return all(m.accept_token(t) for t in ids) and m.can_terminate()


def shipped_samples(name: str, count: int, seed: int) -> list[str]:
    grammar = lark_to_ir(load_builtin(name))
    return sample_sentences(grammar, count=count, seed=seed, max_terminals=30)


@pytest.mark.parametrize("tokenizer_name", TOKENIZERS)
def test_sampled_sentences_are_accepted_token_by_token(tokenizer_name: str) -> None:
    tokenizer, vocab = load_tokenizer(tokenizer_name), load_vocab(tokenizer_name)
    compiler = Compiler(vocab)
    eos = vocab.eos_token_ids[0]
    for name in builtin_names():
        compiled = compiler.grammar(load_builtin(name))
        checked = 0
        for index, text in enumerate(shipped_samples(name, count=6, seed=11) + VALID[name][:2]):
            ids = encode_exactly(tokenizer, vocab, text)
            if ids is None:
                continue
            m = Matcher(compiled)
            for tid in ids:
                if index == 0:  # the mask agrees with accept_token (one sentence: masks cost)
                    assert tid in allowed_ids(m, vocab), (name, text, tid)
                assert m.accept_token(tid), (tokenizer_name, name, text, vocab.token_bytes(tid))
            assert m.can_terminate(), (name, text)
            assert m.accept_token(eos) and m.is_terminated()
            checked += 1
        assert checked >= 4, (tokenizer_name, name)


@pytest.mark.parametrize("name", builtin_names())
@pytest.mark.parametrize("tokenizer_name", ["llama3_1", "gemma3"])
def test_verdicts_agree_with_lark_on_samples_and_mutations(name: str, tokenizer_name: str) -> None:
    tokenizer, vocab = load_tokenizer(tokenizer_name), load_vocab(tokenizer_name)
    text_grammar = load_builtin(name)
    compiled = Compiler(vocab).grammar(text_grammar)
    rng = random.Random(5)
    texts = list(VALID[name]) + list(INVALID[name])
    for text in shipped_samples(name, count=8, seed=2):
        texts += [text] + [mutate(text, rng) for _ in range(4)]
    compared = {True: 0, False: 0}
    for text in texts:
        ids = encode_exactly(tokenizer, vocab, text)
        if ids is None:
            continue
        expected = lark_complete(text_grammar, text.encode())
        assert structgen_accepts(compiled, ids) == expected, (name, text)
        compared[expected] += 1
    assert compared[True] >= 5 and compared[False] >= 5, compared


# ----------------------------------------------------------------------------- contract


class TestMatcherContract:
    compiled = None

    @classmethod
    def grammar(cls) -> object:
        if cls.compiled is None:
            cls.compiled = Compiler(VOCAB).grammar(SMALL_GRAMMARS["arithmetic"])
        return cls.compiled

    def test_rollback_copy_reset(self) -> None:
        m = Matcher(self.grammar())  # type: ignore[arg-type]
        masks = [allowed_ids(m, VOCAB)]
        for piece in (b"((", b"1", b" + ", b"2"):
            assert m.accept_token(token_id(piece))
            masks.append(allowed_ids(m, VOCAB))
        c = m.copy()
        assert c.accept_token(token_id(b"))")) and c.can_terminate()
        assert not m.can_terminate() and allowed_ids(m, VOCAB) == masks[-1]
        m.rollback(2)
        assert allowed_ids(m, VOCAB) == masks[2]
        m.reset()
        assert allowed_ids(m, VOCAB) == masks[0]

    def test_rejected_tokens_leave_the_state_unchanged(self) -> None:
        m = Matcher(self.grammar())  # type: ignore[arg-type]
        assert m.accept_token(token_id(b"(1"))
        before = allowed_ids(m, VOCAB)
        for bad in (token_id(b"x"), token_id(b"(("[:1] + b")"), VOCAB.size - 1, VOCAB.size + 3, -1):
            assert not m.accept_token(bad)
        assert not m.accept_token(VOCAB.eos_token_ids[0])
        assert allowed_ids(m, VOCAB) == before

    def test_termination(self) -> None:
        m = Matcher(self.grammar())  # type: ignore[arg-type]
        assert m.accept_token(token_id(b"1+1"))
        eos = VOCAB.eos_token_ids[0]
        assert m.can_terminate() and eos in allowed_ids(m, VOCAB)
        assert m.accept_token(eos) and m.is_terminated()
        assert allowed_ids(m, VOCAB) == {eos} and not m.accept_token(token_id(b"1"))
        m.rollback(1)
        assert not m.is_terminated() and m.accept_token(token_id(b"2"))

    def test_forced_tokens(self) -> None:
        compiled = Compiler(VOCAB).grammar('start: "(+" /[0-9]+/ ")"\n')
        m = Matcher(compiled)
        forced = m.forced_tokens()  # no token extends "(+", so it can be committed
        assert forced and b"(+".startswith(VOCAB.decode(forced))
        for tid in forced:
            assert m.accept_token(tid)

    def test_start_rule_and_errors(self) -> None:
        text = 'start: "1"\nother: "(" ")"\n'
        m = Matcher(Compiler(VOCAB).grammar(text, start="other"))
        assert m.accept_token(token_id(b"()")) and m.can_terminate()
        with pytest.raises(GrammarError):
            Compiler(VOCAB).grammar("start: missing\n")
        with pytest.raises(GrammarError):
            Compiler(VOCAB).grammar("start: A\nA: /a(?=b)/\n")
