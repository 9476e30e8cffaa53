"""The JSON Schema keyword vocabulary the compiler reads: value kinds, the keywords that assert
something, those that only annotate, the combinators, the compiler's internal keywords (added
while negating), the checks of each keyword's value, and JSON equality as validators judge it.
One list of each, shared by every phase (and by the uniqueItems finder)."""

from __future__ import annotations

from typing import Any

from structgen._json_data import canonical_json, escape_pointer
from structgen.errors import SchemaError, UnsupportedSchemaError
from structgen.schema._patterns import DIALECT_KEYWORD

__all__ = [
    "ALL_KINDS",
    "ANNOTATIONS",
    "COMBINATORS",
    "JSON",
    "KINDS",
    "KINDS_KW",
    "KNOWN",
    "NOTIN_KW",
    "NOTPAT_KW",
    "SOME_KW",
    "TYPE_KINDS",
    "check_keywords",
    "combinator_keys",
    "inert",
    "json_equal",
    "kind_of",
    "kinds_of_type",
    "narrow_kinds",
    "plain_schema",
    "same_json",
    "value_key",
]

JSON = Any
KINDS = ("null", "boolean", "object", "array", "string", "integer", "nonint")
TYPE_KINDS: dict[str, frozenset[str]] = {
    "null": frozenset({"null"}),
    "boolean": frozenset({"boolean"}),
    "object": frozenset({"object"}),
    "array": frozenset({"array"}),
    "string": frozenset({"string"}),
    "integer": frozenset({"integer"}),
    "number": frozenset({"integer", "nonint"}),
}
ALL_KINDS = frozenset(KINDS)
ANNOTATIONS = frozenset(
    {
        "$schema", "$id", "id", "$comment", "$anchor", "$dynamicAnchor", "$defs", "definitions",
        "$vocabulary", "title", "description", "default", "examples", "readOnly", "writeOnly",
        "deprecated", "contentMediaType", "contentEncoding", "contentSchema", "example",
        "discriminator", "$recursiveAnchor", "markdownDescription", DIALECT_KEYWORD,
    }
)  # fmt: skip
COMBINATORS = (
    "anyOf", "oneOf", "not", "if", "dependentRequired", "dependentSchemas", "dependencies",
)  # fmt: skip
# Internal keywords the compiler adds while negating (never seen in user schemas).
KINDS_KW = "$structgen:kinds"
NOTIN_KW = "$structgen:notIn"
NOTPAT_KW = "$structgen:notPattern"
# "Some member's key is in this key set and its value satisfies this schema" (negated
# `additionalProperties` / `patternProperties`): a list of {"exclude": [names], "notPatterns":
# [patterns], "pattern": pattern or None, "schema": schema}.
SOME_KW = "$structgen:someMember"
# Keywords that assert something (everything else is an annotation or unknown: ignored).
KNOWN = frozenset(
    {
        "type", "enum", "const", "properties", "required", "additionalProperties",
        "patternProperties", "propertyNames", "minProperties", "maxProperties", "items",
        "prefixItems", "additionalItems", "minItems", "maxItems", "contains", "minContains",
        "maxContains", "uniqueItems", "anyOf", "oneOf", "allOf", "not", "$ref", "if", "then",
        "else", "dependentRequired", "dependentSchemas", "dependencies", "minLength",
        "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "multipleOf", "unevaluatedProperties", "unevaluatedItems",
        "$dynamicRef", "$recursiveRef", KINDS_KW, NOTIN_KW, NOTPAT_KW, SOME_KW,
    }
)  # fmt: skip


def json_equal(a: JSON, b: JSON) -> bool:
    """JSON equality as jsonschema decides it (1 == 1.0, true != 1, deep)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def kind_of(value: JSON) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "nonint"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def value_key(value: JSON) -> tuple[str, str]:
    """A key equal for equal values of one Python type (deduplicating `enum` members)."""
    kind = type(value)
    if kind is str:  # (the usual member: equal strings, equal keys; no JSON text made)
        return ("str", value)
    if kind is int:
        return ("int", str(value))
    if isinstance(value, float) and value.is_integer():
        return ("float", str(int(value)))
    return (kind.__name__, canonical_json(value))


def same_json(a: JSON, b: JSON) -> bool:
    """Whether two schemas are the same JSON data (key order aside)."""
    return canonical_json(a) == canonical_json(b)


def narrow_kinds(kinds: frozenset[str], s: dict[str, JSON]) -> frozenset[str]:
    """The kinds of `kinds` that `s`'s `type` (and the internal kinds keyword) still allow."""
    if "type" in s:
        kinds = kinds & kinds_of_type(s["type"])
    if KINDS_KW in s:
        kinds = kinds & frozenset(s[KINDS_KW])
    return kinds


def inert(key: str, s: dict[str, JSON]) -> bool:
    """Keywords that assert nothing without their partner (`then` without `if`...)."""
    if key in ("then", "else"):
        return "if" not in s
    if key in ("minContains", "maxContains"):
        return "contains" not in s
    return key == "additionalItems" and not isinstance(s.get("items"), list)


def combinator_keys(found: str) -> tuple[str, ...]:
    if found == "if":
        return ("if", "then", "else")
    return (found,)


def kinds_of_type(value: JSON) -> frozenset[str]:
    names = [value] if isinstance(value, str) else list(value)
    out: frozenset[str] = frozenset()
    for n in names:
        out |= TYPE_KINDS.get(n, frozenset())
    return out


def plain_schema(schema: JSON) -> JSON:
    """`schema` with the compiler's internal keywords (at any depth) spelled as standard JSON
    Schema, for jsonschema to judge `enum`/`const` members against it (a fresh copy)."""
    if isinstance(schema, list):
        return [plain_schema(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, JSON] = {}
    extra: list[JSON] = []
    for key, value in schema.items():
        if key in ("enum", "const", "default", "examples"):
            out[key] = value
        elif key == KINDS_KW:
            extra.append({"anyOf": [_KIND_SCHEMAS[k] for k in value] or [False]})
        elif key == NOTIN_KW:
            extra.append({"not": {"enum": list(value)}})
        elif key == NOTPAT_KW:
            extra.append({"not": {"type": "string", "anyOf": [{"pattern": p} for p in value]}})
        elif key == SOME_KW:
            for spec in value:
                negated: JSON = {"not": plain_schema(spec["schema"])}
                if spec["pattern"] is not None:
                    every: JSON = {"patternProperties": {spec["pattern"]: negated}}
                else:
                    every = {
                        "properties": {name: True for name in spec["exclude"]},
                        "patternProperties": {p: True for p in spec["notPatterns"]},
                        "additionalProperties": negated,
                    }
                extra.append({"type": "object", "not": every})
        elif key.startswith("$structgen:"):
            raise AssertionError(f"unknown internal keyword {key}")
        else:
            out[key] = plain_schema(value)
    if extra:
        out["allOf"] = [*out.get("allOf", []), *extra]
    return out


_KIND_SCHEMAS: dict[str, JSON] = {
    **{k: {"type": k} for k in ("null", "boolean", "object", "array", "string")},
    # as `kind_of` decides, under every draft (draft 4 would not call 1.0 an integer)
    "integer": {"type": "number", "multipleOf": 1},
    "nonint": {"type": "number", "not": {"multipleOf": 1}},
}


def _bad(ptr: str, key: str, what: str) -> SchemaError:
    return SchemaError(f"{key} must be {what}", pointer=f"{ptr}/{escape_pointer(key)}")


def check_keywords(s: dict[str, JSON], ptr: str, legacy: bool) -> None:
    """Reject malformed keyword values (SchemaError) and unsupported keywords. (No nested
    function: compiled by mypyc, a closure is a reference cycle with its scope.)"""
    for key, value in s.items():
        if key == "type":
            names = [value] if isinstance(value, str) else value
            if not isinstance(names, list) or not names or any(n not in TYPE_KINDS for n in names):
                raise _bad(ptr, key, "a JSON type name or a non-empty list of them")
        elif key in ("minLength", "maxLength", "minItems", "maxItems", "minProperties",
                     "maxProperties", "minContains", "maxContains"):  # fmt: skip
            if isinstance(value, float) and value.is_integer():
                s[key] = value = int(value)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise _bad(ptr, key, "a non-negative integer")
        elif key in ("minimum", "maximum"):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise _bad(ptr, key, "a number")
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            if not isinstance(value, (int, float)):
                raise _bad(ptr, key, "a number")
        elif key == "multipleOf":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise _bad(ptr, key, "a number greater than 0")
        elif key == "required":
            if not isinstance(value, list) or any(not isinstance(n, str) for n in value):
                raise _bad(ptr, key, "a list of strings")
        elif key == "enum":
            if not isinstance(value, list):
                raise _bad(ptr, key, "an array")
        elif key in ("properties", "patternProperties", "dependentSchemas", "$defs", "definitions"):
            if not isinstance(value, dict):
                raise _bad(ptr, key, "an object")
        elif key == "dependentRequired":
            if not isinstance(value, dict) or any(
                not isinstance(v, list) or any(not isinstance(x, str) for x in v)
                for v in value.values()
            ):
                raise _bad(ptr, key, "an object of string lists")
        elif key == "dependencies":
            if not isinstance(value, dict):
                raise _bad(ptr, key, "an object")
        elif key in ("allOf", "anyOf", "oneOf", "prefixItems"):
            if not isinstance(value, list) or (key != "prefixItems" and not value):
                raise _bad(ptr, key, "a non-empty array of schemas")
        elif key in ("pattern",) or key == "format":
            if not isinstance(value, str):
                raise _bad(ptr, key, "a string")
        elif key == "uniqueItems":
            if not isinstance(value, bool):
                raise _bad(ptr, key, "a boolean")
        elif key in ("unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"):
            if value is True or value == {}:
                continue
            raise UnsupportedSchemaError(
                f"{key} is not supported", pointer=f"{ptr}/{escape_pointer(key)}"
            )
        elif key in ("additionalProperties", "additionalItems", "items", "contains",
                     "propertyNames", "not", "if", "then", "else"):  # fmt: skip
            ok = isinstance(value, (dict, bool)) or (key == "items" and isinstance(value, list))
            if not ok:
                raise _bad(ptr, key, "a schema")
