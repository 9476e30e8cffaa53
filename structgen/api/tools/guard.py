"""The turn guard beside the turn grammar: no repeated call in a run, and an answer closed within
the turn's token budget.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt

from structgen.api.tools.formats import resolve_tool_format
from structgen.api.tools.formats import tool_format as tool_format_of
from structgen.api.tools.spec import (
    DEFAULT_MAX_CALLS_PER_TURN,
    TURN_SCHEMA_OPTIONS,
    ToolChoice,
    ToolLike,
    as_tools,
)
from structgen.api.tools.turn import (
    ToolCall,
    ToolCallRecord,
    _call_key,
    _choice_name,
    _max_calls,
    _name_and_arguments,
    turn_schema,
)
from structgen.compiler import CompiledGrammar, Compiler
from structgen.errors import StructgenError
from structgen.masks import pack_bool_mask, unpack_bitmask, without_tokens
from structgen.schema import SchemaOptions

if TYPE_CHECKING:
    from structgen.api.lm import LM


_CLOSING = frozenset(b" \t\n\r]}")  # what may follow a repeated call: the turn's end
# Tokens an answer may need to end once the budget closes it: from just after a backslash,
# `u` and four hex digits (one byte per token at worst), then `"`, `}` and EOS; plus one.
_ANSWER_RESERVE = 9


class _TurnScan(NamedTuple):
    """Where the output is in the turn's JSON, the calls finished so far, tokens read."""

    stack: bytes = b""  # open containers, b"{" or b"["
    in_string: bool = False
    escape: int = 0  # in a string: 0 none, -1 just after "\", k > 0 hex digits of \u to come
    utf8: int = 0  # continuation bytes of a UTF-8 character still to come
    answer: bool = False  # the string is the answer (a value of the turn object itself)
    after_colon: bool = False  # in the turn object, after a ":" (a value comes next)
    item: bytes = b""  # the text of the call being written (from its "{"), inside one
    seen: frozenset[Any] | None = frozenset()  # keys of the calls made; None: not tracked
    repeated: bool = False  # a call repeated one of them: only the turn's end may follow
    tokens: int = 0  # tokens read (advance calls)

    @property
    def in_answer(self) -> bool:
        return self.in_string and self.answer

    @property
    def clean(self) -> bool:
        """Not inside an escape or a UTF-8 character: a closing quote could come next."""
        return self.escape == 0 and self.utf8 == 0


def _scan(scan: _TurnScan, data: bytes) -> tuple[_TurnScan | None, int]:
    """The scan after `data`, and the offset in `data` just past the end of a call that
    repeated an earlier one (-1: none). None when `data` goes on past such a call with more
    than the turn's closing brackets and whitespace."""
    stack, in_string, escape, utf8, answer, after_colon, item, seen, repeated, tokens = scan
    buffer = bytearray(item)
    in_item = bool(item)
    cut = -1
    for i, byte in enumerate(data):
        if repeated:
            if byte not in _CLOSING:
                return None, cut
            continue
        if in_item:
            buffer.append(byte)
        if in_string:
            if escape == -1:
                escape = 4 if byte == 0x75 else 0  # \uXXXX, or a one-letter escape
            elif escape > 0:
                escape -= 1
            elif utf8:
                utf8 -= 1
            elif byte == 0x5C:  # backslash
                escape = -1
            elif byte == 0x22:
                in_string = answer = False
            elif byte >= 0xC0:
                utf8 = 1 if byte < 0xE0 else 2 if byte < 0xF0 else 3
            continue
        if byte == 0x22:
            in_string = True
            answer = after_colon and stack == b"{"
            after_colon = False
        elif byte == 0x3A:  # ":"
            after_colon = stack == b"{"
        elif byte in b"{[":
            after_colon = False
            stack += bytes((byte,))
            if byte == 0x7B and stack == b"{[{":  # a call opens in the tool_calls list
                buffer = bytearray(b"{")
                in_item = True
        elif byte in b"}]":
            stack = stack[:-1]
            if in_item and stack == b"{[":  # the call is complete
                in_item = False
                key = _parsed_call_key(bytes(buffer))
                buffer = bytearray()
                if key is None or seen is None:
                    continue
                if key in seen:
                    repeated = True
                    cut = i + 1
                else:
                    seen = seen | {key}
    text = bytes(buffer) if in_item else b""
    scanned = _TurnScan(
        stack, in_string, escape, utf8, answer, after_colon, text, seen, repeated, tokens
    )
    return scanned, cut


def _parsed_call_key(text: bytes) -> tuple[str, Any] | None:
    try:
        call = json.loads(text)
    except ValueError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    return _call_key(call["name"], call.get("arguments", {}))


class _TokenGroups:
    """Per vocabulary: tokens that can end a call (they hold a "}"), tokens that are only
    closing brackets and whitespace (what may follow a repeated call), and tokens that close
    a string and then only that (`"`, `"}`, ...: how an answer ends)."""

    def __init__(self, vocab: Any) -> None:
        # Over the vocabulary's bytes as arrays (a loop over 128k tokens took ~150 ms of the
        # first guard per vocabulary)
        is_closing = np.zeros(256, dtype=bool)
        is_closing[list(_CLOSING)] = True
        is_brace = np.zeros(256, dtype=bool)
        is_brace[0x7D] = True
        others, brace_count = vocab.count_bytes(~is_closing, is_brace)  # (others: not closing)
        nonempty = np.diff(vocab.token_table()[1]) > 0
        braces = brace_count > 0
        closing = nonempty & (others == 0)
        # (the quote itself is the one other byte; special ids have no first byte: 256)
        quote = (vocab.trie.first_byte_of_id == 0x22) & (others == 1)
        self.braces = pack_bool_mask(braces)
        self.closing = pack_bool_mask(closing)
        self.quote = pack_bool_mask(quote)


_GROUPS: dict[str, _TokenGroups] = {}


class _TurnGuard:
    """A turn grammar's engine whose states also carry a `_TurnScan`, for two rules no JSON
    Schema states:

    - no repeated call (with `seen`, the keys of the calls made before the turn): a token that
      finishes a call equal to an earlier one is allowed only when nothing but the turn's end
      follows it in the token, and after it only the turn's end is (a looping model is
      stopped at once, never steered into a near copy of the call);
    - the answer ends within `budget` tokens: once the tokens left could only just close it,
      the answer string is closed (from inside an escape or a UTF-8 character, after one more
      token that finishes it). Tokens are counted as `advance` calls, one per token.
    """

    def __init__(
        self, inner: CompiledGrammar, seen: frozenset[Any] | None, budget: int | None
    ) -> None:
        self.inner = inner
        self.vocab = inner.vocab
        self.seen = seen
        self.budget = budget
        groups = _GROUPS.get(inner.vocab.fingerprint)
        if groups is None:
            groups = _GROUPS.setdefault(inner.vocab.fingerprint, _TokenGroups(inner.vocab))
        self.groups = groups
        repeats = "allowed" if seen is None else json.dumps(sorted(repr(k) for k in seen))
        self.fingerprint = f"{inner.fingerprint}:turn-guard:{repeats}:{budget}"

    def memory_parts(self, known: dict[int, int] | None = None) -> dict[int, int]:
        return self.inner.memory_parts(known)

    @property
    def initial_state(self) -> tuple[Any, _TurnScan]:
        return (self.inner.initial_state, _TurnScan(seen=self.seen))

    def advance(self, state: tuple[Any, _TurnScan], data: bytes) -> Any:
        if self._closing(state[1]) and not self._closes(state, data):
            return None
        scan, _ = _scan(state[1], data)
        if scan is None:
            return None
        inner = self.inner.advance(state[0], data)
        if inner is None:
            return None
        return (inner, scan._replace(tokens=scan.tokens + 1))

    def is_accepting(self, state: tuple[Any, _TurnScan]) -> bool:
        return bool(self.inner.is_accepting(state[0]))

    def shortest_completion(
        self, state: tuple[Any, _TurnScan], *, spaced: bool = False
    ) -> bytes | None:
        """The turn grammar's proposal (the planner checks it against the guard)."""
        return self.inner.shortest_completion(state[0], spaced=spaced)

    def token_mask(self, state: tuple[Any, _TurnScan]) -> npt.NDArray[np.int32]:
        mask = self.inner.token_mask(state[0])
        scan = state[1]
        if scan.repeated:
            return mask & self.groups.closing
        if self._closing(scan):
            return self._closing_answer(mask, scan)
        if scan.in_answer:
            return mask
        if not scan.seen or not scan.item:
            return mask  # no earlier call, or not inside a call: nothing can repeat here
        return self._refuse(mask, mask & self.groups.braces, scan)

    def _closing(self, scan: _TurnScan) -> bool:
        """In the answer, with no more tokens left than closing it may take."""
        budget = self.budget
        return budget is not None and scan.in_answer and budget - scan.tokens <= _ANSWER_RESERVE

    def _closes(self, state: tuple[Any, _TurnScan], data: bytes) -> bool:
        """What `_closing_answer` allows, for one token's bytes (`advance` agrees with masks)."""
        scan = state[1]
        if not scan.clean:
            return _only_finishes(scan, data)
        if self.inner.advance(state[0], b'"') is None:
            return True  # the answer cannot end here (a \u surrogate pair must go on)
        return data[:1] == b'"' and all(byte in _CLOSING for byte in data[1:])

    def _closing_answer(
        self, mask: npt.NDArray[np.int32], scan: _TurnScan
    ) -> npt.NDArray[np.int32]:
        """Close the answer: a quote now, or tokens that only finish the escape or the UTF-8
        character the answer is inside of (nothing new after it)."""
        if scan.clean:
            closed = mask & self.groups.quote
            return closed if closed.any() else mask  # (a \u surrogate pair must go on)
        keep = [
            int(t)
            for t in np.flatnonzero(unpack_bitmask(mask, self.vocab.size))
            if _only_finishes(scan, self.vocab.token_bytes(int(t)))
        ]
        if not keep:
            return mask
        allowed = np.zeros(self.vocab.size, dtype=bool)
        allowed[keep] = True
        narrowed: npt.NDArray[np.int32] = mask & pack_bool_mask(allowed)
        return narrowed

    def _refuse(
        self, mask: npt.NDArray[np.int32], words: npt.NDArray[np.int32], scan: _TurnScan
    ) -> npt.NDArray[np.int32]:
        """The mask without the tokens among `words` that go on past a repeated call."""
        if not words.any():
            return mask
        refused = [
            int(t)
            for t in np.flatnonzero(unpack_bitmask(words, self.vocab.size))
            if _scan(scan, self.vocab.token_bytes(int(t)))[0] is None
        ]
        if not refused:
            return mask
        return without_tokens(mask, refused)

    def forced_bytes(self, state: tuple[Any, _TurnScan], limit: int = 4096) -> bytes:
        inner, scan = state
        if scan.repeated:  # the turn's end, byte by byte while only one closing byte fits
            out = bytearray()
            while len(out) < limit and not self.inner.is_accepting(inner):
                fits = [b for b in _CLOSING if self.inner.advance(inner, bytes((b,))) is not None]
                if len(fits) != 1:
                    break
                out.append(fits[0])
                inner = self.inner.advance(inner, bytes(out[-1:]))
            return bytes(out)
        forced = self.inner.forced_bytes(inner, limit)
        if forced and scan.seen:
            _, cut = _scan(scan, forced)
            if cut >= 0:
                return forced[:cut]  # up to the repeated call's end; the turn's end follows
        return forced


def _only_finishes(scan: _TurnScan, data: bytes) -> bool:
    """Whether `data` stays inside the escape or character `scan` is in, or ends with it."""
    for i in range(len(data)):
        after, _ = _scan(scan, data[: i + 1])
        if after is None:
            return False
        if after.clean:
            return i == len(data) - 1
    return True


class _GuardedGrammar(CompiledGrammar):
    """A turn grammar with the turn guard; pickles as the grammar it wraps."""

    __slots__ = ("_budget", "_inner", "_seen")
    _inner: CompiledGrammar
    _seen: frozenset[Any] | None
    _budget: int | None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (_guarded_turn, (self._inner, self._seen, self._budget))


@lru_cache(maxsize=64)
def _guarded_turn(
    inner: CompiledGrammar, seen: frozenset[Any] | None, budget: int | None
) -> CompiledGrammar:
    guarded = _GuardedGrammar(
        inner.vocab, _TurnGuard(inner, seen, budget), kind=inner.kind, source=inner.source
    )
    guarded._inner = inner
    guarded._seen = seen
    guarded._budget = budget
    return guarded


def tool_call_grammar(
    lm_or_compiler: LM | Compiler,
    tools: Sequence[ToolLike],
    tool_choice: ToolChoice = "auto",
    *,
    parallel_tool_calls: bool | int = True,
    max_answer_chars: int | None = None,
    options: SchemaOptions | None = None,
    max_calls_per_turn: int | None = DEFAULT_MAX_CALLS_PER_TURN,
    allow_repeated_calls: bool = False,
    earlier_calls: Iterable[ToolCall | ToolCallRecord | tuple[str, Mapping[str, Any]]] = (),
    max_new_tokens: int | None = None,
    tool_format: str = "auto",
    reasoning: bool = False,
    max_think_tokens: int | None = None,
) -> CompiledGrammar:
    """The compiled constraint of one turn, for your own loop or a `LogitsProcessor`.

    `tool_format`: the calls as the model family writes them ("hermes", "llama3_json",
    "mistral", "deepseek_v3", "harmony"; `formats.py`), structgen's JSON turn ("json"), or
    "auto": the format of the LM's chat template (`detect_tool_format`; "json" when given a
    `Compiler` or a template without tools). Native formats keep `tool_choice` and the call
    limit exact in the grammar; repeated calls are dropped when the turn is parsed
    (`ToolFormat.parse`), and `max_answer_chars` / `max_new_tokens` apply to the JSON turn only.
    `reasoning`: a free think block first — the family's own (Harmony's analysis message) or
    `<think>…</think>` (`Compiler.reasoning`); `max_think_tokens` bounds a `<think>` block
    (Harmony's analysis message has no such bound: `StructgenError`).

    The turn schema is compiled through the compiler's cache, so each (tool set, choice) is
    compiled once. `options` defaults to `TURN_SCHEMA_OPTIONS` (compact JSON: no whitespace
    between tokens). Unless `allow_repeated_calls`, a guard closes the turn as soon as a call
    repeats an earlier one of the turn or one of `earlier_calls` (the calls already made, as
    `ToolCall`s, records or `(name, arguments)` pairs): the text then ends with that one
    repeat, which `parse_tool_turn` drops. With `max_new_tokens` (the turn's token budget, as
    given to the generation), an answer is closed in time to end within it.
    """
    compiler = lm_or_compiler if isinstance(lm_or_compiler, Compiler) else lm_or_compiler.compiler
    chosen = resolve_tool_format(lm_or_compiler, tool_format)
    if chosen != "json":
        if max_answer_chars is not None:
            raise StructgenError(
                f"max_answer_chars applies to the JSON turn; the {chosen!r} format has none"
            )
        tool_list = as_tools(tools)
        return tool_format_of(chosen).grammar(
            compiler,
            tool_list,
            _choice_name(tool_choice, tool_list),
            _max_calls(parallel_tool_calls, max_calls_per_turn),
            options,
            reasoning=reasoning,
            max_think_tokens=max_think_tokens,
        )
    schema = turn_schema(
        tools,
        tool_choice,
        parallel_tool_calls=parallel_tool_calls,
        max_answer_chars=max_answer_chars,
        max_calls_per_turn=max_calls_per_turn,
    )
    compiled = compiler.json_schema(schema, options=options or TURN_SCHEMA_OPTIONS)
    tool_list = as_tools(tools)
    seen: frozenset[Any] | None = None
    if not allow_repeated_calls and tool_list and _choice_name(tool_choice, tool_list) != "none":
        seen = frozenset(_call_key(*_name_and_arguments(c)) for c in earlier_calls)
    if max_new_tokens is not None and (
        isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int)
    ):
        raise StructgenError(f"max_new_tokens must be an integer, got {max_new_tokens!r}")
    if seen is not None or max_new_tokens is not None:
        compiled = _guarded_turn(compiled, seen, max_new_tokens)
    # the turn (and its guard) after a <think> block
    if not reasoning:
        return compiled
    if isinstance(lm_or_compiler, Compiler):
        return compiler.reasoning(compiled, max_think_tokens=max_think_tokens)
    return compiler.reasoning(
        compiled, max_think_tokens=max_think_tokens, style=lm_or_compiler.reasoning_style
    )
