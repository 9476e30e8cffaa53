"""Combinators and negation: the alternatives `anyOf`, `oneOf`, `not`, `if`/`then`/`else` and
the dependency keywords stand for, positive schemas for "not S", and the disjointness test that
lets an overlapping-free `oneOf` compile as `anyOf`.

Negation pushes "not" down to the keywords: "not {minLength: 3}" is "a string of at most 2
code points, or not a string"; what cannot be negated exactly is refused
(`UnsupportedSchemaError`). The compiler's internal keywords (`_keywords.py`) carry what JSON
Schema has no positive keyword for (kinds, excluded values, patterns that must not match,
"some member" constraints)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from structgen._json_data import escape_pointer
from structgen.errors import SchemaError, UnsupportedSchemaError
from structgen.schema._formats import KNOWN_UNSUPPORTED, format_nodes
from structgen.schema._forms import Unsat
from structgen.schema._keywords import (
    ALL_KINDS,
    KINDS_KW,
    KNOWN,
    NOTIN_KW,
    NOTPAT_KW,
    SOME_KW,
    check_keywords,
    inert,
    json_equal,
    kind_of,
    kinds_of_type,
    narrow_kinds,
)
from structgen.schema._refs import Sub

if TYPE_CHECKING:
    from structgen.schema._compiler import SchemaCompiler

__all__ = ["disjunction", "negate"]

JSON = Any
#: what `summary` knows of a branch: its kinds, its finite values (or None), its object facts
Summary = tuple[frozenset[str], list[JSON] | None, dict[str, JSON]]


def disjunction(c: SchemaCompiler, keyword: str, sub: Sub) -> list[list[Sub]]:
    """The alternatives one combinator keyword of `sub` stands for."""
    s = sub.schema
    if keyword == "anyOf":
        return [[c.child(sub, b, "anyOf", i)] for i, b in enumerate(s["anyOf"])]
    if keyword == "oneOf":
        branches = [c.child(sub, b, "oneOf", i) for i, b in enumerate(s["oneOf"])]
        if len(branches) < 2 or disjoint(c, branches):
            return [[b] for b in branches]
        # exactly one: branch i and the negation of every other branch
        try:
            negs = [negate(c, b) for b in branches]
        except UnsupportedSchemaError as exc:
            c.fail(
                "oneOf branches that may overlap need their negations, and "
                f"{exc.reason} at {exc.pointer} (treated as anyOf in lenient mode)",
                f"{sub.ptr}/oneOf",
            )
            return [[b] for b in branches]
        return [
            [b, *(negs[j] for j in range(len(branches)) if j != i)] for i, b in enumerate(branches)
        ]
    if keyword == "not":
        neg = negate(c, c.child(sub, s["not"], "not"))
        return [[neg]]
    if keyword == "if":
        cond = c.child(sub, s["if"], "if")
        then = c.child(sub, s.get("then", True), "then")
        other = c.child(sub, s.get("else", True), "else")
        if "then" not in s and "else" not in s:
            return [[]]
        return [[cond, then], [negate(c, cond), other]]
    deps: list[tuple[str, JSON, str]] = []
    if keyword == "dependentRequired":
        deps = [(k, v, "dependentRequired") for k, v in s[keyword].items()]
    elif keyword == "dependentSchemas":
        deps = [(k, v, "dependentSchemas") for k, v in s[keyword].items()]
    else:
        for k, v in s[keyword].items():
            deps.append((k, v, "dependentRequired" if isinstance(v, list) else "deps"))
    alternatives: list[list[Sub]] = [[]]
    for name, dep, kind in deps:
        absent = Sub(
            {"properties": {name: False}}, f"{sub.ptr}/{keyword}/{escape_pointer(name)}", ""
        )
        if kind == "dependentRequired":
            present = [Sub({"required": [name, *dep]}, absent.ptr, sub.base)]
        else:
            present = [
                Sub({"required": [name]}, absent.ptr, sub.base),
                c.child(sub, dep, keyword, name),
            ]
        c.keep.extend([absent.schema, present[0].schema])
        alternatives = [a + b for a in alternatives for b in ([absent], present)]
    return alternatives


# ------------------------------------------------------------------ negation


def negate(c: SchemaCompiler, sub: Sub, depth: int = 0) -> Sub:
    """A positive schema for "not `sub`" (an `anyOf` of what fails each keyword)."""
    s = sub.schema
    ptr = sub.ptr
    if depth > 32:
        raise UnsupportedSchemaError("negation nests too deeply", pointer=ptr)
    if s is True or s == {}:
        return Sub(False, ptr, sub.base)
    if s is False:
        return Sub(True, ptr, sub.base)
    if not isinstance(s, dict):
        raise SchemaError("a schema must be an object or a boolean", pointer=ptr)
    check_keywords(s, ptr, c.legacy)
    parts: list[JSON] = []
    subs: list[Sub] = []

    def typed(kind: str, **kw: JSON) -> None:
        parts.append({"type": kind, **kw})

    for key, value in s.items():
        kp = f"{ptr}/{escape_pointer(key)}"
        if key == "$ref":
            target = c.resolve(value, sub)
            subs.append(negate(c, target, depth + 1))
        elif key == "type":
            kinds = kinds_of_type(value)
            parts.append({KINDS_KW: sorted(ALL_KINDS - kinds)})
        elif key == KINDS_KW:
            parts.append({KINDS_KW: sorted(ALL_KINDS - frozenset(value))})
        elif key == "const":
            parts.append({NOTIN_KW: [value]})
        elif key == "enum":
            parts.append({NOTIN_KW: list(value)})
        elif key == NOTIN_KW:
            parts.append({"enum": list(value)})
        elif key == "minLength":
            if value > 0:
                typed("string", maxLength=value - 1)
        elif key == "maxLength":
            typed("string", minLength=value + 1)
        elif key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if isinstance(value, bool):
                continue
            excl = key.startswith("exclusive")
            if (
                key in ("minimum", "maximum")
                and c.legacy
                and s.get("exclusive" + key[0].upper() + key[1:]) is True
            ):
                excl = True
            if "inimum" in key:
                typed("number", **{("maximum" if excl else "exclusiveMaximum"): value})
            else:
                typed("number", **{("minimum" if excl else "exclusiveMinimum"): value})
        elif key == "minItems":
            if value > 0:
                typed("array", maxItems=value - 1)
        elif key == "maxItems":
            typed("array", minItems=value + 1)
        elif key == "minProperties":
            if value > 0:
                typed("object", maxProperties=value - 1)
        elif key == "maxProperties":
            typed("object", minProperties=value + 1)
        elif key == "required":
            for name in value:
                typed("object", properties={name: False})
        elif key == "properties":
            for name, schema in value.items():
                neg = negate(c, c.child(sub, schema, key, name), depth + 1)
                c.keep.append(neg)
                parts.append(
                    {"type": "object", "required": [name], "properties": {name: neg.schema}}
                )
        elif key == "items" and isinstance(value, (dict, bool)) and "prefixItems" not in s:
            neg = negate(c, c.child(sub, value, key), depth + 1)
            typed("array", contains=neg.schema)
        elif key == "contains" and "minContains" not in s and "maxContains" not in s:
            neg = negate(c, c.child(sub, value, key), depth + 1)
            typed("array", items=neg.schema)
        elif key == "additionalProperties":
            if value is True or value == {}:
                continue
            spec = {
                "exclude": list(s.get("properties") or {}),
                "notPatterns": list(s.get("patternProperties") or {}),
                "pattern": None,
                "schema": True,
            }
            if value is not False:
                spec["schema"] = negate(c, c.child(sub, value, key), depth + 1).schema
            parts.append({"type": "object", SOME_KW: [spec]})
        elif key == "patternProperties":
            for pat, schema in value.items():
                if schema is True or schema == {}:
                    continue
                c.patterns.node(
                    pat, f"{kp}/{escape_pointer(pat)}"
                )  # an invalid pattern raises here
                neg = negate(c, c.child(sub, schema, key, pat), depth + 1)
                spec = {"exclude": [], "notPatterns": [], "pattern": pat, "schema": neg.schema}
                parts.append({"type": "object", SOME_KW: [spec]})
        elif key == "oneOf":
            branches = [c.child(sub, b, key, i) for i, b in enumerate(value)]
            negs = [negate(c, b, depth + 1) for b in branches]
            # none of the branches holds, or two of them do
            options: list[JSON] = [{"allOf": [n.schema for n in negs]}]
            infos = [summary(c, b) for b in branches]
            for i, j in itertools.combinations(range(len(branches)), 2):
                if not _pair_disjoint(infos[i], infos[j]):
                    options.append({"allOf": [branches[i].schema, branches[j].schema]})
            parts.append({"anyOf": options})
        elif key == "pattern":
            parts.append({"type": "string", NOTPAT_KW: [value]})
        elif key == NOTPAT_KW:
            parts.extend({"type": "string", "pattern": p} for p in value)
        elif inert(key, s):
            continue
        elif key == "allOf":
            for i, b in enumerate(value):
                subs.append(negate(c, c.child(sub, b, key, i), depth + 1))
        elif key == "anyOf":
            negs = [negate(c, c.child(sub, b, key, i), depth + 1) for i, b in enumerate(value)]
            parts.append({"allOf": [n.schema for n in negs]})
        elif key == "not":
            subs.append(c.child(sub, value, key))
        elif (
            key == "format" and format_nodes(str(value)) is None and value not in KNOWN_UNSUPPORTED
        ):
            continue  # an unknown format is an annotation
        elif key in KNOWN:
            raise UnsupportedSchemaError(
                f"'not' over {key!r} cannot be enforced exactly", pointer=kp
            )
    if not parts and not subs:
        return Sub(False, ptr, sub.base)  # `sub` asserts nothing: no value fails it
    negation: JSON = {"anyOf": parts + [x.schema for x in subs]}
    c.keep.append(negation)
    return Sub(negation, ptr, sub.base)


# ------------------------------------------------------------------ oneOf disjointness


def summary(c: SchemaCompiler, sub: Sub, depth: int = 0) -> Summary:
    """Kinds a branch admits, its finite values (or None), and its object facts."""
    try:
        flat = c.flatten([sub])
    except Unsat:
        return frozenset(), [], {}
    kinds = ALL_KINDS
    values: list[JSON] | None = None
    facts: dict[str, JSON] = {"required": set(), "consts": {}, "closed": None}
    for f in flat:
        s = f.schema
        kinds = narrow_kinds(kinds, s)
        for key in ("const", "enum"):
            if key in s:
                vals = [s["const"]] if key == "const" else list(s["enum"])
                values = (
                    vals
                    if values is None
                    else [v for v in values if any(json_equal(v, w) for w in vals)]
                )
        facts["required"] |= set(s.get("required", []))
        for name, prop in (s.get("properties") or {}).items():
            if isinstance(prop, dict) and depth < 4:
                pk, pv, _ = summary(c, c.child(f, prop, "properties", name), depth + 1)
                if pv is not None:
                    facts["consts"][name] = pv
                elif pk != ALL_KINDS:
                    facts["consts"].setdefault(name + "\0kinds", pk)
        if s.get("additionalProperties") is False and not s.get("patternProperties"):
            names = set(s.get("properties") or {})
            facts["closed"] = names if facts["closed"] is None else facts["closed"] & names
    if values is not None:
        kinds = kinds & frozenset(kind_of(v) for v in values)
    return kinds, values, facts


def disjoint(c: SchemaCompiler, branches: list[Sub]) -> bool:
    """Whether no value satisfies two of `branches` (a sufficient test: kinds, finite values,
    required properties with disjoint values or forbidden by the other)."""
    infos = [summary(c, b) for b in branches]
    for i in range(len(infos)):
        for j in range(i + 1, len(infos)):
            if not _pair_disjoint(infos[i], infos[j]):
                return False
    return True


def _pair_disjoint(a: Summary, b: Summary) -> bool:
    kinds_a, values_a, facts_a = a
    kinds_b, values_b, facts_b = b
    if not (kinds_a & kinds_b):
        return True
    if (
        values_a is not None
        and values_b is not None
        and not any(json_equal(x, y) for x in values_a for y in values_b)
    ):
        return True
    if (kinds_a & kinds_b) - {"object"}:
        return False
    # both are objects only: a required property with disjoint values, or one the other forbids
    for name in facts_a["required"] & facts_b["required"]:
        va = facts_a["consts"].get(name)
        vb = facts_b["consts"].get(name)
        if va is not None and vb is not None and not any(json_equal(x, y) for x in va for y in vb):
            return True
        ka = facts_a["consts"].get(name + "\0kinds")
        kb = facts_b["consts"].get(name + "\0kinds")
        if ka is not None and kb is not None and not (ka & kb):
            return True
    closed_a, closed_b = facts_a["closed"], facts_b["closed"]
    if closed_b is not None and facts_a["required"] - closed_b:
        return True
    return closed_a is not None and bool(facts_b["required"] - closed_a)
