"""`Vocabulary`: the exact byte string of every token id, the special ids, and the EOS ids.

Constraint automata run over bytes, so the first job is to know, for every token id the model can
produce, which bytes it adds to the output. Byte-level BPE stores tokens in a printable alphabet
(`Ġ` = space); SentencePiece uses `▁` for space and `<0xNN>` byte-fallback tokens; added tokens
are stored as plain text. Special tokens and ids past the tokenizer (padding rows of the
embedding) have no bytes: they never match text. See docs/design/vocabulary.md.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from structgen.errors import TokenizerError
from structgen.vocab._byte_level import BYTE_LEVEL_ALPHABET, BYTE_LEVEL_TO_LATIN1
from structgen.vocab._trie import TokenTrie

__all__ = ["Vocabulary"]

_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_SPIECE_SPACE = "\u2581"
_FORMAT_VERSION = "1"


class Vocabulary:
    """Token bytes, special-token flags and EOS ids for one tokenizer and logits width.

    Build it with `Vocabulary.from_hf(tokenizer)` or, for synthetic vocabularies in tests and
    custom tokenizers, `Vocabulary.from_tokens(...)`. Immutable after construction.
    """

    __slots__ = (
        "_blob",
        "_offsets",
        "_special",
        "_eos",
        "_size",
        "_fingerprint",
        "_trie",
        "_lock",
        "_family",
        "_names",
    )

    def __init__(
        self,
        tokens: Sequence[bytes | None],
        *,
        eos_token_ids: Iterable[int],
        size: int | None = None,
        family: str = "custom",
        names: Mapping[str, int] | None = None,
    ) -> None:
        n = len(tokens)
        width = n if size is None else int(size)
        if width < n:
            raise TokenizerError(
                f"size={width} is smaller than the tokenizer's {n} ids; pass the width of the "
                "model's logits (model.config.vocab_size), which is never smaller"
            )
        special = np.ones(width, dtype=bool)
        lengths = np.zeros(width, dtype=np.int64)
        parts: list[bytes] = []
        for i, tok in enumerate(tokens):
            if tok:  # None (special) and b"" (no text) never match
                special[i] = False
                lengths[i] = len(tok)
                parts.append(tok)
        offsets = np.zeros(width + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        eos = tuple(sorted({int(e) for e in eos_token_ids}))
        for e in eos:
            if not 0 <= e < width:
                raise TokenizerError(f"EOS id {e} is outside the vocabulary of size {width}")
        self._blob = b"".join(parts)
        self._offsets = offsets
        self._special = special
        self._special.setflags(write=False)
        self._offsets.setflags(write=False)
        self._eos = eos
        self._size = width
        self._family = family
        self._trie: TokenTrie | None = None
        self._lock = threading.Lock()
        digest = hashlib.sha256()
        digest.update(f"structgen-vocab-{_FORMAT_VERSION}:{width}:{eos}".encode())
        digest.update(offsets.tobytes())
        digest.update(self._blob)
        self._names = dict(names or {})
        for name, idx in self._names.items():
            if not 0 <= idx < width:
                raise TokenizerError(f"token {name!r} has id {idx}, outside the vocabulary")
        if self._names:  # (vocabularies without names keep their fingerprints)
            digest.update(repr(sorted(self._names.items())).encode())
        self._fingerprint = digest.hexdigest()

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_tokens(
        cls,
        tokens: Sequence[bytes | None],
        *,
        eos_token_ids: Iterable[int],
        size: int | None = None,
        names: Mapping[str, int] | None = None,
    ) -> Vocabulary:
        """A vocabulary from explicit token bytes (`None` marks a special token); `names`:
        the special and added tokens by their text (`<|im_end|>`), for `token_id`."""
        return cls(tokens, eos_token_ids=eos_token_ids, size=size, names=names)

    @classmethod
    def from_hf(
        cls,
        tokenizer: Any,
        size: int | None = None,
        *,
        eos_token_ids: Iterable[int] | None = None,
        generation_config: Any = None,
    ) -> Vocabulary:
        """Read a Hugging Face tokenizer (`transformers` or `tokenizers.Tokenizer`).

        `size` is the width of the model's logits (`model.config.vocab_size`); ids between the
        tokenizer's length and `size` are padding and never allowed. EOS ids are the union of
        `eos_token_ids`, the tokenizer's `eos_token_id` and `generation_config.eos_token_id`.
        """
        backend = _backend_of(tokenizer)
        try:
            vocab: dict[str, int] = backend.get_vocab(with_added_tokens=True)
            added: dict[int, Any] = backend.get_added_tokens_decoder()
            decoder_json = _component_json(backend.decoder)
            pre_tokenizer_json = _component_json(backend.pre_tokenizer)
        except Exception as exc:  # a broken backend: say what failed, not where deep inside
            raise TokenizerError(f"cannot read the tokenizer's vocabulary: {exc}") from exc
        if not vocab:
            raise TokenizerError("the tokenizer has an empty vocabulary")
        n = max(vocab.values()) + 1
        family = _family(decoder_json, pre_tokenizer_json)
        strings: list[str | None] = [None] * n
        for text, idx in vocab.items():
            strings[idx] = text
        tokens = _decode_tokens(strings, added, family)

        eos: set[int] = set(eos_token_ids or ())
        tok_eos = getattr(tokenizer, "eos_token_id", None)
        if isinstance(tok_eos, int):
            eos.add(tok_eos)
        eos.update(_generation_config_eos(generation_config))
        if not eos:
            eos.update(_guess_eos(vocab))
        if not eos:
            raise TokenizerError(
                "no EOS token found: pass eos_token_ids=[...] or a generation_config that names it"
            )
        for e in eos:
            if 0 <= e < len(tokens):
                tokens[e] = None  # EOS is governed by can_terminate(), never by text
        names = {str(token.content): int(i) for i, token in added.items() if i < n}
        return cls(tokens, eos_token_ids=eos, size=size, family=family, names=names)

    # ------------------------------------------------------------------ queries

    @property
    def size(self) -> int:
        """Width of the logits: every id in `range(size)` has a verdict in a mask."""
        return self._size

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """Ids that end generation; allowed exactly when the matcher can terminate."""
        return self._eos

    @property
    def fingerprint(self) -> str:
        """A stable sha256 of the token bytes, special flags, EOS ids and size (cache key)."""
        return self._fingerprint

    @property
    def family(self) -> str:
        """How token strings were decoded: 'byte_level', 'sentencepiece' or 'custom'."""
        return self._family

    @property
    def special_mask(self) -> npt.NDArray[np.bool_]:
        """Read-only bool array [size]: True for ids that never match text."""
        return self._special

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes `token_id` adds to the output (b"" for special and padding ids)."""
        if not 0 <= token_id < self._size:
            raise IndexError(f"token id {token_id} is outside the vocabulary of size {self._size}")
        start, end = self._offsets[token_id], self._offsets[token_id + 1]
        return self._blob[start:end]

    @property
    def named_tokens(self) -> dict[str, int]:
        """The tokenizer's special and added tokens by their text (`<|im_end|>`, `<tool_call>`)."""
        return dict(self._names)

    def token_id(self, name: str) -> int | None:
        """The id of the special or added token `name` (None: the tokenizer has none)."""
        return self._names.get(name)

    def token_table(self) -> tuple[bytes, npt.NDArray[np.int64]]:
        """(every token's bytes concatenated, offsets [size + 1]): token `i` is
        `blob[offsets[i]:offsets[i + 1]]` (read-only; for vectorised scans)."""
        return self._blob, self._offsets

    def count_bytes(self, *flags: npt.NDArray[np.bool_]) -> list[npt.NDArray[np.int64]]:
        """For each `flags` (bool [256]: a set of byte values), how many of every token's bytes
        are in it (int64 [size]), in a few array passes over `token_table` (a Python loop over
        128k tokens took ~0.1 s)."""
        data = np.frombuffer(self._blob, dtype=np.uint8)
        owner = np.repeat(np.arange(self.size), np.diff(self._offsets))  # each byte's token
        return [np.bincount(owner[f[data]], minlength=self.size) for f in flags]

    def is_special(self, token_id: int) -> bool:
        """True for special/control tokens, EOS and padding ids: they never match text."""
        return bool(self._special[token_id])

    def decode(self, token_ids: Iterable[int]) -> bytes:
        """Concatenated bytes of `token_ids` (special ids contribute nothing)."""
        return b"".join(self.token_bytes(i) for i in token_ids)

    @property
    def trie(self) -> TokenTrie:
        """The sorted token table that mask computation walks (built on first use)."""
        trie = self._trie
        if trie is None:
            with self._lock:
                if self._trie is None:
                    self._trie = TokenTrie(self._blob, self._offsets, self._special)
                trie = self._trie
        return trie

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return (
            f"Vocabulary(size={self._size}, family={self._family!r}, "
            f"eos_token_ids={list(self._eos)}, fingerprint={self._fingerprint[:12]})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and other._fingerprint == self._fingerprint

    def __hash__(self) -> int:
        return hash(self._fingerprint)

    def __getstate__(self) -> dict[str, Any]:
        return {
            "blob": self._blob,
            "offsets": self._offsets,
            "special": self._special,
            "eos": self._eos,
            "size": self._size,
            "family": self._family,
            "fingerprint": self._fingerprint,
            "names": self._names,
        }

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        self._blob = state["blob"]
        self._offsets = state["offsets"]
        self._special = state["special"]
        self._eos = state["eos"]
        self._size = state["size"]
        self._family = state["family"]
        self._fingerprint = state["fingerprint"]
        self._names = dict(state.get("names", {}))
        self._trie = None
        self._lock = threading.Lock()


# ---------------------------------------------------------------------- helpers


def _backend_of(tokenizer: Any) -> Any:
    """The `tokenizers.Tokenizer` behind a transformers tokenizer, or the object itself."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None and hasattr(tokenizer, "get_vocab") and hasattr(tokenizer, "decoder"):
        try:
            import tokenizers

            if isinstance(tokenizer, tokenizers.Tokenizer):
                backend = tokenizer
        except ImportError:  # pragma: no cover - tokenizers is a dependency
            pass
    if backend is None:
        raise TokenizerError(
            f"expected a Hugging Face tokenizer (a transformers fast tokenizer or a "
            f"tokenizers.Tokenizer), got {type(tokenizer).__name__}; slow (Python) tokenizers "
            "are not supported: load it with use_fast=True"
        )
    return backend


def _component_json(component: Any) -> dict[str, Any] | None:
    if component is None:
        return None
    state = component.__getstate__()
    parsed: dict[str, Any] = json.loads(state)
    return parsed


def _contains_type(node: Any, name: str) -> bool:
    if isinstance(node, dict):
        if node.get("type") == name:
            return True
        return any(_contains_type(v, name) for v in node.values())
    if isinstance(node, list):
        return any(_contains_type(v, name) for v in node)
    return False


def _family(decoder: dict[str, Any] | None, pre_tokenizer: dict[str, Any] | None) -> str:
    if _contains_type(decoder, "ByteLevel"):
        return "byte_level"
    if _contains_type(decoder, "Metaspace") or _contains_type(decoder, "ByteFallback"):
        return "sentencepiece"
    if decoder is None and _contains_type(pre_tokenizer, "ByteLevel"):
        return "byte_level"
    if _contains_type(decoder, "Replace") and _SPIECE_SPACE in json.dumps(decoder):
        return "sentencepiece"
    kind = decoder.get("type") if decoder else None
    raise TokenizerError(
        f"unsupported tokenizer decoder {kind!r}: structgen reads byte-level BPE and "
        "SentencePiece-style (▁ and <0xNN>) vocabularies; build one with Vocabulary.from_tokens"
    )


def _decode_tokens(
    strings: Sequence[str | None], added: Mapping[int, Any], family: str
) -> list[bytes | None]:
    """Token strings → bytes for the whole vocabulary (C-speed str methods, no per-byte loop)."""
    tokens: list[bytes | None] = [None] * len(strings)
    if family == "byte_level":
        for i, s in enumerate(strings):
            if s is not None and i not in added:
                try:
                    tokens[i] = s.translate(BYTE_LEVEL_TO_LATIN1).encode("latin-1")
                except UnicodeEncodeError:
                    tokens[i] = b"\x00" + s.encode()  # marker; rejected by the check below
        bad = [
            strings[i]
            for i, s in enumerate(strings)
            if s is not None and i not in added and not BYTE_LEVEL_ALPHABET.issuperset(s)
        ]
        if bad:
            raise TokenizerError(
                f"{len(bad)} tokens are not in the byte-level alphabet (first: {bad[0]!r}); "
                "the tokenizer's vocabulary cannot be decoded to bytes"
            )
    else:
        for i, s in enumerate(strings):
            if s is None or i in added:
                continue
            match = _BYTE_FALLBACK.fullmatch(s) if len(s) == 6 else None
            if match is not None:
                tokens[i] = bytes([int(match.group(1), 16)])
            else:
                tokens[i] = s.replace(_SPIECE_SPACE, " ").encode("utf-8")
    for i, token in added.items():
        if i >= len(tokens):
            continue
        if getattr(token, "special", True):
            tokens[i] = None
        else:
            content: str = token.content
            if family == "sentencepiece":
                content = content.replace(_SPIECE_SPACE, " ")
            tokens[i] = content.encode("utf-8")
    return tokens


def _generation_config_eos(config: Any) -> list[int]:
    if config is None:
        return []
    value = config.get("eos_token_id") if isinstance(config, Mapping) else None
    if value is None:
        value = getattr(config, "eos_token_id", None)
    if value is None and hasattr(config, "generation_config"):
        value = getattr(config.generation_config, "eos_token_id", None)
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


_KNOWN_EOS = (
    "</s>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<|eot_id|>",
    "<|im_end|>",
    "<eos>",
    "<end_of_turn>",
)


def _guess_eos(vocab: Mapping[str, int]) -> list[int]:
    return [vocab[name] for name in _KNOWN_EOS if name in vocab]
