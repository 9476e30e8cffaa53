"""`ReasoningEngine`: think freely, then answer under the constraint.

Wraps any engine: the output is an optional opening tag (`<think>`), free text, the closing tag
(`</think>`), then a sentence of the inner constraint. Tags are token terminals when the
vocabulary has them as tokens (Qwen3's `<think>` is id 151667: the think block ends exactly when
the model emits that token, as vLLM's and SGLang's reasoning parsers read it), text otherwise.
With `opened`, the prompt already holds the opening tag (DeepSeek-R1's template appends it).

States: `("s",)` before the opening tag, `("t", k, n)` thinking (`k` bytes of a text closing
tag matched, `n` tokens of the block so far, for `max_think_tokens`: once it is reached, only
the closing tag may follow, byte for byte), `("e", j)` after the
closing tag (`j` bytes of the optional separator), `("a", inner)` answering. The think block has
no constraint; budget-aware closing sees its shortest completion (the closing tag, then the
inner grammar's shortest text), so a budget closes the block in time to leave room for the
answer. See docs/design/reasoning.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from structgen.engines._before import BeforeInner, cached_mask_of
from structgen.grammar.tokens import token_marker
from structgen.masks import pack_bool_mask
from structgen.vocab import Vocabulary

__all__ = ["ReasoningEngine"]


class ReasoningEngine(BeforeInner):
    """`inner` after a think block; `begin`/`end` are token ids or texts."""

    def __init__(
        self,
        inner: Any,
        vocab: Vocabulary,
        *,
        begin: int | str | None,
        end: int | str,
        opened: bool = False,
        separator: str = "",
        max_think_tokens: int | None = None,
        inner_tokens: frozenset[int] = frozenset(),
    ) -> None:
        if isinstance(begin, str) and not opened:
            raise ValueError(
                "a text opening tag is only supported when the prompt already ends with it "
                "(opened=True); this vocabulary has no token for it"
            )
        self.inner = inner
        self.vocab = vocab
        self._begin = None if opened or begin is None else _tag_bytes(begin)
        self._end = _tag_bytes(end)
        self._end_is_token = isinstance(end, int)
        self._separator = separator.encode()
        self._max_think = max_think_tokens
        tags = {t for t in (begin, end) if isinstance(t, int)}
        if opened and isinstance(begin, int):
            tags.discard(begin)
        self.token_ids = frozenset(tags) | inner_tokens
        self.fingerprint = (
            f"reasoning:{self._begin!r}:{self._end!r}:{opened}:{separator!r}:{max_think_tokens}:"
            f"{getattr(inner, 'fingerprint', '')}"
        )
        self._text_words = pack_bool_mask(~vocab.special_mask[: vocab.size])
        self._think_masks: dict[tuple[int, bool], npt.NDArray[np.int32]] = {}
        self._gap_masks: dict[int, npt.NDArray[np.int32]] = {}
        self._opened = opened or begin is None

    # ------------------------------------------------------------------ states

    @property
    def initial_state(self) -> Any:
        return ("t", 0, 0) if self._opened else ("s",)

    def _answer(self, data: bytes) -> Any:
        state = self.inner.advance(self.inner.initial_state, data) if data else None
        if not data:
            state = self.inner.initial_state
        return None if state is None else ("a", state)

    def _think(self, k: int, data: bytes, count: int) -> Any:
        """Read `data` (one token, from the Matcher) in the think block: `k` bytes of the
        closing tag matched, `count` tokens of the block so far. Every token counts; once
        `max_think_tokens` are in, only tokens that go on with the closing tag byte for byte
        (and may close it) are taken: the block holds at most that many tokens, then the tag."""
        end = self._end
        full = self._max_think is not None and count >= self._max_think
        for i, byte in enumerate(data):
            after = _step(end, k, byte)
            if full and after != k + 1:
                return None  # text (or a tag begun again) in a full block
            k = after
            if k == len(end):
                return self._gap(0, data[i + 1 :])
        return ("t", k, count + 1 if data else count)

    def _gap(self, j: int, data: bytes) -> Any:
        """After the closing tag: `j` bytes of the optional separator ("\n\n") read."""
        sep = self._separator
        i = 0
        while i < len(data) and j < len(sep) and data[i] == sep[j]:
            i, j = i + 1, j + 1
        if j == len(sep) or (j == 0 and i < len(data)):
            return self._answer(data[i:])
        if i < len(data):
            return None  # a separator begun and left
        return ("e", j)

    def advance(self, state: Any, data: bytes) -> Any:
        phase = state[0]
        if phase == "a":
            nxt = self.inner.advance(state[1], data)
            return None if nxt is None else ("a", nxt)
        if phase == "t":
            return self._think(state[1], data, state[2])
        if phase == "e":
            return self._gap(state[1], data)
        begin = self._begin
        assert begin is not None
        if data.startswith(begin):  # (the opening tag's token)
            return self._think(0, data[len(begin) :], 0)
        return self._answer(data)  # no think block: the answer straight away

    def cached_token_mask(self, state: Any) -> npt.NDArray[np.int32] | None:
        """The answer's cached mask in the answer phase (None elsewhere: computed each time)."""
        return cached_mask_of(self.inner, state[1]) if state[0] == "a" else None

    def token_mask(self, state: Any) -> npt.NDArray[np.int32]:
        phase = state[0]
        if phase == "a":
            mask: npt.NDArray[np.int32] = self.inner.token_mask(state[1])
            return mask
        if phase == "s":  # (the tags' bits: CompiledGrammar)
            first: npt.NDArray[np.int32] = self.inner.token_mask(self.inner.initial_state)
            return first
        if phase == "e":
            return self._gap_mask(state[1])
        full = self._max_think is not None and state[2] >= self._max_think
        return self._think_mask(state[1], full)

    def _gap_mask(self, j: int) -> npt.NDArray[np.int32]:
        """The inner grammar's first tokens (when no separator byte is read yet), with the
        tokens that start with a separator byte checked one by one."""
        hit = self._gap_masks.get(j)
        if hit is not None:
            return hit
        vocab = self.vocab
        first = self._separator[j]
        candidates = vocab.trie.first_byte_of_id == first  # (special ids: 256, never a byte)
        ok = np.zeros(vocab.size, dtype=bool)
        for token in np.flatnonzero(candidates).tolist():  # (a few hundred: one by one)
            ok[token] = self._gap(j, vocab.token_bytes(token)) is not None
        if j == 0:
            inner: npt.NDArray[np.int32] = self.inner.token_mask(self.inner.initial_state)
            mask = (inner & ~pack_bool_mask(candidates)) | pack_bool_mask(ok)
        else:
            mask = pack_bool_mask(ok)
        mask.setflags(write=False)
        self._gap_masks[j] = mask
        return mask

    def _think_mask(self, k: int, full: bool) -> npt.NDArray[np.int32]:
        """Every text token, less those that close a text tag into an answer refused after it;
        once the block is `full` (max_think_tokens), only the tokens that close it or go on
        with a text closing tag byte for byte."""
        hit = self._think_masks.get((k, full))
        if hit is not None:
            return hit
        if self._end_is_token and not full:
            mask = self._text_words
        elif self._end_is_token:  # full: the closing token alone (its bit: CompiledGrammar)
            mask = np.zeros_like(self._text_words)
        else:
            vocab = self.vocab
            end = self._end
            marks = {end[-1], end[0], end[k]}  # a token that can close or go on with the tag
            is_mark = np.zeros(256, dtype=bool)
            is_mark[list(marks)] = True
            marked = vocab.count_bytes(is_mark)[0] > 0
            nonempty = np.diff(vocab.token_table()[1]) > 0
            # tokens without a mark byte: text inside the block (none once it is full); those
            # with one are read one by one
            verdict = nonempty & ~marked if not full else np.zeros(vocab.size, dtype=bool)
            count = 0 if not full else 1 << 40
            for token in np.flatnonzero(marked).tolist():
                verdict[token] = self._think(k, vocab.token_bytes(token), count) is not None
            mask = pack_bool_mask(verdict)
        mask.setflags(write=False)
        self._think_masks[(k, full)] = mask
        return mask

    def shortest_completion(self, state: Any, *, spaced: bool = False) -> bytes | None:
        if state[0] == "a":
            return self.inner_completion(state[1], spaced=spaced)
        rest = self.inner_completion(None, spaced=spaced)
        if rest is None:
            return None
        if state[0] == "s":
            return rest  # answering without a think block is shortest
        if state[0] == "e":
            return rest
        end = self._end
        return end[state[1] :] + rest if not self._end_is_token or state[1] == 0 else None

    def memory_parts(self, known: dict[int, int] | None = None) -> dict[int, int]:
        parts: dict[int, int] = dict(self.inner.memory_parts(known))
        parts[id(self)] = len(self._think_masks) * len(self._text_words) * 4
        return parts

    def to_text(self) -> str:
        writer = getattr(self.inner, "to_text", None)
        inner = writer() if writer is not None else "<constraint>"
        return f"reasoning ::= {self._begin!r}? THINK {self._end!r} answer\nanswer: {inner}"


def _tag_bytes(tag: int | str) -> bytes:
    return token_marker(tag) if isinstance(tag, int) else tag.encode()


def _step(end: bytes, k: int, byte: int) -> int:
    """KMP-style: bytes of `end` matched after `byte`, `k` matched before (short tags: naive)."""
    text = end[:k] + bytes((byte,))
    for size in range(min(len(text), len(end)), 0, -1):
        if text.endswith(end[:size]):
            return size
    return 0
