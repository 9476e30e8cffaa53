"""Vocabulary: exact token bytes for every tokenizer family, special tokens, EOS, padding."""

from __future__ import annotations

import itertools
import pickle
import unicodedata

import numpy as np
import pytest

from structgen import TokenizerError, Vocabulary
from tests.conftest import TOKENIZER_NAMES, load_tokenizer, load_vocab

CORPUS = [
    "hello world",
    "Hello, World! 123",
    " leading space",
    "   three leading spaces",
    "trailing space ",
    '{"name": "Ada", "age": 36, "tags": ["x", "y"], "ok": true, "n": null}',
    '{"nested": {"deep": [1, 2.5e-3, -7, {"k": "v"}]}}',
    "def f(x):\n\treturn x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "line one\nline two\r\nline three\n\n\n",
    "\ttab\tseparated\tvalues\t",
    "emoji: 😀🎉👩‍👩‍👧 and a flag 🇫🇷",
    "中文字符测试，日本語のテキスト、한국어 텍스트",
    "combining: e\u0301 a\u0308 n\u0303 (decomposed)",
    "precomposed: é ä ñ",
    "invalid-looking escapes: \\u12 \\x4 \\q \\\\ \\n",
    "math: ∑ x² ≤ ∞, → ⇒ ∀∃",
    "mixed\u00a0nbsp and \u200b zero-width",
    "a" * 300,
    " " * 40 + "indented",
    "<tool_call> looks like markup </tool_call>",
    "",
]


def expected_bytes(tokenizer: object, text: str) -> bytes:
    """The text the tokenizer actually encodes, after its own normaliser and pre-tokenizer.

    Qwen2.5 applies NFC; the Mistral SentencePiece tokenizer prepends a space (▁).
    """
    backend = tokenizer.backend_tokenizer  # type: ignore[attr-defined]
    normalized = backend.normalizer.normalize_str(text) if backend.normalizer else text
    vocab = load_vocab_for(tokenizer)
    if vocab.family == "sentencepiece" and backend.pre_tokenizer is not None and normalized:
        pieces = backend.pre_tokenizer.pre_tokenize_str(normalized)
        normalized = "".join(piece for piece, _ in pieces)
    return normalized.replace("\u2581", " ").encode("utf-8")


_VOCABS: dict[int, Vocabulary] = {}


def load_vocab_for(tokenizer: object) -> Vocabulary:
    if id(tokenizer) not in _VOCABS:
        _VOCABS[id(tokenizer)] = Vocabulary.from_hf(tokenizer)
    return _VOCABS[id(tokenizer)]


@pytest.mark.parametrize("name", TOKENIZER_NAMES)
class TestRealTokenizers:
    def test_token_bytes_concatenate_to_the_text(self, name: str) -> None:
        tokenizer = load_tokenizer(name)
        vocab = load_vocab_for(tokenizer)
        for text in CORPUS:
            ids = tokenizer.encode(text, add_special_tokens=False)
            assert vocab.decode(ids) == expected_bytes(tokenizer, text), (name, text)

    def test_normalisers_are_the_only_difference(self, name: str) -> None:
        tokenizer = load_tokenizer(name)
        for text in CORPUS:
            expected = expected_bytes(tokenizer, text)
            nfc = unicodedata.normalize("NFC", text)
            assert expected in {
                text.encode(),
                nfc.encode(),
                b" " + text.encode(),
            }, (name, text)

    def test_special_tokens_are_flagged_and_have_no_bytes(self, name: str) -> None:
        tokenizer = load_tokenizer(name)
        vocab = load_vocab_for(tokenizer)
        added = tokenizer.backend_tokenizer.get_added_tokens_decoder()
        specials = [i for i, t in added.items() if t.special]
        assert specials
        for i in specials:
            assert vocab.is_special(i)
            assert vocab.token_bytes(i) == b""
        for e in vocab.eos_token_ids:
            assert vocab.is_special(e)

    def test_eos_is_the_tokenizers(self, name: str) -> None:
        tokenizer = load_tokenizer(name)
        vocab = load_vocab_for(tokenizer)
        assert tokenizer.eos_token_id in vocab.eos_token_ids

    def test_size_padding_ids_are_never_text(self, name: str) -> None:
        tokenizer = load_tokenizer(name)
        vocab = Vocabulary.from_hf(tokenizer, size=len(tokenizer) + 77)
        assert vocab.size == len(tokenizer) + 77
        for i in range(len(tokenizer), vocab.size):
            assert vocab.is_special(i)
            assert vocab.token_bytes(i) == b""
        trie_ids = set(vocab.trie.ids.tolist())
        assert not trie_ids & set(range(len(tokenizer), vocab.size))

    def test_trie_holds_exactly_the_text_tokens(self, name: str) -> None:
        vocab = load_vocab(name)
        trie = vocab.trie
        text_ids = np.flatnonzero(~vocab.special_mask)
        assert sorted(trie.ids.tolist()) == text_ids.tolist()
        rng = np.random.default_rng(0)
        for pos in rng.integers(0, trie.num_tokens, size=200):
            assert trie.token_bytes_at(int(pos)) == vocab.token_bytes(int(trie.ids[pos]))
        assert np.all(np.diff(trie.lengths) <= 0)
        for k in range(trie.max_length):
            assert np.all(trie.lengths[: trie.counts[k]] > k)
            assert np.all(trie.lengths[trie.counts[k] :] <= k)

    def test_lexicographic_arrays_are_the_tokens_in_byte_order(self, name: str) -> None:
        """The C walk's flat trie: every text token in byte order (a prefix before the tokens
        it begins; equal bytes in trie order), each with the bytes it shares with the one
        before, its bytes laid out in that order, and the end of its first byte's bucket —
        checked against a plain sort of the tokens' bytes."""
        vocab = load_vocab(name)
        trie = vocab.trie
        lex = trie.lexicographic_arrays()
        texts = [vocab.token_bytes(int(t)) for t in trie.ids]
        order = sorted(range(len(texts)), key=texts.__getitem__)  # (stable)
        assert lex["ids"].tolist() == trie.ids[order].tolist()
        ordered = [texts[i] for i in order]
        assert lex["lengths"].tolist() == [len(t) for t in ordered]
        lcp = [0]
        for a, b in itertools.pairwise(ordered):
            k = 0
            while k < min(len(a), len(b)) and a[k] == b[k]:
                k += 1
            lcp.append(k)
        assert lex["lcp"].tolist() == lcp
        assert lex["blob"].tobytes() == b"".join(ordered)
        starts = np.cumsum([0] + [len(t) for t in ordered[:-1]])
        assert lex["offsets"].tolist() == starts.tolist()
        firsts = [t[0] for t in ordered]
        expected_skip = [len(firsts)] * len(firsts)  # the next token with another first byte
        for i in range(len(firsts) - 2, -1, -1):
            same = firsts[i + 1] == firsts[i]
            expected_skip[i] = expected_skip[i + 1] if same else i + 1
        assert lex["skip0"].tolist() == expected_skip


def test_byte_fallback_tokens_are_single_bytes() -> None:
    tokenizer = load_tokenizer("mistral")
    vocab = load_vocab_for(tokenizer)
    for b in (0x00, 0x0A, 0x80, 0xE4, 0xFF):
        token_id = tokenizer.convert_tokens_to_ids(f"<0x{b:02X}>")
        assert vocab.token_bytes(token_id) == bytes([b])


def test_half_utf8_tokens_exist_in_byte_level_vocabularies() -> None:
    vocab = load_vocab("llama3_1")
    partial = 0
    for i in range(vocab.size):
        data = vocab.token_bytes(i)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            partial += 1
    assert partial > 100  # e.g. the lead byte of a CJK character alone


def test_qwen_non_special_added_tokens_match_their_text() -> None:
    tokenizer = load_tokenizer("qwen2_5")
    vocab = load_vocab_for(tokenizer)
    token_id = tokenizer.convert_tokens_to_ids("<tool_call>")
    assert not vocab.is_special(token_id)
    assert vocab.token_bytes(token_id) == b"<tool_call>"
    assert vocab.is_special(tokenizer.convert_tokens_to_ids("<|im_end|>"))


def test_generation_config_adds_eos_ids() -> None:
    tokenizer = load_tokenizer("llama3_1")
    vocab = Vocabulary.from_hf(tokenizer, generation_config={"eos_token_id": [128001, 128008]})
    assert set(vocab.eos_token_ids) == {128001, 128008, 128009}


def test_fingerprint_is_stable_and_discriminating() -> None:
    a = Vocabulary.from_hf(load_tokenizer("gpt2"))
    b = Vocabulary.from_hf(load_tokenizer("gpt2"))
    c = Vocabulary.from_hf(load_tokenizer("gpt2"), size=50304)
    assert a.fingerprint == b.fingerprint and a == b
    assert a.fingerprint != c.fingerprint
    restored = pickle.loads(pickle.dumps(a))
    assert restored == a and restored.token_bytes(100) == a.token_bytes(100)


def test_tokenizers_library_object_is_accepted() -> None:
    backend = load_tokenizer("gpt2").backend_tokenizer
    vocab = Vocabulary.from_hf(backend)
    assert vocab.size == 50257
    assert vocab.eos_token_ids == (50256,)  # guessed from <|endoftext|>


class TestBadInput:
    def test_not_a_tokenizer(self) -> None:
        with pytest.raises(TokenizerError, match="expected a Hugging Face tokenizer"):
            Vocabulary.from_hf(object())

    def test_size_smaller_than_tokenizer(self) -> None:
        with pytest.raises(TokenizerError, match="smaller than the tokenizer"):
            Vocabulary.from_hf(load_tokenizer("gpt2"), size=1000)

    def test_undecodable_byte_level_vocabulary(self) -> None:
        from tokenizers import Tokenizer, decoders, models

        tok = Tokenizer(models.BPE(vocab={"a": 0, "b": 1, "a b\n": 2}, merges=[]))
        tok.decoder = decoders.ByteLevel()
        with pytest.raises(TokenizerError, match="cannot be decoded"):
            Vocabulary.from_hf(tok, eos_token_ids=[0])

    def test_unsupported_decoder(self) -> None:
        from tokenizers import Tokenizer, decoders, models

        tok = Tokenizer(models.WordPiece(vocab={"[UNK]": 0, "a": 1, "##b": 2}))
        tok.decoder = decoders.WordPiece()
        with pytest.raises(TokenizerError, match="unsupported tokenizer decoder"):
            Vocabulary.from_hf(tok, eos_token_ids=[0])

    def test_eos_out_of_range(self) -> None:
        with pytest.raises(TokenizerError, match="outside the vocabulary"):
            Vocabulary.from_tokens([b"a", b"b"], eos_token_ids=[5])


class TestSyntheticVocabulary:
    def test_from_tokens(self) -> None:
        vocab = Vocabulary.from_tokens([b"a", None, b"bc", b""], eos_token_ids=[1], size=40)
        assert vocab.size == 40
        assert vocab.token_bytes(2) == b"bc"
        assert vocab.is_special(1) and vocab.is_special(3) and vocab.is_special(39)
        assert sorted(vocab.trie.ids.tolist()) == [0, 2]
