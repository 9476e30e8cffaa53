"""`$ref` resolution: the subschemas of one document by pointer, `$id` and `$anchor`.

A `Sub` is a subschema with the JSON pointer errors name and the base URI its `$ref`s resolve
against. Only references inside the document resolve (remote ones are refused: inline them in
`$defs`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from structgen._json_data import pointer, unescape_pointer
from structgen.errors import SchemaError, UnsupportedSchemaError

__all__ = ["RefIndex", "Sub"]


class Sub:
    """A subschema with its JSON pointer (for errors) and base URI (for `$ref`). Immutable by
    convention, compared and hashed by value; a plain class, not a frozen dataclass, so that
    mypyc makes it native (a frozen dataclass's `__init__` stays Python: ~0.4 us, and every
    subschema a compile visits makes one)."""

    __slots__ = ("base", "ptr", "schema")

    def __init__(self, schema: Any, ptr: str, base: str) -> None:
        self.schema = schema
        self.ptr = ptr
        self.base = base

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sub):
            return NotImplemented
        return self.schema == other.schema and self.ptr == other.ptr and self.base == other.base

    def __hash__(self) -> int:
        return hash((self.schema, self.ptr, self.base))

    def __repr__(self) -> str:
        return f"Sub(schema={self.schema!r}, ptr={self.ptr!r}, base={self.base!r})"


class RefIndex:
    """Every `$id` and `$anchor` of one document, and the resolution of `$ref`s against it."""

    def __init__(self, root: Any, *, legacy: bool) -> None:
        self.root = root
        self.legacy = legacy
        self.root_base = ""
        if isinstance(root, dict) and isinstance(root.get("$id"), str):
            self.root_base = urldefrag(root["$id"])[0]
        self.ids: dict[str, Sub] = {}
        self.anchors: dict[str, Sub] = {}
        # resolved `$ref`s by (ref, base): a definition is referred to from many places, and
        # each resolution parses URLs (urllib: microseconds) and walks the pointer again
        self._resolved: dict[tuple[str, str], Sub] = {}
        self._index(Sub(root, "", self.root_base))

    def root_sub(self) -> Sub:
        """The root schema as a subschema (pointer "", the root's base URI)."""
        return Sub(self.root, "", self.root_base)

    def _index(self, sub: Sub) -> None:
        """Record every `$id` and `$anchor` with its base URI (iteratively: deep documents).

        A node's place is kept as (parent's place, key) and spelled as a JSON pointer only for
        the nodes recorded: most schemas have none, and escaping every key cost more than the
        walk."""
        stack: list[tuple[Any, Any, str]] = [(sub.schema, sub.ptr, sub.base)]
        while stack:
            node, where, base = stack.pop()
            if isinstance(node, list):
                stack.extend((v, (where, i), base) for i, v in enumerate(node))
                continue
            if not isinstance(node, dict):
                continue
            sid = node.get("$id")
            if isinstance(sid, str) and not sid.startswith("#"):
                base = urldefrag(urljoin(base, sid))[0]
                self.ids.setdefault(base, Sub(node, _spelled(where), base))
            anchor = node.get("$anchor")
            if isinstance(anchor, str):
                self.anchors.setdefault(f"{base}#{anchor}", Sub(node, _spelled(where), base))
            for key, value in node.items():
                if key in ("enum", "const", "examples", "default"):
                    continue
                if isinstance(value, (dict, list)):
                    stack.append((value, (where, key), base))

    def resolve(self, ref: Any, sub: Sub) -> Sub:
        """The subschema `ref` (the `$ref` of `sub`) names."""
        if isinstance(ref, str):
            hit = self._resolved.get((ref, sub.base))
            if hit is not None:
                return hit
        found = self._resolve(ref, sub)
        self._resolved[(ref, sub.base)] = found  # (a failure raised: nothing kept)
        return found

    def _resolve(self, ref: Any, sub: Sub) -> Sub:
        ptr = f"{sub.ptr}/$ref"
        if not isinstance(ref, str):
            raise SchemaError("$ref must be a string", pointer=ptr)
        if not sub.base and ref.startswith("#"):  # (most refs: no URL to parse)
            url, frag = "", ref[1:]
        else:
            url, frag = urldefrag(urljoin(sub.base, ref) if sub.base else ref)
        if url:
            doc = self.ids.get(url)
            if doc is None:
                if (
                    url.startswith(("http://", "https://", "urn:", "file:"))
                    and url != self.root_base
                ):
                    raise UnsupportedSchemaError(
                        f"remote $ref {ref!r} is not supported (inline it in $defs)", pointer=ptr
                    )
                if url != self.root_base:
                    raise SchemaError(f"$ref {ref!r} does not resolve", pointer=ptr)
                doc = Sub(self.root, "", self.root_base)
        else:
            doc = Sub(self.root, "", self.root_base)
        if not frag:
            return doc
        if not frag.startswith("/"):
            hit = self.anchors.get(f"{doc.base}#{frag}")
            if hit is None:
                raise SchemaError(f"$ref {ref!r}: anchor {frag!r} not found", pointer=ptr)
            return hit
        node = doc.schema
        path = doc.ptr
        base = doc.base
        for raw in frag.split("/")[1:]:
            token = unescape_pointer(unquote(raw))
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise SchemaError(f"$ref {ref!r} does not resolve", pointer=ptr)
            path = pointer(path, token)
            if isinstance(node, dict) and isinstance(node.get("$id"), str):
                base = urldefrag(urljoin(base, node["$id"]))[0]
        return Sub(node, path, base)

    def child(self, sub: Sub, value: Any, *path: str | int) -> Sub:
        """The subschema `value` found at `path` below `sub` (its own `$id` rebases it)."""
        ptr = pointer(sub.ptr, *path)
        base = sub.base
        sid = value.get("$id") if isinstance(value, dict) else None
        if isinstance(sid, str) and not sid.startswith("#"):
            base = urldefrag(urljoin(base, sid))[0]
        return Sub(value, ptr, base)


def _spelled(where: Any) -> str:
    """The JSON pointer of a place kept as nested (parent's place, key) pairs around a root
    pointer string (`RefIndex._index`)."""
    keys: list[str | int] = []
    while type(where) is tuple:
        where, key = where
        keys.append(key)
    return pointer(where, *reversed(keys))
