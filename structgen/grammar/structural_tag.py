"""Structural tags: free text with constrained regions, in the JSON format vLLM and SGLang
forward (xgrammar's `structural_tag`), compiled to one IR grammar.

A structural tag is `{"type": "structural_tag", "format": FORMAT}` or the older
`{"type": "structural_tag", "structures": [{"begin", "schema", "end"}], "triggers": [...]}`.
FORMAT is one of: `const_string` (value), `json_schema` (json_schema), `regex` (pattern),
`grammar` (grammar, syntax "ebnf" or "lark"), `any_text` (excludes, max_chars), `token`
(token: an id or the token's text), `sequence` / `or` (elements), `optional` / `plus` / `star`
(content), `repeat` (min, max, content), `tag` (begin, content, end: strings or tokens; end may
be a list), `triggered_tags` (triggers, tags, at_least_one, stop_after_first, excludes),
`token_triggered_tags` (trigger_tokens, tags, at_least_one, stop_after_first, exclude_tokens)
and `tags_with_separator` (tags, separator, at_least_one, stop_after_first).

Exactness under a greedy lexer: free text cannot be one lexeme that ends where a trigger or an
end string begins (the lexer would read the trigger's first bytes as more text). So free text is
compiled together with what ends it: the text up to and including the first trigger
(`compose.text_ending_at`) is one lexeme, as is `any_text` up to and including its tag's end
string, and a regex content with its end. Free text outside tags holds no trigger and no
`excludes` string. Token triggers and token begins/ends are token terminals (grammar/tokens.py):
matched as the token, never as its text. See docs/design/structural-tags.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from structgen.automata import Concat, Node, Repeat, literal_node, parse_regex
from structgen.automata.dialects import dialects_of
from structgen.errors import GrammarError, SchemaError, StructgenError
from structgen.grammar.compose import (
    ANY_CHAR,
    NON_EMPTY,
    GrammarBuilder,
    any_text,
    text_ending_at,
    text_without,
)
from structgen.grammar.ir import Grammar
from structgen.grammar.lark_literals import nullable
from structgen.vocab import Vocabulary

__all__ = ["StructuralTagError", "structural_tag_to_ir"]


class StructuralTagError(GrammarError):
    """A structural tag that is malformed or asks for what cannot be enforced exactly."""


_UNSUPPORTED = {
    "exclude_token": "a single token other than some",
    "any_tokens": "any tokens",
    "dispatch": "dispatch",
    "token_dispatch": "token dispatch",
    "qwen_xml_parameter": "Qwen XML parameters",
}


def structural_tag_to_ir(spec: Any, vocab: Vocabulary, *, schema_options: Any = None) -> Grammar:
    """The IR grammar of a structural tag (a dict or its JSON text)."""
    if isinstance(spec, (str, bytes)):
        try:
            spec = json.loads(spec)
        except ValueError as exc:
            raise StructuralTagError(f"the structural tag is not valid JSON: {exc}") from None
    if not isinstance(spec, Mapping):
        raise StructuralTagError(f"a structural tag is a JSON object, got {type(spec).__name__}")
    builder = _Builder(vocab, schema_options)
    if "structures" in spec:  # the older form: triggered tags with JSON Schema contents
        fmt = _legacy(spec)
        where = ""
    else:
        if spec.get("type", "structural_tag") != "structural_tag":
            raise StructuralTagError(f"/type: expected 'structural_tag', got {spec.get('type')!r}")
        if "format" not in spec:
            raise StructuralTagError("a structural tag needs a 'format' (or 'structures')")
        fmt = spec["format"]
        where = "/format"
    start = builder.compile(fmt, where, follow=None)
    return builder.b.grammar(start)


def _legacy(spec: Mapping[str, Any]) -> dict[str, Any]:
    structures = spec.get("structures")
    triggers = spec.get("triggers", [])
    if not isinstance(structures, list) or not isinstance(triggers, list):
        raise StructuralTagError("/structures and /triggers must be lists")
    tags = []
    for i, item in enumerate(structures):
        if not isinstance(item, Mapping) or not {"begin", "end"} <= set(item):
            raise StructuralTagError(f"/structures/{i}: needs 'begin', 'schema' and 'end'")
        schema = item.get("schema", True)
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError as exc:
                raise StructuralTagError(f"/structures/{i}/schema: not JSON: {exc}") from None
        tags.append(
            {
                "type": "tag",
                "begin": item["begin"],
                "content": {"type": "json_schema", "json_schema": schema},
                "end": item["end"],
            }
        )
    return {"type": "triggered_tags", "triggers": triggers, "tags": tags}


class _Builder:
    def __init__(self, vocab: Vocabulary, schema_options: Any) -> None:
        self.vocab = vocab
        self.schema_options = schema_options
        self.b = GrammarBuilder("st")

    # ------------------------------------------------------------------ helpers

    def _field(
        self, fmt: Mapping[str, Any], key: str, where: str, kind: type | tuple[type, ...]
    ) -> Any:
        if key not in fmt:
            raise StructuralTagError(f"{where}: a {fmt.get('type')} format needs {key!r}")
        value = fmt[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise StructuralTagError(f"{where}/{key}: unexpected {type(value).__name__}")
        return value

    def _strings(self, value: Any, where: str) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
            raise StructuralTagError(f"{where}: expected a list of non-empty strings")
        return list(value)

    def _token_id(self, token: Any, where: str) -> int:
        if isinstance(token, int) and not isinstance(token, bool):
            if not 0 <= token < self.vocab.size:
                raise StructuralTagError(f"{where}: token id {token} is outside the vocabulary")
            return token
        if isinstance(token, str):
            found = self.vocab.token_id(token)
            if found is None:
                raise StructuralTagError(
                    f"{where}: the tokenizer has no special or added token {token!r}"
                )
            return found
        raise StructuralTagError(f"{where}: a token is an id or the token's text")

    def _mark(self, part: Any, where: str) -> str | int:
        """A begin/end: text, or a token id (a `token` format)."""
        if isinstance(part, str):
            return part
        if isinstance(part, Mapping) and part.get("type") == "token":
            return self._token_id(part.get("token"), f"{where}/token")
        raise StructuralTagError(f"{where}: expected a string or a token format")

    def _piece(self, mark: str | int) -> str:
        return self.b.token(mark) if isinstance(mark, int) else self.b.literal(mark)

    def _text_terminal(self, node: Node, extra: tuple[Node, ...] = ()) -> str:
        """Possibly-empty text as an optional non-empty terminal."""
        return self.b.optional(self.b.terminal(node, (*extra, NON_EMPTY), hint="TEXT"))

    # ------------------------------------------------------------------ formats

    def compile(self, fmt: Any, where: str, *, follow: str | int | None) -> str:
        """The nonterminal of `fmt`; `follow` is a literal end that comes right after it (a
        tag's end), which free text and regexes take into their lexeme. When `follow` is
        given, the returned symbol includes it."""
        if not isinstance(fmt, Mapping) or not isinstance(fmt.get("type"), str):
            raise StructuralTagError(f"{where or '/'}: a format is an object with a 'type'")
        kind = fmt["type"]
        if kind in _UNSUPPORTED:
            raise StructuralTagError(
                f"{where}: the {kind!r} format ({_UNSUPPORTED[kind]}) is not supported"
            )
        handler = getattr(self, f"_f_{kind}", None)
        if handler is None:
            raise StructuralTagError(f"{where}/type: unknown format type {kind!r}")
        fused = kind in ("any_text", "regex")
        symbol: str = handler(fmt, where, follow if fused else None)
        if follow is not None and not fused:
            symbol = self.b.sequence(symbol, self._piece(follow))
        return symbol

    def _f_const_string(self, fmt: Mapping[str, Any], where: str, follow: Any) -> str:
        return self.b.literal(self._field(fmt, "value", where, str))

    def _f_token(self, fmt: Mapping[str, Any], where: str, follow: Any) -> str:
        return self.b.token(self._token_id(fmt.get("token"), f"{where}/token"))

    def _f_json_schema(self, fmt: Mapping[str, Any], where: str, follow: Any) -> str:
        from structgen.schema import SchemaOptions, compile_schema

        schema = self._field(fmt, "json_schema", where, (dict, bool))
        style = fmt.get("style", "json")
        if style != "json":
            raise StructuralTagError(f"{where}/style: only the 'json' style is supported")
        if fmt.get("excludes"):
            raise StructuralTagError(f"{where}/excludes: not supported for JSON contents")
        if fmt.get("any_order"):
            raise StructuralTagError(f"{where}/any_order: not supported")
        options = self.schema_options or SchemaOptions()
        try:
            grammar = compile_schema(schema, options=options)
        except SchemaError as exc:
            raise StructuralTagError(f"{where}/json_schema: {exc}") from None
        return self.b.embed(grammar, "json")

    def _f_grammar(self, fmt: Mapping[str, Any], where: str, follow: Any) -> str:
        text = self._field(fmt, "grammar", where, str)
        syntax = fmt.get("syntax", "ebnf")
        try:
            if syntax == "ebnf":
                from structgen.grammar.ebnf import ebnf_to_ir

                grammar = ebnf_to_ir(text, "root")
            elif syntax == "lark":
                from structgen.grammar.lark_frontend import lark_to_ir

                grammar = lark_to_ir(text)
            else:
                raise StructuralTagError(f"{where}/syntax: 'ebnf' or 'lark', got {syntax!r}")
        except StructuralTagError:
            raise
        except StructgenError as exc:
            raise StructuralTagError(f"{where}/grammar: {exc}") from None
        return self.b.embed(grammar, "grammar")

    def _f_regex(self, fmt: Mapping[str, Any], where: str, follow: str | int | None) -> str:
        pattern = self._field(fmt, "pattern", where, str)
        try:
            node = parse_regex(pattern, dialect=dialects_of("python-ascii"))
        except StructgenError as exc:
            raise StructuralTagError(f"{where}/pattern: {exc}") from None
        if isinstance(follow, str):  # one lexeme with the end that follows it
            return self.b.terminal(Concat((node, literal_node(follow))), hint="RE")
        symbol = self.b.terminal(node, (NON_EMPTY,), hint="RE")
        if nullable(node):
            symbol = self.b.optional(symbol)
        if follow is not None:
            symbol = self.b.sequence(symbol, self._piece(follow))
        return symbol

    def _f_any_text(self, fmt: Mapping[str, Any], where: str, follow: str | int | None) -> str:
        excludes = self._strings(fmt.get("excludes", []), f"{where}/excludes")
        if fmt.get("max_tokens") is not None:
            raise StructuralTagError(f"{where}/max_tokens: not supported (use max_chars)")
        max_chars = fmt.get("max_chars")
        limit = None if max_chars is None else Repeat(ANY_CHAR, 0, _count(max_chars, where))
        if isinstance(follow, str):
            # the text up to and including the first `follow`, as one lexeme
            ends, more = text_ending_at(follow, [follow], avoid=excludes)
            if limit is not None:
                more = (*more, Concat((limit, literal_node(follow))))
            return self.b.terminal(ends, more, hint="UNTIL")
        body = text_without(excludes) if excludes else any_text()
        symbol = self._text_terminal(body, () if limit is None else (limit,))
        if follow is not None:  # a token end: text never reaches into a token's marker
            symbol = self.b.sequence(symbol, self._piece(follow))
        return symbol

    def _f_sequence(self, fmt: Mapping[str, Any], where: str, follow: Any) -> str:
        elements = self._field(fmt, "elements", where, list)
        symbols = []
        i = 0
        while i < len(elements):
            element = elements[i]
            after = _leading_literal(elements[i + 1]) if i + 1 < len(elements) else None
            if after is not None and _fusable(element):  # free text/regex, then a literal
                symbols.append(self.compile(element, f"{where}/elements/{i}", follow=after))
                i += 2
                continue
            symbols.append(self.compile(element, f"{where}/elements/{i}", follow=None))
            i += 1
        return self.b.sequence(*symbols)

    def _f_or(self, fmt: Mapping[str, Any], where: str, follow: Any) -> str:
        elements = self._field(fmt, "elements", where, list)
        if not elements:
            raise StructuralTagError(f"{where}/elements: an 'or' needs at least one element")
        options = [
            [self.compile(e, f"{where}/elements/{i}", follow=None)] for i, e in enumerate(elements)
        ]
        return self.b.alternatives(options)

    def _f_optional(self, fmt: Mapping[str, Any], where: str, follow: Any) -> str:
        return self.b.optional(
            self.compile(self._field(fmt, "content", where, dict), f"{where}/content", follow=None)
        )

    def _f_star(self, fmt: Mapping[str, Any], where: str, follow: Any) -> str:
        item = self.compile(
            self._field(fmt, "content", where, dict), f"{where}/content", follow=None
        )
        return self.b.repeat(item)

    def _f_plus(self, fmt: Mapping[str, Any], where: str, follow: Any) -> str:
        item = self.compile(
            self._field(fmt, "content", where, dict), f"{where}/content", follow=None
        )
        return self.b.repeat(item, at_least_one=True)

    def _f_repeat(self, fmt: Mapping[str, Any], where: str, follow: Any) -> str:
        low = self._field(fmt, "min", where, int)
        high = self._field(fmt, "max", where, int)
        if low < 0 or (high != -1 and high < low):
            raise StructuralTagError(f"{where}: repeat needs 0 <= min <= max (or max = -1)")
        item = self.compile(
            self._field(fmt, "content", where, dict), f"{where}/content", follow=None
        )
        parts = [item] * low
        if high == -1:
            parts.append(self.b.repeat(item))
        else:
            if high - low > 1000:
                raise StructuralTagError(f"{where}: at most 1000 optional repeats")
            tail = self.b.literal("")
            for _ in range(high - low):
                tail = self.b.optional(self.b.sequence(item, tail))
            parts.append(tail)
        return self.b.sequence(*parts)

    def _f_tag(self, fmt: Mapping[str, Any], where: str, follow: Any) -> str:
        return self._tag(fmt, where, skip=None)

    def _tag(self, fmt: Any, where: str, *, skip: str | None) -> str:
        """A tag; `skip`: the part of its begin a trigger already matched."""
        if not isinstance(fmt, Mapping) or fmt.get("type", "tag") != "tag":
            raise StructuralTagError(f"{where}: expected a tag format")
        for key in ("begin", "content", "end"):
            if key not in fmt:
                raise StructuralTagError(f"{where}: a tag needs {key!r}")
        begin = self._mark(fmt["begin"], f"{where}/begin")
        ends_raw = fmt["end"]
        ends = (
            [self._mark(e, f"{where}/end/{i}") for i, e in enumerate(ends_raw)]
            if isinstance(ends_raw, list)
            else [self._mark(ends_raw, f"{where}/end")]
        )
        if not ends:
            raise StructuralTagError(f"{where}/end: at least one end")
        head: list[str] = []
        if skip is not None:
            assert isinstance(begin, str)
            rest = begin[len(skip) :]
            if rest:
                head.append(self.b.literal(rest))
        else:
            head.append(self._piece(begin))
        bodies = [
            [*head, self.compile(fmt["content"], f"{where}/content", follow=end or None)]
            for end in ends
        ]
        return self.b.alternatives(bodies, "tag")

    def _f_triggered_tags(self, fmt: Mapping[str, Any], where: str, follow: Any) -> str:
        triggers = self._strings(self._field(fmt, "triggers", where, list), f"{where}/triggers")
        tags = self._field(fmt, "tags", where, list)
        excludes = self._strings(fmt.get("excludes", []), f"{where}/excludes")
        by_trigger: dict[str, list[str]] = {t: [] for t in triggers}
        for i, tag in enumerate(tags):
            begin = tag.get("begin") if isinstance(tag, Mapping) else None
            if not isinstance(begin, str):
                raise StructuralTagError(f"{where}/tags/{i}/begin: triggered tags begin with text")
            matching = [t for t in triggers if begin.startswith(t)]
            if len(matching) != 1:
                raise StructuralTagError(
                    f"{where}/tags/{i}/begin: {begin!r} must start with exactly one trigger "
                    f"(it starts with {len(matching)})"
                )
            by_trigger[matching[0]].append(self._tag(tag, f"{where}/tags/{i}", skip=matching[0]))
        extra = (text_without(excludes),) if excludes else ()
        # one segment: free text up to and including a trigger, then the rest of a tag
        segment_options = []
        for trigger, rests in by_trigger.items():
            if not rests:
                continue
            ends, more = text_ending_at(trigger, triggers)
            lead = self.b.terminal(ends, (*more, *extra), hint="TEXT")
            segment_options.append([lead, self.b.alternatives([[r] for r in rests])])
        avoid = [*triggers, *excludes]
        tail = (
            self._text_terminal(text_without(avoid)) if avoid else self._text_terminal(any_text())
        )
        if not segment_options:  # no tags: free text only
            if fmt.get("at_least_one", False):
                raise StructuralTagError(f"{where}/tags: at_least_one needs a tag")
            return tail
        segment = self.b.alternatives(segment_options, "segment")
        return self._repeated(segment, tail, fmt, where)

    def _f_token_triggered_tags(self, fmt: Mapping[str, Any], where: str, follow: Any) -> str:
        raw = self._field(fmt, "trigger_tokens", where, list)
        triggers = [self._token_id(t, f"{where}/trigger_tokens/{i}") for i, t in enumerate(raw)]
        excluded = [
            self._token_id(t, f"{where}/exclude_tokens/{i}")
            for i, t in enumerate(fmt.get("exclude_tokens", []))
        ]
        tags = self._field(fmt, "tags", where, list)
        options = []
        for i, tag in enumerate(tags):
            begin = self._mark(
                tag.get("begin") if isinstance(tag, Mapping) else None, f"{where}/tags/{i}/begin"
            )
            if not isinstance(begin, int) or begin not in triggers:
                raise StructuralTagError(
                    f"{where}/tags/{i}/begin: token-triggered tags begin with a trigger token"
                )
            options.append([self._tag(tag, f"{where}/tags/{i}", skip=None)])
        if not options:
            raise StructuralTagError(f"{where}/tags: at least one tag")
        # free text: text tokens only (token terminals' ids never read as text), and not the
        # text of a trigger or excluded token spelled in pieces
        spelled = [
            self.vocab.token_bytes(t).decode("utf-8", "replace") for t in [*triggers, *excluded]
        ]
        spelled = [s for s in spelled if s]
        body = text_without(spelled) if spelled else any_text()
        text = self._text_terminal(body)
        for token in excluded:
            self.b.token(token)  # (registered: their text reading is refused, see tokens.py)
        segment = self.b.sequence(text, self.b.alternatives(options, "tags"))
        return self._repeated(segment, text, fmt, where)

    def _repeated(self, segment: str, tail: str, fmt: Mapping[str, Any], where: str) -> str:
        at_least_one = bool(fmt.get("at_least_one", False))
        if fmt.get("stop_after_first", False):
            body = segment if at_least_one else self.b.alternatives([[segment], [tail]])
            return body
        segments = self.b.repeat(segment, at_least_one=at_least_one)
        return self.b.sequence(segments, tail)

    def _f_tags_with_separator(self, fmt: Mapping[str, Any], where: str, follow: Any) -> str:
        tags = self._field(fmt, "tags", where, list)
        separator = self._field(fmt, "separator", where, str)
        if not tags:
            raise StructuralTagError(f"{where}/tags: at least one tag")
        one = self.b.alternatives(
            [[self._tag(t, f"{where}/tags/{i}", skip=None)] for i, t in enumerate(tags)], "tags"
        )
        at_least_one = bool(fmt.get("at_least_one", False))
        if fmt.get("stop_after_first", False):
            return one if at_least_one else self.b.optional(one)
        sep = self.b.literal(separator) if separator else None
        return self.b.repeat(one, separator=sep, at_least_one=at_least_one)


def _fusable(fmt: Any) -> bool:
    """Formats whose lexeme takes in the literal that follows them (see the module docstring)."""
    return isinstance(fmt, Mapping) and fmt.get("type") in ("any_text", "regex")


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StructuralTagError(f"{where}/max_chars: a number >= 0")
    return value


def _leading_literal(fmt: Any) -> str | None:
    """The literal a format is, when it is one (`const_string`)."""
    if isinstance(fmt, Mapping) and fmt.get("type") == "const_string":
        value = fmt.get("value")
        return value if isinstance(value, str) and value else None
    return None
