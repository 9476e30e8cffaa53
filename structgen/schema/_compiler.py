"""JSON Schema → grammar IR: one rule per (sub)schema, one terminal per scalar value or key.

The compiler works on *conjunctions*: a list of subschemas that must all hold for one value.
The phases, one module each:

- `_refs.py` resolves `$ref`s (pointers, `$id`, `$anchor`); `_keywords.py` checks each
  keyword's value and holds the keyword lists;
- here, `flatten` inlines `allOf` and `$ref`s with sibling keywords into the conjunction, and
  disjunctions (`_combinators.py`: `anyOf`, disjoint `oneOf`, `if`/`then`/`else`,
  dependencies, `not` turned into positive forms) are distributed into alternative rules;
  `enum`/`const` become the finite set of members that validate against the whole conjunction
  (decided by jsonschema itself);
- what remains is read by type into typed forms (`_forms.py`) and emitted as terminals and rules
  (`_scalars.py` for null, booleans, numbers and strings; `_arrays.py`; `_objects.py`) through
  the grammar emitter (`_emitter.py`: terminals, punctuation with its whitespace, keys).

A pure `$ref` is a rule reference, so recursive schemas stay recursive.
See docs/design/json-schema.md.
"""

from __future__ import annotations

import warnings
from typing import Any

from structgen._budget import check_budget
from structgen.automata import AutomataLimits, Node, alternation
from structgen.automata.codepoint_dfa import complement
from structgen.errors import (
    LimitExceededError,
    RegexError,
    SchemaError,
    UnsupportedSchemaError,
    detached,
)
from structgen.grammar.ir import Grammar
from structgen.schema._arrays import array_rule
from structgen.schema._combinators import disjunction
from structgen.schema._emitter import GrammarEmitter
from structgen.schema._forms import (
    Unsat,
    read_array,
    read_number,
    read_object,
    read_string,
)
from structgen.schema._keywords import (
    ALL_KINDS,
    ANNOTATIONS,
    COMBINATORS,
    JSON,
    KINDS_KW,
    KNOWN,
    NOTIN_KW,
    NOTPAT_KW,
    TYPE_KINDS,
    check_keywords,
    combinator_keys,
    json_equal,
    kind_of,
    narrow_kinds,
    plain_schema,
    value_key,
)
from structgen.schema._objects import object_rule
from structgen.schema._patterns import DIALECT_KEYWORD, PatternReader
from structgen.schema._refs import RefIndex, Sub
from structgen.schema._scalars import (
    boolean_rule,
    null_rule,
    number_rule,
    scalar_text,
    string_rule,
    string_words,
)

#: the keywords that make a subschema constrain anything (`flatten` keeps the others out)
_CONSTRAINING = frozenset(COMBINATORS) | KNOWN

__all__ = ["SchemaCompiler"]

_LEGACY_DRAFTS = ("draft-03", "draft-04", "draft-06", "draft-07")


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
        self.memo: dict[tuple[Any, ...], str] = {}
        self.ref_memo: dict[str, str] = {}
        # the same subschema written at several places (inlined definitions) compiles once: by
        # (content, base URI) — not in lenient mode, where each place warns with its pointer
        self.content_memo: dict[tuple[Any, ...], str] | None = None if options.lenient else {}
        self._contents: dict[int, tuple[Any, Any]] = {}  # id -> (object held, content key)
        self._interned: dict[Any, int] = {}
        self.keep: list[Any] = []
        # schemas whose keywords were checked, by id (held: an id is not reused meanwhile); a
        # subschema is flattened once per conjunction it takes part in
        self._checked: dict[int, Any] = {}
        self.branches = 0
        self._values = 0  # value() calls so far (the budget is checked every few)
        self.legacy = isinstance(root, dict) and any(
            d in str(root.get("$schema", "")) for d in _LEGACY_DRAFTS
        )
        # drafts 3 and 4: an integer is written without a fraction (`1.0` is not one)
        self.integer_fractions = not (
            isinstance(root, dict)
            and any(d in str(root.get("$schema", "")) for d in ("draft-03", "draft-04"))
        )
        self.refs = RefIndex(root, legacy=self.legacy)
        self.emit = GrammarEmitter(options, self.limits)
        # patterns in the validator's dialect: ECMA-262 for JSON Schema, a Pydantic model's
        # engine for its schema (`_patterns.py`); generate mode: what every dialect accepts
        dialect = root.get(DIALECT_KEYWORD) if isinstance(root, dict) else None
        self.patterns = PatternReader(
            dialect if dialect in ("rust", "python") else "ecma",
            generate=options.mode == "generate",
            lenient=options.lenient,
        )
        # generate mode: one spelling per value (json.dumps'), literal keys, plain integers,
        # no unlisted properties where a schema lists some (see `_objects.closed_by_default`)
        self.canonical = options.mode == "generate"
        self._validator: Any = None
        # `valid`'s per-schema plans, by (id of the schema, whether the value comes from it)
        self._plans: dict[tuple[int, bool], tuple[JSON, Any]] = {}

    # ------------------------------------------------------------------ plumbing

    def fail(self, reason: str, ptr: str) -> None:
        """Raise `UnsupportedSchemaError`, or warn and carry on in lenient mode."""
        if not self.opts.lenient:
            raise UnsupportedSchemaError(reason, pointer=ptr)
        warnings.warn(f"structgen relaxed {ptr or '/'}: {reason}", stacklevel=4)

    def resolve(self, ref: Any, sub: Sub) -> Sub:
        return self.refs.resolve(ref, sub)

    def child(self, sub: Sub, value: JSON, *path: str | int) -> Sub:
        return self.refs.child(sub, value, *path)

    def root_sub(self) -> Sub:
        """The root schema as a subschema (pointer "", the root's base URI)."""
        return self.refs.root_sub()

    def complement(self, node: Node, sub: Sub) -> Node:
        """The strings not in `node` (for patterns that must not match)."""
        try:
            return complement(node)
        except RegexError as exc:
            raise UnsupportedSchemaError(
                f"the complement of these patterns is too large: {exc.reason}",
                pointer=f"{sub.ptr}/patternProperties",
            ) from exc

    # ------------------------------------------------------------------ entry

    def compile(self) -> Grammar:
        top = self.root_sub()
        if self.guard_unique:
            from structgen.schema._unique import find_unique_arrays

            self.unique = find_unique_arrays(self, KNOWN)
        try:
            start = self.value([top])
        except Unsat as exc:
            raise SchemaError(
                f"the schema is unsatisfiable: {exc.reason}", pointer=exc.pointer
            ) from None
        return self.emit.grammar(start)

    # ------------------------------------------------------------------ values

    def value(self, conj: list[Sub]) -> str:
        """The rule (or terminal) for values satisfying every subschema of `conj`."""
        self._values += 1
        if not self._values & 7:  # (every 8th call: a check is a thread-local read and a clock)
            check_budget()
        conj = [s for s in conj if s.schema is not True and s.schema != {}]
        if len(conj) == 1 and self._pure_ref(conj[0].schema):
            target = self.resolve(conj[0].schema["$ref"], conj[0])
            name = self.ref_memo.get(target.ptr + "@" + target.base)
            if name is not None:
                return name
            name = self.emit.new_rule("ref")
            self.ref_memo[target.ptr + "@" + target.base] = name
            self.emit.add(name, self.value([target]))
            return name
        key = tuple((id(s.schema), s.ptr, s.base) for s in conj)
        name = self.memo.get(key)
        if name is not None:
            return name
        same = self.content_memo
        if same is not None:
            ckey = tuple((self._content(s.schema), s.base) for s in conj)
            name = same.get(ckey)
            if name is not None:
                self.memo[key] = name
                return name
        self.keep.append(conj)
        name = self.emit.new_rule("v")
        self.memo[key] = name
        try:
            alternatives = self._value_alternatives(conj)
        except Unsat:
            del self.memo[key]
            raise
        for alt in alternatives:
            self.emit.add(name, alt)
        if same is not None:
            same[ckey] = name
        return name

    def _content(self, value: JSON) -> Any:
        """A key equal for equal JSON (keys in their order: it is the generated order), an int
        per container interned bottom-up, so that a deep subschema hashes in one step."""
        hit = self._contents.get(id(value))
        if hit is not None:
            return hit[1]
        kind = type(value)
        if kind is dict:
            body: Any = tuple([(k, self._content(v)) for k, v in value.items()])
        elif kind is list or kind is tuple:
            body = (kind.__name__, *[self._content(v) for v in value])
        elif kind is str:
            return value
        elif kind is float:
            return (kind, repr(value))  # (-0.0 == 0.0, but json.dumps spells them apart)
        elif kind in (int, bool) or value is None:
            return (kind, value)
        else:  # (not JSON, e.g. a set in an annotation a Python caller wrote: equal to itself)
            body = ("object", id(value))
        interned = self._interned
        found = interned.get(body)
        if found is None:
            found = interned[body] = len(interned)
        self._contents[id(value)] = (value, found)
        return found

    def _pure_ref(self, schema: JSON) -> bool:
        if not isinstance(schema, dict) or "$ref" not in schema:
            return False
        if self.legacy:
            return True
        return all(k == "$ref" or k in ANNOTATIONS or k not in KNOWN for k in schema)

    def flatten(self, conj: list[Sub]) -> list[Sub]:
        """Inline `allOf` and `$ref`s with siblings; check keyword types on the way."""
        out: list[Sub] = []
        stack: list[tuple[Sub, tuple[str, ...]]] = [(s, ()) for s in reversed(conj)]
        while stack:
            sub, refs = stack.pop()
            schema = sub.schema
            if schema is True:
                continue
            if schema is False:
                raise Unsat(sub.ptr, "the schema is false")
            if not isinstance(schema, dict):
                raise SchemaError("a schema must be an object or a boolean", pointer=sub.ptr)
            if id(schema) not in self._checked:
                check_keywords(schema, sub.ptr, self.legacy)
                self._checked[id(schema)] = schema
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
                sub = Sub(rest, sub.ptr, sub.base)
            if not _CONSTRAINING.isdisjoint(rest):  # (a combinator or a known keyword)
                out.append(sub)
        return out

    def _value_alternatives(self, conj: list[Sub]) -> list[str]:
        flat = self.flatten(conj)
        for i, sub in enumerate(flat):
            found = next((k for k in COMBINATORS if k in sub.schema), None)
            if found is None:
                continue
            rest = {k: v for k, v in sub.schema.items() if k not in combinator_keys(found)}
            self.keep.append(rest)
            others = [*flat[:i], Sub(rest, sub.ptr, sub.base), *flat[i + 1 :]]
            branches = disjunction(self, found, sub)
            self.branches += len(branches)
            if self.branches > self.opts.max_branches:
                raise LimitExceededError(
                    "the schema's combinators expand to too many alternatives",
                    limit="SchemaOptions.max_branches",
                    value=self.opts.max_branches,
                )
            out: list[str] = []
            first_unsat: Unsat | None = None
            for branch in branches:
                try:
                    out.append(self.value([*others, *branch]))
                except Unsat as exc:
                    first_unsat = first_unsat or detached(exc)
            if not out:
                assert first_unsat is not None
                try:
                    raise first_unsat
                finally:  # (see `_plain`)
                    first_unsat = None
            return list(dict.fromkeys(out))
        return self._plain(flat)

    def _plain(self, flat: list[Sub]) -> list[str]:
        """The alternatives by type of a conjunction without combinators."""
        kinds = ALL_KINDS
        for sub in flat:
            kinds = narrow_kinds(kinds, sub.schema)
        ptr = flat[0].ptr if flat else ""
        if not kinds:
            raise Unsat(ptr, "no type satisfies every 'type' keyword")
        finite = [s for s in flat if "enum" in s.schema or "const" in s.schema]
        if finite:
            return self._finite(flat, finite, kinds)
        out: list[str] = []
        first: Unsat | None = None
        for kind in ("null", "boolean", "number", "string", "array", "object"):
            wanted = kinds & (TYPE_KINDS["number"] if kind == "number" else {kind})
            if not wanted:
                continue
            try:
                out.append(self._kind_rule(kind, flat, wanted))
            except Unsat as exc:
                first = first or detached(exc)
        if not out:
            try:
                raise first or Unsat(ptr, "unsatisfiable")
            finally:
                # The traceback holds this frame: with the exception in a local, a reference
                # cycle would keep every frame of it, and their locals (a schema's worth of
                # subschemas), until a full collection (seconds, in a long-running process).
                first = None
        return out

    def _kind_rule(self, kind: str, flat: list[Sub], kinds: frozenset[str]) -> str:
        """Read the conjunction's form for one kind, and emit its rule."""
        if kind == "null":
            return null_rule(self, flat)
        if kind == "boolean":
            return boolean_rule(self, flat)
        if kind == "number":
            return number_rule(self, read_number(self, flat), kinds)
        if kind == "string":
            return string_rule(self, read_string(flat))
        if kind == "array":
            return array_rule(self, read_array(self, flat))
        return object_rule(self, read_object(self, flat))

    # ------------------------------------------------------------------ finite sets

    def validator(self) -> Any:
        if self._validator is None:
            from jsonschema import Draft202012Validator
            from jsonschema.validators import validator_for

            root = self.root if isinstance(self.root, dict) else {}
            cls = self.patterns.validator_class(validator_for(root, default=Draft202012Validator))
            self._validator = cls(self.root, format_checker=cls.FORMAT_CHECKER)
        return self._validator

    def valid(self, value: JSON, flat: list[Sub], *, source: Sub | None = None) -> bool:
        base = self.validator()
        for sub in flat:
            plan = self._check_plan(base, sub, sub is source)
            if plan is None:
                continue
            s, type_kinds = plan
            if isinstance(s, bool):
                if not s:
                    return False
                continue
            if KINDS_KW in s and kind_of(value) not in s[KINDS_KW]:
                return False
            if NOTIN_KW in s and any(json_equal(value, v) for v in s[NOTIN_KW]):
                return False
            if isinstance(value, str) and any(
                self.patterns.matches(p, value, sub.ptr, every=False) for p in s.get(NOTPAT_KW, ())
            ):
                return False
            checked = self._type_only(base, type_kinds, value)
            if checked is not None:
                if not checked:
                    return False
                continue
            clean = plain_schema(s)
            try:
                with self.patterns.reading():
                    if not base.evolve(schema=clean).is_valid(value):
                        return False
            except Exception as exc:  # a schema jsonschema cannot evaluate
                raise UnsupportedSchemaError(
                    f"cannot evaluate enum/const against this schema: {exc}", pointer=sub.ptr
                ) from exc
        return True

    def _check_plan(
        self, base: Any, sub: Sub, is_source: bool
    ) -> tuple[JSON, list[JSON] | bool | None] | None:
        """What `valid` checks of `sub` for any value, worked out once per schema (an enum of
        hundreds of values asks the same for each): the schema to check (without enum and
        const when the value comes from them; None: nothing left but annotations) and its
        `_type_kinds`. The plan holds the schema, so its id is not reused while cached."""
        s = sub.schema
        key = (id(s), is_source)
        found = self._plans.get(key)
        if found is not None and found[0] is s:
            return found[1]  # type: ignore[no-any-return]
        plan: tuple[JSON, list[JSON] | bool | None] | None
        if not isinstance(s, dict):
            plan = (s, None)
        elif is_source:
            # `value` comes from this schema's own enum/const: check only the rest.
            rest = {k: v for k, v in s.items() if k not in ("enum", "const")}
            plan = (
                None
                if all(k in ANNOTATIONS for k in rest)
                else (rest, self._type_kinds(base, rest))
            )
        else:
            plan = (s, self._type_kinds(base, s))
        self._plans[key] = (s, plan)
        return plan

    @staticmethod
    def _type_kinds(base: Any, schema: dict[str, JSON]) -> list[JSON] | bool | None:
        """The type names that decide a value when `schema` asks nothing but its `type` (an
        enum's own schema, the common case: `{"type": "string", "enum": [...]}`); True when it
        asks nothing at all; None when something else must be evaluated (the validator
        judges)."""
        kind = None
        validators = type(base).VALIDATORS
        for key in schema:
            if key == "type":
                kind = schema[key]
            elif key in validators or (key.startswith("$") and key not in ANNOTATIONS):
                return None  # (anything jsonschema or the compiler would evaluate)
        if kind is None:
            return True  # (annotations and keywords jsonschema ignores)
        return kind if isinstance(kind, list) else [kind]

    @staticmethod
    def _type_only(base: Any, kinds: list[JSON] | bool | None, value: JSON) -> bool | None:
        """`value`'s verdict by jsonschema's own type checker (`_type_kinds`); None when the
        validator must judge."""
        if kinds is None or kinds is True:
            return kinds
        try:
            return any(base.is_type(value, k) for k in kinds)  # type: ignore[union-attr]
        except Exception:  # an unknown type name: the validator says what it says
            return None

    def _finite(self, flat: list[Sub], finite: list[Sub], kinds: frozenset[str]) -> list[str]:
        first = finite[0]
        s = first.schema
        values = [s["const"]] if "const" in s else list(s["enum"])
        kept = [v for v in values if kind_of(v) in kinds and self.valid(v, flat, source=first)]
        unique: list[JSON] = []
        seen: set[tuple[str, str]] = set()
        for v in kept:  # linear: enums can hold thousands of values
            canon = value_key(v)
            if canon not in seen:
                seen.add(canon)
                unique.append(v)
        if not unique:
            key = "const" if "const" in s else "enum"
            raise Unsat(f"{first.ptr}/{key}", f"no value of {key} satisfies the schema")
        scalars: list[Node] = []
        words: list[str] = []
        out: list[str] = []
        for i, v in enumerate(unique):
            if isinstance(v, (dict, list)):
                out.append(self.value([Sub(_literal_schema(v), f"{first.ptr}/enum/{i}", "")]))
            elif isinstance(v, str):
                words.append(v)
            else:
                scalars.append(scalar_text(self, v, kinds))
        if words:
            scalars.append(string_words(self, words))
        if scalars:
            out.insert(0, self.emit.terminal(alternation(scalars)))
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
