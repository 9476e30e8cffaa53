"""The GPT-2 byte-level alphabet: every byte is shown as one printable code point.

Byte-level BPE tokenizers (GPT-2, Llama-3, Qwen2, SmolLM2) store token strings in this
alphabet (`Ġ` is a space, `Ċ` a newline). Decoding a token back to bytes is a `str.translate`
into Latin-1 followed by `encode("latin-1")`, which runs in C for the whole vocabulary.
"""

from __future__ import annotations

__all__ = ["BYTE_LEVEL_ALPHABET", "BYTE_LEVEL_TO_LATIN1"]


def _bytes_to_unicode() -> dict[int, str]:
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


_BYTE_TO_CHAR = _bytes_to_unicode()
BYTE_LEVEL_ALPHABET: frozenset[str] = frozenset(_BYTE_TO_CHAR.values())
#: `token_string.translate(BYTE_LEVEL_TO_LATIN1).encode("latin-1")` gives the token's bytes.
BYTE_LEVEL_TO_LATIN1: dict[int, str] = {ord(c): chr(b) for b, c in _BYTE_TO_CHAR.items()}
