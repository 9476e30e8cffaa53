"""Rules for objects, from their typed form: one rule per (declared name, member count, first,
"some member" flags) state.

Declared names come in their order, each optional unless required; then any number of extra
members (keys beyond the declared ones, built as languages: "not a declared name" ∩ the matched
pattern ∩ `propertyNames`) as the subschemas' `patternProperties` and `additionalProperties`
allow. Generate mode closes objects that list `properties` and say nothing of other keys
(`closed_by_default`). See docs/design/json-schema.md."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from structgen._json_data import escape_pointer
from structgen.automata import CharClass, Node, Pattern, alternation, compile_ast, intersect
from structgen.errors import LimitExceededError, StructgenError, UnsupportedSchemaError
from structgen.schema._emitter import strings_except
from structgen.schema._forms import ObjectForm, Unsat, read_string
from structgen.schema._keywords import COMBINATORS, SOME_KW, kinds_of_type, same_json
from structgen.schema._refs import Sub
from structgen.schema._scalars import string_parts
from structgen.schema._strings import any_string_body, encode, literal_body

if TYPE_CHECKING:
    from structgen.schema._compiler import SchemaCompiler

__all__ = ["object_rule"]

JSON = Any


def object_rule(c: SchemaCompiler, form: ObjectForm) -> str:
    ptr, flat, order, required = form.ptr, form.flat, form.order, form.required
    lo, hi = form.min_properties, form.max_properties
    names_schemas, musts = form.names, form.musts
    full = (1 << len(musts)) - 1

    declared: list[tuple[str, list[tuple[str, int]], bool]] = []  # name, options, required
    for name in order:
        conj: list[Sub] = []
        for sub in flat:
            s = sub.schema
            props = s.get("properties") or {}
            matched = False
            if name in props:
                conj.append(c.child(sub, props[name], "properties", name))
                matched = True
            for pat, schema in (s.get("patternProperties") or {}).items():
                where = f"{sub.ptr}/patternProperties"
                if c.patterns.matches(pat, name, where, every=False):
                    conj.append(c.child(sub, schema, "patternProperties", pat))
                    matched = True
            if not matched and "additionalProperties" in s:
                conj.append(c.child(sub, s["additionalProperties"], "additionalProperties"))
        ok = all(c.valid(name, [n]) for n in names_schemas)
        rule: str | None = None
        if ok:
            try:
                rule = c.value(conj)
            except Unsat:
                rule = None
        if rule is None:
            if name in required:
                raise Unsat(f"{ptr}/required", f"required property {name!r} can never be valid")
            continue
        qualifying = [
            j for j, (s, spec) in enumerate(musts) if c.patterns.qualifies(name, spec, s.ptr)
        ]
        declared.append((name, _options(c, musts, conj, rule, qualifying), name in required))

    members, make_key = _extra_members(c, flat, order, names_schemas, ptr)
    if closed_by_default(c, flat, musts, len(order), lo):
        members = []
    extra: list[tuple[str, str, int]] = []  # key terminal, value rule, flags it sets
    key_sets = [_some_keys(c, sub, spec) for sub, spec in musts]
    for langs, conj, value_rule in members:
        extra.append((make_key(langs, []), value_rule, 0))
        for size in range(1, len(musts) + 1):
            for combo in itertools.combinations(range(len(musts)), size):
                keys_in = [node for j in combo for node in key_sets[j]]
                for rule, flags in _options(c, musts, conj, value_rule, list(combo)):
                    if flags == _bits(combo):
                        extra.append((make_key(langs, keys_in), rule, flags))
    cap = hi if hi is not None else lo
    n = len(declared)
    if (n + 1) * (cap + 1) * 2 * (full + 1) > c.opts.max_rules:
        raise LimitExceededError(
            "the object's property counts need too many grammar rules",
            limit="SchemaOptions.max_rules",
            value=c.opts.max_rules,
        )
    sep = c.emit.punct(",")
    states = _ObjectStates(c, cap)
    state = states.rule
    keys = [
        c.emit.key_terminal(literal_body(name, canonical=c.canonical)) for name, _, _ in declared
    ]
    start = state(0, 0, True, 0)
    while states.todo:
        i, count, first, f = key = states.todo.pop()
        name = states.rules[key]
        lead = [] if first else [sep]
        if i < n:
            _, opts, req = declared[i]
            if hi is None or count < hi:
                for rule, flags in opts:
                    c.emit.add(
                        name, *lead, keys[i], rule, state(i + 1, count + 1, False, f | flags)
                    )
            if not req:
                c.emit.add(name, state(i + 1, count, first, f))
            continue
        if count >= lo and f == full:
            c.emit.add(name)
        if hi is None or count < hi:
            for key_term, value_rule, flags in extra:
                c.emit.add(name, *lead, key_term, value_rule, state(n, count + 1, False, f | flags))
    rule = c.emit.new_rule("object")
    c.emit.add(rule, c.emit.punct("{"), start, c.emit.punct("}"))
    return rule


def _options(
    c: SchemaCompiler, musts: list[Any], conj: list[Sub], rule: str, qualifying: list[int]
) -> list[tuple[str, int]]:
    """(value rule, flags it sets) for a member whose key is in the key sets of
    `qualifying`: the flag of a constraint with a value schema needs that schema."""
    trivial = 0
    hard: list[int] = []
    for j in qualifying:
        if musts[j][1]["schema"] is True or musts[j][1]["schema"] == {}:
            trivial |= 1 << j
        else:
            hard.append(j)
    out = [(rule, trivial)]
    for size in range(1, len(hard) + 1):
        for combo in itertools.combinations(hard, size):
            more = [Sub(musts[j][1]["schema"], musts[j][0].ptr, musts[j][0].base) for j in combo]
            try:
                out.append((c.value([*conj, *more]), trivial | _bits(combo)))
            except Unsat:
                continue
    return out


class _ObjectStates:
    """The rules of an object's member-sequence states (declared member i next, members so
    far, first or not, flags set), each made once and queued for its alternatives. (A class,
    not a closure: a closure compiled by mypyc is a reference cycle with its scope.)"""

    def __init__(self, c: SchemaCompiler, cap: int) -> None:
        self.c, self.cap = c, cap
        self.rules: dict[tuple[int, int, bool, int], str] = {}
        self.todo: list[tuple[int, int, bool, int]] = []

    def rule(self, i: int, count: int, first: bool, f: int) -> str:
        key = (i, min(count, self.cap), first, f)
        name = self.rules.get(key)
        if name is None:
            name = self.rules[key] = self.c.emit.new_rule("obj")
            self.todo.append(key)
        return name


def closed_by_default(
    c: SchemaCompiler, flat: list[Sub], musts: list[Any], declared: int, min_count: int
) -> bool:
    """Whether generate mode offers no keys beyond the declared ones: a subschema lists
    `properties` and none says anything of other keys (as OpenAI's strict mode and xgrammar
    do; accept mode keeps JSON Schema's open default). Keys that `required` names are
    declared; an object that `minProperties` forces past them stays open."""
    if not c.canonical or musts or min_count > declared:
        return False
    if not any(sub.schema.get("properties") for sub in flat):
        return False
    open_keys = ("additionalProperties", "patternProperties", "propertyNames",
                 "unevaluatedProperties")  # fmt: skip
    return not any(key in sub.schema for sub in flat for key in open_keys)


def _some_keys(c: SchemaCompiler, sub: Sub, spec: dict[str, JSON]) -> list[Pattern]:
    """The encoded key languages whose intersection is a "some member" key set."""
    out: list[Pattern] = []
    canonical = c.canonical
    if spec["exclude"]:
        out.append(strings_except(spec["exclude"], canonical=canonical))
    where = f"{sub.ptr}/{escape_pointer(SOME_KW)}"
    if spec["notPatterns"]:
        nodes = [c.patterns.possible(p, where) for p in spec["notPatterns"]]
        out.append(encode(c.complement(alternation(nodes), sub), canonical=canonical))
    if spec["pattern"] is not None:
        out.append(encode(c.patterns.node(spec["pattern"], where), canonical=canonical))
    return out


def _extra_members(
    c: SchemaCompiler, flat: list[Sub], declared: list[str], names_schemas: list[Sub], ptr: str
) -> tuple[list[tuple[list[Node], list[Sub], str]], Any]:
    """Members for keys beyond the declared ones: (decoded key languages to intersect,
    value conjunction, value rule) triples, and `make_key(decoded, encoded)` building the
    key terminal of such languages (with the declared-name and `propertyNames` limits).

    An extra key must satisfy each subschema's policy: its `patternProperties` schemas when
    it matches one, else its `additionalProperties`. Keys are built as "not a declared name"
    ∩ the matched pattern ∩ `propertyNames`; the complement of a pattern is not built, so
    `patternProperties` with `additionalProperties` other than false is unsupported.
    """
    name_parts: list[Pattern] = []
    for ns in names_schemas:
        name_parts.extend(_names_language(c, ns))
    canonical = c.canonical
    base_key = strings_except(declared, canonical=canonical) if declared else None

    def trivial(sub: Sub) -> bool:
        pats = sub.schema.get("patternProperties") or {}
        addl = sub.schema.get("additionalProperties", True)
        return addl in (True, {}) and all(v is True or v == {} for v in pats.values())

    def key_terminal(decoded: list[Node], encoded: list[Pattern]) -> str:
        enc: list[Pattern] = [encode(d, canonical=canonical) for d in decoded]
        enc += encoded + name_parts
        enc += [base_key] if base_key else []
        if not enc:
            return c.emit.key_terminal(any_string_body(canonical=canonical))
        return c.emit.key_terminal(enc[0], tuple(enc[1:]))

    patterned = [s for s in flat if s.schema.get("patternProperties") and not trivial(s)]
    others = [s for s in flat if s not in patterned and "additionalProperties" in s.schema]
    if any(s.schema["additionalProperties"] is False for s in others):
        return [], key_terminal
    other_conj = [
        c.child(s, s.schema["additionalProperties"], "additionalProperties") for s in others
    ]
    if not patterned:
        try:
            value = c.value(other_conj)
        except Unsat:
            return [], key_terminal
        return [([], other_conj, value)], key_terminal
    if len(patterned) > 1:
        c.fail(
            "patternProperties in several allOf branches are not supported "
            "(only the first one's patterns are used in lenient mode)",
            f"{patterned[1].ptr}/patternProperties",
        )
    sub = patterned[0]
    pats = list(sub.schema["patternProperties"].items())
    nodes = [
        c.patterns.node(p, f"{sub.ptr}/patternProperties/{escape_pointer(p)}") for p, _ in pats
    ]
    # keys that some dialect matches (what "does not match" must exclude)
    wide = [
        c.patterns.possible(p, f"{sub.ptr}/patternProperties/{escape_pointer(p)}") for p, _ in pats
    ]
    out: list[tuple[list[Node], list[Sub], str]] = []
    # keys matching exactly the patterns in `group`: a value for each group of patterns
    groups: list[tuple[list[int], list[Node]]] = []
    overlapping = any(
        not same_json(pats[i][1], pats[j][1]) and not _overlap_free(wide[i], wide[j])
        for i in range(len(pats))
        for j in range(i + 1, len(pats))
    )
    if not overlapping:
        groups = [([i], [nodes[i]]) for i in range(len(pats))]
    elif len(pats) <= 4:
        for size in range(1, len(pats) + 1):
            for combo in itertools.combinations(range(len(pats)), size):
                langs = [nodes[i] for i in combo]
                langs += [c.complement(wide[j], sub) for j in range(len(pats)) if j not in combo]
                groups.append((list(combo), langs))
    else:
        c.fail(
            "more than 4 overlapping patternProperties with different schemas",
            f"{sub.ptr}/patternProperties",
        )
        groups = [([i], [nodes[i]]) for i in range(len(pats))]
    for group, langs in groups:
        conj = [c.child(sub, pats[i][1], "patternProperties", pats[i][0]) for i in group]
        conj += other_conj
        try:
            value = c.value(conj)
        except Unsat:
            continue
        out.append((langs, conj, value))
    addl = sub.schema.get("additionalProperties", True)
    if addl is not False:
        rest = [c.complement(alternation(wide), sub)]
        conj = [c.child(sub, addl, "additionalProperties"), *other_conj]
        with contextlib.suppress(Unsat):
            out.append((rest, conj, c.value(conj)))
    return out, key_terminal


def _names_language(c: SchemaCompiler, sub: Sub) -> list[Pattern]:
    """Encoded key bodies allowed by `propertyNames` (strings only matter for keys)."""
    try:
        flat = c.flatten([sub])
    except Unsat:
        return [CharClass(())]
    for f in flat:
        if any(k in f.schema for k in COMBINATORS):
            raise UnsupportedSchemaError(
                "propertyNames with combinators is not supported", pointer=sub.ptr
            )
        if "type" in f.schema and "string" not in kinds_of_type(f.schema["type"]):
            return [CharClass(())]
    finite = [f for f in flat if "enum" in f.schema or "const" in f.schema]
    if finite:
        s = finite[0].schema
        values = [s["const"]] if "const" in s else list(s["enum"])
        words = [v for v in values if isinstance(v, str) and c.valid(v, flat)]
        return [alternation(literal_body(w, canonical=c.canonical) for w in words)]
    return string_parts(c, read_string(flat))


def _bits(indices: Iterator[int] | tuple[int, ...] | list[int]) -> int:
    out = 0
    for j in indices:
        out |= 1 << j
    return out


def _overlap_free(a: Node, b: Node) -> bool:
    try:
        return intersect(compile_ast(a), compile_ast(b)).is_empty
    except StructgenError:
        return False
