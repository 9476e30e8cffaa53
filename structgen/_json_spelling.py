"""How JSON strings are spelled: the facts the schema frontend builds its string languages from
and the `uniqueItems` guard reads its items back with (one copy, so the two cannot drift)."""

from __future__ import annotations

import json

__all__ = ["MANY_LITERALS", "MAX_TRIE_WORD", "SHORT_ESCAPES", "canonical_text"]

# The characters with a two-character escape (`\\n`, `\\"`, ...), by code point.
SHORT_ESCAPES = {0x22: '"', 0x5C: "\\", 0x2F: "/", 8: "b", 12: "f", 10: "n", 13: "r", 9: "t"}
# Above this many literal strings, an enum's bodies are spelled compactly (no `\\uXXXX` forms
# inside words; see `schema._strings.literal_bodies`).
MANY_LITERALS = 64
# Words longer than this are spelled in full even in a compact set.
MAX_TRIE_WORD = 200


def canonical_text(text: str) -> str:
    """`text` as json.dumps(ensure_ascii=False) writes a string's body (lone surrogates, which
    UTF-8 cannot carry raw, as `\\udxxx`)."""
    body = json.dumps(text, ensure_ascii=False)[1:-1]
    if any(0xD800 <= ord(c) <= 0xDFFF for c in body):
        body = "".join(f"\\u{ord(c):04x}" if 0xD800 <= ord(c) <= 0xDFFF else c for c in body)
    return body
