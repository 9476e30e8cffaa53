"""Model-native tool-call formats: the text each model family is trained to write for a call,
as an exact grammar, and its parser.

Each `ToolFormat` is written from its family's published format (the chat template that renders
an assistant message with `tool_calls`, or the family's format description):

* ``hermes`` (Qwen2.5, Qwen3, Hermes): optional text, then ``<tool_call>\\n{"name": N,
  "arguments": A}\\n</tool_call>`` per call, a newline before each;
* ``llama3_json`` (Llama 3.1–3.3): ``{"name": N, "parameters": A}``, calls joined by ``; ``,
  optionally after ``<|python_tag|>`` where the vocabulary has it;
* ``mistral``: ``[TOOL_CALLS]`` then a JSON list of ``{"name": N, "arguments": A}``;
* ``deepseek_v3``: ``<｜tool▁calls▁begin｜>`` then per call ``<｜tool▁call▁begin｜>function
  <｜tool▁sep｜>N\\n```json\\nA\\n```<｜tool▁call▁end｜>`` (a newline between calls) and
  ``<｜tool▁calls▁end｜>``;
* ``harmony`` (gpt-oss): ``<|channel|>commentary to=functions.N <|constrain|>json<|message|>A
  <|call|>`` for a call, ``<|channel|>final<|message|>TEXT`` for an answer (one message per turn);
* ``json``: structgen's own turn object (`turn.turn_schema`), for templates without tools.

Tags the vocabulary has as special or added tokens are token terminals (matched as the token,
never as text: grammar/tokens.py); free text never contains the text of a call's opening tag.
`tool_choice` ("auto" = text or calls, "required", "none", a tool's name) and the call limit
are exact in the grammar. See docs/design/tool-formats.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from structgen.api.tools.spec import Tool
from structgen.api.tools.turn import ToolCall, ToolTurn, _call_key
from structgen.automata import CharClass, Concat, literal_node
from structgen.automata import intervals as iv
from structgen.errors import GenerationError, StructgenError
from structgen.grammar.compose import (
    NON_EMPTY,
    GrammarBuilder,
    any_text,
    text_ending_at,
    text_without,
)
from structgen.grammar.tokens import tag_token
from structgen.vocab import Vocabulary

if TYPE_CHECKING:
    from structgen.compiler import CompiledGrammar, Compiler
    from structgen.schema import SchemaOptions

__all__ = [
    "FORMATS",
    "ToolFormat",
    "detect_tool_format",
    "render_tokens",
    "resolve_tool_format",
    "tool_format",
]


def render_tokens(vocab: Vocabulary, token_ids: Sequence[int]) -> str:
    """Output tokens as text, special tokens written as their names (`<|call|>`), so that a
    format's parser sees the tags that special tokens carry."""
    names = {i: n for n, i in vocab.named_tokens.items()}
    out = bytearray()
    for t in token_ids:
        if 0 <= t < vocab.size:
            data = vocab.token_bytes(t)
            if not data and t in names and t not in vocab.eos_token_ids:
                data = names[t].encode()
            out += data
    return out.decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class _Turn:
    """What one turn may hold: the tools callable, whether text / calls are allowed, the most
    calls."""

    tools: tuple[Tool, ...]
    text: bool
    calls: bool
    max_calls: int | None


class ToolFormat:
    """A family's tool-call format: `grammar(...)` for one turn, `parse(text)` back to calls."""

    name = "base"

    def _mark(self, b: GrammarBuilder, vocab: Vocabulary, text: str) -> str:
        """A tag: its token when the vocabulary has one of that text, else the literal."""
        token = tag_token(vocab, text)
        return b.literal(text) if token is None else b.token(token)

    def _is_token(self, vocab: Vocabulary, text: str) -> bool:
        return tag_token(vocab, text) is not None

    def build(self, b: GrammarBuilder, vocab: Vocabulary, turn: _Turn, options: Any) -> str:
        raise NotImplementedError

    def parse(self, text: str, *, id_prefix: str = "call_", drop_repeats: bool = True) -> ToolTurn:
        raise NotImplementedError

    def render(self, calls: Sequence[tuple[str, Any]]) -> str:
        """Calls `(name, arguments)` as this format writes them (what `parse` reads back)."""
        raise NotImplementedError

    def instructions(self, tools: Sequence[Tool]) -> str:
        """How to call, for a template that does not say it itself: the format, by example."""
        example = self.render([(tools[0].name, {})]) if tools else ""
        return (
            "To call a tool, reply with the call in this format (arguments as JSON):\n"
            f"{example}\nOtherwise reply with your answer as plain text."
        )

    def grammar(
        self,
        compiler: Compiler,
        tools: Sequence[Tool],
        choice: str,
        max_calls: int | None,
        options: SchemaOptions | None = None,
        *,
        reasoning: bool = False,
        max_think_tokens: int | None = None,
    ) -> CompiledGrammar:
        """The compiled grammar of one turn (`choice`: "auto", "required", "none" or a name);
        `reasoning`: a free think block first, in the family's own form (`think`), of at most
        `max_think_tokens` tokens where it is a `<think>` block."""
        if choice not in ("auto", "required", "none"):
            tools = [t for t in tools if t.name == choice]
        calls = choice != "none" and bool(tools)
        turn = _Turn(
            tuple(tools),
            text=choice in ("auto", "none") or not tools,
            calls=calls,
            max_calls=max_calls,
        )
        b = GrammarBuilder(f"tf_{self.name}")
        start = self.build(b, compiler.vocab, turn, options)
        if reasoning:
            framed = self.think(b, compiler.vocab, start)
            if framed is None:  # a <think> block around the whole turn
                return compiler.reasoning(
                    compiler.grammar_ir(b.grammar(start)), max_think_tokens=max_think_tokens
                )
            if max_think_tokens is not None:
                raise StructgenError(
                    f"max_think_tokens bounds a <think> block; the {self.name!r} format's "
                    "reasoning is a message of its own, which a token count cannot bound here "
                    "(leave max_think_tokens out, or bound the turn with max_new_tokens)"
                )
            start = framed
        return compiler.grammar_ir(b.grammar(start))

    def think(self, b: GrammarBuilder, vocab: Vocabulary, start: str) -> str | None:
        """`start` after the family's own think block, as a grammar symbol; None: the
        `<think>…</think>` block of `Compiler.reasoning` (Qwen3, DeepSeek-R1)."""
        return None

    # ------------------------------------------------------------------ shared pieces

    def _json(self, b: GrammarBuilder, schema: Any, options: Any) -> str:
        from structgen.schema import SchemaOptions, compile_schema

        return b.embed(compile_schema(schema, options=options or SchemaOptions()), "json")

    def _calls(self, b: GrammarBuilder, one: str, separator: str | None, turn: _Turn) -> str:
        """`one` (separator `one`)*, at most `turn.max_calls` of them."""
        later = b.sequence(separator, one) if separator else one
        return b.sequence(one, self._more(b, later, turn.max_calls))

    def _more(self, b: GrammarBuilder, item: str, max_calls: int | None) -> str:
        """`item` repeated up to `max_calls - 1` times (no bound: any number)."""
        if max_calls is None:
            return b.repeat(item)
        tail = b.literal("")
        for _ in range(max_calls - 1):
            tail = b.optional(b.sequence(item, tail))
        return tail

    def _object_schema(self, tools: Sequence[Tool], args_key: str) -> dict[str, Any]:
        options = [
            {
                "type": "object",
                "properties": {"name": {"const": t.name}, args_key: t.parameters},
                "required": ["name", args_key],
                "additionalProperties": False,
            }
            for t in tools
        ]
        return options[0] if len(options) == 1 else {"anyOf": options}

    def _finish(
        self,
        content: str | None,
        raw: list[tuple[str, Any]],
        id_prefix: str,
        drop_repeats: bool,
    ) -> ToolTurn:
        if not raw:
            return ToolTurn(answer=content or "")
        calls: list[ToolCall] = []
        repeated: list[ToolCall] = []
        seen: set[Any] = set()
        for name, arguments in raw:
            if not isinstance(arguments, dict):
                raise GenerationError(f"the arguments of {name!r} are not an object: {arguments!r}")
            key = _call_key(name, arguments)
            call = ToolCall(f"{id_prefix}{len(calls)}", name, arguments)
            if drop_repeats and key in seen:
                repeated.append(call)
                continue
            seen.add(key)
            calls.append(call)
        return ToolTurn(calls=tuple(calls), repeated=tuple(repeated))


class HermesFormat(ToolFormat):
    name = "hermes"
    begin, end = "<tool_call>", "</tool_call>"

    def build(self, b: GrammarBuilder, vocab: Vocabulary, turn: _Turn, options: Any) -> str:
        start = b.rule("turn")
        free = text_without([self.begin])
        if turn.text:
            b.add(start, b.terminal(free, (NON_EMPTY,), hint="TEXT"))
        if turn.calls:
            obj = self._json(b, self._object_schema(turn.tools, "arguments"), options)
            if self._is_token(vocab, self.begin):
                call = b.sequence(
                    self._mark(b, vocab, self.begin),
                    b.literal("\n"),
                    obj,
                    b.literal("\n"),
                    self._mark(b, vocab, self.end),
                )
                calls = self._calls(b, call, b.literal("\n"), turn)
                b.add(start, calls)
                if turn.text:  # text, a newline, then the calls (text cannot reach a token)
                    lead = b.terminal(
                        Concat((any_text(), literal_node("\n"))), (free,), hint="TEXT"
                    )
                    b.add(start, lead, calls)
            else:  # text tags: the text before a call ends with the tag, in one lexeme
                rest = b.sequence(b.literal("\n"), obj, b.literal("\n" + self.end))
                later = b.sequence(b.literal("\n" + self.begin), rest)
                tail = self._more(b, later, turn.max_calls)
                b.add(start, b.literal(self.begin), rest, tail)
                if turn.text:
                    ends, extra = text_ending_at("\n" + self.begin, [], avoid=[self.begin])
                    b.add(start, b.terminal(ends, extra, hint="TEXT"), rest, tail)
        return start

    def render(self, calls: Sequence[tuple[str, Any]]) -> str:
        return "\n".join(
            f"{self.begin}\n{_dumps({'name': n, 'arguments': a})}\n{self.end}" for n, a in calls
        )

    def parse(self, text: str, *, id_prefix: str = "call_", drop_repeats: bool = True) -> ToolTurn:
        parts = text.split(self.begin)
        content = parts[0]
        raw = []
        for part in parts[1:]:
            body, sep, _ = part.partition(self.end)
            if not sep:
                raise GenerationError(f"a {self.begin} without {self.end}: {part[:200]!r}")
            raw.append(_named_call(_loads(body.strip()), "arguments"))
        return self._finish(content, raw, id_prefix, drop_repeats)  # (content: the answer)


class Llama3JsonFormat(ToolFormat):
    name = "llama3_json"
    python_tag = "<|python_tag|>"

    def build(self, b: GrammarBuilder, vocab: Vocabulary, turn: _Turn, options: Any) -> str:
        start = b.rule("turn")
        if turn.text:  # an answer: text that does not open a call
            head = CharClass(iv.complement(((ord("{"), ord("{")),)))
            b.add(start, b.terminal(Concat((head, any_text())), hint="TEXT"))
        if turn.calls:
            obj = self._json(b, self._object_schema(turn.tools, "parameters"), options)
            calls = self._calls(b, obj, b.literal("; "), turn)
            b.add(start, calls)
            if self._is_token(vocab, self.python_tag):
                b.add(start, self._mark(b, vocab, self.python_tag), calls)
        return start

    def render(self, calls: Sequence[tuple[str, Any]]) -> str:
        return "; ".join(_dumps({"name": n, "parameters": a}) for n, a in calls)

    def parse(self, text: str, *, id_prefix: str = "call_", drop_repeats: bool = True) -> ToolTurn:
        body = text.removeprefix(self.python_tag)
        if not body.startswith("{"):
            return ToolTurn(answer=text)
        raw = []
        decoder = json.JSONDecoder()
        pos = 0
        while pos < len(body):
            try:
                data, pos = decoder.raw_decode(body, pos)
            except json.JSONDecodeError as exc:
                raise GenerationError(f"a call is not JSON: {exc}: {body[:200]!r}") from None
            raw.append(_named_call(data, "parameters"))
            if body.startswith("; ", pos):
                pos += 2
            elif pos < len(body):
                raise GenerationError(f"calls are joined by '; ': {body[pos : pos + 50]!r}")
        return self._finish(None, raw, id_prefix, drop_repeats)


class MistralFormat(ToolFormat):
    name = "mistral"
    begin = "[TOOL_CALLS]"

    def build(self, b: GrammarBuilder, vocab: Vocabulary, turn: _Turn, options: Any) -> str:
        start = b.rule("turn")
        if turn.text:
            b.add(start, b.terminal(text_without([self.begin]), (NON_EMPTY,), hint="TEXT"))
        if turn.calls:
            items: dict[str, Any] = {
                "type": "array",
                "items": self._object_schema(turn.tools, "arguments"),
                "minItems": 1,
            }
            if turn.max_calls is not None:
                items["maxItems"] = turn.max_calls
            b.add(start, self._mark(b, vocab, self.begin), self._json(b, items, options))
        return start

    def render(self, calls: Sequence[tuple[str, Any]]) -> str:
        return self.begin + _dumps([{"name": n, "arguments": a} for n, a in calls])

    def parse(self, text: str, *, id_prefix: str = "call_", drop_repeats: bool = True) -> ToolTurn:
        if self.begin not in text and not text.lstrip().startswith("[{"):
            return ToolTurn(answer=text)
        body = text.split(self.begin, 1)[-1]
        data = _loads(body.strip())
        if not isinstance(data, list):
            raise GenerationError(f"{self.begin} is followed by a JSON list: {body[:200]!r}")
        raw = [_named_call(item, "arguments") for item in data]
        return self._finish(None, raw, id_prefix, drop_repeats)


class DeepSeekV3Format(ToolFormat):
    name = "deepseek_v3"
    calls_begin, calls_end = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
    call_begin, call_end, sep = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"

    def build(self, b: GrammarBuilder, vocab: Vocabulary, turn: _Turn, options: Any) -> str:
        start = b.rule("turn")
        if turn.text:
            b.add(
                start,
                b.terminal(
                    text_without([self.calls_begin, self.call_begin]), (NON_EMPTY,), hint="TEXT"
                ),
            )
        if turn.calls:
            options_ = []
            for tool in turn.tools:
                args = self._json(b, tool.parameters, options)
                options_.append(
                    [
                        self._mark(b, vocab, self.call_begin),
                        b.literal("function"),
                        self._mark(b, vocab, self.sep),
                        b.literal(f"{tool.name}\n```json\n"),
                        args,
                        b.literal("\n```"),
                        self._mark(b, vocab, self.call_end),
                    ]
                )
            one = b.alternatives(options_, "call")
            calls = self._calls(b, one, b.literal("\n"), turn)
            b.add(
                start,
                self._mark(b, vocab, self.calls_begin),
                calls,
                self._mark(b, vocab, self.calls_end),
            )
        return start

    _CALL = re.compile(
        r"<｜tool▁call▁begin｜>function<｜tool▁sep｜>([^\n]+)\n```json\n(.*?)\n```"
        r"<｜tool▁call▁end｜>",
        re.DOTALL,
    )

    def render(self, calls: Sequence[tuple[str, Any]]) -> str:
        body = "\n".join(
            f"{self.call_begin}function{self.sep}{n}\n```json\n{_dumps(a)}\n```{self.call_end}"
            for n, a in calls
        )
        return f"{self.calls_begin}{body}{self.calls_end}"

    def parse(self, text: str, *, id_prefix: str = "call_", drop_repeats: bool = True) -> ToolTurn:
        if self.calls_begin not in text:
            return ToolTurn(answer=text)
        raw = [(m.group(1), _loads(m.group(2))) for m in self._CALL.finditer(text)]
        if not raw:
            raise GenerationError(f"no complete call after {self.calls_begin}: {text[:200]!r}")
        return self._finish(None, raw, id_prefix, drop_repeats)


class HarmonyFormat(ToolFormat):
    """gpt-oss: one message per turn (a call, or the final answer)."""

    name = "harmony"

    def think(self, b: GrammarBuilder, vocab: Vocabulary, start: str) -> str | None:
        """An optional analysis message (Harmony's reasoning) before the turn's message."""
        analysis = b.sequence(
            self._mark(b, vocab, "<|channel|>"),
            b.literal("analysis"),
            self._mark(b, vocab, "<|message|>"),
            b.optional(b.terminal(NON_EMPTY, hint="THINK")),
            self._mark(b, vocab, "<|end|>"),
            self._mark(b, vocab, "<|start|>"),
            b.literal("assistant"),
        )
        return b.alternatives([[start], [analysis, start]], "reasoning")

    def build(self, b: GrammarBuilder, vocab: Vocabulary, turn: _Turn, options: Any) -> str:
        start = b.rule("turn")
        channel, message = (self._mark(b, vocab, t) for t in ("<|channel|>", "<|message|>"))
        if turn.text:
            text = b.terminal(NON_EMPTY, hint="TEXT")
            b.add(start, channel, b.literal("final"), message, text)
        if turn.calls:
            for tool in turn.tools:
                b.add(
                    start,
                    channel,
                    b.literal(f"commentary to=functions.{tool.name} "),
                    self._mark(b, vocab, "<|constrain|>"),
                    b.literal("json"),
                    message,
                    self._json(b, tool.parameters, options),
                    self._mark(b, vocab, "<|call|>"),
                )
        return start

    _CALL = re.compile(
        r"<\|channel\|>commentary to=functions\.([^\s<]+) ?(?:<\|constrain\|>json)?"
        r"<\|message\|>(.*?)<\|call\|>",
        re.DOTALL,
    )

    def render(self, calls: Sequence[tuple[str, Any]]) -> str:
        n, a = calls[0]  # (one call per message)
        head = f"<|channel|>commentary to=functions.{n} <|constrain|>json<|message|>"
        return f"{head}{_dumps(a)}<|call|>"

    def parse(self, text: str, *, id_prefix: str = "call_", drop_repeats: bool = True) -> ToolTurn:
        raw = [(m.group(1), _loads(m.group(2))) for m in self._CALL.finditer(text)]
        if raw:
            return self._finish(None, raw, id_prefix, drop_repeats)
        _, sep, answer = text.partition("<|channel|>final<|message|>")
        return ToolTurn(answer=answer if sep else text)


FORMATS: dict[str, ToolFormat] = {
    f.name: f
    for f in (
        HermesFormat(),
        Llama3JsonFormat(),
        MistralFormat(),
        DeepSeekV3Format(),
        HarmonyFormat(),
    )
}


def detect_tool_format(tokenizer: Any, vocab: Vocabulary | None = None) -> str:
    """The native format of a tokenizer's chat template and special tokens ("json" when the
    template says nothing of tools)."""
    template = getattr(tokenizer, "chat_template", None) or ""
    if not isinstance(template, str):
        template = json.dumps(template)
    names = set(vocab.named_tokens) if vocab is not None else set()
    if "<|channel|>" in names and "<|call|>" in names:
        return "harmony"
    if "<｜tool▁calls▁begin｜>" in template:
        return "deepseek_v3"
    if "[TOOL_CALLS]" in template or "[TOOL_CALLS]" in names:
        return "mistral"
    if "<tool_call>" in template:
        return "hermes"
    if "<|start_header_id|>" in template and "parameters" in template:
        return "llama3_json"
    return "json"


def _named_call(data: Any, args_key: str) -> tuple[str, Any]:
    """(name, arguments) of a call object `{"name": N, args_key: A}`."""
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise GenerationError(f'a call is {{"name": ..., "{args_key}": ...}}: {data!r}')
    return data["name"], data.get(args_key, {})


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise GenerationError(f"not JSON: {exc}: {text[:200]!r}") from None


def tool_format(name: str) -> ToolFormat:
    """The format called `name` (see `FORMATS`)."""
    try:
        return FORMATS[name]
    except KeyError:
        raise StructgenError(
            f"unknown tool format {name!r}; known: {', '.join(sorted(FORMATS))} or 'json'"
        ) from None


def resolve_tool_format(lm_or_compiler: Any, name: str) -> str:
    """`name`, or for "auto" the format of the LM's tokenizer ("json" for a `Compiler`)."""
    if name == "auto":
        tokenizer = getattr(lm_or_compiler, "tokenizer", None)
        if tokenizer is None:
            return "json"
        compiler = getattr(lm_or_compiler, "compiler", None)
        return detect_tool_format(tokenizer, getattr(compiler, "vocab", None))
    if name != "json":
        tool_format(name)  # (refuses unknown names)
    return name
