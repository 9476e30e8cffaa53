"""Tool calling: tools from Python functions or OpenAI specs, a constrained turn, and the loop.

A model's turn is one JSON object, constrained by one JSON Schema compiled per tool set:

    {"tool_calls": [{"name": "<tool>", "arguments": {...}}, ...]}   call one or more tools
    {"answer": "<text>"}                                              the final answer

The `name` of each call is a `const` and its `arguments` are that tool's own argument schema
(an `anyOf` over the tools), so a call of an unknown tool, or with invalid arguments, cannot be
generated at all. `tool_choice` picks the branches: "auto" (either), "required" (calls only),
"none" (answer only) or a tool name (calls of that tool only). A turn holds at most
`max_calls_per_turn` calls (`maxItems`), and a guard beside the grammar stops a model that
repeats itself: once a call equals an earlier one (same name, equal arguments; in the turn, or
made earlier in the run), the only way on is to close the turn, and the repeat is dropped.
Given the turn's token budget, the same guard closes an answer in time to end within it.

`run_tools` loops: generate a turn, run every call in it (an exception becomes an error message
for the model, never the user's problem), put the calls and their results into the conversation
through the chat template, and go again until the model answers; the last allowed step is forced
to answer, so a run always ends with one, and so is the step after a turn that only repeated
calls. See docs/guide/tools.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import json
import re
import time
import typing
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple, overload

import numpy as np
import numpy.typing as npt

from structgen.api._docstrings import parse_docstring
from structgen.compiler import CompiledGrammar, Compiler
from structgen.errors import GenerationError, StructgenError
from structgen.masks import pack_bool_mask, unpack_bitmask, without_tokens
from structgen.schema import SchemaOptions

if TYPE_CHECKING:
    from pydantic import BaseModel

    from structgen.api.lm import LM, Prompt
    from structgen.generate import RequestMetrics, SamplingParams

__all__ = [
    "DEFAULT_MAX_CALLS_PER_TURN",
    "TURN_SCHEMA_OPTIONS",
    "TemplateSupport",
    "Tool",
    "ToolCall",
    "ToolCallRecord",
    "ToolChoice",
    "ToolLike",
    "ToolRun",
    "ToolTurn",
    "TurnRecord",
    "as_tools",
    "execute_tool_calls",
    "parse_tool_turn",
    "run_tools",
    "template_support",
    "tool",
    "tool_call_grammar",
    "tool_prompt",
    "turn_schema",
]

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# Turns are compact JSON (no whitespace between tokens): no token budget spent on indentation,
# and the fixed parts (`{"answer":"`, a forced tool's `{"tool_calls":[{"name":"x","arguments":`)
# are fed by jump forward instead of sampled. Give `options=` to change it.
TURN_SCHEMA_OPTIONS = SchemaOptions(whitespace="compact")
# At most this many calls in one turn (the turn schema's `maxItems`) unless told otherwise: a
# small model that lists calls without end stops there instead of at max_new_tokens.
DEFAULT_MAX_CALLS_PER_TURN = 8
_CHOICES = ("auto", "required", "none")


# ====================================================================== tools


@dataclass(frozen=True, slots=True)
class Tool:
    """A function the model may call: its name, description and argument JSON Schema.

    `function` is the Python callable that runs a call (None for a spec-only tool: the grammar
    and the parser still work, `run_tools` refuses it). `arguments_model` is the Pydantic model
    that validates arguments before the call (built by `from_function`, so a `BaseModel`- or
    `Enum`-typed parameter receives an instance); without it arguments are checked against
    `parameters` with `jsonschema`. A `Tool` is callable like its function.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any] | None = None
    arguments_model: type[BaseModel] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise StructgenError(
                f"tool name {self.name!r} must be 1-64 letters, digits, '_', '-' or '.'"
            )
        if not isinstance(self.parameters, dict) or self.parameters.get("type") != "object":
            raise StructgenError(
                f"tool {self.name!r}: parameters must be a JSON Schema of type 'object', "
                f"got {self.parameters!r}"
            )
        if self.function is not None and not callable(self.function):
            raise StructgenError(f"tool {self.name!r}: function is not callable")

    def __hash__(self) -> int:
        return hash((self.name, self.description, _canonical(self.parameters), self.function))

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> Tool:
        """A tool from a function's signature, type hints and docstring.

        Parameters without a default are required; types go through Pydantic (`Literal`,
        `Optional`, `list[...]`, `Enum`, `BaseModel`, `Annotated[..., Field(...)]` all work);
        the docstring's first paragraph is the description and its documented parameters
        (Google, NumPy, reST or Epydoc style) describe the properties. Extra arguments are
        forbidden (`additionalProperties: false`), so the model cannot invent any.
        """
        if isinstance(fn, Tool):
            return fn if name is None and description is None else fn._renamed(name, description)
        if not callable(fn):
            raise StructgenError(f"a tool needs a callable, got {fn!r}")
        tool_name = name or getattr(fn, "__name__", None)
        if not tool_name or tool_name == "<lambda>":
            raise StructgenError(f"give a name for the tool {fn!r} (name=...)")
        model = _arguments_model(fn, tool_name)
        doc = parse_docstring(inspect.getdoc(fn))
        return cls(
            name=tool_name,
            description=description if description is not None else doc.summary,
            parameters=_clean_schema(model.model_json_schema()),
            function=fn,
            arguments_model=model,
        )

    @classmethod
    def from_openai(
        cls, spec: Mapping[str, Any], function: Callable[..., Any] | None = None
    ) -> Tool:
        """A tool from an OpenAI-style spec: `{"type": "function", "function": {"name", ...}}`.

        The inner `{"name", "description", "parameters"}` object is accepted too. `function`
        (optional) runs the calls; its arguments are checked against `parameters`.
        """
        if not isinstance(spec, Mapping):
            raise StructgenError(f"a tool spec is a JSON object, got {type(spec).__name__}")
        body: Any = spec
        if "function" in spec:
            if spec.get("type", "function") != "function":
                raise StructgenError(f"unsupported tool type {spec.get('type')!r}")
            body = spec["function"]
        if not isinstance(body, Mapping) or "name" not in body:
            raise StructgenError(f"a tool spec needs a function name, got {dict(spec)!r}")
        parameters = body.get("parameters")
        if parameters is None:
            parameters = {"type": "object", "properties": {}, "additionalProperties": False}
        return cls(
            name=str(body["name"]),
            description=str(body.get("description") or ""),
            parameters=json.loads(json.dumps(parameters)),  # a private, JSON-only copy
            function=function,
        )

    def _renamed(self, name: str | None, description: str | None) -> Tool:
        return replace(
            self,
            name=name if name is not None else self.name,
            description=description if description is not None else self.description,
        )

    # ------------------------------------------------------------------ use

    def openai_spec(self) -> dict[str, Any]:
        """The OpenAI-compatible spec (also what chat templates take as `tools=`)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": json.loads(json.dumps(self.parameters)),
            },
        }

    def validate(self, arguments: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """Positional and keyword arguments for the function, validated (raises if invalid)."""
        if not isinstance(arguments, Mapping):
            raise StructgenError(f"tool {self.name!r}: arguments must be a JSON object")
        if self.arguments_model is None:
            import jsonschema

            jsonschema.Draft202012Validator(self.parameters).validate(dict(arguments))
            return [], dict(arguments)
        instance = self.arguments_model.model_validate(dict(arguments))
        values = {
            (info.alias or key): getattr(instance, key)
            for key, info in type(instance).model_fields.items()
        }
        positional: list[Any] = []
        if self.function is not None:
            for p in _signature(self.function).parameters.values():
                if p.kind is inspect.Parameter.POSITIONAL_ONLY and p.name in values:
                    positional.append(values.pop(p.name))
        return positional, values

    def invoke(self, arguments: Mapping[str, Any]) -> Any:
        """Validate `arguments` and call the function (a coroutine function is run to its end)."""
        if self.function is None:
            raise StructgenError(f"tool {self.name!r} has no Python function to call")
        args, kwargs = self.validate(arguments)
        value = self.function(*args, **kwargs)
        if inspect.iscoroutine(value):
            value = asyncio.run(value)
        return value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly, like the undecorated function."""
        if self.function is None:
            raise StructgenError(f"tool {self.name!r} has no Python function to call")
        return self.function(*args, **kwargs)


# What tool lists take: a `Tool`, a function (`Tool.from_function`) or an OpenAI spec.
ToolLike = Tool | Callable[..., Any] | Mapping[str, Any]
# "auto" | "required" | "none" | a tool name | a Tool | {"type": "function", "function": {...}}
ToolChoice = str | Tool | Mapping[str, Any]


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator: `@tool` or `@tool(name=..., description=...)` makes a `Tool` of a function.

    The result is still callable like the function, so decorating does not change its users.
    """
    if fn is not None:
        return Tool.from_function(fn, name=name, description=description)

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool.from_function(f, name=name, description=description)

    return wrap


def as_tools(tools: Sequence[ToolLike]) -> tuple[Tool, ...]:
    """Tools from `Tool`s, plain functions and OpenAI specs; names must be distinct."""
    if isinstance(tools, (Tool, Mapping)) or callable(tools):
        tools = [tools]  # type: ignore[list-item]
    out: list[Tool] = []
    for t in tools:
        if isinstance(t, Tool):
            out.append(t)
        elif isinstance(t, Mapping):
            out.append(Tool.from_openai(t))
        elif callable(t):
            out.append(Tool.from_function(t))
        else:
            raise StructgenError(f"not a tool: {t!r} (give a Tool, a function or an OpenAI spec)")
    seen: set[str] = set()
    for t in out:
        if t.name in seen:
            raise StructgenError(f"two tools are named {t.name!r}")
        seen.add(t.name)
    return tuple(out)


def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise StructgenError(f"cannot read the signature of {fn!r}: {exc}") from exc


def _arguments_model(fn: Callable[..., Any], name: str) -> type[BaseModel]:
    """A Pydantic model of the function's parameters (the source of schema and validation)."""
    from pydantic import BaseModel, ConfigDict, Field, create_model
    from pydantic.fields import FieldInfo

    sig = _signature(fn)
    target = fn if inspect.isfunction(fn) or inspect.ismethod(fn) else type(fn).__call__
    try:
        hints = typing.get_type_hints(target, include_extras=True)
    except NameError:
        # String annotations naming classes local to the caller (`from __future__ import
        # annotations` inside a function): resolve them in the caller's namespace.
        try:
            hints = typing.get_type_hints(target, localns=_caller_locals(), include_extras=True)
        except Exception as exc:
            raise StructgenError(
                f"cannot resolve the type hints of {name!r}: {exc} (define the types it uses "
                "at module level)"
            ) from exc
    docs = parse_docstring(inspect.getdoc(fn)).params
    fields: dict[str, Any] = {}
    for i, p in enumerate(sig.parameters.values()):
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise StructgenError(
                f"tool {name!r}: *{p.name} / **{p.name} cannot be described to the model; "
                "list the parameters explicitly"
            )
        annotation = hints.get(p.name, Any)
        default = p.default
        extra: dict[str, Any] = {}
        described = _described(annotation) or (
            isinstance(default, FieldInfo) and bool(default.description)
        )
        if p.name in docs and not described:
            extra["description"] = docs[p.name]
        key = p.name
        if key.startswith("_") or hasattr(BaseModel, key):
            key = f"arg{i}_{key.lstrip('_')}"  # names pydantic reserves: alias them
            extra["alias"] = p.name
        if isinstance(default, FieldInfo):
            info = FieldInfo.merge_field_infos(default, **extra) if extra else default
        else:
            required = default is inspect.Parameter.empty
            info = Field(default=... if required else default, **extra)
        fields[key] = (annotation, info)
    config = ConfigDict(extra="forbid", protected_namespaces=(), arbitrary_types_allowed=False)
    model: type[BaseModel] = create_model(  # type: ignore[call-overload]
        f"{name}_arguments", __config__=config, **fields
    )
    return model


def _caller_locals() -> dict[str, Any]:
    """The local names of the nearest frame outside structgen (where the tool was defined)."""
    frame = inspect.currentframe()
    try:
        while frame is not None and frame.f_globals.get("__name__", "").startswith("structgen"):
            frame = frame.f_back
        return dict(frame.f_locals) if frame is not None else {}
    finally:
        del frame


def _described(annotation: Any) -> bool:
    """True when `Annotated[..., Field(description=...)]` already describes a parameter."""
    from pydantic.fields import FieldInfo

    if typing.get_origin(annotation) is typing.Annotated:
        return any(
            isinstance(m, FieldInfo) and m.description for m in typing.get_args(annotation)[1:]
        )
    return False


_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_ONE = (
    "items",
    "additionalProperties",
    "not",
    "contains",
    "propertyNames",
    "if",
    "then",
    "else",
    "unevaluatedProperties",
    "unevaluatedItems",
)


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Pydantic's schema, trimmed for the model: no titles, and closed nested objects.

    Titles repeat the property names (tokens in every prompt); nested models are closed
    (`additionalProperties: false` where unset) so the model cannot invent fields that
    validation would ignore anyway.
    """

    def walk(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "title" and isinstance(value, str):
                continue
            if key in _SCHEMA_MAPS and isinstance(value, dict):
                out[key] = {k: walk(v) for k, v in value.items()}
            elif key in _SCHEMA_LISTS and isinstance(value, list):
                out[key] = [walk(v) for v in value]
            elif key in _SCHEMA_ONE:
                out[key] = walk(value)
            else:
                out[key] = value
        if "properties" in out and out.get("type") == "object":
            out.setdefault("additionalProperties", False)
        return out

    cleaned: dict[str, Any] = walk(schema)
    cleaned.setdefault("properties", {})
    return cleaned


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# ====================================================================== the turn format


def _choice_name(choice: ToolChoice, tools: Sequence[Tool]) -> str:
    """ "auto", "required", "none", or the name of the one tool the turn must call."""
    if isinstance(choice, Tool):
        choice = choice.name
    if isinstance(choice, Mapping):
        inner = choice.get("function")
        if choice.get("type") != "function" or not isinstance(inner, Mapping):
            raise StructgenError(f"tool_choice {dict(choice)!r} is not a function choice")
        choice = str(inner.get("name"))
    if not isinstance(choice, str):
        raise StructgenError(f"tool_choice must be a string or a dict, got {choice!r}")
    names = [t.name for t in tools]
    if choice in _CHOICES:
        if choice == "required" and not tools:
            raise StructgenError('tool_choice="required" needs at least one tool')
        return choice
    if choice not in names:
        raise StructgenError(
            f"tool_choice {choice!r} is neither 'auto', 'required', 'none' nor a tool name "
            f"({', '.join(names) or 'no tools'})"
        )
    return choice


def _max_calls(
    parallel_tool_calls: bool | int, max_calls_per_turn: int | None = None
) -> int | None:
    """The most calls a turn may hold: `parallel_tool_calls` (False: 1, a number: that many)
    and `max_calls_per_turn` (None: no bound), whichever is smaller."""
    if max_calls_per_turn is not None and (
        isinstance(max_calls_per_turn, bool)
        or not isinstance(max_calls_per_turn, int)
        or max_calls_per_turn < 1
    ):
        raise StructgenError(
            f"max_calls_per_turn is a number of calls >= 1 or None, got {max_calls_per_turn!r}"
        )
    if parallel_tool_calls is True:
        limit = None
    elif parallel_tool_calls is False:
        limit = 1
    elif isinstance(parallel_tool_calls, int) and parallel_tool_calls >= 1:
        limit = parallel_tool_calls
    else:
        raise StructgenError(
            "parallel_tool_calls is True, False or a number of calls >= 1, "
            f"got {parallel_tool_calls!r}"
        )
    if max_calls_per_turn is None:
        return limit
    return max_calls_per_turn if limit is None else min(limit, max_calls_per_turn)


def turn_schema(
    tools: Sequence[ToolLike],
    tool_choice: ToolChoice = "auto",
    *,
    parallel_tool_calls: bool | int = True,
    max_answer_chars: int | None = None,
    max_calls_per_turn: int | None = DEFAULT_MAX_CALLS_PER_TURN,
) -> dict[str, Any]:
    """The JSON Schema of one model turn (see the module docstring for the format).

    `parallel_tool_calls`: True (several calls per turn), False (one) or a maximum;
    `max_calls_per_turn` bounds the calls of a turn in any case (None: no bound), so both give
    the list's `maxItems`. `max_answer_chars` bounds the answer string (`maxLength`): the
    grammar closes the answer there, so a rambling model still finishes in budget.
    Each tool's argument schema moves under `$defs/tool:<name>` with its local `$ref`s rewritten,
    so tools that bring their own `$defs` do not collide.
    """
    tool_list = as_tools(tools)
    choice = _choice_name(tool_choice, tool_list)
    defs: dict[str, Any] = {}
    branches: list[dict[str, Any]] = []
    for t in tool_list:
        if choice in ("auto", "required", t.name):
            key = f"tool:{t.name}"
            defs[key] = _rebase_refs(t.parameters, f"#/$defs/{_pointer_escape(key)}")
            branches.append(
                {
                    "type": "object",
                    "properties": {
                        "name": {"const": t.name},
                        "arguments": {"$ref": f"#/$defs/{_pointer_escape(key)}"},
                    },
                    "required": ["name", "arguments"],
                    "additionalProperties": False,
                }
            )
    calls: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": branches}}
    limit = _max_calls(parallel_tool_calls, max_calls_per_turn)
    if limit is not None:
        calls["maxItems"] = limit
    answer_text: dict[str, Any] = {"type": "string", "minLength": 1}
    if max_answer_chars is not None:
        if max_answer_chars < 1:
            raise StructgenError(f"max_answer_chars must be >= 1, got {max_answer_chars}")
        answer_text["maxLength"] = max_answer_chars
    call_turn = {
        "type": "object",
        "properties": {"tool_calls": calls},
        "required": ["tool_calls"],
        "additionalProperties": False,
    }
    answer_turn = {
        "type": "object",
        "properties": {"answer": answer_text},
        "required": ["answer"],
        "additionalProperties": False,
    }
    if choice == "none" or not branches:
        schema: dict[str, Any] = answer_turn
    elif choice == "auto":
        schema = {"anyOf": [call_turn, answer_turn]}
    else:
        schema = call_turn
    return {"$defs": defs, **schema} if branches else schema


def _pointer_escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _rebase_refs(schema: Any, base: str) -> Any:
    """A copy of `schema` with every local `$ref` ("#...") made relative to `base`."""
    if isinstance(schema, list):
        return [_rebase_refs(v, base) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("enum", "const", "default", "examples"):
            out[key] = json.loads(json.dumps(value))
        elif key == "$ref" and isinstance(value, str) and value.startswith("#"):
            fragment = value[1:]
            out[key] = base + fragment if fragment.startswith("/") or not fragment else value
        else:
            out[key] = _rebase_refs(value, base)
    return out


def tool_call_grammar(
    lm_or_compiler: LM | Compiler,
    tools: Sequence[ToolLike],
    tool_choice: ToolChoice = "auto",
    *,
    parallel_tool_calls: bool | int = True,
    max_answer_chars: int | None = None,
    options: SchemaOptions | None = None,
    max_calls_per_turn: int | None = DEFAULT_MAX_CALLS_PER_TURN,
    allow_repeated_calls: bool = False,
    earlier_calls: Iterable[ToolCall | ToolCallRecord | tuple[str, Mapping[str, Any]]] = (),
    max_new_tokens: int | None = None,
) -> CompiledGrammar:
    """The compiled constraint of one turn, for your own loop or a `LogitsProcessor`.

    The turn schema is compiled through the compiler's cache, so each (tool set, choice) is
    compiled once. `options` defaults to `TURN_SCHEMA_OPTIONS` (compact JSON: no whitespace
    between tokens). Unless `allow_repeated_calls`, a guard closes the turn as soon as a call
    repeats an earlier one of the turn or one of `earlier_calls` (the calls already made, as
    `ToolCall`s, records or `(name, arguments)` pairs): the text then ends with that one
    repeat, which `parse_tool_turn` drops. With `max_new_tokens` (the turn's token budget, as
    given to the generation), an answer is closed in time to end within it.
    """
    compiler = lm_or_compiler if isinstance(lm_or_compiler, Compiler) else lm_or_compiler.compiler
    schema = turn_schema(
        tools,
        tool_choice,
        parallel_tool_calls=parallel_tool_calls,
        max_answer_chars=max_answer_chars,
        max_calls_per_turn=max_calls_per_turn,
    )
    compiled = compiler.json_schema(schema, options=options or TURN_SCHEMA_OPTIONS)
    tool_list = as_tools(tools)
    seen: frozenset[Any] | None = None
    if not allow_repeated_calls and tool_list and _choice_name(tool_choice, tool_list) != "none":
        seen = frozenset(_call_key(*_name_and_arguments(c)) for c in earlier_calls)
    if seen is None and max_new_tokens is None:
        return compiled
    if max_new_tokens is not None and (
        isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int)
    ):
        raise StructgenError(f"max_new_tokens must be an integer, got {max_new_tokens!r}")
    return _guarded_turn(compiled, seen, max_new_tokens)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call in a turn: an id (unique in the run), the tool's name and its arguments."""

    id: str
    name: str
    arguments: dict[str, Any]

    def openai(self) -> dict[str, Any]:
        """The call as an OpenAI `tool_calls` entry (arguments as JSON text)."""
        return {
            "id": self.id,
            "type": "function",
            "function": {
                "name": self.name,
                "arguments": json.dumps(self.arguments, ensure_ascii=False),
            },
        }


@dataclass(frozen=True, slots=True)
class ToolTurn:
    """A parsed turn: either `calls` (one or more) or an `answer`.

    `repeated` holds the calls dropped from `calls` because they repeated an earlier call of
    the turn (same name, equal arguments; see `parse_tool_turn`).
    """

    calls: tuple[ToolCall, ...] = ()
    answer: str | None = None
    repeated: tuple[ToolCall, ...] = ()

    @property
    def is_answer(self) -> bool:
        return self.answer is not None


def parse_tool_turn(
    text: str,
    tools: Sequence[ToolLike] | None = None,
    *,
    id_prefix: str = "call_",
    drop_repeats: bool = True,
) -> ToolTurn:
    """Parse a turn's text; with `tools`, also check names and arguments (for outside output).

    Text generated under `tool_call_grammar` always parses; text from elsewhere that does not
    follow the turn format raises `GenerationError` saying why. With `drop_repeats`, a call
    equal to an earlier one of the turn (same name, equal JSON arguments) moves to `repeated`
    instead of `calls` (ids count the calls kept).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GenerationError(f"the turn is not JSON: {exc}: {text[:200]!r}") from exc
    if isinstance(data, dict) and set(data) == {"answer"} and isinstance(data["answer"], str):
        return ToolTurn(answer=data["answer"])
    raw = data.get("tool_calls") if isinstance(data, dict) and set(data) == {"tool_calls"} else None
    if not isinstance(raw, list) or not raw:
        raise GenerationError(
            'a turn is {"tool_calls": [...]} (one or more calls) or {"answer": "..."}; '
            f"got {text[:200]!r}"
        )
    known = {t.name: t for t in as_tools(tools)} if tools is not None else None
    calls: list[ToolCall] = []
    repeated: list[ToolCall] = []
    seen: set[Any] = set()
    for i, item in enumerate(raw):
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("name"), str)
            or not isinstance(item.get("arguments", {}), dict)
        ):
            raise GenerationError(
                f'call {i} is not {{"name": ..., "arguments": {{...}}}}: {item!r}'
            )
        name, arguments = item["name"], item.get("arguments", {})
        if known is not None:
            if name not in known:
                raise GenerationError(f"call {i} names an unknown tool {name!r}")
            import jsonschema

            try:
                jsonschema.Draft202012Validator(known[name].parameters).validate(arguments)
            except jsonschema.ValidationError as exc:
                raise GenerationError(
                    f"call {i} of {name!r} has invalid arguments: {exc.message}"
                ) from exc
        key = _call_key(name, arguments)
        if drop_repeats and key in seen:
            repeated.append(ToolCall(f"{id_prefix}repeat_{len(repeated)}", name, arguments))
            continue
        seen.add(key)
        calls.append(ToolCall(f"{id_prefix}{len(calls)}", name, arguments))
    return ToolTurn(calls=tuple(calls), repeated=tuple(repeated))


# ====================================================================== repeated calls


def _hashable(value: Any) -> Any:
    """A JSON value as a hashable key that is equal exactly when the values are JSON-equal
    (key order does not matter, 1 and 1.0 are one number, true is not 1)."""
    if isinstance(value, Mapping):
        return ("o", frozenset((str(k), _hashable(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("a", tuple(_hashable(v) for v in value))
    if isinstance(value, bool) or value is None:
        return ("c", value)
    if isinstance(value, (int, float)):
        return ("n", value)
    return ("s", str(value))


def _call_key(name: str, arguments: Any) -> tuple[str, Any]:
    return (name, _hashable(arguments))


def _name_and_arguments(
    call: ToolCall | ToolCallRecord | tuple[str, Mapping[str, Any]],
) -> tuple[str, Any]:
    if isinstance(call, (ToolCall, ToolCallRecord)):
        return call.name, call.arguments
    name, arguments = call
    return str(name), arguments


_CLOSING = frozenset(b" \t\n\r]}")  # what may follow a repeated call: the turn's end
# Tokens an answer may need to end once the budget closes it: from just after a backslash,
# `u` and four hex digits (one byte per token at worst), then `"`, `}` and EOS; plus one.
_ANSWER_RESERVE = 9


class _TurnScan(NamedTuple):
    """Where the output is in the turn's JSON, the calls finished so far, tokens read."""

    stack: bytes = b""  # open containers, b"{" or b"["
    in_string: bool = False
    escape: int = 0  # in a string: 0 none, -1 just after "\", k > 0 hex digits of \u to come
    utf8: int = 0  # continuation bytes of a UTF-8 character still to come
    answer: bool = False  # the string is the answer (a value of the turn object itself)
    after_colon: bool = False  # in the turn object, after a ":" (a value comes next)
    item: bytes = b""  # the text of the call being written (from its "{"), inside one
    seen: frozenset[Any] | None = frozenset()  # keys of the calls made; None: not tracked
    repeated: bool = False  # a call repeated one of them: only the turn's end may follow
    tokens: int = 0  # tokens read (advance calls)

    @property
    def in_answer(self) -> bool:
        return self.in_string and self.answer

    @property
    def clean(self) -> bool:
        """Not inside an escape or a UTF-8 character: a closing quote could come next."""
        return self.escape == 0 and self.utf8 == 0


def _scan(scan: _TurnScan, data: bytes) -> tuple[_TurnScan | None, int]:
    """The scan after `data`, and the offset in `data` just past the end of a call that
    repeated an earlier one (-1: none). None when `data` goes on past such a call with more
    than the turn's closing brackets and whitespace."""
    stack, in_string, escape, utf8, answer, after_colon, item, seen, repeated, tokens = scan
    buffer = bytearray(item)
    in_item = bool(item)
    cut = -1
    for i, byte in enumerate(data):
        if repeated:
            if byte not in _CLOSING:
                return None, cut
            continue
        if in_item:
            buffer.append(byte)
        if in_string:
            if escape == -1:
                escape = 4 if byte == 0x75 else 0  # \uXXXX, or a one-letter escape
            elif escape > 0:
                escape -= 1
            elif utf8:
                utf8 -= 1
            elif byte == 0x5C:  # backslash
                escape = -1
            elif byte == 0x22:
                in_string = answer = False
            elif byte >= 0xC0:
                utf8 = 1 if byte < 0xE0 else 2 if byte < 0xF0 else 3
            continue
        if byte == 0x22:
            in_string = True
            answer = after_colon and stack == b"{"
            after_colon = False
        elif byte == 0x3A:  # ":"
            after_colon = stack == b"{"
        elif byte in b"{[":
            after_colon = False
            stack += bytes((byte,))
            if byte == 0x7B and stack == b"{[{":  # a call opens in the tool_calls list
                buffer = bytearray(b"{")
                in_item = True
        elif byte in b"}]":
            stack = stack[:-1]
            if in_item and stack == b"{[":  # the call is complete
                in_item = False
                key = _parsed_call_key(bytes(buffer))
                buffer = bytearray()
                if key is None or seen is None:
                    continue
                if key in seen:
                    repeated = True
                    cut = i + 1
                else:
                    seen = seen | {key}
    text = bytes(buffer) if in_item else b""
    scanned = _TurnScan(
        stack, in_string, escape, utf8, answer, after_colon, text, seen, repeated, tokens
    )
    return scanned, cut


def _parsed_call_key(text: bytes) -> tuple[str, Any] | None:
    try:
        call = json.loads(text)
    except ValueError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    return _call_key(call["name"], call.get("arguments", {}))


class _TokenGroups:
    """Per vocabulary: tokens that can end a call (they hold a "}"), tokens that are only
    closing brackets and whitespace (what may follow a repeated call), and tokens that close
    a string and then only that (`"`, `"}`, ...: how an answer ends)."""

    def __init__(self, vocab: Any) -> None:
        size = vocab.size
        braces = np.zeros(size, dtype=bool)
        closing = np.zeros(size, dtype=bool)
        quote = np.zeros(size, dtype=bool)
        for token in range(size):
            data = vocab.token_bytes(token)
            if not data:
                continue
            braces[token] = 0x7D in data
            closing[token] = all(byte in _CLOSING for byte in data)
            quote[token] = data[0] == 0x22 and all(byte in _CLOSING for byte in data[1:])
        self.braces = pack_bool_mask(braces)
        self.closing = pack_bool_mask(closing)
        self.quote = pack_bool_mask(quote)


_GROUPS: dict[str, _TokenGroups] = {}


class _TurnGuard:
    """A turn grammar's engine whose states also carry a `_TurnScan`, for two rules no JSON
    Schema states:

    - no repeated call (with `seen`, the keys of the calls made before the turn): a token that
      finishes a call equal to an earlier one is allowed only when nothing but the turn's end
      follows it in the token, and after it only the turn's end is (a looping model is
      stopped at once, never steered into a near copy of the call);
    - the answer ends within `budget` tokens: once the tokens left could only just close it,
      the answer string is closed (from inside an escape or a UTF-8 character, after one more
      token that finishes it). Tokens are counted as `advance` calls, one per token.
    """

    def __init__(
        self, inner: CompiledGrammar, seen: frozenset[Any] | None, budget: int | None
    ) -> None:
        self.inner = inner
        self.vocab = inner.vocab
        self.seen = seen
        self.budget = budget
        groups = _GROUPS.get(inner.vocab.fingerprint)
        if groups is None:
            groups = _GROUPS.setdefault(inner.vocab.fingerprint, _TokenGroups(inner.vocab))
        self.groups = groups
        repeats = "allowed" if seen is None else json.dumps(sorted(repr(k) for k in seen))
        self.fingerprint = f"{inner.fingerprint}:turn-guard:{repeats}:{budget}"

    def memory_parts(self) -> dict[int, int]:
        return self.inner.memory_parts()

    @property
    def initial_state(self) -> tuple[Any, _TurnScan]:
        return (self.inner.initial_state, _TurnScan(seen=self.seen))

    def advance(self, state: tuple[Any, _TurnScan], data: bytes) -> Any:
        if self._closing(state[1]) and not self._closes(state, data):
            return None
        scan, _ = _scan(state[1], data)
        if scan is None:
            return None
        inner = self.inner.advance(state[0], data)
        if inner is None:
            return None
        return (inner, scan._replace(tokens=scan.tokens + 1))

    def is_accepting(self, state: tuple[Any, _TurnScan]) -> bool:
        return bool(self.inner.is_accepting(state[0]))

    def shortest_completion(
        self, state: tuple[Any, _TurnScan], *, spaced: bool = False
    ) -> bytes | None:
        """The turn grammar's proposal (the planner checks it against the guard)."""
        return self.inner.shortest_completion(state[0], spaced=spaced)

    def token_mask(self, state: tuple[Any, _TurnScan]) -> npt.NDArray[np.int32]:
        mask = self.inner.token_mask(state[0])
        scan = state[1]
        if scan.repeated:
            return mask & self.groups.closing
        if self._closing(scan):
            return self._closing_answer(mask, scan)
        if scan.in_answer:
            return mask
        if not scan.seen or not scan.item:
            return mask  # no earlier call, or not inside a call: nothing can repeat here
        return self._refuse(mask, mask & self.groups.braces, scan)

    def _closing(self, scan: _TurnScan) -> bool:
        """In the answer, with no more tokens left than closing it may take."""
        budget = self.budget
        return budget is not None and scan.in_answer and budget - scan.tokens <= _ANSWER_RESERVE

    def _closes(self, state: tuple[Any, _TurnScan], data: bytes) -> bool:
        """What `_closing_answer` allows, for one token's bytes (`advance` agrees with masks)."""
        scan = state[1]
        if not scan.clean:
            return _only_finishes(scan, data)
        if self.inner.advance(state[0], b'"') is None:
            return True  # the answer cannot end here (a \u surrogate pair must go on)
        return data[:1] == b'"' and all(byte in _CLOSING for byte in data[1:])

    def _closing_answer(
        self, mask: npt.NDArray[np.int32], scan: _TurnScan
    ) -> npt.NDArray[np.int32]:
        """Close the answer: a quote now, or tokens that only finish the escape or the UTF-8
        character the answer is inside of (nothing new after it)."""
        if scan.clean:
            closed = mask & self.groups.quote
            return closed if closed.any() else mask  # (a \u surrogate pair must go on)
        keep = [
            int(t)
            for t in np.flatnonzero(unpack_bitmask(mask, self.vocab.size))
            if _only_finishes(scan, self.vocab.token_bytes(int(t)))
        ]
        if not keep:
            return mask
        allowed = np.zeros(self.vocab.size, dtype=bool)
        allowed[keep] = True
        narrowed: npt.NDArray[np.int32] = mask & pack_bool_mask(allowed)
        return narrowed

    def _refuse(
        self, mask: npt.NDArray[np.int32], words: npt.NDArray[np.int32], scan: _TurnScan
    ) -> npt.NDArray[np.int32]:
        """The mask without the tokens among `words` that go on past a repeated call."""
        if not words.any():
            return mask
        refused = [
            int(t)
            for t in np.flatnonzero(unpack_bitmask(words, self.vocab.size))
            if _scan(scan, self.vocab.token_bytes(int(t)))[0] is None
        ]
        if not refused:
            return mask
        return without_tokens(mask, refused)

    def forced_bytes(self, state: tuple[Any, _TurnScan], limit: int = 4096) -> bytes:
        inner, scan = state
        if scan.repeated:  # the turn's end, byte by byte while only one closing byte fits
            out = bytearray()
            while len(out) < limit and not self.inner.is_accepting(inner):
                fits = [b for b in _CLOSING if self.inner.advance(inner, bytes((b,))) is not None]
                if len(fits) != 1:
                    break
                out.append(fits[0])
                inner = self.inner.advance(inner, bytes(out[-1:]))
            return bytes(out)
        forced = self.inner.forced_bytes(inner, limit)
        if forced and scan.seen:
            _, cut = _scan(scan, forced)
            if cut >= 0:
                return forced[:cut]  # up to the repeated call's end; the turn's end follows
        return forced


def _only_finishes(scan: _TurnScan, data: bytes) -> bool:
    """Whether `data` stays inside the escape or character `scan` is in, or ends with it."""
    for i in range(len(data)):
        after, _ = _scan(scan, data[: i + 1])
        if after is None:
            return False
        if after.clean:
            return i == len(data) - 1
    return True


class _GuardedGrammar(CompiledGrammar):
    """A turn grammar with the turn guard; pickles as the grammar it wraps."""

    __slots__ = ("_budget", "_inner", "_seen")
    _inner: CompiledGrammar
    _seen: frozenset[Any] | None
    _budget: int | None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (_guarded_turn, (self._inner, self._seen, self._budget))


@lru_cache(maxsize=64)
def _guarded_turn(
    inner: CompiledGrammar, seen: frozenset[Any] | None, budget: int | None
) -> CompiledGrammar:
    guarded = _GuardedGrammar(
        inner.vocab, _TurnGuard(inner, seen, budget), kind=inner.kind, source=inner.source
    )
    guarded._inner = inner
    guarded._seen = seen
    guarded._budget = budget
    return guarded


# ====================================================================== rendering


@dataclass(frozen=True, slots=True)
class TemplateSupport:
    """What a chat template does with tools: `tools=`, role "tool", and a tool message's name."""

    tools: bool
    tool_role: bool
    tool_name: bool


_SUPPORT: dict[str, TemplateSupport] = {}
_PROBE_TOOL = "structgen_probe_tool_q7"
_PROBE_RESULT = "structgen_probe_result_z3"


def template_support(tokenizer: Any) -> TemplateSupport:
    """Probe the tokenizer's chat template once (cached by template text)."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return TemplateSupport(False, False, False)
    key = template if isinstance(template, str) else _canonical(template)
    found = _SUPPORT.get(key)
    if found is not None:
        return found
    spec = Tool(_PROBE_TOOL, "probe", {"type": "object", "properties": {}}).openai_spec()
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "hi"}], tools=[spec], tokenize=False
        )
        takes_tools = _PROBE_TOOL in str(text)
    except Exception:
        takes_tools = False
    probe = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "{}"},
        {"role": "tool", "tool_call_id": "call_0", "name": _PROBE_TOOL, "content": _PROBE_RESULT},
    ]
    try:
        text = str(tokenizer.apply_chat_template(probe, tokenize=False))
        tool_role, tool_name = _PROBE_RESULT in text, _PROBE_TOOL in text
    except Exception:
        tool_role = tool_name = False
    found = _SUPPORT[key] = TemplateSupport(takes_tools, tool_role, tool_name)
    return found


def _instructions(tools: Sequence[Tool], support: TemplateSupport, limit: int | None) -> str:
    """The system text that tells the model the tools (unless the template does) and format."""
    parts = []
    if not support.tools:
        listed = "\n".join(
            json.dumps(
                {"name": t.name, "description": t.description, "parameters": t.parameters},
                ensure_ascii=False,
            )
            for t in tools
        )
        parts.append(f"You can call these tools (arguments as JSON Schema):\n{listed}")
    how = "one tool" if limit == 1 else "one or more tools"
    parts.append(
        "Reply with one JSON object and nothing else:\n"
        '{"tool_calls":[{"name":"<tool name>","arguments":{...}}]} to call '
        f"{how}, or\n"
        '{"answer":"<text>"} to give your final answer.\n'
        "Tool results come back in the next messages; answer once you have what you need."
    )
    return "\n\n".join(parts)


def _as_json_value(text: str) -> Any:
    """Text that is JSON as its value (so it is not escaped twice), other text as a string."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return text


def _call_turn_text(calls: Sequence[Mapping[str, Any]]) -> str:
    """An assistant tool-call message as turn text (what the model writes in this format)."""
    items = []
    for c in calls:
        fn = c.get("function", c)
        arguments = fn.get("arguments", {})
        if isinstance(arguments, str):
            with contextlib.suppress(json.JSONDecodeError):
                arguments = json.loads(arguments)
        items.append({"name": fn.get("name"), "arguments": arguments})
    return json.dumps({"tool_calls": items}, ensure_ascii=False, separators=(",", ":"))


def _template_messages(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[ToolLike],
    support: TemplateSupport,
    *,
    parallel_tool_calls: bool | int = True,
) -> list[dict[str, Any]]:
    """The conversation as the chat template should see it in the turn format.

    The instructions join the system message; assistant tool calls become their turn text;
    tool results become role "tool" messages (their name and call id in the text when the
    template drops them), or one user message per step when the template has no tool role.
    """
    tool_list = as_tools(tools)
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # tool results waiting for a user message (no tool role)
    for m in messages:
        msg = dict(m)
        role = msg.get("role")
        if role == "tool":
            name = str(msg.get("name") or "tool")
            call = str(msg.get("tool_call_id") or "")
            content = str(msg.get("content") or "")
            if support.tool_role:
                if not support.tool_name:
                    content = json.dumps(
                        {"tool": name, "call_id": call, "result": _as_json_value(content)},
                        ensure_ascii=False,
                    )
                out.append({"role": "tool", "name": name, "tool_call_id": call, "content": content})
            else:
                pending.append(f"Result of {name} ({call}): {content}")
            continue
        if pending:
            out.append({"role": "user", "content": "\n".join(pending)})
            pending = []
        if role == "assistant" and msg.get("tool_calls"):
            msg = {"role": "assistant", "content": _call_turn_text(msg["tool_calls"])}
        elif msg.get("content") is None:
            msg["content"] = ""
        out.append(msg)
    if pending:
        out.append({"role": "user", "content": "\n".join(pending)})
    text = _instructions(tool_list, support, _max_calls(parallel_tool_calls))
    if out and out[0].get("role") == "system":
        first = str(out[0].get("content") or "")
        out[0] = {**out[0], "content": f"{first}\n\n{text}" if first else text}
    else:
        out.insert(0, {"role": "system", "content": text})
    return out


def tool_prompt(
    lm_or_tokenizer: LM | Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[ToolLike],
    *,
    parallel_tool_calls: bool | int = True,
) -> str:
    """The prompt text of the next turn: the conversation through the chat template.

    `tools=` goes to the template when it renders them; otherwise the system message lists the
    tools. The reply format is always described (the grammar enforces it either way). Without
    a chat template the messages are written as `role: content` paragraphs.
    """
    from structgen.api.lm import LM

    tokenizer = lm_or_tokenizer.tokenizer if isinstance(lm_or_tokenizer, LM) else lm_or_tokenizer
    support = template_support(tokenizer)
    tool_list = as_tools(tools)
    rendered = _template_messages(
        messages, tool_list, support, parallel_tool_calls=parallel_tool_calls
    )
    if not getattr(tokenizer, "chat_template", None):
        lines = [f"{m['role']}: {m.get('content', '')}" for m in rendered]
        return "\n\n".join(lines) + "\n\nassistant: "
    specs = [t.openai_spec() for t in tool_list] if support.tools and tool_list else None
    try:
        text = tokenizer.apply_chat_template(
            rendered, tools=specs, add_generation_prompt=True, tokenize=False
        )
    except Exception as exc:
        raise GenerationError(f"cannot apply the chat template to the conversation: {exc}") from exc
    return str(text)


# ====================================================================== the loop


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """One executed call: where it happened, what it got, what it returned, how long it took.

    `result` is the text sent back to the model; `value` the function's return value; `error`
    the exception (`"TypeName: message"`) when it raised or its arguments were refused.
    `started` is seconds since the run began, `duration` the call's own seconds.
    """

    step: int
    id: str
    name: str
    arguments: dict[str, Any]
    result: str
    value: Any = None
    error: str | None = None
    started: float = 0.0
    duration: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One generated turn: its step, the tool_choice it ran under, its text and metrics.

    `repeated_calls` are the calls of the turn that repeated a call made before (in the turn
    or earlier in the run: same name, equal arguments); the turn was closed at the first of
    them and they were not run.
    """

    step: int
    tool_choice: str
    text: str
    metrics: RequestMetrics
    repeated_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolRun:
    """The outcome of `run_tools`.

    `answer` is the final answer; `calls` every executed call in order; `messages` the whole
    conversation in OpenAI shape (assistant `tool_calls`, role "tool" results, the answer last;
    pass it back with a new user message to continue); `turns` each generated turn with its
    metrics; `forced_answer` is True when the step limit, or a turn that only repeated calls
    already made, made the last turn answer.
    `answer_cut` is True when the answer reached `max_answer_chars`, where the grammar closed
    it: it may end mid-sentence (`run_tools` warns too).
    """

    answer: str
    calls: tuple[ToolCallRecord, ...]
    messages: tuple[dict[str, Any], ...]
    turns: tuple[TurnRecord, ...]
    forced_answer: bool
    answer_cut: bool = False

    @property
    def steps(self) -> int:
        """How many turns the model generated."""
        return len(self.turns)

    @property
    def metrics(self) -> tuple[RequestMetrics, ...]:
        """The generation metrics of each turn."""
        return tuple(t.metrics for t in self.turns)

    @property
    def repeated_calls(self) -> tuple[ToolCall, ...]:
        """Calls the model repeated (not run): each turn's `repeated_calls`, in order."""
        return tuple(c for t in self.turns for c in t.repeated_calls)


def _result_text(value: Any) -> str:
    """A return value as text for the model: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, enum.Enum):
        value = value.value
    from pydantic_core import to_json

    try:
        return to_json(value, fallback=str).decode("utf-8")
    except Exception:
        return str(value)


def _error_text(exc: Exception) -> str:
    """An exception as one short line for the model (validation errors without their URLs)."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        problems = "; ".join(
            f"{'.'.join(str(part) for part in e['loc']) or 'arguments'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        return f"ValidationError: invalid arguments: {problems}"
    message = getattr(exc, "message", None)  # jsonschema's errors: the one-line message
    text = message if isinstance(message, str) else str(exc)
    return f"{type(exc).__name__}: {text}"


def _execute(call: ToolCall, tool: Tool, step: int, t0: float) -> ToolCallRecord:
    """Run one call; any exception becomes the error the model reads next."""
    start = time.perf_counter()
    try:
        value = tool.invoke(call.arguments)
    except Exception as exc:
        error = _error_text(exc)
        return ToolCallRecord(
            step,
            call.id,
            call.name,
            call.arguments,
            result=f"Error: {error}",
            error=error,
            started=start - t0,
            duration=time.perf_counter() - start,
        )
    return ToolCallRecord(
        step,
        call.id,
        call.name,
        call.arguments,
        result=_result_text(value),
        value=value,
        started=start - t0,
        duration=time.perf_counter() - start,
    )


def execute_tool_calls(
    calls: ToolTurn | Sequence[ToolCall],
    tools: Sequence[ToolLike],
    *,
    step: int = 1,
) -> tuple[ToolCallRecord, ...]:
    """Run the calls of one turn in order; a failing call is recorded, never raised.

    For your own loop: `parse_tool_turn(text)` then this; each record's `result` is the text
    to send back as a role "tool" message.
    """
    by_name = {t.name: t for t in as_tools(tools)}
    items = calls.calls if isinstance(calls, ToolTurn) else tuple(calls)
    t0 = time.perf_counter()
    records = []
    for call in items:
        found = by_name.get(call.name)
        if found is None:
            records.append(
                ToolCallRecord(
                    step,
                    call.id,
                    call.name,
                    call.arguments,
                    result=f"Error: there is no tool named {call.name!r}",
                    error=f"unknown tool {call.name!r}",
                )
            )
            continue
        records.append(_execute(call, found, step, t0))
    return tuple(records)


def run_tools(
    lm: LM,
    prompt: Prompt,
    tools: Sequence[ToolLike],
    *,
    max_steps: int = 4,
    tool_choice: ToolChoice = "auto",
    parallel_tool_calls: bool | int = True,
    max_answer_chars: int | None = None,
    system: str | None = None,
    schema_options: SchemaOptions | None = None,
    params: SamplingParams | None = None,
    max_calls_per_turn: int | None = DEFAULT_MAX_CALLS_PER_TURN,
    allow_repeated_calls: bool = False,
    **sampling: Any,
) -> ToolRun:
    """Let the model call `tools` until it answers; returns the answer, the calls, the chat.

    Each step generates one constrained turn and runs every call in it (in order); results
    return through the chat template and the next step begins. `tool_choice` applies to the
    first turn (later turns are "auto", unless it is "none"), and turn `max_steps` must answer,
    so the run always ends with an answer. A tool that raises sends its error to the model.

    A turn holds at most `max_calls_per_turn` calls. Unless `allow_repeated_calls`, a call
    equal to one already made (same name, equal arguments, in this turn or an earlier one)
    closes the turn and is not run (`TurnRecord.repeated_calls`); a turn with nothing new to
    run makes the next turn answer. An answer ends within `max_new_tokens` and within
    `max_answer_chars` when given: the grammar closes it there, and `ToolRun.answer_cut` and a
    warning say when it did. Raises `GenerationError` when a turn of calls is cut short (raise
    `max_new_tokens`, or bound the calls with `max_calls_per_turn`).
    """
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise GenerationError(f"max_steps must be an integer >= 1, got {max_steps!r}")
    tool_list = as_tools(tools)
    by_name = {t.name: t for t in tool_list}
    missing = [t.name for t in tool_list if t.function is None]
    if missing:
        raise GenerationError(
            f"tool(s) {missing} have no Python function; give one "
            "(Tool.from_openai(spec, function)) or run the calls yourself (tool_call_grammar)"
        )
    first_choice = _choice_name(tool_choice, tool_list)
    _max_calls(parallel_tool_calls, max_calls_per_turn)  # refuse bad values before generating
    if max_answer_chars is not None and (
        isinstance(max_answer_chars, bool)
        or not isinstance(max_answer_chars, int)
        or max_answer_chars < 1
    ):
        raise StructgenError(f"max_answer_chars must be an integer >= 1, got {max_answer_chars!r}")
    if max_steps < 2 and first_choice not in ("auto", "none"):
        raise GenerationError(
            f"tool_choice={first_choice!r} needs max_steps >= 2 (the last turn must answer)"
        )
    sampling_params = lm.params(params, **sampling)
    conversation = lm.messages(prompt, system=system)
    turns: list[TurnRecord] = []
    records: list[ToolCallRecord] = []
    made: set[Any] = set()  # keys of the calls run so far
    answer_next = False  # the last turn only repeated calls: this one answers
    t0 = time.perf_counter()
    for step in range(1, max_steps + 1):
        if step == max_steps or not tool_list or answer_next:
            choice = "none"
        elif step == 1 or first_choice == "none":
            choice = first_choice
        else:
            choice = "auto"
        grammar = tool_call_grammar(
            lm,
            tool_list,
            choice,
            parallel_tool_calls=parallel_tool_calls,
            max_answer_chars=max_answer_chars,
            options=schema_options,
            max_calls_per_turn=max_calls_per_turn,
            allow_repeated_calls=allow_repeated_calls,
            earlier_calls=records,
        )  # (no max_new_tokens: the loop's budget-aware closing ends the turn in time)
        text = tool_prompt(lm, conversation, tool_list, parallel_tool_calls=parallel_tool_calls)
        ids = lm.tokenizer(text, add_special_tokens=not lm.has_chat_template)["input_ids"]
        result = lm.generator.generate(list(ids), sampling_params, grammar=grammar)
        if not (result.finish_reason in ("eos", "stop") or result.complete):
            raise GenerationError(
                f"turn {step} stopped ({result.finish_reason}) after "
                f"{result.metrics.output_tokens} tokens before it was complete; raise "
                f"max_new_tokens (now {sampling_params.max_new_tokens}), bound the answer "
                "with max_answer_chars or the calls with max_calls_per_turn. "
                f"Partial turn: {result.text[:200]!r}"
            )
        turn = parse_tool_turn(
            result.text, id_prefix=f"call_{step}_", drop_repeats=not allow_repeated_calls
        )
        if not allow_repeated_calls:
            turn = _without_calls_made(turn, made)
        turns.append(TurnRecord(step, choice, result.text, result.metrics, turn.repeated))
        if turn.answer is not None:
            conversation.append({"role": "assistant", "content": turn.answer})
            cut = _answer_cut(
                turn.answer,
                result.metrics.output_tokens if result.metrics.closing_redraws else 0,
                max_answer_chars,
                sampling_params.max_new_tokens,
            )
            if cut:
                warnings.warn(
                    f"run_tools: {cut}, so it may be cut short (ToolRun.answer_cut)", stacklevel=2
                )
            return ToolRun(
                answer=turn.answer,
                calls=tuple(records),
                messages=tuple(conversation),
                turns=tuple(turns),
                forced_answer=answer_next
                or (step == max_steps and first_choice != "none" and bool(tool_list)),
                answer_cut=bool(cut),
            )
        if not turn.calls:  # only calls already made: the results are in; now answer
            answer_next = True
            continue
        conversation.append(
            {"role": "assistant", "content": None, "tool_calls": [c.openai() for c in turn.calls]}
        )
        for call in turn.calls:
            record = _execute(call, by_name[call.name], step, t0)
            records.append(record)
            made.add(_call_key(call.name, call.arguments))
            conversation.append(
                {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "name": call.name,
                    "content": record.result,
                }
            )
    raise AssertionError("unreachable: the last step always answers")  # pragma: no cover


def _answer_cut(answer: str, tokens: int, max_chars: int | None, max_tokens: int) -> str:
    """Why the grammar closed the answer ("" when the model ended it): its length reached
    `max_answer_chars`, or the turn reached the tokens where the budget closes answers
    (`tokens`: the turn's output tokens when budget-aware closing narrowed a draw, else 0)."""
    if max_chars is not None and len(answer) >= max_chars:
        return (
            f"the answer reached max_answer_chars={max_chars}, where the grammar closed it "
            "(raise max_answer_chars for a longer one)"
        )
    if tokens and tokens >= max_tokens - _ANSWER_RESERVE:
        return (
            f"the answer was closed to end within max_new_tokens={max_tokens} (raise "
            "max_new_tokens, or ask for a shorter answer)"
        )
    return ""


def _without_calls_made(turn: ToolTurn, made: set[Any]) -> ToolTurn:
    """The turn with the calls already made in earlier turns moved to `repeated`."""
    again = [c for c in turn.calls if _call_key(c.name, c.arguments) in made]
    if not again:
        return turn
    kept = tuple(c for c in turn.calls if c not in again)
    return replace(turn, calls=kept, repeated=(*turn.repeated, *again))
