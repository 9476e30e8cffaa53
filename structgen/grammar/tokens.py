"""Token terminals: grammar terminals that match one token id (a special or added token such
as `<tool_call>`, `<|python_tag|>`, `<|channel|>`), never its text.

The engines read bytes, so a token terminal is spelled with bytes no text can contain: the
4-byte UTF-8 pattern of code point `TOKEN_BASE + id` (above U+10FFFF, lead byte F5–F7; valid
UTF-8 never has a byte from F5 up). A terminal is the one-point class of that code point, so
every engine, automaton and cache works on it unchanged. `CompiledGrammar` does the rest: a
grammar with token terminals reads those ids as their marker bytes (their text reading is
gone), refuses every text token holding a byte from F5 up (so no text spells a marker), and
sets the ids' mask bits where the marker is allowed. See docs/design/token-terminals.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from structgen._lru import LRU
from structgen.automata import CharClass, Node
from structgen.automata.utf8 import TOKEN_BASE, encode_utf8
from structgen.grammar.ir import Grammar, TerminalDef

if TYPE_CHECKING:
    from structgen.vocab import Vocabulary

__all__ = [
    "NON_TEXT_BYTE",
    "TOKEN_BASE",
    "grammar_tokens",
    "tag_token",
    "text_clashes",
    "token_id_at",
    "token_marker",
    "token_node",
    "token_terminal",
]

#: ids up to this fit below U+1FFFFF (the 4-byte UTF-8 form) from `TOKEN_BASE`
MAX_TOKEN_ID = 0x1FFFFF - TOKEN_BASE
#: the lowest byte valid UTF-8 never holds; markers start with one (F5, F6 or F7)
NON_TEXT_BYTE = 0xF5


def _check(token_id: int) -> int:
    if isinstance(token_id, bool) or not isinstance(token_id, int):
        raise TypeError(f"a token id is an int, got {token_id!r}")
    if not 0 <= token_id <= MAX_TOKEN_ID:
        raise ValueError(f"token id {token_id} is outside 0..{MAX_TOKEN_ID}")
    return token_id


def token_node(token_id: int) -> Node:
    """The regex AST of token `token_id`'s terminal."""
    cp = TOKEN_BASE + _check(token_id)
    return CharClass(((cp, cp),))


def token_marker(token_id: int) -> bytes:
    """The 4 bytes the engines read for token `token_id`."""
    return encode_utf8(TOKEN_BASE + _check(token_id))


def token_id_at(data: bytes, pos: int) -> int | None:
    """The token id whose marker starts at `data[pos]` (None: no marker there)."""
    if pos + 4 > len(data) or not NON_TEXT_BYTE <= data[pos] <= 0xF7:
        return None
    b0, b1, b2, b3 = data[pos : pos + 4]
    if not all(0x80 <= b < 0xC0 for b in (b1, b2, b3)):
        return None
    cp = (b0 & 0x07) << 18 | (b1 & 0x3F) << 12 | (b2 & 0x3F) << 6 | (b3 & 0x3F)
    return cp - TOKEN_BASE if cp >= TOKEN_BASE else None


def tag_token(vocab: Vocabulary, text: str) -> int | None:
    """The id of the special or added token spelled `text`, when a grammar may use it as a
    token terminal (None: the vocabulary has none, or it is an EOS token: write the text)."""
    token = vocab.token_id(text)
    return None if token is None or token in vocab.eos_token_ids else token


def token_terminal(token_id: int) -> TerminalDef:
    """A terminal matching exactly token `token_id` (named after it: one per id)."""
    return TerminalDef(f"__TOKEN_{token_id}", token_node(token_id))


def grammar_tokens(grammar: Grammar) -> frozenset[int]:
    """The token ids a grammar's token terminals match."""
    out: set[int] = set()
    for terminal in grammar.terminals:
        node = terminal.pattern
        if isinstance(node, CharClass) and len(node.ranges) == 1 and not terminal.intersect:
            lo, hi = node.ranges[0]
            if lo == hi and lo >= TOKEN_BASE:
                out.add(lo - TOKEN_BASE)
    return frozenset(out)


_CLASHES: LRU[str, npt.NDArray[np.bool_]] = LRU(8)


def text_clashes(vocab: Vocabulary) -> npt.NDArray[np.bool_]:
    """Read-only bool array [size]: the text tokens holding a byte from F5 up (a byte-level or
    byte-fallback token of one byte, mostly), which a grammar with token terminals refuses."""

    def build() -> npt.NDArray[np.bool_]:
        blob, offsets = vocab.token_table()
        data = np.frombuffer(blob, dtype=np.uint8)
        at = np.flatnonzero(data >= NON_TEXT_BYTE)
        out = np.zeros(vocab.size, dtype=bool)
        out[np.searchsorted(offsets, at, side="right") - 1] = True  # the tokens holding them
        out.setflags(write=False)
        return out

    return _CLASHES.get_or_make(vocab.fingerprint, build)
