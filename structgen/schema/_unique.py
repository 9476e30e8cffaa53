"""`uniqueItems`: no grammar can say "no two items are equal", so a guard beside the grammar does.

`find_unique_arrays` decides, before compiling, whether every `uniqueItems: true` of a schema can
be enforced exactly, and where the arrays are (instance-path patterns). The cases enforced:
arrays reached from the root through `properties`, `items`, `additionalProperties`, `allOf` and
non-recursive `$ref` only, whose items are plain strings, integers or numbers — languages so
open that a partial item can always be finished without repeating an earlier one (the one
exception, the integer `0`, which cannot grow, is handled) — or strings from an `enum`, where
the tracker also checks that some value not yet taken can still be written. Anything else that
constrains such an array or its items (a `maxLength`, a combinator at the same place) makes the
schema unsupported as before: a finite item language could run out of new values mid-array.

`UniqueItemsEngine` wraps the grammar engine: its states pair the grammar's state with a
`JsonTracker` that follows the output's JSON structure, knows which arrays must be unique and
what their finished items were, and refuses a token that finishes a repeated item (or an
integer item `0` that can no longer differ). Masks are the grammar's, minus those tokens: only
tokens that can finish an item are checked. See docs/design/json-schema.md (uniqueItems).
"""

from __future__ import annotations

import bisect
import json
import re
from decimal import Decimal
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from structgen.masks import pack_bool_mask, unpack_bitmask, without_tokens
from structgen.schema._strings import (
    _MAX_TRIE_WORD,
    _SHORT_ESCAPES,
    MANY_LITERALS,
    canonical_text,
)

__all__ = ["JsonTracker", "UniqueArray", "UniqueItemsEngine", "find_unique_arrays"]

# Path elements: ("k", name) one key, ("x", names) any other key, ("i",) any index.
Element = tuple[Any, ...]
Pattern = tuple[Element, ...]


class UniqueArray(NamedTuple):
    """An array that must hold distinct items: where it is, and what its items are."""

    path: Pattern
    kind: str  # "string", "integer", "number", or "enum" (strings from `values`)
    values: frozenset[str] = frozenset()
    canonical: bool = False  # the grammar spells strings one way only (generate mode)


# Keywords that only annotate (or that the schema compiler ignores): harmless anywhere.
_ANNOTATIONS = frozenset(
    {
        "$schema", "$id", "$comment", "$defs", "definitions", "title", "description",
        "default", "examples", "deprecated", "readOnly", "writeOnly", "$anchor",
        "contentMediaType", "contentEncoding", "markdownDescription",
    }
)  # fmt: skip
_ARRAY_KEYS = frozenset({"type", "items", "uniqueItems", "minItems", "maxItems", "$ref", "allOf"})
_ITEM_KEYS = {
    "string": frozenset({"type", "minLength"}),
    # a lower bound of 0 or more keeps numbers open: any item can still grow into a new value
    # (digits appended), except the integer 0; a negative bound or an upper one could close them
    "integer": frozenset({"type", "minimum", "exclusiveMinimum"}),
    "number": frozenset({"type", "minimum", "exclusiveMinimum"}),
}
_MAX_VISITS = 20_000
_ZERO = Decimal(0)


def _has_unique(node: Any) -> bool:
    if isinstance(node, dict):
        if node.get("uniqueItems") is True:
            return True
        return any(_has_unique(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_unique(v) for v in node)
    return False


def _overlap(a: Pattern, b: Pattern) -> bool:
    """Whether some instance location matches both patterns."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x[0] == "i" or y[0] == "i":
            if x[0] != y[0]:
                return False
            continue
        if x[0] == "k" and y[0] == "k" and x[1] != y[1]:
            return False
        if x[0] == "k" and y[0] == "x" and x[1] in y[1]:
            return False
        if x[0] == "x" and y[0] == "k" and y[1] in x[1]:
            return False
    return True


def _constraint_keys(schema: dict[str, Any], known: frozenset[str]) -> set[str]:
    return {k for k in schema if k in known and k not in _ANNOTATIONS}


def find_unique_arrays(compiler: Any, known: frozenset[str]) -> tuple[UniqueArray, ...] | None:
    """The arrays that must be unique (empty: none), or None when some `uniqueItems` cannot be
    enforced exactly (the compiler then refuses it, or relaxes it in lenient mode).

    `compiler` resolves `$ref`s (`resolve`, `child`); `known` is the set of keywords the
    compiler acts on (the others are annotations to it)."""
    root = compiler.root
    if not _has_unique(root):
        return ()
    from structgen.schema._compiler import _Sub

    seen: list[tuple[Pattern, dict[str, Any], bool]] = []  # (path, schema, plain context)
    found: list[tuple[Pattern, Any, tuple[str, ...]]] = []  # (path, unique array's sub, stack)
    recursive: set[str] = set()
    item_schemas: set[int] = set()  # the items schemas `_item_kind` read
    visits = 0

    def visit(sub: Any, path: Pattern, plain: bool, stack: tuple[str, ...]) -> bool:
        nonlocal visits
        visits += 1
        if visits > _MAX_VISITS:
            return False
        s = sub.schema
        if not isinstance(s, dict):
            return True
        if sub.ptr in stack:
            recursive.add(sub.ptr)
            return True
        stack = (*stack, sub.ptr)
        seen.append((path, s, plain))
        if s.get("uniqueItems") is True:
            hi = s.get("maxItems")
            if not (isinstance(hi, int) and hi <= 1):
                found.append((path, sub, stack))
        children: list[tuple[Any, Pattern, bool]] = []
        for key, value in s.items():
            if key not in known:
                continue
            if key == "$ref":
                try:
                    children.append((compiler.resolve(value, sub), path, plain))
                except Exception:
                    return False
            elif key == "properties" and isinstance(value, dict):
                for name, v in value.items():
                    children.append(
                        (compiler.child(sub, v, key, name), (*path, ("k", name)), plain)
                    )
            elif key == "additionalProperties":
                names = frozenset(s.get("properties") or {})
                ok = plain and not s.get("patternProperties")
                children.append((compiler.child(sub, value, key), (*path, ("x", names)), ok))
            elif key == "patternProperties" and isinstance(value, dict):
                for pat, v in value.items():
                    child = compiler.child(sub, v, key, pat)
                    children.append((child, (*path, ("x", frozenset())), False))
            elif key == "items":
                if isinstance(value, list):
                    for i, v in enumerate(value):
                        children.append((compiler.child(sub, v, key, i), (*path, ("i",)), False))
                else:
                    ok = plain and "prefixItems" not in s
                    children.append((compiler.child(sub, value, key), (*path, ("i",)), ok))
            elif key == "prefixItems" and isinstance(value, list):
                for i, v in enumerate(value):
                    children.append((compiler.child(sub, v, key, i), (*path, ("i",)), False))
            elif key in ("additionalItems", "contains", "unevaluatedItems"):
                children.append((compiler.child(sub, value, key), (*path, ("i",)), False))
            elif key == "unevaluatedProperties":
                children.append(
                    (compiler.child(sub, value, key), (*path, ("x", frozenset())), False)
                )
            elif key == "allOf" and isinstance(value, list):
                for i, v in enumerate(value):
                    children.append((compiler.child(sub, v, key, i), path, plain))
            elif key in ("anyOf", "oneOf") and isinstance(value, list):
                for i, v in enumerate(value):
                    children.append((compiler.child(sub, v, key, i), path, False))
            elif key in ("not", "if", "then", "else"):
                children.append((compiler.child(sub, value, key), path, False))
            elif key in ("dependentSchemas", "dependencies") and isinstance(value, dict):
                for name, v in value.items():
                    if isinstance(v, (dict, bool)):
                        children.append((compiler.child(sub, v, key, name), path, False))
            elif key == "propertyNames":
                children.append((compiler.child(sub, value, key), (*path, ("names",)), False))
        return all(visit(child, p, ok, stack) for child, p, ok in children)

    if not visit(_Sub(root, "", compiler.root_base), (), True, ()):
        return None
    out: list[UniqueArray] = []
    for path, sub, stack in found:
        if any(p in recursive for p in stack):
            return None  # inside recursion: the array has endless instance paths
        if not any(s is sub.schema and ok for p, s, ok in seen if p == path):
            return None  # under a combinator, a pattern, a tuple, ...
        kind = _item_kind(compiler, sub, known)
        if kind is None:
            return None
        out.append(UniqueArray(path, kind[0], kind[1], compiler.canonical))
        item_schemas.update(kind[2])
    for array in out:
        for path, schema, plain in seen:
            if _overlap(path, array.path) and not _harmless(schema, plain, known):
                return None
            at_item = len(path) == len(array.path) + 1 and path[-1][0] == "i"
            if (
                at_item
                and _overlap(path[:-1], array.path)
                and not (plain and id(schema) in item_schemas)  # read by `_item_kind`
                and not _harmless_item(schema, plain, array.kind, known)
            ):
                return None
    return tuple(out)


def _item_kind(
    compiler: Any, sub: Any, known: frozenset[str]
) -> tuple[str, frozenset[str], tuple[int, ...]] | None:
    """The item kind (and values, for an enum) of a unique array schema whose items are open
    or a set of strings (None: anything else)."""
    schema = sub.schema
    if _constraint_keys(schema, known) - _ARRAY_KEYS:
        return None
    items = schema.get("items")
    if not isinstance(items, dict):
        return None
    read = [id(items)]  # the items schemas along the chain of references
    item_sub = compiler.child(sub, items, "items")
    for _ in range(16):  # a chain of plain references: `items: {"$ref": ...}`
        if "$ref" not in items or _constraint_keys(items, known) != {"$ref"}:
            break
        try:
            item_sub = compiler.resolve(items["$ref"], item_sub)
        except Exception:
            return None
        items = item_sub.schema
        if not isinstance(items, dict):
            return None
        read.append(id(items))
    kind = items.get("type")
    if isinstance(kind, list) and len(kind) == 1:
        kind = kind[0]
    if "$ref" in items or "allOf" in items:
        return None
    keys = _constraint_keys(items, known)
    if "enum" in keys or "const" in keys:
        # strings from a finite set: enough of them for `minItems` distinct items
        values = items["enum"] if "enum" in items else [items["const"]]
        if (
            keys - {"type", "enum", "const"}
            or kind not in (None, "string")
            or not isinstance(values, list)
            or not all(isinstance(v, str) for v in values)
            or ("const" in items and "enum" in items)
        ):
            return None
        minimum = schema.get("minItems", 0)
        if not isinstance(minimum, int) or minimum > len(set(values)):
            return None
        return ("enum", frozenset(values), tuple(read))
    if not isinstance(kind, str) or kind not in _ITEM_KEYS:
        return None
    if keys - _ITEM_KEYS[kind] or not _open_bounds(items):
        return None
    return (str(kind), frozenset(), tuple(read))


def _open_bounds(schema: dict[str, Any]) -> bool:
    """Whether a number schema's lower bounds keep it open (none below 0: see `_ITEM_KEYS`)."""
    for key in ("minimum", "exclusiveMinimum"):
        value = schema.get(key)
        if value is None or isinstance(value, bool):  # (draft-04's boolean exclusiveMinimum)
            continue
        if not isinstance(value, (int, float)) or value < 0:
            return False
    return True


def _harmless(schema: dict[str, Any], plain: bool, known: frozenset[str]) -> bool:
    """Whether a schema that applies where a unique array may be leaves its items open (its
    `items` are checked where they are visited, at the item path)."""
    keys = _constraint_keys(schema, known)
    if not plain:
        return not keys  # nothing but annotations under a combinator at that place
    return not keys - _ARRAY_KEYS


def _harmless_item(schema: dict[str, Any], plain: bool, kind: str, known: frozenset[str]) -> bool:
    """Whether a schema that applies to a unique array's items keeps them as they were read
    (open-ended, or the one set of strings)."""
    keys = _constraint_keys(schema, known)
    if not keys:
        return True
    if not plain:
        return False  # under a combinator (a `not` could bound a length), or a tuple position
    if not _open_bounds(schema):
        return False
    allowed = (_ITEM_KEYS.get(kind) or frozenset({"type"})) | {"$ref", "allOf"}
    if keys - allowed:
        return False
    kinds = schema.get("type")
    if kinds is None:
        return True
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if kind == "enum":
        return "string" in kinds
    return kind in kinds or (kind == "integer" and "number" in kinds)


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
    characters (`_compact_char`), words over `_MAX_TRIE_WORD` characters excepted."""
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
        short_only = compact and len(value) <= _MAX_TRIE_WORD
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
        as_unicode = not short_only or cp >= 0x7F or (cp < 0x20 and cp not in _SHORT_ESCAPES)
        if tail == b"\\":
            if as_unicode or cp in _SHORT_ESCAPES:
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
        n = vocab.size
        quote = np.zeros(n, dtype=bool)
        two_quotes = np.zeros(n, dtype=bool)
        ends_number = np.zeros(n, dtype=bool)  # a byte a number cannot continue with
        digit_then_end = np.zeros(n, dtype=bool)
        zero = np.zeros(n, dtype=bool)
        finishes = re.compile(rb"[0-9].*[^0-9+\-.eE]", re.DOTALL)  # a digit, later a stop
        number = bytes(sorted(_NUMBER_BYTES))
        for token in range(n):
            data = vocab.token_bytes(token)
            if not data:
                continue
            count = data.count(b'"')
            quote[token] = count > 0
            two_quotes[token] = count > 1
            ends_number[token] = bool(data.translate(None, number))
            digit_then_end[token] = finishes.search(data) is not None
            zero[token] = b"0" in data
        self.quote = pack_bool_mask(quote)
        self.ends_number = pack_bool_mask(ends_number)
        self.item_start = pack_bool_mask(two_quotes | digit_then_end)
        self.zero = pack_bool_mask(zero)


_GROUPS: dict[str, _TokenGroups] = {}


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

    def memory_parts(self) -> dict[int, int]:
        finder = getattr(self.inner, "memory_parts", None)
        return finder() if finder is not None else {}

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
