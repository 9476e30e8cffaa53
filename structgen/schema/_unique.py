"""`uniqueItems`: no grammar can say "no two items are equal", so a guard beside the grammar does
(`structgen.engines.unique_items`); this frontend decides where it applies.

`find_unique_arrays` decides, before compiling, whether every `uniqueItems: true` of a schema can
be enforced exactly, and where the arrays are (instance-path patterns). The cases enforced:
arrays reached from the root through `properties`, `items`, `additionalProperties`, `allOf` and
non-recursive `$ref` only, whose items are plain strings, integers or numbers — languages so
open that a partial item can always be finished without repeating an earlier one (the one
exception, the integer `0`, which cannot grow, is handled) — or strings from an `enum`, where
the tracker also checks that some value not yet taken can still be written. Anything else that
constrains such an array or its items (a `maxLength`, a combinator at the same place) makes the
schema unsupported as before: a finite item language could run out of new values mid-array.
See docs/design/json-schema.md (uniqueItems).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from structgen.engines.unique_items import Pattern, UniqueArray

__all__ = ["UniqueArray", "find_unique_arrays"]

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
    return {k for k in schema if k in known}  # (annotations are never in `known`)


def find_unique_arrays(compiler: Any, known: frozenset[str]) -> tuple[UniqueArray, ...] | None:
    """The arrays that must be unique (empty: none), or None when some `uniqueItems` cannot be
    enforced exactly (the compiler then refuses it, or relaxes it in lenient mode).

    `compiler` resolves `$ref`s (`resolve`, `child`); `known` is the set of keywords the
    compiler acts on (the others are annotations to it)."""
    root = compiler.root
    if not _has_unique(root):
        return ()
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

    complete = visit(compiler.root_sub(), (), True, ())
    visit = None  # type: ignore[assignment]  # (it refers to itself and the compiler: a cycle)
    if not complete:
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
