"""JSON Schema → grammar IR (the frontend behind `Compiler.json_schema` and `Compiler.json`).

`compile_schema` turns a schema (dict, boolean, JSON text or Pydantic model class) into a
`Grammar` whose language is the set of JSON texts valid against it — exactly, or it raises
`UnsupportedSchemaError` naming the keyword (JSON pointer) unless `lenient=True`. Recursion
(`$ref` cycles, JSON mode) stays recursive: the grammar runs on the Earley engine.
See docs/design/json-schema.md.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Literal

from structgen._json_data import pointer as json_pointer
from structgen.automata import AutomataLimits
from structgen.automata.nfa import extension_module
from structgen.engines.unique_items import UniqueArray
from structgen.errors import LimitExceededError, SchemaError
from structgen.grammar.ir import Grammar
from structgen.schema._compiler import SchemaCompiler
from structgen.schema._patterns import DIALECT_KEYWORD, model_dialect

__all__ = [
    "DEFAULT_GENERATE_LAYOUT",
    "SchemaOptions",
    "compile_schema",
    "compile_schema_guarded",
    "data_fingerprint",
    "schema_data",
    "schema_fingerprint",
]


# Objects and arrays in the schema's JSON; the compiler recurses about twice per level.
DEFAULT_MAX_NESTING = 200


Layout = Literal["flexible", "compact", "spaced", "indented"]
# The layout generate mode uses unless told otherwise: on the dev schemas the default model
# finishes most often, in the fewest tokens, with it (docs/benchmarks.md, "Generation layouts").
DEFAULT_GENERATE_LAYOUT: Layout = "spaced"


@dataclass(frozen=True, slots=True)
class SchemaOptions:
    """What text to allow, how strict to be, and how much work a schema may cost.

    `mode="generate"` (the default) offers a model one spelling of
    each value — keys, `enum` and `const` strings as json.dumps(ensure_ascii=False) writes
    them, free strings escaping only `"`, `\\` and control characters, integers as plain
    digits — no keys beyond the listed `properties` where a schema says nothing of others, a
    writer's layout, and only what every common validator accepts of a pattern (ECMA-262,
    Python `re` and Rust `regex` at once). `mode="accept"` validates existing
    text exactly: every spelling and layout, unlisted properties, patterns in the schema's own
    dialect.
    `whitespace`: "flexible" allows runs of up to `max_whitespace` spaces/tabs/newlines between
    tokens; "compact" none; "spaced" json.dumps' default separators (`", "`, `": "`);
    "indented" json.dumps(indent=...)'s newlines and indents (up to `max_whitespace` spaces);
    "auto" (the default) is "flexible" when accepting and `DEFAULT_GENERATE_LAYOUT` when
    generating — `layout` says which.
    `lenient=True` relaxes keywords that cannot be enforced exactly, warning for each.
    `max_rules` / `max_branches` bound the grammar size and the alternatives that combinators
    expand to, `max_nesting` how deeply the schema's JSON may nest (objects and arrays; the
    compiler recurses along it) — `LimitExceededError` beyond each.
    """

    mode: Literal["generate", "accept"] = "generate"
    whitespace: Literal["auto", "flexible", "compact", "spaced", "indented"] = "auto"
    max_whitespace: int = 16
    lenient: bool = False
    max_rules: int = 100_000
    max_branches: int = 2_000
    max_nesting: int = DEFAULT_MAX_NESTING

    def __post_init__(self) -> None:
        if self.mode not in ("generate", "accept"):
            raise ValueError("mode must be 'generate' or 'accept'")
        if self.whitespace not in ("auto", "flexible", "compact", "spaced", "indented"):
            raise ValueError(
                "whitespace must be 'auto', 'flexible', 'compact', 'spaced' or 'indented'"
            )
        if self.max_whitespace < 0:
            raise ValueError("max_whitespace must be >= 0")

    @property
    def layout(self) -> Layout:
        """The layout in force: `whitespace`, with "auto" resolved by `mode`."""
        if self.whitespace != "auto":
            return self.whitespace
        return "flexible" if self.mode == "accept" else DEFAULT_GENERATE_LAYOUT


def schema_data(schema: Any, *, max_nesting: int = DEFAULT_MAX_NESTING) -> Any:
    """The schema (a dict, JSON text or Pydantic class) as plain JSON data, a private copy."""
    return _load(schema, max_nesting)


_JSON_NATIVE = extension_module("structgen._json_native")
#: `_json_native.plain_json`: the plain-data case of `_check_nesting`, or None (not built)
_PLAIN_JSON = None if _JSON_NATIVE is None else _JSON_NATIVE.plain_json
#: `_json_native.fingerprint_bytes` (`data_fingerprint`), or None (not built, or built before it)
_FINGERPRINT_BYTES = getattr(_JSON_NATIVE, "fingerprint_bytes", None)


def _check_nesting(data: Any, limit: int, *, copy_out: bool = False) -> Any:
    """Refuse JSON nested deeper than `limit`, and values JSON cannot hold (NaN, infinities,
    non-string keys) — iteratively, so deep input never recurses. With `copy_out`, return a
    private copy made in the same pass (dicts and lists anew, JSON scalars shared, anything
    else deep-copied): checking, then `copy.deepcopy`, walked the schema twice. Plain data
    (what JSON text loads to) is checked and copied in C where built; anything else, including
    every error, takes this walk."""
    if _PLAIN_JSON is not None:
        found = _PLAIN_JSON(data, limit, copy_out)
        if found is not None:
            return found
    box: list[Any] = [data]
    # (value, the container its copy goes in, its slot there, depth, path: (parent path, key))
    stack: list[tuple[Any, Any, Any, int, Any]] = [(data, box, 0, 1, None)]
    while stack:
        node, parent, slot, depth, path = stack.pop()
        if isinstance(node, float):
            if not math.isfinite(node):
                raise SchemaError(f"{node!r} is not a JSON number", pointer=_path_pointer(path))
            continue
        if not isinstance(node, (dict, list)):
            if copy_out and not (node is None or isinstance(node, (str, int))):
                parent[slot] = copy.deepcopy(node)
            continue
        if depth > limit:
            raise LimitExceededError(
                f"the schema nests deeper than {limit} levels of objects and arrays",
                limit="SchemaOptions.max_nesting",
                value=limit,
            )
        if isinstance(node, dict):
            items: Any = node.items()
            for key, _ in items:
                if not isinstance(key, str):
                    raise SchemaError(
                        f"object keys must be strings, got {key!r}", pointer=_path_pointer(path)
                    )
            fresh: Any = dict(node) if copy_out else node
        else:
            items = enumerate(node)
            fresh = list(node) if copy_out else node
        if copy_out:
            parent[slot] = fresh
        for key, value in items:
            if not (value is None or isinstance(value, (str, int))):  # (bool is an int)
                stack.append((value, fresh, key, depth + 1, (path, key)))
    return box[0]


def _path_pointer(path: Any) -> str:
    """The JSON pointer of a `_check_nesting` path (nested (parent, key) pairs)."""
    keys: list[str | int] = []
    while path is not None:
        path, key = path
        keys.append(key)
    return json_pointer("", *reversed(keys))


def _load(schema: Any, max_nesting: int = DEFAULT_MAX_NESTING) -> Any:
    """The schema as plain JSON data (a private deep copy), no deeper than `max_nesting`."""
    if isinstance(schema, type):
        method = getattr(schema, "model_json_schema", None)
        if method is None:
            raise SchemaError(f"{schema.__name__} is not a Pydantic BaseModel subclass")
        data = method()
        _check_nesting(data, max_nesting)
        if isinstance(data, dict):
            # Pydantic checks the patterns with its own engine: Rust regex, or Python re
            data[DIALECT_KEYWORD] = model_dialect(schema)
        return data
    if isinstance(schema, (str, bytes)):
        try:
            data = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise SchemaError(f"the schema is not valid JSON: {exc}") from exc
        except RecursionError:
            raise LimitExceededError(
                "the schema's JSON text nests too deeply to parse",
                limit="SchemaOptions.max_nesting",
                value=max_nesting,
            ) from None
        _check_nesting(data, max_nesting)
        return data
    if isinstance(schema, (bool, dict)):
        return _check_nesting(schema, max_nesting, copy_out=True)
    raise SchemaError(
        f"a schema must be a dict, a bool, JSON text or a model class, not {type(schema).__name__}"
    )


def compile_schema(
    schema: dict[str, Any] | bool | str | type, *, options: SchemaOptions
) -> Grammar:
    """The grammar of the JSON texts valid against `schema`.

    Raises `SchemaError` (invalid or unsatisfiable, with its JSON pointer),
    `UnsupportedSchemaError` (a keyword that cannot be enforced exactly) or
    `LimitExceededError` (the grammar would be too large). `uniqueItems` is refused (no grammar
    can enforce it); `compile_schema_guarded` enforces it beside the grammar where it can.
    """
    return compile_schema_guarded(schema, options=options, guard_unique=False)[0]


def compile_schema_guarded(
    schema: dict[str, Any] | bool | str | type,
    *,
    options: SchemaOptions,
    guard_unique: bool = True,
    limits: AutomataLimits | None = None,
    loaded: bool = False,
) -> tuple[Grammar, tuple[UniqueArray, ...]]:
    """`compile_schema`, and the arrays whose `uniqueItems` the caller must enforce with
    `UniqueItemsEngine` (with `guard_unique`; without, `uniqueItems` is refused as before).
    `limits`: the automaton limits of the engine that will run the grammar (its terminal
    automata are built here once, to find unsatisfiable intersections, and shared with it).
    `loaded`: `schema` is what `schema_data` returned, a private checked copy (not copied and
    checked a second time; the compile may normalise it in place)."""
    data = schema if loaded else _load(schema, options.max_nesting)
    if not isinstance(data, (dict, bool)):
        raise SchemaError("a schema must be a JSON object or a boolean")
    compiler = SchemaCompiler(data, options, guard_unique=guard_unique, limits=limits)
    try:
        return compiler.compile(), compiler.unique or ()
    except RecursionError:  # a safety net: max_nesting normally stops this first
        raise LimitExceededError(
            "the schema is too deeply nested for the compiler",
            limit="SchemaOptions.max_nesting",
            value=options.max_nesting,
        ) from None


def schema_fingerprint(schema: Any, *, max_nesting: int = DEFAULT_MAX_NESTING) -> str:
    """A stable cache key: sha256 of the schema's compact JSON text (a model class: its JSON
    schema), keys in their written order — the order is compiled (properties are written in
    it), so schemas that differ only in it are different keys."""
    return data_fingerprint(_load(schema, max_nesting))


def data_fingerprint(data: Any) -> str:
    """`schema_fingerprint` of data `schema_data` returned (not copied or checked again): a
    digest of the data's tagged bytes (`_json_native.fingerprint_bytes`, in C), or of its JSON
    text where the C module is not built or the data is not plain."""
    tagged = None if _FINGERPRINT_BYTES is None else _FINGERPRINT_BYTES(data)
    if tagged is not None:
        return hashlib.sha256(b"structgen-schema-3\0" + tagged).hexdigest()
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(
        b"structgen-schema-2\0" + text.encode("utf-8", "surrogatepass")
    ).hexdigest()
