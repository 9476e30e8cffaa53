"""`UniqueItemsEngine`: the `uniqueItems` guard, run beside a schema's grammar engine.

Its states pair the grammar's state with a `JsonTracker` that follows the output's JSON
structure, knows which arrays must be unique (`UniqueArray`s, from the schema frontend's
`find_unique_arrays`) and what their finished items were, and refuses a token that finishes a
repeated item (or an integer item `0` that can no longer differ). Masks are the grammar's, minus
those tokens: only tokens that can finish an item are checked. See docs/design/json-schema.md
(uniqueItems).
"""

from __future__ import annotations

import bisect
import json
from decimal import Decimal
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from structgen._json_spelling import MANY_LITERALS, MAX_TRIE_WORD, SHORT_ESCAPES, canonical_text
from structgen.masks import pack_bool_mask, unpack_bitmask, without_tokens

__all__ = ["JsonTracker", "Pattern", "UniqueArray", "UniqueItemsEngine"]

# Path elements: ("k", name) one key, ("x", names) any other key, ("i",) any index.
Element = tuple[Any, ...]
Pattern = tuple[Element, ...]


class UniqueArray(NamedTuple):
    """An array that must hold distinct items: where it is, and what its items are."""

    path: Pattern
    kind: str  # "string", "integer", "number", or "enum" (strings from `values`)
    values: frozenset[str] = frozenset()
    canonical: bool = False  # the grammar spells strings one way only (generate mode)


_ZERO = Decimal(0)


# ----------------------------------------------------------------------------- the tracker


def _matches(pattern: Pattern, path: tuple[Any, ...]) -> bool:
    if len(pattern) != len(path):
        return False
    for element, step in zip(pattern, path):
        tag = element[0]
        if tag == "i":
            if step is not None:
                return False
        elif step is None:
            return False
        elif tag == "k":
            if step != element[1]:
                return False
        elif tag == "x":
            if step in element[1]:
                return False
        else:
            return False
    return True


_NUMBER_BYTES = frozenset(b"0123456789+-.eE")
_SPACE = frozenset(b" \t\r\n")


class JsonTracker:
    """Follows a JSON text being written (assumed valid: the grammar sees to that), keeping
    the finished items of every unique array open at the moment.

    Immutable from the outside: `feed` returns a new tracker, or None when the bytes finish an
    item equal to an earlier one of its unique array (or leave an integer item `0` that cannot
    grow and is taken)."""

    __slots__ = ("scalar", "stack")

    def __init__(self, stack: tuple[Any, ...] = (), scalar: tuple[int, bytes] | None = None):
        # frames: ("o", key or None, a key comes next) / ("a", UniqueArray or None, finished
        # items, an item comes next)
        self.stack = stack
        self.scalar = scalar  # (first byte, bytes so far) of a string or number being written

    def unique_frame(self) -> tuple[Any, ...] | None:
        """The unique array whose items are being written now (innermost frame), if any:
        `("a", UniqueArray, finished items, an item must come next)`."""
        if self.stack and self.stack[-1][0] == "a" and self.stack[-1][1] is not None:
            frame: tuple[Any, ...] = self.stack[-1]
            return frame
        return None

    def feed(self, data: bytes, arrays: tuple[UniqueArray, ...]) -> JsonTracker | None:
        stack = list(self.stack)
        scalar = self.scalar
        for byte in data:
            if scalar is not None:
                first, text = scalar
                if first == 0x22:  # a string
                    if byte == 0x22 and not _escaped(text):
                        if not _finish(stack, ("s", _decode(text))):
                            return None
                        scalar = None
                    else:
                        scalar = (first, text + bytes((byte,)))
                    continue
                if byte in _NUMBER_BYTES or 0x61 <= byte <= 0x7A:
                    scalar = (first, text + bytes((byte,)))
                    continue
                if not _finish(stack, _number_value(text)):
                    return None
                scalar = None
            if byte in _SPACE:
                continue
            if byte == 0x7B:  # {
                stack.append(("o", None, True))
            elif byte == 0x5B:  # [
                path = tuple(_step(frame) for frame in stack)
                array = next((a for a in arrays if _matches(a.path, path)), None)
                stack.append(("a", array, frozenset(), True))
            elif byte in (0x7D, 0x5D):  # } ]
                stack.pop()
                _finish(stack, None)
            elif byte == 0x2C:  # ,
                if stack and stack[-1][0] == "o":
                    stack[-1] = ("o", None, True)
                elif stack:
                    frame = stack[-1]
                    stack[-1] = ("a", frame[1], frame[2], True)  # an item must follow
            elif byte == 0x3A:  # :
                pass
            else:
                scalar = (byte, b"" if byte == 0x22 else bytes((byte,)))
        out = JsonTracker(tuple(stack), scalar)
        frame = out.unique_frame()
        if frame is None:
            return out
        array, seen = frame[1], frame[2]
        if array.kind == "integer":
            zero = scalar is not None and scalar[0] != 0x22 and scalar[1] in (b"0", b"-0")
            if zero and ("n", _ZERO) in seen:
                return None  # an integer item 0 cannot grow into another value
        elif array.kind == "enum":
            if scalar is not None:
                if scalar[0] == 0x22 and not _could_finish(scalar[1], array, seen):
                    return None  # the item can only end as one already there
            elif frame[3] and len(seen) >= len(array.values):
                return None  # an item must follow, and every value is taken
        return out


def _could_finish(body: bytes, array: UniqueArray, seen: frozenset[Any]) -> bool:
    """Whether a string body being written (`body`, raw) can still end as one of `values`.

    The grammar spells the values as `literal_bodies` does: every JSON spelling for an enum of
    at most `MANY_LITERALS` strings, so an unfinished escape can still become any character
    (`\\` any, `\\u` + hex digits those whose code, or high surrogate, starts with them);
    for more, `\\u` only for other than printable ASCII and short escapes only for their own
    characters (`_compact_char`), words over `MAX_TRIE_WORD` characters excepted."""
    compact = len(array.values) > MANY_LITERALS
    if array.canonical:
        return _could_finish_canonical(body, array, seen)
    tail = b""
    if _escaped(body):
        tail, body = b"\\", body[:-1]
    else:
        start = body.rfind(b"\\u")
        if start >= 0 and not _escaped(body[:start]) and len(body) - start < 6:
            tail, body = body[start:], body[:start]
    try:
        done = _decode(body)
    except ValueError:
        return False  # not decodable (never for the grammar's output): refuse, never loosen
    pending = ""  # a high surrogate still waiting for its low half
    if done and 0xD800 <= ord(done[-1]) <= 0xDBFF:
        pending, done = done[-1], done[:-1]
    ordered = _sorted(array.values)
    for i in range(bisect.bisect_left(ordered, done), len(ordered)):
        value = ordered[i]
        if not value.startswith(done):
            break  # (sorted: the values starting with `done` are one run)
        if ("s", value) in seen:
            continue
        rest = value[len(done) :]
        short_only = compact and len(value) <= MAX_TRIE_WORD
        if pending:  # the next character is the pair's: its low half comes (or is coming)
            if not rest or ord(rest[0]) <= 0xFFFF or _high(rest[0]) != ord(pending):
                continue
            low = 0xDC00 + ((ord(rest[0]) - 0x10000) & 0x3FF)
            if not tail or f"{low:04x}".startswith(tail[2:].decode("ascii").lower()):
                return True
            continue
        if not tail:
            return True
        if not rest:
            continue
        cp = ord(rest[0])
        as_unicode = not short_only or cp >= 0x7F or (cp < 0x20 and cp not in SHORT_ESCAPES)
        if tail == b"\\":
            if as_unicode or cp in SHORT_ESCAPES:
                return True
            continue
        if not as_unicode:
            continue
        code = cp if cp <= 0xFFFF else _high(rest[0])
        if f"{code:04x}".startswith(tail[2:].decode("ascii").lower()):
            return True
    return False


def _could_finish_canonical(body: bytes, array: UniqueArray, seen: frozenset[Any]) -> bool:
    """`_could_finish` for a grammar that spells each value as json.dumps(ensure_ascii=False)
    does: the body is a prefix of the canonical spelling of some value not yet taken."""
    bodies, values = _canonical_sorted(array.values)
    for i in range(bisect.bisect_left(bodies, body), len(bodies)):
        if not bodies[i].startswith(body):
            break  # (sorted: the bodies starting with `body` are one run)
        if ("s", values[i]) not in seen:
            return True
    return False


@lru_cache(maxsize=256)
def _canonical_sorted(values: frozenset[str]) -> tuple[tuple[bytes, ...], tuple[str, ...]]:
    """The values' canonical bodies (UTF-8), sorted, beside the values they spell."""
    pairs = sorted((canonical_text(v).encode("utf-8", "surrogatepass"), v) for v in values)
    return tuple(b for b, _ in pairs), tuple(v for _, v in pairs)


@lru_cache(maxsize=256)
def _sorted(values: frozenset[str]) -> tuple[str, ...]:
    return tuple(sorted(values))


def _high(ch: str) -> int:
    return 0xD800 + ((ord(ch) - 0x10000) >> 10)


def _step(frame: tuple[Any, ...]) -> Any:
    return frame[1] if frame[0] == "o" else None


def _escaped(text: bytes) -> bool:
    """Whether the next character of a string body ending in `text` is escaped."""
    count = len(text) - len(text.rstrip(b"\\"))
    return count % 2 == 1


def _decode(body: bytes) -> str:
    value: str = json.loads(b'"' + body + b'"')
    return value


def _number_value(text: bytes) -> tuple[str, Any]:
    if text in (b"true", b"false", b"null"):
        return ("l", text)
    # Decimals compare and hash by value (1 = 1.0 = 1e0) without expanding the exponent, which
    # a Fraction of "1e-99999999" would (a model may write any exponent)
    return ("n", Decimal(text.decode("ascii")))


def _finish(stack: list[Any], value: tuple[str, Any] | None) -> bool:
    """A value ended (`None`: a container): record it in its parent; False for a repeat."""
    if not stack:
        return True
    frame = stack[-1]
    if frame[0] == "o":
        if frame[2] and value is not None and value[0] == "s":
            stack[-1] = ("o", value[1], False)  # that string was a key
        return True
    array, items = frame[1], frame[2]
    if array is None or value is None:
        stack[-1] = ("a", array, items, False)
        return True
    if value in items:
        return False
    stack[-1] = ("a", array, items | {value}, False)
    return True


# ----------------------------------------------------------------------------- the engine


class _TokenGroups:
    """Per vocabulary: the tokens that can finish an item (checked against a mask)."""

    def __init__(self, vocab: Any) -> None:
        # Vectorised over the vocabulary's concatenated bytes (a loop over 128k tokens took
        # half a second of the first compile with `uniqueItems`).
        n = vocab.size
        blob, offsets = vocab.token_table()
        data = np.frombuffer(blob, dtype=np.uint8)
        owner = np.repeat(np.arange(n), np.diff(offsets))  # the token of each byte
        in_number = np.zeros(256, dtype=bool)
        in_number[list(_NUMBER_BYTES)] = True
        is_digit = (data >= 0x30) & (data <= 0x39)

        def count(where: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
            return np.bincount(owner[where], minlength=n)

        quotes = count(data == 0x22)
        # a digit, and later in the token a byte a number cannot continue with (the owners of
        # the bytes ascend: each token's first and last such byte is where its owner changes,
        # with no sort — two `np.unique` sorts were ~30 ms of the first such compile)
        first_digit = np.full(n, len(data), dtype=np.int64)
        at = np.flatnonzero(is_digit)
        tokens = owner[at]
        first = np.ones(len(at), dtype=bool)
        first[1:] = tokens[1:] != tokens[:-1]
        first_digit[tokens[first]] = at[first]
        stops = ~in_number[data]
        last_stop = np.full(n, -1, dtype=np.int64)
        at = np.flatnonzero(stops)
        tokens = owner[at]
        last = np.ones(len(at), dtype=bool)
        last[:-1] = tokens[1:] != tokens[:-1]
        last_stop[tokens[last]] = at[last]
        self.quote = pack_bool_mask(quotes > 0)
        self.ends_number = pack_bool_mask(count(stops) > 0)
        self.item_start = pack_bool_mask((quotes > 1) | (first_digit < last_stop))
        self.zero = pack_bool_mask(count(data == 0x30) > 0)


_GROUPS: dict[str, _TokenGroups] = {}


def _path_text(path: Pattern) -> str:
    """An instance-path pattern as text: `/key`, `/*` (any other key), `/[]` (any index)."""
    steps = []
    for element in path:
        if element[0] == "k":
            steps.append(f"/{element[1]}")
        elif element[0] == "x":
            steps.append("/*")
        else:
            steps.append("/[]")
    return "".join(steps) or "/"


class UniqueItemsEngine:
    """A grammar engine whose states also carry a `JsonTracker` (see the module docstring)."""

    def __init__(self, inner: Any, vocab: Any, arrays: tuple[UniqueArray, ...]) -> None:
        self.inner = inner
        self.vocab = vocab
        self.arrays = arrays
        groups = _GROUPS.get(vocab.fingerprint)
        if groups is None:
            groups = _GROUPS.setdefault(vocab.fingerprint, _TokenGroups(vocab))
        self.groups = groups
        self.fingerprint = f"{inner.fingerprint}:unique:{arrays!r}"

    def memory_parts(self, known: dict[int, int] | None = None) -> dict[int, int]:
        parts: dict[int, int] = self.inner.memory_parts(known)
        return parts

    def to_text(self) -> str:
        inner: str = self.inner.to_text()
        lines = [f"%unique {a.kind} items at {_path_text(a.path)}" for a in self.arrays]
        return "\n".join([inner, *lines])

    @property
    def initial_state(self) -> tuple[Any, JsonTracker]:
        return (self.inner.initial_state, JsonTracker())

    def advance(self, state: tuple[Any, JsonTracker], data: bytes) -> Any:
        inner = self.inner.advance(state[0], data)
        if inner is None:
            return None
        tracker = state[1].feed(data, self.arrays)
        if tracker is None:
            return None
        return (inner, tracker)

    def is_accepting(self, state: tuple[Any, JsonTracker]) -> bool:
        return bool(self.inner.is_accepting(state[0]))

    def shortest_completion(
        self, state: tuple[Any, JsonTracker], *, spaced: bool = False
    ) -> bytes | None:
        """The inner grammar's proposal (it may repeat an item: the planner checks it)."""
        found: bytes | None = self.inner.shortest_completion(state[0], spaced=spaced)
        return found

    def token_mask(self, state: tuple[Any, JsonTracker]) -> npt.NDArray[np.int32]:
        mask: npt.NDArray[np.int32] = self.inner.token_mask(state[0])
        tracker = state[1]
        frame = tracker.unique_frame()
        if frame is None:
            return mask
        groups = self.groups
        scalar = tracker.scalar
        kind = frame[1].kind
        if kind == "enum":
            words = mask  # any token may leave only taken values to finish with
        else:
            if scalar is None:
                candidates = groups.item_start
            elif scalar[0] == 0x22:
                candidates = groups.quote
            else:
                candidates = groups.ends_number
            if kind == "integer" and ("n", _ZERO) in frame[2]:
                candidates = candidates | groups.zero
            words = mask & candidates
        if not words.any():
            return mask
        refused = [
            int(t)
            for t in np.flatnonzero(unpack_bitmask(words, self.vocab.size))
            if tracker.feed(self.vocab.token_bytes(int(t)), self.arrays) is None
        ]
        if not refused:
            return mask
        out = without_tokens(mask, refused)
        out.setflags(write=False)
        return out

    def forced_bytes(self, state: tuple[Any, JsonTracker], limit: int = 4096) -> bytes:
        forced: bytes = self.inner.forced_bytes(state[0], limit)
        if forced and state[1].feed(forced, self.arrays) is None:
            return b""  # never force bytes that finish a repeat (the mask refuses them)
        return forced
