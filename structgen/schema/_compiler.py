"""JSON Schema → grammar IR: one rule per (sub)schema, one terminal per scalar value or key.

The compiler works on *conjunctions*: a list of subschemas that must all hold for one value.
`allOf` and `$ref`s with sibling keywords are flattened into the list; disjunctions (`anyOf`,
disjoint `oneOf`, `if`/`then`/`else`, dependencies, `not` turned into positive forms) are
distributed into alternative rules; `enum`/`const` become the finite set of members that
validate against the whole conjunction (decided by jsonschema itself); what remains is split by
type into terminals (strings, numbers, keys, punctuation with its whitespace) and rules
(objects, arrays). A pure `$ref` is a rule reference, so recursive schemas stay recursive.
See docs/design/json-schema.md.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from structgen._budget import check_budget
from structgen.automata import (
    AutomataLimits,
    CharClass,
    Empty,
    Node,
    Repeat,
    String,
    alternation,
    compile_ast,
    concat,
    intersect,
    parse_regex,
    repeat,
)
from structgen.automata.codepoint_dfa import complement
from structgen.errors import (
    LimitExceededError,
    RegexError,
    SchemaError,
    StructgenError,
    UnsupportedSchemaError,
)
from structgen.grammar.ir import Grammar, Rule, TerminalDef
from structgen.grammar.terminals import terminal_dfa
from structgen.schema._formats import KNOWN_UNSUPPORTED, format_nodes
from structgen.schema._numbers import (
    NumRange,
    number_node,
)
from structgen.schema._patterns import DIALECT_KEYWORD, PatternReader
from structgen.schema._strings import (
    any_string_body,
    encode,
    length_body,
    literal_bodies,
    literal_body,
    not_in_set,
)

__all__ = ["SchemaCompiler"]

JSON = Any
KINDS = ("null", "boolean", "object", "array", "string", "integer", "nonint")
_TYPE_KINDS: dict[str, frozenset[str]] = {
    "null": frozenset({"null"}),
    "boolean": frozenset({"boolean"}),
    "object": frozenset({"object"}),
    "array": frozenset({"array"}),
    "string": frozenset({"string"}),
    "integer": frozenset({"integer"}),
    "number": frozenset({"integer", "nonint"}),
}
ALL_KINDS = frozenset(KINDS)
_ANNOTATIONS = frozenset(
    {
        "$schema", "$id", "id", "$comment", "$anchor", "$dynamicAnchor", "$defs", "definitions",
        "$vocabulary", "title", "description", "default", "examples", "readOnly", "writeOnly",
        "deprecated", "contentMediaType", "contentEncoding", "contentSchema", "example",
        "discriminator", "$recursiveAnchor", DIALECT_KEYWORD,
    }
)  # fmt: skip
_COMBINATORS = (
    "anyOf", "oneOf", "not", "if", "dependentRequired", "dependentSchemas", "dependencies",
)  # fmt: skip
# Internal keywords the compiler adds while negating (never seen in user schemas).
_KINDS_KW = "$structgen:kinds"
_NOTIN_KW = "$structgen:notIn"
_NOTPAT_KW = "$structgen:notPattern"
# "Some member's key is in this key set and its value satisfies this schema" (negated
# `additionalProperties` / `patternProperties`): a list of {"exclude": [names], "notPatterns":
# [patterns], "pattern": pattern or None, "schema": schema}.
_SOME_KW = "$structgen:someMember"
# At most this many "some member" constraints on one object (each is a flag in the rules).
_MAX_SOME = 3
_LEGACY_DRAFTS = ("draft-03", "draft-04", "draft-06", "draft-07")


def _nonint(zeros: str) -> Node:
    """Non-integer number texts whose *parsed double* is not an integer either (jsonschema
    judges the float): at most 15 significant digits round-trip through a double, so such a
    text cannot land on an integer (`zeros`: trailing zeros, which do not count); longer ones
    (1.0000000000000001, 1e25-sized fractions) could, and are left out."""
    return parse_regex(
        r"-?(?:"
        + "|".join(
            rf"[1-9][0-9]{{{k - 1}}}\.(?:[0-9]{{0,{14 - k}}}[1-9]){zeros}" for k in range(1, 15)
        )
        + rf"|0\.0{{0,20}}[1-9](?:[0-9]{{0,13}}[1-9])?{zeros})"
    )


_NONINT = _nonint("0*")
_CANONICAL_NONINT = _nonint("")  # generating: no trailing zeros, as a writer spells numbers
# Drafts 3 and 4: a number written with a fraction or an exponent is not an integer (`1.0`).
_WRITTEN_NONINT = parse_regex(
    r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+)"
)


class _Unsat(Exception):
    """A subschema no value satisfies (callers drop the alternative, or report it)."""

    def __init__(self, pointer: str, reason: str) -> None:
        super().__init__(reason)
        self.pointer = pointer
        self.reason = reason


@dataclass(frozen=True, slots=True)
class _Sub:
    """A subschema with its JSON pointer (for errors) and base URI (for `$ref`)."""

    schema: JSON
    ptr: str
    base: str


def _esc(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _canonical(value: JSON) -> str:
    """A text key equal for JSON-equal values of the same shape (1 and 1.0 alike)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False)


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


class SchemaCompiler:
    """One compilation: the root document, its `$id` index, and the rules built so far."""

    def __init__(
        self,
        root: JSON,
        options: Any,
        *,
        guard_unique: bool = False,
        limits: AutomataLimits | None = None,
    ) -> None:
        self.limits = limits or AutomataLimits()
        self.root = root
        self.opts = options
        # uniqueItems enforced beside the grammar (`_unique.py`): the arrays, once found
        self.guard_unique = guard_unique
        self.unique: tuple[Any, ...] | None = None
        self.rules: list[Rule] = []
        self.terminals: dict[tuple[Node, tuple[Node, ...]], str] = {}
        self.term_defs: list[TerminalDef] = []
        self.key_rules: dict[str, str] = {}
        self.memo: dict[tuple[Any, ...], str] = {}
        self.ref_memo: dict[str, str] = {}
        self.keep: list[Any] = []
        self.counter = 0
        self.branches = 0
        self.legacy = isinstance(root, dict) and any(
            d in str(root.get("$schema", "")) for d in _LEGACY_DRAFTS
        )
        # drafts 3 and 4: an integer is written without a fraction (`1.0` is not one)
        self.integer_fractions = not (
            isinstance(root, dict)
            and any(d in str(root.get("$schema", "")) for d in ("draft-03", "draft-04"))
        )
        self.root_base = ""
        if isinstance(root, dict) and isinstance(root.get("$id"), str):
            self.root_base = urldefrag(root["$id"])[0]
        self.ids: dict[str, _Sub] = {}
        self.anchors: dict[str, _Sub] = {}
        self._index(_Sub(root, "", self.root_base))
        # patterns in the validator's dialect: ECMA-262 for JSON Schema, a Pydantic model's
        # engine for its schema (`_patterns.py`); generate mode: what every dialect accepts
        dialect = root.get(DIALECT_KEYWORD) if isinstance(root, dict) else None
        self.patterns = PatternReader(
            dialect if dialect in ("rust", "python") else "ecma",
            generate=options.mode == "generate",
            lenient=options.lenient,
        )
        # generate mode: one spelling per value (json.dumps'), literal keys, plain integers,
        # no unlisted properties where a schema lists some (see `_closed_by_default`)
        self.canonical = options.mode == "generate"
        self.layout = options.layout
        ws = CharClass(((9, 10), (13, 13), (32, 32)))
        self.ws: Node = (
            Repeat(ws, 0, options.max_whitespace) if self.layout == "flexible" else Empty()
        )
        # indented: a newline and an indent (any depth up to max_whitespace spaces)
        self.newline: Node = concat([String("\n"), Repeat(String(" "), 0, options.max_whitespace)])
        self._validator: Any = None

    # ------------------------------------------------------------------ plumbing

    def fail(self, reason: str, ptr: str) -> None:
        """Raise `UnsupportedSchemaError`, or warn and carry on in lenient mode."""
        if not self.opts.lenient:
            raise UnsupportedSchemaError(reason, pointer=ptr)
        warnings.warn(f"structgen relaxed {ptr or '/'}: {reason}", stacklevel=4)

    def new_rule(self, prefix: str) -> str:
        self.counter += 1
        if self.counter > self.opts.max_rules:
            raise LimitExceededError(
                "the schema needs too many grammar rules",
                limit="SchemaOptions.max_rules",
                value=self.opts.max_rules,
            )
        return f"{prefix}{self.counter}"

    def add(self, lhs: str, *rhs: str) -> None:
        self.rules.append(Rule(lhs, tuple(rhs)))

    def terminal(self, node: Node, extra: tuple[Node, ...] = ()) -> str:
        key = (node, extra)
        name = self.terminals.get(key)
        if name is None:
            name = f"T{len(self.terminals)}"
            self.terminals[key] = name
            self.term_defs.append(TerminalDef(name, node, extra))
        return name

    def punct(self, text: str) -> str:
        """`{`, `}`, `[`, `]`, `,`, `:` with the whitespace the layout allows around them:
        any run (flexible), none (compact), json.dumps' `", "` and `": "` (spaced), or those of
        `json.dumps(indent=...)` (indented: a newline after `{ [ ,` and before `} ]`, optional
        around the brackets so that empty ones stay `{}`)."""
        if self.layout == "compact":
            return self.terminal(String(text))
        if self.layout == "spaced":
            return self.terminal(String(text + " " if text in ",:" else text))
        if self.layout == "indented":
            nl = self.newline
            if text == ":":
                return self.terminal(String(": "))
            if text == ",":
                return self.terminal(concat([String(","), nl]))
            if text in "{[":
                return self.terminal(concat([String(text), repeat(nl, 0, 1)]))
            return self.terminal(concat([repeat(nl, 0, 1), String(text)]))
        ws = self.ws
        if text in "{[":
            return self.terminal(concat([String(text), ws]))
        if text in "}]":
            return self.terminal(concat([ws, String(text)]))
        return self.terminal(concat([ws, String(text), ws]))

    def key_terminal(self, body: Node, extra: tuple[Node, ...] = ()) -> str:
        """A rule `key: "name" COLON` — the quoted key, then the shared `ws : ws` terminal.

        Keeping the colon and its whitespace out of the key terminal keeps the union lexer of
        the keys expected at one position a small trie, and the colon lexer is one automaton
        shared by every key: new lexer states (built in Python) are what masks cost most.
        """
        term = self.string_terminal(body, extra)
        rule = self.key_rules.get(term)
        if rule is None:
            rule = self.new_rule("key")
            self.add(rule, term, self.punct(":"))
            self.key_rules[term] = rule
        return rule

    def string_terminal(self, body: Node, extra: tuple[Node, ...] = ()) -> str:
        def wrap(n: Node) -> Node:
            return concat([String('"'), n, String('"')])

        return self.terminal(wrap(body), tuple(wrap(e) for e in extra))

    # ------------------------------------------------------------------ $ref resolution

    def _index(self, sub: _Sub) -> None:
        """Record every `$id` and `$anchor` with its base URI (iteratively: deep documents)."""
        stack = [sub]
        while stack:
            s = stack.pop()
            node = s.schema
            if isinstance(node, list):
                stack.extend(_Sub(v, f"{s.ptr}/{i}", s.base) for i, v in enumerate(node))
                continue
            if not isinstance(node, dict):
                continue
            base = s.base
            sid = node.get("$id")
            if isinstance(sid, str) and not sid.startswith("#"):
                base = urldefrag(urljoin(base, sid))[0]
                self.ids.setdefault(base, _Sub(node, s.ptr, base))
            elif isinstance(sid, str) or (isinstance(node.get("id"), str) and self.legacy):
                pass
            anchor = node.get("$anchor")
            if isinstance(anchor, str):
                self.anchors.setdefault(f"{base}#{anchor}", _Sub(node, s.ptr, base))
            for key, value in node.items():
                if key in ("enum", "const", "examples", "default"):
                    continue
                if isinstance(value, (dict, list)):
                    stack.append(_Sub(value, f"{s.ptr}/{_esc(key)}", base))

    def resolve(self, ref: Any, sub: _Sub) -> _Sub:
        ptr = f"{sub.ptr}/$ref"
        if not isinstance(ref, str):
            raise SchemaError("$ref must be a string", pointer=ptr)
        full = urljoin(sub.base, ref) if sub.base else ref
        url, frag = urldefrag(full)
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
                doc = _Sub(self.root, "", self.root_base)
        else:
            doc = _Sub(self.root, "", self.root_base)
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
            token = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise SchemaError(f"$ref {ref!r} does not resolve", pointer=ptr)
            path = f"{path}/{_esc(token)}"
            if isinstance(node, dict) and isinstance(node.get("$id"), str):
                base = urldefrag(urljoin(base, node["$id"]))[0]
        return _Sub(node, path, base)

    def child(self, sub: _Sub, value: JSON, *path: str | int) -> _Sub:
        ptr = sub.ptr + "".join(f"/{_esc(str(p))}" for p in path)
        base = sub.base
        sid = value.get("$id") if isinstance(value, dict) else None
        if isinstance(sid, str) and not sid.startswith("#"):
            base = urldefrag(urljoin(base, sid))[0]
        return _Sub(value, ptr, base)

    # ------------------------------------------------------------------ entry

    def root_sub(self) -> _Sub:
        """The root schema as a subschema (pointer "", the root's base URI)."""
        return _Sub(self.root, "", self.root_base)

    def compile(self) -> Grammar:
        top = _Sub(self.root, "", self.root_base)
        if self.guard_unique:
            from structgen.schema._unique import find_unique_arrays

            self.unique = find_unique_arrays(self, _KNOWN)
        try:
            start = self.value([top])
        except _Unsat as exc:
            raise SchemaError(
                f"the schema is unsatisfiable: {exc.reason}", pointer=exc.pointer
            ) from None
        self.add("start", start)
        grammar = Grammar("start", tuple(self.rules), tuple(self.term_defs))
        productive = self._check_productive(grammar)
        # Drop the rules through dead states (say, an object state below `minProperties` with
        # no property left to add): they derive nothing, and a rule with no productions left
        # must not be referenced.
        kept = tuple(
            r for r in self.rules if r.lhs in productive and all(x in productive for x in r.rhs)
        )
        if len(kept) != len(self.rules):
            grammar = Grammar("start", kept, tuple(self.term_defs))
        return grammar

    def _check_productive(self, grammar: Grammar) -> set[str]:
        """Unsatisfiable schemas must fail here, not inside the engine; returns the productive
        symbols (terminals and rules that derive some text)."""
        usable: set[str] = set()
        for t in grammar.terminals:
            if not t.intersect:
                usable.add(t.name)
                continue
            # The same cached automaton the engine will use (same limits): built once, not
            # twice; a limit it hits is the compile's.
            if not terminal_dfa(t, self.limits).is_empty:
                usable.add(t.name)
        productive = set(usable)
        changed = True
        while changed:
            changed = False
            for rule in grammar.rules:
                if rule.lhs not in productive and all(s in productive for s in rule.rhs):
                    productive.add(rule.lhs)
                    changed = True
        if "start" not in productive:
            raise SchemaError("the schema is unsatisfiable: no JSON value satisfies it")
        return productive

    # ------------------------------------------------------------------ values

    def value(self, conj: list[_Sub]) -> str:
        """The rule (or terminal) for values satisfying every subschema of `conj`."""
        check_budget()
        conj = [s for s in conj if s.schema is not True and s.schema != {}]
        if len(conj) == 1 and self._pure_ref(conj[0].schema):
            target = self.resolve(conj[0].schema["$ref"], conj[0])
            name = self.ref_memo.get(target.ptr + "@" + target.base)
            if name is not None:
                return name
            name = self.new_rule("ref")
            self.ref_memo[target.ptr + "@" + target.base] = name
            self.add(name, self.value([target]))
            return name
        key = tuple((id(s.schema), s.ptr, s.base) for s in conj)
        name = self.memo.get(key)
        if name is not None:
            return name
        self.keep.append(conj)
        name = self.new_rule("v")
        self.memo[key] = name
        try:
            alternatives = self._value_alternatives(conj)
        except _Unsat:
            del self.memo[key]
            raise
        for alt in alternatives:
            self.add(name, alt)
        return name

    def _pure_ref(self, schema: JSON) -> bool:
        if not isinstance(schema, dict) or "$ref" not in schema:
            return False
        if self.legacy:
            return True
        return all(k == "$ref" or k in _ANNOTATIONS or k not in _KNOWN for k in schema)

    def flatten(self, conj: list[_Sub]) -> list[_Sub]:
        """Inline `allOf` and `$ref`s with siblings; check keyword types on the way."""
        out: list[_Sub] = []
        stack: list[tuple[_Sub, tuple[str, ...]]] = [(s, ()) for s in reversed(conj)]
        while stack:
            sub, refs = stack.pop()
            schema = sub.schema
            if schema is True:
                continue
            if schema is False:
                raise _Unsat(sub.ptr, "the schema is false")
            if not isinstance(schema, dict):
                raise SchemaError("a schema must be an object or a boolean", pointer=sub.ptr)
            _check_keywords(schema, sub.ptr, self.legacy)
            rest = schema
            if "$ref" in schema:
                target = self.resolve(schema["$ref"], sub)
                tkey = target.ptr + "@" + target.base
                if tkey in refs or len(refs) > 64:
                    raise UnsupportedSchemaError(
                        "a recursive $ref combined with other keywords (allOf or siblings) "
                        "cannot be inlined",
                        pointer=f"{sub.ptr}/$ref",
                    )
                rest = {k: v for k, v in schema.items() if k != "$ref"}
                if self.legacy:
                    rest = {}
                stack.append((target, (*refs, tkey)))
            if "allOf" in rest:
                items = rest["allOf"]
                rest = {k: v for k, v in rest.items() if k != "allOf"}
                for i in reversed(range(len(items))):
                    stack.append((self.child(sub, items[i], "allOf", i), refs))
            if rest is not schema:
                self.keep.append(rest)
                sub = _Sub(rest, sub.ptr, sub.base)
            if any(k in rest for k in _COMBINATORS) or any(k in _KNOWN for k in rest):
                out.append(sub)
        return out

    def _value_alternatives(self, conj: list[_Sub]) -> list[str]:
        flat = self.flatten(conj)
        for i, sub in enumerate(flat):
            found = next((k for k in _COMBINATORS if k in sub.schema), None)
            if found is None:
                continue
            rest = {k: v for k, v in sub.schema.items() if k not in _combinator_keys(found)}
            self.keep.append(rest)
            others = [*flat[:i], _Sub(rest, sub.ptr, sub.base), *flat[i + 1 :]]
            branches = self._disjunction(found, sub)
            self.branches += len(branches)
            if self.branches > self.opts.max_branches:
                raise LimitExceededError(
                    "the schema's combinators expand to too many alternatives",
                    limit="SchemaOptions.max_branches",
                    value=self.opts.max_branches,
                )
            out: list[str] = []
            first_unsat: _Unsat | None = None
            for branch in branches:
                try:
                    out.append(self.value([*others, *branch]))
                except _Unsat as exc:
                    first_unsat = first_unsat or exc
            if not out:
                assert first_unsat is not None
                raise first_unsat
            return list(dict.fromkeys(out))
        return self._plain(flat)

    def _disjunction(self, keyword: str, sub: _Sub) -> list[list[_Sub]]:
        """The alternatives one combinator keyword of `sub` stands for."""
        s = sub.schema
        if keyword == "anyOf":
            return [[self.child(sub, b, "anyOf", i)] for i, b in enumerate(s["anyOf"])]
        if keyword == "oneOf":
            branches = [self.child(sub, b, "oneOf", i) for i, b in enumerate(s["oneOf"])]
            if len(branches) < 2 or self._disjoint(branches):
                return [[b] for b in branches]
            # exactly one: branch i and the negation of every other branch
            try:
                negs = [self.negate(b) for b in branches]
            except UnsupportedSchemaError as exc:
                self.fail(
                    "oneOf branches that may overlap need their negations, and "
                    f"{exc.reason} at {exc.pointer} (treated as anyOf in lenient mode)",
                    f"{sub.ptr}/oneOf",
                )
                return [[b] for b in branches]
            return [
                [b, *(negs[j] for j in range(len(branches)) if j != i)]
                for i, b in enumerate(branches)
            ]
        if keyword == "not":
            neg = self.negate(self.child(sub, s["not"], "not"))
            return [[neg]]
        if keyword == "if":
            cond = self.child(sub, s["if"], "if")
            then = self.child(sub, s.get("then", True), "then")
            other = self.child(sub, s.get("else", True), "else")
            if "then" not in s and "else" not in s:
                return [[]]
            return [[cond, then], [self.negate(cond), other]]
        deps: list[tuple[str, JSON, str]] = []
        if keyword == "dependentRequired":
            deps = [(k, v, "dependentRequired") for k, v in s[keyword].items()]
        elif keyword == "dependentSchemas":
            deps = [(k, v, "dependentSchemas") for k, v in s[keyword].items()]
        else:
            for k, v in s[keyword].items():
                deps.append((k, v, "dependentRequired" if isinstance(v, list) else "deps"))
        alternatives: list[list[_Sub]] = [[]]
        for name, dep, kind in deps:
            absent = _Sub({"properties": {name: False}}, f"{sub.ptr}/{keyword}/{_esc(name)}", "")
            if kind == "dependentRequired":
                present = [_Sub({"required": [name, *dep]}, absent.ptr, sub.base)]
            else:
                present = [
                    _Sub({"required": [name]}, absent.ptr, sub.base),
                    self.child(sub, dep, keyword, name),
                ]
            self.keep.extend([absent.schema, present[0].schema])
            alternatives = [a + b for a in alternatives for b in ([absent], present)]
        return alternatives

    # ------------------------------------------------------------------ negation

    def negate(self, sub: _Sub, depth: int = 0) -> _Sub:
        """A positive schema for "not `sub`" (an `anyOf` of what fails each keyword)."""
        s = sub.schema
        ptr = sub.ptr
        if depth > 32:
            raise UnsupportedSchemaError("negation nests too deeply", pointer=ptr)
        if s is True or s == {}:
            return _Sub(False, ptr, sub.base)
        if s is False:
            return _Sub(True, ptr, sub.base)
        if not isinstance(s, dict):
            raise SchemaError("a schema must be an object or a boolean", pointer=ptr)
        _check_keywords(s, ptr, self.legacy)
        parts: list[JSON] = []
        subs: list[_Sub] = []

        def typed(kind: str, **kw: JSON) -> None:
            parts.append({"type": kind, **kw})

        for key, value in s.items():
            kp = f"{ptr}/{_esc(key)}"
            if key == "$ref":
                target = self.resolve(value, sub)
                subs.append(self.negate(target, depth + 1))
            elif key == "type":
                kinds = _kinds_of_type(value)
                parts.append({_KINDS_KW: sorted(ALL_KINDS - kinds)})
            elif key == _KINDS_KW:
                parts.append({_KINDS_KW: sorted(ALL_KINDS - frozenset(value))})
            elif key == "const":
                parts.append({_NOTIN_KW: [value]})
            elif key == "enum":
                parts.append({_NOTIN_KW: list(value)})
            elif key == _NOTIN_KW:
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
                    and self.legacy
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
                    neg = self.negate(self.child(sub, schema, key, name), depth + 1)
                    self.keep.append(neg)
                    parts.append(
                        {"type": "object", "required": [name], "properties": {name: neg.schema}}
                    )
            elif key == "items" and isinstance(value, (dict, bool)) and "prefixItems" not in s:
                neg = self.negate(self.child(sub, value, key), depth + 1)
                typed("array", contains=neg.schema)
            elif key == "contains" and "minContains" not in s and "maxContains" not in s:
                neg = self.negate(self.child(sub, value, key), depth + 1)
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
                    spec["schema"] = self.negate(self.child(sub, value, key), depth + 1).schema
                parts.append({"type": "object", _SOME_KW: [spec]})
            elif key == "patternProperties":
                for pat, schema in value.items():
                    if schema is True or schema == {}:
                        continue
                    self.patterns.node(pat, f"{kp}/{_esc(pat)}")  # an invalid pattern raises here
                    neg = self.negate(self.child(sub, schema, key, pat), depth + 1)
                    spec = {"exclude": [], "notPatterns": [], "pattern": pat, "schema": neg.schema}
                    parts.append({"type": "object", _SOME_KW: [spec]})
            elif key == "oneOf":
                branches = [self.child(sub, b, key, i) for i, b in enumerate(value)]
                negs = [self.negate(b, depth + 1) for b in branches]
                # none of the branches holds, or two of them do
                options: list[JSON] = [{"allOf": [n.schema for n in negs]}]
                infos = [self._summary(b) for b in branches]
                for i, j in itertools.combinations(range(len(branches)), 2):
                    if not _pair_disjoint(infos[i], infos[j]):
                        options.append({"allOf": [branches[i].schema, branches[j].schema]})
                parts.append({"anyOf": options})
            elif key == "pattern":
                parts.append({"type": "string", _NOTPAT_KW: [value]})
            elif key == _NOTPAT_KW:
                parts.extend({"type": "string", "pattern": p} for p in value)
            elif _inert(key, s):
                continue
            elif key == "allOf":
                for i, b in enumerate(value):
                    subs.append(self.negate(self.child(sub, b, key, i), depth + 1))
            elif key == "anyOf":
                negs = [
                    self.negate(self.child(sub, b, key, i), depth + 1) for i, b in enumerate(value)
                ]
                parts.append({"allOf": [n.schema for n in negs]})
            elif key == "not":
                subs.append(self.child(sub, value, key))
            elif (
                key == "format"
                and format_nodes(str(value)) is None
                and value not in KNOWN_UNSUPPORTED
            ):
                continue  # an unknown format is an annotation
            elif key in _KNOWN:
                raise UnsupportedSchemaError(
                    f"'not' over {key!r} cannot be enforced exactly", pointer=kp
                )
        if not parts and not subs:
            return _Sub(False, ptr, sub.base)  # `sub` asserts nothing: no value fails it
        negation: JSON = {"anyOf": parts + [x.schema for x in subs]}
        self.keep.append(negation)
        return _Sub(negation, ptr, sub.base)

    # ------------------------------------------------------------------ oneOf disjointness

    def _summary(
        self, sub: _Sub, depth: int = 0
    ) -> tuple[frozenset[str], list[JSON] | None, dict[str, JSON]]:
        """Kinds a branch admits, its finite values (or None), and its object facts."""
        try:
            flat = self.flatten([sub])
        except _Unsat:
            return frozenset(), [], {}
        kinds = ALL_KINDS
        values: list[JSON] | None = None
        facts: dict[str, JSON] = {"required": set(), "consts": {}, "closed": None}
        for f in flat:
            s = f.schema
            if "type" in s:
                kinds = kinds & _kinds_of_type(s["type"])
            if _KINDS_KW in s:
                kinds = kinds & frozenset(s[_KINDS_KW])
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
                    pk, pv, _ = self._summary(self.child(f, prop, "properties", name), depth + 1)
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

    def _disjoint(self, branches: list[_Sub]) -> bool:
        infos = [self._summary(b) for b in branches]
        for i in range(len(infos)):
            for j in range(i + 1, len(infos)):
                if not _pair_disjoint(infos[i], infos[j]):
                    return False
        return True

    # ------------------------------------------------------------------ plain conjunctions

    def _plain(self, flat: list[_Sub]) -> list[str]:
        kinds = ALL_KINDS
        for sub in flat:
            s = sub.schema
            if "type" in s:
                kinds = kinds & _kinds_of_type(s["type"])
            if _KINDS_KW in s:
                kinds = kinds & frozenset(s[_KINDS_KW])
        ptr = flat[0].ptr if flat else ""
        if not kinds:
            raise _Unsat(ptr, "no type satisfies every 'type' keyword")
        finite = [s for s in flat if "enum" in s.schema or "const" in s.schema]
        if finite:
            return self._finite(flat, finite, kinds)
        out: list[str] = []
        first: _Unsat | None = None
        builders = (
            ("null", self._null),
            ("boolean", self._boolean),
            ("number", self._number),
            ("string", self._string),
            ("array", self._array),
            ("object", self._object),
        )
        for kind, build in builders:
            wanted = kinds & (_TYPE_KINDS["number"] if kind == "number" else {kind})
            if not wanted:
                continue
            try:
                out.append(build(flat, wanted))
            except _Unsat as exc:
                first = first or exc
        if not out:
            raise first or _Unsat(ptr, "unsatisfiable")
        return out

    def _excluded(self, flat: list[_Sub]) -> list[JSON]:
        return [v for s in flat for v in s.schema.get(_NOTIN_KW, [])]

    def _null(self, flat: list[_Sub], kinds: frozenset[str]) -> str:
        if any(v is None for v in self._excluded(flat)):
            raise _Unsat(flat[0].ptr if flat else "", "null is excluded")
        return self.terminal(String("null"))

    def _boolean(self, flat: list[_Sub], kinds: frozenset[str]) -> str:
        excluded = self._excluded(flat)
        words = [
            w for w, v in (("true", True), ("false", False)) if not any(x is v for x in excluded)
        ]
        if not words:
            raise _Unsat(flat[0].ptr if flat else "", "both booleans are excluded")
        return self.terminal(alternation(String(w) for w in words))

    # ------------------------------------------------------------------ finite sets

    def validator(self) -> Any:
        if self._validator is None:
            from jsonschema import Draft202012Validator
            from jsonschema.validators import validator_for

            root = self.root if isinstance(self.root, dict) else {}
            cls = self.patterns.validator_class(validator_for(root, default=Draft202012Validator))
            self._validator = cls(self.root, format_checker=cls.FORMAT_CHECKER)
        return self._validator

    def _valid(self, value: JSON, flat: list[_Sub], *, source: _Sub | None = None) -> bool:
        base = self.validator()
        for sub in flat:
            s = sub.schema
            if sub is source and isinstance(s, dict):
                # `value` comes from this schema's own enum/const: check only the rest.
                s = {k: v for k, v in s.items() if k not in ("enum", "const")}
                if all(k in _ANNOTATIONS for k in s):
                    continue
            if isinstance(s, bool):
                if not s:
                    return False
                continue
            if _KINDS_KW in s and kind_of(value) not in s[_KINDS_KW]:
                return False
            if _NOTIN_KW in s and any(json_equal(value, v) for v in s[_NOTIN_KW]):
                return False
            if isinstance(value, str) and any(
                self.patterns.matches(p, value, sub.ptr, every=False) for p in s.get(_NOTPAT_KW, ())
            ):
                return False
            clean = _plain_schema(s)
            try:
                if not base.evolve(schema=clean).is_valid(value):
                    return False
            except Exception as exc:  # a schema jsonschema cannot evaluate
                raise UnsupportedSchemaError(
                    f"cannot evaluate enum/const against this schema: {exc}", pointer=sub.ptr
                ) from exc
        return True

    def _finite(self, flat: list[_Sub], finite: list[_Sub], kinds: frozenset[str]) -> list[str]:
        first = finite[0]
        s = first.schema
        values = [s["const"]] if "const" in s else list(s["enum"])
        kept = [v for v in values if kind_of(v) in kinds and self._valid(v, flat, source=first)]
        unique: list[JSON] = []
        seen: set[tuple[str, str]] = set()
        for v in kept:  # linear: enums can hold thousands of values
            canon = (type(v).__name__, _canonical(v))
            if canon not in seen:
                seen.add(canon)
                unique.append(v)
        if not unique:
            key = "const" if "const" in s else "enum"
            raise _Unsat(f"{first.ptr}/{key}", f"no value of {key} satisfies the schema")
        scalars: list[Node] = []
        words: list[str] = []
        out: list[str] = []
        for i, v in enumerate(unique):
            if isinstance(v, (dict, list)):
                out.append(self.value([_Sub(_literal_schema(v), f"{first.ptr}/enum/{i}", "")]))
            elif isinstance(v, str):
                words.append(v)
            else:
                scalars.append(self._scalar_text(v))
        if words:
            bodies = literal_bodies(words, canonical=self.canonical)
            scalars.append(concat([String('"'), bodies, String('"')]))
        if scalars:
            out.insert(0, self.terminal(alternation(scalars)))
        return out

    def _scalar_text(self, v: JSON) -> Node:
        if v is None:
            return String("null")
        if v is True:
            return String("true")
        if v is False:
            return String("false")
        if isinstance(v, str):
            return concat([String('"'), literal_body(v, canonical=self.canonical), String('"')])
        if self.canonical:
            return String(json.dumps(v))  # as a writer spells it: 3, 1.5, 1e+100
        return number_node(NumRange(v, v), integer=False)

    # ------------------------------------------------------------------ numbers

    def _number(self, flat: list[_Sub], kinds: frozenset[str]) -> str:
        rng = NumRange()
        multiples: list[int] = []
        ptr = flat[0].ptr if flat else ""
        for sub in flat:
            s = sub.schema
            for key in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
                if key not in s or isinstance(s[key], bool):
                    continue
                value = s[key]
                excl = key.startswith("exclusive")
                if not excl and self.legacy_excl(s, key):
                    excl = True
                if "inimum" in key:
                    rng.tighten_lo(value, excl)
                else:
                    rng.tighten_hi(value, excl)
            if "multipleOf" in s:
                m = s["multipleOf"]
                if isinstance(m, float) and m.is_integer():
                    m = int(Decimal(repr(m)))  # 1e30 as written (10**30), not the double's digits
                if isinstance(m, int) and not isinstance(m, bool):
                    multiples.append(m)
                else:
                    self.fail(
                        f"multipleOf {m!r} is not an integer; jsonschema judges it in floating "
                        "point, which no regular language matches exactly (ignored)",
                        f"{sub.ptr}/multipleOf",
                    )
        excluded = [v for v in self._excluded(flat) if kind_of(v) in ("integer", "nonint")]
        integer = "nonint" not in kinds
        if multiples:
            step = 1
            for m in multiples:
                step = step * m // math.gcd(step, m)
            integer = True
            if "integer" not in kinds:
                raise _Unsat(ptr, "multipleOf admits only integers here")
            if step > 1:
                return self._multiple(rng, step, excluded, ptr)
        ranges = _split_range(rng, excluded)
        if not ranges:
            raise _Unsat(ptr, "the numeric range is empty")
        nodes = [
            number_node(
                r, integer=integer, canonical=self.canonical, fractions=self.integer_fractions
            )
            for r in ranges
        ]
        node = alternation(nodes)
        if kinds == frozenset({"nonint"}):
            # drafts 3 and 4 (accepting): any text with a fraction or exponent is no integer;
            # generating offers only what every validator (ajv: `Number.isInteger`) agrees on
            if self.canonical:
                return self.terminal(node, (_CANONICAL_NONINT,))
            return self.terminal(node, (_NONINT if self.integer_fractions else _WRITTEN_NONINT,))
        return self.terminal(node)

    def legacy_excl(self, s: dict[str, JSON], key: str) -> bool:
        flag = {"minimum": "exclusiveMinimum", "maximum": "exclusiveMaximum"}.get(key)
        return flag is not None and s.get(flag) is True

    def _multiple(self, rng: NumRange, step: int, excluded: list[JSON], ptr: str) -> str:
        lo, hi = rng.int_bounds()
        if lo is not None and hi is not None:
            if lo > hi:
                raise _Unsat(ptr, "the numeric range is empty")
            first = -(-lo // step) * step
            count = (hi - first) // step + 1 if first <= hi else 0
            if count <= 0:
                raise _Unsat(ptr, "no multiple of multipleOf lies in the range")
            if count <= 2000:
                values = [
                    v
                    for v in range(first, hi + 1, step)
                    if not any(json_equal(v, e) for e in excluded)
                ]
                if not values:
                    raise _Unsat(ptr, "every multiple is excluded")
                return self.terminal(
                    alternation(
                        number_node(
                            NumRange(v, v),
                            integer=True,
                            canonical=self.canonical,
                            fractions=self.integer_fractions,
                        )
                        for v in values
                    )
                )
        if excluded:
            raise UnsupportedSchemaError("multipleOf with excluded values", pointer=ptr)
        # divisibility by `step` as a right-linear grammar over single-digit terminals; it
        # covers all integers (lo and hi open) or the non-negative ones (lo <= 0, hi open)
        if (lo is not None and lo > 0) or hi is not None:
            raise UnsupportedSchemaError(
                f"multipleOf {step} with a wide range cannot be enforced exactly", pointer=ptr
            )
        return self._divisible(step, negatives=lo is None)

    def _divisible(self, step: int, *, negatives: bool) -> str:
        key = ("divisible", step, negatives)
        if key in self.memo:
            return self.memo[key]
        name = self.new_rule("div")
        self.memo[key] = name
        zeros = 0  # a multiple of k * 10**z is 0 or a multiple of k followed by z zeros
        while step % 10 == 0:
            step //= 10
            zeros += 1
        digits = [self.terminal(String(str(d))) for d in range(10)]
        states = [self.new_rule(f"mod{step}_") for _ in range(step)]
        for r in range(step):
            if r == 0:
                self.add(states[r])
            for d in range(10):
                self.add(states[r], digits[d], states[(r * 10 + d) % step])
        zero = self.terminal(String("0"))
        self.add(name, zero)
        body = self.new_rule("divpos")
        if zeros:  # the multiple of k, then the zeros, each a digit (no lexeme to split)
            prefix = self.new_rule("divpre")
            for d in range(1, 10):
                self.add(prefix, digits[d], states[d % step])
            self.add(body, prefix, *([digits[0]] * zeros))
        else:
            for d in range(1, 10):
                self.add(body, digits[d], states[d % step])
        self.add(name, body)
        if negatives:
            self.add(name, self.terminal(String("-")), body)
            if not self.canonical:
                self.add(name, self.terminal(String("-0")))
        return name

    # ------------------------------------------------------------------ strings

    def string_parts(self, flat: list[_Sub]) -> tuple[list[Node], bool]:
        """Encoded body languages to intersect for strings satisfying `flat` (decoded rules)."""
        lo, hi = 0, None
        decoded: list[Node] = []
        for sub in flat:
            s = sub.schema
            if "minLength" in s:
                lo = max(lo, s["minLength"])
            if "maxLength" in s:
                hi = s["maxLength"] if hi is None else min(hi, s["maxLength"])
            if "pattern" in s:
                decoded.extend(self.pattern_nodes(s["pattern"], f"{sub.ptr}/pattern"))
            for pat in s.get(_NOTPAT_KW, ()):
                node = self.patterns.possible(pat, f"{sub.ptr}/not/pattern")
                decoded.append(self.complement(node, sub))
            if "format" in s:
                fmt = s["format"]
                nodes = format_nodes(fmt)
                if nodes is not None:
                    decoded.extend(nodes)
                elif fmt in KNOWN_UNSUPPORTED:
                    self.fail(f"format {fmt!r} is not supported (ignored)", f"{sub.ptr}/format")
        excluded = [v for v in self._excluded(flat) if isinstance(v, str)]
        if hi is not None and lo > hi:
            raise _Unsat(flat[0].ptr, "minLength is greater than maxLength")
        canonical = self.canonical
        parts = [encode(n, canonical=canonical) for n in decoded]
        if excluded:
            parts.append(not_in_set(excluded, canonical=canonical))
        if lo > 0 or hi is not None:
            parts.insert(0, length_body(lo, hi, canonical=canonical))
        return parts, bool(parts)

    def pattern_nodes(self, pattern: JSON, ptr: str) -> list[Node]:
        """The languages whose intersection is `pattern`'s (lookaheads after a leading `^`
        are languages of their own): `PatternReader.nodes`."""
        return self.patterns.nodes(pattern, ptr)

    def pattern_node(self, pattern: JSON, ptr: str) -> Node:
        return self.patterns.node(pattern, ptr)

    def _string(self, flat: list[_Sub], kinds: frozenset[str]) -> str:
        parts, constrained = self.string_parts(flat)
        if not constrained:
            return self.string_terminal(any_string_body(canonical=self.canonical))
        return self.string_terminal(parts[0], tuple(parts[1:]))

    # ------------------------------------------------------------------ arrays

    def _array(self, flat: list[_Sub], kinds: frozenset[str]) -> str:
        ptr = flat[0].ptr if flat else ""
        lo, hi = 0, None
        prefixes: list[tuple[_Sub, list[JSON]]] = []
        tails: list[_Sub] = []
        contains: _Sub | None = None
        cmin, cmax = 1, None
        for sub in flat:
            s = sub.schema
            lo = max(lo, s.get("minItems", 0))
            if "maxItems" in s:
                hi = s["maxItems"] if hi is None else min(hi, s["maxItems"])
            prefix = s.get("prefixItems")
            items = s.get("items")
            tail_key = "items"
            if isinstance(items, list):
                prefix, items, tail_key = items, s.get("additionalItems"), "additionalItems"
            elif prefix is None and "additionalItems" in s:
                pass  # additionalItems without a tuple `items` has no effect
            if prefix is not None:
                prefixes.append((sub, list(prefix)))
            if items is not None:
                tails.append(self.child(sub, items, tail_key))
            elif prefix is not None:
                tails.append(_Sub(True, sub.ptr, sub.base))
            if "contains" in s:
                if contains is not None:
                    raise UnsupportedSchemaError(
                        "several 'contains' on one array", pointer=f"{sub.ptr}/contains"
                    )
                contains = self.child(sub, s["contains"], "contains")
                cmin = s.get("minContains", 1)
                cmax = s.get("maxContains")
            if s.get("uniqueItems") is True and (hi is None or hi > 1) and self.unique is None:
                self.fail(
                    "uniqueItems cannot be enforced by a grammar (ignored)",
                    f"{sub.ptr}/uniqueItems",
                )
        if contains is not None and cmin == 0 and cmax is None:
            contains = None
        if hi is not None and lo > hi:
            raise _Unsat(ptr, "minItems is greater than maxItems")

        # schema of position i: each subschema's prefix entry or its tail
        def position(i: int) -> list[_Sub]:
            conj: list[_Sub] = []
            for sub, prefix in prefixes:
                if i < len(prefix):
                    conj.append(
                        self.child(
                            sub,
                            prefix[i],
                            "prefixItems" if "prefixItems" in sub.schema else "items",
                            i,
                        )
                    )
            for sub in flat:
                s = sub.schema
                prefix = s.get("prefixItems")
                items = s.get("items")
                if isinstance(items, list):
                    prefix, items, key = items, s.get("additionalItems"), "additionalItems"
                else:
                    key = "items"
                if prefix is not None and i < len(prefix):
                    continue
                if items is not None:
                    conj.append(self.child(sub, items, key))
            return conj

        width = max([len(p) for _, p in prefixes], default=0)
        # element rules per position (None: no value allowed there)
        elements: list[str | None] = []
        for i in range(width + 1):
            try:
                elements.append(self.value(position(i)))
            except _Unsat:
                elements.append(None)
        for i, e in enumerate(elements):
            if e is None:
                limit = i
                if lo > limit:
                    raise _Unsat(ptr, f"item {i} can never be valid but minItems is {lo}")
                hi = limit if hi is None else min(hi, limit)
                break
        counted: list[str | None] = []
        uncounted: list[str | None] = list(elements)
        if contains is not None:
            for i in range(width + 1):
                try:
                    counted.append(self.value([*position(i), contains]))
                except _Unsat:
                    counted.append(None)
            if cmax is not None:
                neg = self.negate(contains)
                uncounted = []
                for i in range(width + 1):
                    try:
                        uncounted.append(self.value([*position(i), neg]))
                    except _Unsat:
                        uncounted.append(None)
        cap = 0 if contains is None else (cmax + 1 if cmax is not None else cmin)
        index_cap = max(width, lo, 1)
        sep = self.punct(",")
        states: dict[tuple[int, int], str] = {}
        todo: list[tuple[int, int]] = []
        total = (hi if hi is not None else index_cap) + 1
        if total * (cap + 1) > self.opts.max_rules:
            raise LimitExceededError(
                "the array's item counts need too many grammar rules",
                limit="SchemaOptions.max_rules",
                value=self.opts.max_rules,
            )

        def state(i: int, c: int) -> str:
            if hi is None:
                i = min(i, index_cap)
            c = min(c, cap)
            key = (i, c)
            if key not in states:
                states[key] = self.new_rule("arr")
                todo.append(key)
            return states[key]

        start = state(0, 0)
        while todo:
            i, c = todo.pop()
            name = states[(i, c)]
            if contains is not None and cmax is not None and c > cmax:
                continue  # too many matches: a dead state
            if i >= lo and (contains is None or c >= cmin):
                self.add(name)
            if hi is not None and i >= hi:
                continue
            k = min(i, width)
            prefix_sym = [sep] if i > 0 else []
            if uncounted[k] is not None:
                self.add(name, *prefix_sym, uncounted[k], state(i + 1, c))  # type: ignore[arg-type]
            if (
                contains is not None
                and counted[k] is not None
                and c < cap
                and (cmax is None or c < cmax)  # one more match would be too many: no edge
            ):
                self.add(name, *prefix_sym, counted[k], state(i + 1, c + 1))  # type: ignore[arg-type]
        rule = self.new_rule("array")
        self.add(rule, self.punct("["), start, self.punct("]"))
        return rule

    # ------------------------------------------------------------------ objects

    def _object(self, flat: list[_Sub], kinds: frozenset[str]) -> str:
        ptr = flat[0].ptr if flat else ""
        lo, hi = 0, None
        order: list[str] = []
        required: list[str] = []
        for sub in flat:
            s = sub.schema
            for name in s.get("properties") or {}:
                if name not in order:
                    order.append(name)
            for name in s.get("required", []):
                if name not in required:
                    required.append(name)
            lo = max(lo, s.get("minProperties", 0))
            if "maxProperties" in s:
                hi = s["maxProperties"] if hi is None else min(hi, s["maxProperties"])
        for name in required:
            if name not in order:
                order.append(name)
        if hi is not None and lo > hi:
            raise _Unsat(ptr, "minProperties is greater than maxProperties")

        names_schemas = [
            self.child(sub, sub.schema["propertyNames"], "propertyNames")
            for sub in flat
            if "propertyNames" in sub.schema
        ]
        # "some member" constraints (negated additionalProperties/patternProperties): one flag
        # each in the rule states, set by a member whose key and value qualify
        musts = [(sub, spec) for sub in flat for spec in sub.schema.get(_SOME_KW, [])]
        if len(musts) > _MAX_SOME:
            raise UnsupportedSchemaError(
                f"more than {_MAX_SOME} negated additionalProperties/patternProperties on one "
                "object",
                pointer=ptr,
            )
        full = (1 << len(musts)) - 1

        def options(conj: list[_Sub], rule: str, qualifying: list[int]) -> list[tuple[str, int]]:
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
                    more = [
                        _Sub(musts[j][1]["schema"], musts[j][0].ptr, musts[j][0].base)
                        for j in combo
                    ]
                    try:
                        out.append((self.value([*conj, *more]), trivial | _bits(combo)))
                    except _Unsat:
                        continue
            return out

        declared: list[tuple[str, list[tuple[str, int]], bool]] = []  # name, options, required
        for name in order:
            conj: list[_Sub] = []
            for sub in flat:
                s = sub.schema
                props = s.get("properties") or {}
                matched = False
                if name in props:
                    conj.append(self.child(sub, props[name], "properties", name))
                    matched = True
                for pat, schema in (s.get("patternProperties") or {}).items():
                    where = f"{sub.ptr}/patternProperties"
                    if self.patterns.matches(pat, name, where, every=False):
                        conj.append(self.child(sub, schema, "patternProperties", pat))
                        matched = True
                if not matched and "additionalProperties" in s:
                    conj.append(self.child(sub, s["additionalProperties"], "additionalProperties"))
            ok = all(self._valid(name, [n]) for n in names_schemas)
            rule: str | None = None
            if ok:
                try:
                    rule = self.value(conj)
                except _Unsat:
                    rule = None
            if rule is None:
                if name in required:
                    raise _Unsat(
                        f"{ptr}/required", f"required property {name!r} can never be valid"
                    )
                continue
            qualifying = [
                j for j, (s, spec) in enumerate(musts) if self.patterns.qualifies(name, spec, s.ptr)
            ]
            declared.append((name, options(conj, rule, qualifying), name in required))

        members, make_key = self._extra_members(flat, order, names_schemas, ptr)
        if self._closed_by_default(flat, musts, len(order), lo):
            members = []
        extra: list[tuple[str, str, int]] = []  # key terminal, value rule, flags it sets
        key_sets = [self._some_keys(sub, spec) for sub, spec in musts]
        for langs, conj, value_rule in members:
            extra.append((make_key(langs, []), value_rule, 0))
            for size in range(1, len(musts) + 1):
                for combo in itertools.combinations(range(len(musts)), size):
                    keys_in = [node for j in combo for node in key_sets[j]]
                    for rule, flags in options(conj, value_rule, list(combo)):
                        if flags == _bits(combo):
                            extra.append((make_key(langs, keys_in), rule, flags))
        cap = hi if hi is not None else lo
        n = len(declared)
        if (n + 1) * (cap + 1) * 2 * (full + 1) > self.opts.max_rules:
            raise LimitExceededError(
                "the object's property counts need too many grammar rules",
                limit="SchemaOptions.max_rules",
                value=self.opts.max_rules,
            )
        sep = self.punct(",")
        states: dict[tuple[int, int, bool, int], str] = {}
        todo: list[tuple[int, int, bool, int]] = []

        def state(i: int, c: int, first: bool, f: int) -> str:
            c = min(c, cap)
            key = (i, c, first, f)
            if key not in states:
                states[key] = self.new_rule("obj")
                todo.append(key)
            return states[key]

        keys = [
            self.key_terminal(literal_body(name, canonical=self.canonical))
            for name, _, _ in declared
        ]
        start = state(0, 0, True, 0)
        while todo:
            i, c, first, f = todo.pop()
            name = states[(i, c, first, f)]
            lead = [] if first else [sep]
            if i < n:
                _, opts, req = declared[i]
                if hi is None or c < hi:
                    for rule, flags in opts:
                        self.add(name, *lead, keys[i], rule, state(i + 1, c + 1, False, f | flags))
                if not req:
                    self.add(name, state(i + 1, c, first, f))
                continue
            if c >= lo and f == full:
                self.add(name)
            if hi is None or c < hi:
                for key_term, value_rule, flags in extra:
                    self.add(name, *lead, key_term, value_rule, state(n, c + 1, False, f | flags))
        rule = self.new_rule("object")
        self.add(rule, self.punct("{"), start, self.punct("}"))
        return rule

    def _closed_by_default(
        self, flat: list[_Sub], musts: list[Any], declared: int, min_count: int
    ) -> bool:
        """Whether generate mode offers no keys beyond the declared ones: a subschema lists
        `properties` and none says anything of other keys (as OpenAI's strict mode and xgrammar
        do; accept mode keeps JSON Schema's open default). Keys that `required` names are
        declared; an object that `minProperties` forces past them stays open."""
        if not self.canonical or musts or min_count > declared:
            return False
        if not any(sub.schema.get("properties") for sub in flat):
            return False
        open_keys = ("additionalProperties", "patternProperties", "propertyNames",
                     "unevaluatedProperties")  # fmt: skip
        return not any(key in sub.schema for sub in flat for key in open_keys)

    def _some_keys(self, sub: _Sub, spec: dict[str, JSON]) -> list[Node]:
        """The encoded key languages whose intersection is a "some member" key set."""
        out: list[Node] = []
        canonical = self.canonical
        if spec["exclude"]:
            out.append(not_in_set(spec["exclude"], canonical=canonical))
        where = f"{sub.ptr}/{_esc(_SOME_KW)}"
        if spec["notPatterns"]:
            nodes = [self.patterns.possible(p, where) for p in spec["notPatterns"]]
            out.append(encode(self.complement(alternation(nodes), sub), canonical=canonical))
        if spec["pattern"] is not None:
            out.append(encode(self.pattern_node(spec["pattern"], where), canonical=canonical))
        return out

    def _extra_members(
        self, flat: list[_Sub], declared: list[str], names_schemas: list[_Sub], ptr: str
    ) -> tuple[list[tuple[list[Node], list[_Sub], str]], Any]:
        """Members for keys beyond the declared ones: (decoded key languages to intersect,
        value conjunction, value rule) triples, and `make_key(decoded, encoded)` building the
        key terminal of such languages (with the declared-name and `propertyNames` limits).

        An extra key must satisfy each subschema's policy: its `patternProperties` schemas when
        it matches one, else its `additionalProperties`. Keys are built as "not a declared name"
        ∩ the matched pattern ∩ `propertyNames`; the complement of a pattern is not built, so
        `patternProperties` with `additionalProperties` other than false is unsupported.
        """
        name_parts: list[Node] = []
        for ns in names_schemas:
            name_parts.extend(self._names_language(ns))
        canonical = self.canonical
        base_key = not_in_set(declared, canonical=canonical) if declared else None

        def trivial(sub: _Sub) -> bool:
            pats = sub.schema.get("patternProperties") or {}
            addl = sub.schema.get("additionalProperties", True)
            return addl in (True, {}) and all(v is True or v == {} for v in pats.values())

        def key_terminal(decoded: list[Node], encoded: list[Node]) -> str:
            enc = [encode(d, canonical=canonical) for d in decoded] + encoded + name_parts
            enc += [base_key] if base_key else []
            if not enc:
                return self.key_terminal(any_string_body(canonical=canonical))
            return self.key_terminal(enc[0], tuple(enc[1:]))

        patterned = [s for s in flat if s.schema.get("patternProperties") and not trivial(s)]
        others = [s for s in flat if s not in patterned and "additionalProperties" in s.schema]
        if any(s.schema["additionalProperties"] is False for s in others):
            return [], key_terminal
        other_conj = [
            self.child(s, s.schema["additionalProperties"], "additionalProperties") for s in others
        ]
        if not patterned:
            try:
                value = self.value(other_conj)
            except _Unsat:
                return [], key_terminal
            return [([], other_conj, value)], key_terminal
        if len(patterned) > 1:
            self.fail(
                "patternProperties in several allOf branches are not supported "
                "(only the first one's patterns are used in lenient mode)",
                f"{patterned[1].ptr}/patternProperties",
            )
        sub = patterned[0]
        pats = list(sub.schema["patternProperties"].items())
        nodes = [self.pattern_node(p, f"{sub.ptr}/patternProperties/{_esc(p)}") for p, _ in pats]
        # keys that some dialect matches (what "does not match" must exclude)
        wide = [
            self.patterns.possible(p, f"{sub.ptr}/patternProperties/{_esc(p)}") for p, _ in pats
        ]
        out: list[tuple[list[Node], list[_Sub], str]] = []
        # keys matching exactly the patterns in `group`: a value for each group of patterns
        groups: list[tuple[list[int], list[Node]]] = []
        overlapping = any(
            not _same(pats[i][1], pats[j][1]) and not _overlap_free(wide[i], wide[j])
            for i in range(len(pats))
            for j in range(i + 1, len(pats))
        )
        if not overlapping:
            groups = [([i], [nodes[i]]) for i in range(len(pats))]
        elif len(pats) <= 4:
            for size in range(1, len(pats) + 1):
                for combo in itertools.combinations(range(len(pats)), size):
                    langs = [nodes[i] for i in combo]
                    langs += [
                        self.complement(wide[j], sub) for j in range(len(pats)) if j not in combo
                    ]
                    groups.append((list(combo), langs))
        else:
            self.fail(
                "more than 4 overlapping patternProperties with different schemas",
                f"{sub.ptr}/patternProperties",
            )
            groups = [([i], [nodes[i]]) for i in range(len(pats))]
        for group, langs in groups:
            conj = [self.child(sub, pats[i][1], "patternProperties", pats[i][0]) for i in group]
            conj += other_conj
            try:
                value = self.value(conj)
            except _Unsat:
                continue
            out.append((langs, conj, value))
        addl = sub.schema.get("additionalProperties", True)
        if addl is not False:
            rest = [self.complement(alternation(wide), sub)]
            conj = [self.child(sub, addl, "additionalProperties"), *other_conj]
            with contextlib.suppress(_Unsat):
                out.append((rest, conj, self.value(conj)))
        return out, key_terminal

    def complement(self, node: Node, sub: _Sub) -> Node:
        try:
            return complement(node)
        except RegexError as exc:
            raise UnsupportedSchemaError(
                f"the complement of these patterns is too large: {exc.reason}",
                pointer=f"{sub.ptr}/patternProperties",
            ) from exc

    def _names_language(self, sub: _Sub) -> list[Node]:
        """Encoded key bodies allowed by `propertyNames` (strings only matter for keys)."""
        try:
            flat = self.flatten([sub])
        except _Unsat:
            return [CharClass(())]
        for f in flat:
            if any(k in f.schema for k in _COMBINATORS):
                raise UnsupportedSchemaError(
                    "propertyNames with combinators is not supported", pointer=sub.ptr
                )
            if "type" in f.schema and "string" not in _kinds_of_type(f.schema["type"]):
                return [CharClass(())]
        finite = [f for f in flat if "enum" in f.schema or "const" in f.schema]
        if finite:
            s = finite[0].schema
            values = [s["const"]] if "const" in s else list(s["enum"])
            words = [v for v in values if isinstance(v, str) and self._valid(v, flat)]
            return [alternation(literal_body(w, canonical=self.canonical) for w in words)]
        parts, _ = self.string_parts(flat)
        return parts


def _inert(key: str, s: dict[str, JSON]) -> bool:
    """Keywords that assert nothing without their partner (`then` without `if`...)."""
    if key in ("then", "else"):
        return "if" not in s
    if key in ("minContains", "maxContains"):
        return "contains" not in s
    return key == "additionalItems" and not isinstance(s.get("items"), list)


def _same(a: JSON, b: JSON) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _combinator_keys(found: str) -> tuple[str, ...]:
    if found == "if":
        return ("if", "then", "else")
    return (found,)


def _kinds_of_type(value: JSON) -> frozenset[str]:
    names = [value] if isinstance(value, str) else list(value)
    out: frozenset[str] = frozenset()
    for n in names:
        out |= _TYPE_KINDS.get(n, frozenset())
    return out


def _literal_schema(value: JSON) -> JSON:
    """A schema accepting exactly one array/object value (members in their given order)."""
    if isinstance(value, list):
        return {"type": "array", "prefixItems": [_const(v) for v in value], "items": False,
                "minItems": len(value)}  # fmt: skip
    return {
        "type": "object",
        "properties": {k: _const(v) for k, v in value.items()},
        "required": list(value),
        "additionalProperties": False,
    }


def _const(value: JSON) -> JSON:
    if isinstance(value, (dict, list)):
        return _literal_schema(value)
    return {"const": value}


def _split_range(rng: NumRange, excluded: list[JSON]) -> list[NumRange]:
    """`rng` minus single excluded values, as ranges with exclusive ends at each of them."""
    pieces = [rng]
    for v in sorted({float(x) if isinstance(x, float) else x for x in excluded}):
        out: list[NumRange] = []
        for r in pieces:
            inside_lo = r.lo is None or v > r.lo or (v == r.lo and not r.lo_excl)
            inside_hi = r.hi is None or v < r.hi or (v == r.hi and not r.hi_excl)
            if not (inside_lo and inside_hi):
                out.append(r)
                continue
            out.append(NumRange(r.lo, v, lo_excl=r.lo_excl, hi_excl=True))
            out.append(NumRange(v, r.hi, lo_excl=True, hi_excl=r.hi_excl))
        pieces = out
    return [p for p in pieces if not _empty_range(p)]


def _empty_range(r: NumRange) -> bool:
    if r.lo is None or r.hi is None:
        return False
    return r.lo > r.hi or (r.lo == r.hi and (r.lo_excl or r.hi_excl))


def _bits(indices: Iterator[int] | tuple[int, ...] | list[int]) -> int:
    out = 0
    for j in indices:
        out |= 1 << j
    return out


def _plain_schema(schema: JSON) -> JSON:
    """`schema` with the compiler's internal keywords (at any depth) spelled as standard JSON
    Schema, for jsonschema to judge `enum`/`const` members against it (a fresh copy)."""
    if isinstance(schema, list):
        return [_plain_schema(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, JSON] = {}
    extra: list[JSON] = []
    for key, value in schema.items():
        if key in ("enum", "const", "default", "examples"):
            out[key] = value
        elif key == _KINDS_KW:
            extra.append({"anyOf": [_KIND_SCHEMAS[k] for k in value] or [False]})
        elif key == _NOTIN_KW:
            extra.append({"not": {"enum": list(value)}})
        elif key == _NOTPAT_KW:
            extra.append({"not": {"type": "string", "anyOf": [{"pattern": p} for p in value]}})
        elif key == _SOME_KW:
            for spec in value:
                negated: JSON = {"not": _plain_schema(spec["schema"])}
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
            out[key] = _plain_schema(value)
    if extra:
        out["allOf"] = [*out.get("allOf", []), *extra]
    return out


_KIND_SCHEMAS: dict[str, JSON] = {
    **{k: {"type": k} for k in ("null", "boolean", "object", "array", "string")},
    # as `kind_of` decides, under every draft (draft 4 would not call 1.0 an integer)
    "integer": {"type": "number", "multipleOf": 1},
    "nonint": {"type": "number", "not": {"multipleOf": 1}},
}


def _overlap_free(a: Node, b: Node) -> bool:
    try:
        return intersect(compile_ast(a), compile_ast(b)).is_empty
    except StructgenError:
        return False


def _pair_disjoint(
    a: tuple[frozenset[str], list[JSON] | None, dict[str, JSON]],
    b: tuple[frozenset[str], list[JSON] | None, dict[str, JSON]],
) -> bool:
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


# Keywords that assert something (everything else is an annotation or unknown: ignored).
_KNOWN = frozenset(
    {
        "type", "enum", "const", "properties", "required", "additionalProperties",
        "patternProperties", "propertyNames", "minProperties", "maxProperties", "items",
        "prefixItems", "additionalItems", "minItems", "maxItems", "contains", "minContains",
        "maxContains", "uniqueItems", "anyOf", "oneOf", "allOf", "not", "$ref", "if", "then",
        "else", "dependentRequired", "dependentSchemas", "dependencies", "minLength",
        "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "multipleOf", "unevaluatedProperties", "unevaluatedItems",
        "$dynamicRef", "$recursiveRef", _KINDS_KW, _NOTIN_KW, _NOTPAT_KW, _SOME_KW,
    }
)  # fmt: skip


def _check_keywords(s: dict[str, JSON], ptr: str, legacy: bool) -> None:
    """Reject malformed keyword values (SchemaError) and unsupported keywords."""

    def bad(key: str, what: str) -> SchemaError:
        return SchemaError(f"{key} must be {what}", pointer=f"{ptr}/{_esc(key)}")

    for key, value in s.items():
        if key == "type":
            names = [value] if isinstance(value, str) else value
            if not isinstance(names, list) or not names or any(n not in _TYPE_KINDS for n in names):
                raise bad(key, "a JSON type name or a non-empty list of them")
        elif key in ("minLength", "maxLength", "minItems", "maxItems", "minProperties",
                     "maxProperties", "minContains", "maxContains"):  # fmt: skip
            if isinstance(value, float) and value.is_integer():
                s[key] = value = int(value)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise bad(key, "a non-negative integer")
        elif key in ("minimum", "maximum"):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise bad(key, "a number")
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            if not isinstance(value, (int, float)):
                raise bad(key, "a number")
        elif key == "multipleOf":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise bad(key, "a number greater than 0")
        elif key == "required":
            if not isinstance(value, list) or any(not isinstance(n, str) for n in value):
                raise bad(key, "a list of strings")
        elif key == "enum":
            if not isinstance(value, list):
                raise bad(key, "an array")
        elif key in ("properties", "patternProperties", "dependentSchemas", "$defs", "definitions"):
            if not isinstance(value, dict):
                raise bad(key, "an object")
        elif key == "dependentRequired":
            if not isinstance(value, dict) or any(
                not isinstance(v, list) or any(not isinstance(x, str) for x in v)
                for v in value.values()
            ):
                raise bad(key, "an object of string lists")
        elif key == "dependencies":
            if not isinstance(value, dict):
                raise bad(key, "an object")
        elif key in ("allOf", "anyOf", "oneOf", "prefixItems"):
            if not isinstance(value, list) or (key != "prefixItems" and not value):
                raise bad(key, "a non-empty array of schemas")
        elif key in ("pattern",) or key == "format":
            if not isinstance(value, str):
                raise bad(key, "a string")
        elif key == "uniqueItems":
            if not isinstance(value, bool):
                raise bad(key, "a boolean")
        elif key in ("unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"):
            if value is True or value == {}:
                continue
            raise UnsupportedSchemaError(f"{key} is not supported", pointer=f"{ptr}/{_esc(key)}")
        elif key in ("additionalProperties", "additionalItems", "items", "contains",
                     "propertyNames", "not", "if", "then", "else"):  # fmt: skip
            ok = isinstance(value, (dict, bool)) or (key == "items" and isinstance(value, list))
            if not ok:
                raise bad(key, "a schema")


def iter_terminals(grammar: Grammar) -> Iterator[TerminalDef]:
    yield from grammar.terminals
