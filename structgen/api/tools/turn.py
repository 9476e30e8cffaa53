"""The turn format: the JSON Schema of one turn (calls or an answer) for a tool set, parsing a
turn back into `ToolCall`s, and what makes two calls the same call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from structgen._json_data import escape_pointer
from structgen.api.tools.spec import (
    _CHOICES,
    DEFAULT_MAX_CALLS_PER_TURN,
    Tool,
    ToolChoice,
    ToolLike,
    as_tools,
)
from structgen.errors import GenerationError, StructgenError

if TYPE_CHECKING:
    pass


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
            defs[key] = _rebase_refs(t.parameters, f"#/$defs/{escape_pointer(key)}")
            branches.append(
                {
                    "type": "object",
                    "properties": {
                        "name": {"const": t.name},
                        "arguments": {"$ref": f"#/$defs/{escape_pointer(key)}"},
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
