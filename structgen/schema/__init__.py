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
from dataclasses import dataclass
from typing import Any, Literal

from structgen.errors import SchemaError
from structgen.grammar.ir import Grammar
from structgen.schema._compiler import SchemaCompiler

__all__ = ["SchemaOptions", "compile_schema", "schema_data", "schema_fingerprint"]


@dataclass(frozen=True, slots=True)
class SchemaOptions:
    """How JSON text may be laid out, how strict to be, and how much work a schema may cost.

    `whitespace="flexible"` allows runs of up to `max_whitespace` spaces/tabs/newlines between
    tokens (json.dumps' default separators and indented output); "compact" allows none.
    `lenient=True` relaxes keywords that cannot be enforced exactly, warning for each.
    `max_rules` / `max_branches` bound the grammar size and the alternatives that combinators
    expand to (`LimitExceededError` beyond).
    """

    whitespace: Literal["flexible", "compact"] = "flexible"
    max_whitespace: int = 16
    lenient: bool = False
    max_rules: int = 100_000
    max_branches: int = 2_000

    def __post_init__(self) -> None:
        if self.whitespace not in ("flexible", "compact"):
            raise ValueError("whitespace must be 'flexible' or 'compact'")
        if self.max_whitespace < 0:
            raise ValueError("max_whitespace must be >= 0")


def schema_data(schema: Any) -> Any:
    """The schema (a dict, JSON text or Pydantic class) as plain JSON data, a private copy."""
    return _load(schema)


def _load(schema: Any) -> Any:
    """The schema as plain JSON data (a private deep copy)."""
    if isinstance(schema, type):
        method = getattr(schema, "model_json_schema", None)
        if method is None:
            raise SchemaError(f"{schema.__name__} is not a Pydantic BaseModel subclass")
        return method()
    if isinstance(schema, (str, bytes)):
        try:
            return json.loads(schema)
        except json.JSONDecodeError as exc:
            raise SchemaError(f"the schema is not valid JSON: {exc}") from exc
    if isinstance(schema, (bool, dict)):
        return copy.deepcopy(schema)
    raise SchemaError(
        f"a schema must be a dict, a bool, JSON text or a model class, not {type(schema).__name__}"
    )


def compile_schema(
    schema: dict[str, Any] | bool | str | type, *, options: SchemaOptions
) -> Grammar:
    """The grammar of the JSON texts valid against `schema`.

    Raises `SchemaError` (invalid or unsatisfiable, with its JSON pointer),
    `UnsupportedSchemaError` (a keyword that cannot be enforced exactly) or
    `LimitExceededError` (the grammar would be too large).
    """
    data = _load(schema)
    if not isinstance(data, (dict, bool)):
        raise SchemaError("a schema must be a JSON object or a boolean")
    return SchemaCompiler(data, options).compile()


def schema_fingerprint(schema: Any) -> str:
    """A stable cache key: sha256 of the canonical JSON (a model class: its JSON schema)."""
    data = _load(schema)
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(
        b"structgen-schema-1\0" + text.encode("utf-8", "surrogatepass")
    ).hexdigest()
