"""JSON data helpers shared by the schema compiler and the API: JSON pointers (RFC 6901) and
the canonical text of a JSON value (for cache keys and equality of schemas)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["canonical_json", "escape_pointer", "pointer", "unescape_pointer"]


def escape_pointer(token: str) -> str:
    """One reference token of a JSON pointer: `~` and `/` escaped (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


def unescape_pointer(token: str) -> str:
    """The key a JSON pointer's reference token names."""
    return token.replace("~1", "/").replace("~0", "~")


def pointer(base: str, *tokens: str | int) -> str:
    """`base` extended by `tokens` (keys or indices), each escaped. (Asked for every subschema
    a compile visits: a token without `~` or `/` is appended as it is, no generator.)"""
    out = base
    for t in tokens:
        token = t if type(t) is str else str(t)
        if "~" in token or "/" in token:
            token = escape_pointer(token)
        out += "/" + token
    return out


def canonical_json(value: Any) -> str:
    """Compact JSON text with sorted keys, equal for equal JSON data of the same shape."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
