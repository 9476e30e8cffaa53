"""Tools: a `Tool` from a Python function (its signature and docstring) or an OpenAI function spec,
and its argument schema.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, overload

from structgen._json_data import canonical_json
from structgen.api._docstrings import parse_docstring
from structgen.errors import StructgenError
from structgen.schema import SchemaOptions

if TYPE_CHECKING:
    from pydantic import BaseModel


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
        return hash((self.name, self.description, canonical_json(self.parameters), self.function))

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
