"""JSON Schema patterns (`pattern`, `patternProperties`, `propertyNames`) as languages, read in
the regex dialect of the validator the user runs.

The JSON Schema spec reads patterns as ECMA-262 regexes (ajv: `new RegExp(p, "u")`); a Pydantic
model's are Rust `regex` (pydantic-core's default) or Python `re` (`regex_engine="python-re"`).
Accept mode (`SchemaOptions(mode="accept")`) follows that one dialect exactly, syntax errors
included (with `lenient=True`, a pattern the dialect rejects is read as Python `re`, else Rust,
with a warning). Generate mode offers only strings every common validator accepts: the per-atom
intersection of ECMA-262, Python `re` (the `jsonschema` library) and Rust `regex`, read in the
first of those syntaxes that parses the pattern (a validator that cannot parse a pattern rejects
every instance anyway). Keys follow the same rule: a member key counts as matching a
`patternProperties` pattern when some dialect says so (its schema applies), and falls under
`additionalProperties` only when no dialect matches it.

Search semantics and anchors come from `structgen.automata.search_language`; lookaheads right
after a leading `^` become extra languages (negative ones complemented here).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from structgen.automata import (
    ByteDFA,
    Dialect,
    Node,
    SearchLanguage,
    UnsupportedRegexError,
    alternation,
    compile_ast,
    search_language,
)
from structgen.automata.codepoint_dfa import complement
from structgen.errors import (
    RegexError,
    SchemaError,
    StructgenError,
    UnsupportedSchemaError,
    detached,
)

__all__ = ["DIALECT_KEYWORD", "PatternReader", "model_dialect"]

# Set by `schema_data` on a Pydantic model's schema: "rust" or "python", the engine Pydantic
# validates its patterns with (an annotation to every validator).
DIALECT_KEYWORD = "x-structgen-pattern-dialect"

_NAMES = {"ecma": "ECMA-262", "python": "Python re", "rust": "Rust regex", "python-ascii": "re"}
_GENERATE_ORDER: tuple[Dialect, ...] = ("ecma", "python", "rust")


def model_dialect(model: type) -> Dialect:
    """The dialect Pydantic checks a model's patterns with."""
    config = getattr(model, "model_config", None) or {}
    return "python" if config.get("regex_engine") == "python-re" else "rust"


class PatternReader:
    """The pattern languages of one compilation: exact in `dialect` (accept), or what every
    dialect accepts (`generate`). Parses, automata and verdicts are memoised."""

    def __init__(
        self, dialect: Dialect = "ecma", *, generate: bool = False, lenient: bool = False
    ) -> None:
        self.dialect = dialect
        self.generate = generate
        self.lenient = lenient
        # accept mode, lenient: a pattern its dialect rejects is read as Python `re` or Rust
        self._fallback: dict[str, Dialect] = {}
        first = (dialect, *(d for d in _GENERATE_ORDER if d != dialect))
        # readings tried in order: the validator's syntax first
        self.readings: list[tuple[Dialect, ...]] = (
            [first[i:] + first[:i] for i in range(len(first))] if generate else [(dialect,)]
        )
        self._parsed: dict[tuple[str, tuple[Dialect, ...]], SearchLanguage | RegexError] = {}
        self._dfas: dict[tuple[str, Dialect], list[tuple[bool, ByteDFA]] | None] = {}

    # ------------------------------------------------------------------ languages

    def _parse(self, pattern: str, dialects: tuple[Dialect, ...]) -> SearchLanguage:
        key = (pattern, dialects)
        if key not in self._parsed:
            try:
                self._parsed[key] = search_language(pattern, dialect=dialects)
            except RegexError as exc:
                # kept detached, and raised as a copy: a traceback holds this frame, which
                # holds `self`, which holds the cache (a reference cycle)
                self._parsed[key] = detached(exc)
        found = self._parsed[key]
        if isinstance(found, RegexError):
            raise _copy_error(found)  # (no local may hold what is raised: see above)
        return found

    def language(self, pattern: Any, ptr: str) -> SearchLanguage:
        """The strings `pattern` surely matches (see the module docstring)."""
        if not isinstance(pattern, str):
            raise SchemaError("pattern must be a string", pointer=ptr)
        first: RegexError | None = None
        for dialects in self.readings:
            try:
                return self._parse(pattern, dialects)
            except UnsupportedRegexError as exc:
                raise UnsupportedSchemaError(
                    f"pattern {pattern!r}: {exc.reason}", pointer=ptr
                ) from exc
            except RegexError as exc:
                first = first or detached(exc)
        assert first is not None
        where = f" at offset {first.offset}" if first.offset is not None else ""
        if self.lenient and not self.generate:
            for d in _GENERATE_ORDER:
                if d == self.dialect:
                    continue
                try:
                    found = self._parse(pattern, (d,))
                except RegexError:
                    continue
                if pattern not in self._fallback:
                    warnings.warn(
                        f"structgen relaxed {ptr or '/'}: pattern {pattern!r} is not a valid"
                        f" {_NAMES[self.dialect]} regex ({first.reason}{where}); read as"
                        f" {_NAMES[d]}",
                        stacklevel=5,
                    )
                self._fallback[pattern] = d
                return found
        raise SchemaError(
            f"pattern {pattern!r} is not a valid {_NAMES[self.dialect]} regex: {first.reason}"
            f"{where}",
            pointer=ptr,
        ) from first

    def nodes(self, pattern: Any, ptr: str) -> list[Node]:
        """Decoded-string languages whose intersection is `pattern`'s: the search language and
        one per lookahead after a leading `^` (a negative one complemented)."""
        found = self.language(pattern, ptr)
        out = [found.node]
        for positive, node in found.lookaheads:
            if not positive:
                try:
                    node = complement(node)
                except RegexError as exc:
                    raise UnsupportedSchemaError(
                        f"pattern {pattern!r}: a negative lookahead is too large to complement:"
                        f" {exc.reason}",
                        pointer=ptr,
                    ) from exc
            out.append(node)
        return out

    def node(self, pattern: Any, ptr: str) -> Node:
        """`pattern`'s language as one node (no lookaheads: keys and complements need one)."""
        found = self.language(pattern, ptr)
        if found.lookaheads:
            raise UnsupportedSchemaError(
                f"pattern {pattern!r}: lookaheads are supported in `pattern` only", pointer=ptr
            )
        return found.node

    def possible(self, pattern: Any, ptr: str) -> Node:
        """The strings some dialect matches `pattern` in (a superset of `node`): what must be
        excluded where a pattern must *not* match (`not`, keys no pattern covers)."""
        exact = self.node(pattern, ptr)
        if not self.generate:
            return exact
        nodes = [exact]
        for d in _GENERATE_ORDER:
            try:
                found = self._parse(pattern, (d,))
            except RegexError:
                continue  # that validator cannot parse it: no instance is valid there
            if found.lookaheads:
                raise UnsupportedSchemaError(
                    f"pattern {pattern!r}: lookaheads are supported in `pattern` only",
                    pointer=ptr,
                )
            nodes.append(found.node)
        return alternation(nodes)

    # ------------------------------------------------------------------ single strings

    def _verdicts(self, pattern: str, text: str) -> Iterator[bool]:
        """Each dialect's verdict on `text` (dialects that cannot parse `pattern` skipped)."""
        dialects = (
            _GENERATE_ORDER if self.generate else (self._fallback.get(pattern, self.dialect),)
        )
        data = text.encode("utf-8", "surrogatepass")
        for d in dialects:
            key = (pattern, d)
            if key not in self._dfas:
                try:
                    found = self._parse(pattern, (d,))
                except UnsupportedRegexError:
                    raise
                except RegexError:
                    self._dfas[key] = None
                    continue
                parts = [(True, compile_ast(found.node))]
                parts += [(positive, compile_ast(n)) for positive, n in found.lookaheads]
                self._dfas[key] = parts
            found_parts = self._dfas[key]
            if found_parts is not None:
                yield all(dfa.accepts(data) == positive for positive, dfa in found_parts)

    def matches(self, pattern: Any, text: str, ptr: str, *, every: bool) -> bool:
        """Whether `pattern` finds a match in `text`: in every dialect (`every`) or in some.
        Accept mode has one dialect, so both are its exact verdict."""
        self.language(pattern, ptr)  # invalid or unsupported patterns raise here
        try:
            verdicts = list(self._verdicts(pattern, text))
        except (StructgenError, RegexError) as exc:
            raise UnsupportedSchemaError(
                f"pattern {pattern!r}: {getattr(exc, 'reason', exc)}", pointer=ptr
            ) from exc
        if not verdicts:
            return False
        return all(verdicts) if every else any(verdicts)

    # ------------------------------------------------------------------ jsonschema

    def validator_class(self, cls: Any) -> Any:
        """`cls` (a jsonschema validator class) with `pattern`, `patternProperties` and
        `additionalProperties` judged by this reader instead of Python's `re`: an instance is
        valid only when it is under every dialect considered (`enum`/`const` members are kept
        by this verdict). Validate inside `self.reading()`.

        The class is made once per `cls` (jsonschema's `extend` builds an attrs class, about
        0.2 ms) and finds the reader of the validation in progress in a context variable."""
        extended = _EXTENDED.get(cls)
        if extended is None:
            extended = _EXTENDED.setdefault(cls, _extend(cls))
        return extended

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Validators of `validator_class` judge patterns by this reader in this block."""
        token = _READER.set(self)
        try:
            yield
        finally:
            _READER.reset(token)

    def qualifies(self, name: str, spec: dict[str, Any], ptr: str) -> bool:
        """Whether a member key surely lies in a "some member" key set (the negation of
        `additionalProperties` / `patternProperties`): not a listed name, no pattern of
        `notPatterns` can match it, and its `pattern` (if any) matches in every dialect."""
        if name in spec["exclude"]:
            return False
        if any(self.matches(p, name, ptr, every=False) for p in spec["notPatterns"]):
            return False
        pat = spec["pattern"]
        return pat is None or self.matches(pat, name, ptr, every=True)


def _copy_error(exc: RegexError) -> RegexError:
    """A fresh instance of a cached error (its arguments and attributes, no traceback)."""
    fresh = type(exc).__new__(type(exc), *exc.args)
    fresh.__dict__.update(exc.__dict__)
    return fresh


# ---------------------------------------------------------------------- jsonschema classes

_READER: ContextVar[PatternReader] = ContextVar("structgen_pattern_reader")
_EXTENDED: dict[Any, Any] = {}


def _extend(cls: Any) -> Any:
    """`cls` with the pattern keywords judged by the reader of `PatternReader.reading`."""
    from jsonschema import ValidationError
    from jsonschema.validators import extend

    def pattern(validator: Any, patrn: Any, instance: Any, schema: Any) -> Any:
        if validator.is_type(instance, "string") and not _READER.get().matches(
            patrn, instance, "", every=True
        ):
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    def pattern_properties(validator: Any, pats: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "object"):
            return
        reader = _READER.get()
        for pat, subschema in pats.items():
            for k, v in instance.items():
                if reader.matches(pat, k, "", every=False):
                    yield from validator.descend(v, subschema, path=k, schema_path=pat)

    def additional(validator: Any, extra_schema: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "object"):
            return
        reader = _READER.get()
        properties = schema.get("properties", {})
        pats = list(schema.get("patternProperties", {}))
        extras = [
            k
            for k in instance
            if k not in properties and not any(reader.matches(p, k, "", every=True) for p in pats)
        ]
        if validator.is_type(extra_schema, "object"):
            for k in extras:
                yield from validator.descend(instance[k], extra_schema, path=k)
        elif extra_schema is False and extras:
            yield ValidationError(f"additional properties {sorted(extras)!r}")

    return extend(
        cls,
        {
            "pattern": pattern,
            "patternProperties": pattern_properties,
            "additionalProperties": additional,
        },
    )
