"""Pydantic models as answers: schema-valid by construction, semantically checked, re-asked.

The model class is compiled into a token-mask grammar (`lm.compiler.json_schema(cls)`), so the
text is always JSON valid against its schema. What a JSON Schema cannot say (Pydantic's own
field and model validators, the user's `validators`) is checked after parsing; on failure the
answer and a message that states the errors go back into the conversation and the model tries
again, at most `max_retries` more times, then `ValidationFailedError` carries every attempt.
An invalid object is never returned. `stream_object` shows the object while it is written.
See docs/guide/pydantic.md and docs/guide/validators.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from pydantic import BaseModel, ValidationError

from structgen.api.lm import LM, Prompt, default_lm
from structgen.api.partial import parse_partial
from structgen.errors import (
    GenerationError,
    UnsupportedSchemaError,
    ValidationAttempt,
    ValidationFailedError,
)

if TYPE_CHECKING:
    from structgen.compiler import CompiledGrammar
    from structgen.generate import GenerationResult, SamplingParams
    from structgen.schema import SchemaOptions

__all__ = [
    "Check",
    "Partial",
    "generate_object",
    "generation_schema",
    "stream_object",
    "structured",
]

ModelT = TypeVar("ModelT", bound=BaseModel)

# A semantic check on a parsed object. It fails by raising ValueError or AssertionError (the
# message is shown to the model), or by returning a str (the message) or False. Anything else
# (None, True, ...) passes. Other exceptions are bugs in the check and propagate.
Check = Callable[[Any], object]

_METHODS = ("generate", "stream")


@dataclass(frozen=True, slots=True)
class Partial(Generic[ModelT]):
    """One item of `stream_object`: the object as far as it has been written.

    `data` is the JSON value parsed from `text` so far (a dict once `{` is out; None before);
    later items of the same `attempt` only extend it (strings grow, keys and items are added).
    The last item has `complete=True` and `value`, the validated instance. When an answer fails
    validation and the model is re-asked, `attempt` goes up and `data` starts again from empty.
    """

    data: Any
    text: str
    attempt: int
    complete: bool = False
    value: ModelT | None = None


# ---------------------------------------------------------------------------- the one-call API


def generate_object(
    lm: LM,
    cls: type[ModelT],
    prompt: Prompt,
    *,
    validators: Iterable[Check] = (),
    max_retries: int = 2,
    instructions: bool = True,
    system: str | None = None,
    schema_options: SchemaOptions | None = None,
    results: list[GenerationResult] | None = None,
    reasoning: bool = False,
    max_think_tokens: int | None = None,
    **sampling: Any,
) -> ModelT:
    """An instance of `cls` (a Pydantic model) answering `prompt`, valid and checked.

    The output follows `cls`'s JSON Schema by construction; Pydantic's validators and each of
    `validators` then run on it. A failure (or an answer cut short by `max_new_tokens`) is told
    to the model, which answers again, at most `max_retries` more times; then
    `ValidationFailedError` (with every attempt) is raised. `instructions=True` adds the JSON
    Schema to the prompt (small models follow it better). `sampling`: `SamplingParams` fields.
    `results`: a list that receives each attempt's `GenerationResult` (tokens, metrics).
    `reasoning`: the model thinks freely in a `<think>` block before the object (see
    `LM.run`), of at most `max_think_tokens` tokens when given; the block is in each result's
    `reasoning`.
    """
    asker = _Asker(
        lm, cls, prompt, validators, max_retries, instructions, system, schema_options, sampling
    )
    while True:
        text, chat = asker.model_input()
        grammar = (
            lm.reasoning_grammar(asker.grammar, max_think_tokens=max_think_tokens)
            if reasoning
            else asker.grammar
        )
        result = lm.generator.generate(text, asker.params, grammar=grammar, chat=chat)
        if reasoning:
            result = lm.split_reasoning(result)
        if results is not None:
            results.append(result)
        value = asker.judge(result)
        if value is not None:
            return value
        if asker.exhausted:
            raise asker.error()


def stream_object(
    lm: LM,
    cls: type[ModelT],
    prompt: Prompt,
    *,
    validators: Iterable[Check] = (),
    max_retries: int = 2,
    instructions: bool = True,
    system: str | None = None,
    schema_options: SchemaOptions | None = None,
    **sampling: Any,
) -> Iterator[Partial[ModelT]]:
    """Like `generate_object`, but yields `Partial` items while the answer is written.

    An item comes whenever the parsed value changes; the last one has `complete=True` and the
    validated instance in `value`. A re-ask starts a new `attempt`. Options are checked (and the
    schema compiled) when this is called, before the first item is asked for.
    """
    asker = _Asker(
        lm, cls, prompt, validators, max_retries, instructions, system, schema_options, sampling
    )
    return _stream(lm, asker)


def _stream(lm: LM, asker: _Asker[ModelT]) -> Iterator[Partial[ModelT]]:
    while True:
        attempt = len(asker.attempts) + 1
        text_in, chat = asker.model_input()
        stream = lm.generator.stream(text_in, asker.params, grammar=asker.grammar, chat=chat)
        text = ""
        shown: Any = None
        for delta in stream:
            text += delta
            data = parse_partial(text)
            if data is not None and data != shown:
                shown = data
                yield Partial(data, text, attempt)
        result = stream.result
        if result is None:  # pragma: no cover - TextStream sets it when exhausted
            raise GenerationError("the stream ended without a result")
        value = asker.judge(result)
        if value is not None:
            yield Partial(json.loads(result.text), result.text, attempt, True, value)
            return
        if asker.exhausted:
            raise asker.error()


# ---------------------------------------------------------------------------- the decorator


@dataclass(frozen=True, slots=True)
class _Options:
    """What `@structured(...)` fixed for a class; call options extend or override it."""

    validators: tuple[Check, ...] = ()
    settings: Mapping[str, Any] = field(default_factory=dict)

    def merged(self, options: dict[str, Any]) -> dict[str, Any]:
        merged = {**self.settings, **options}
        merged["validators"] = (*self.validators, *_checks(options.get("validators", ())))
        return merged


@overload
def structured(cls: type[ModelT], /) -> type[ModelT]: ...


@overload
def structured(
    *,
    validators: Iterable[Check] = (),
    max_retries: int = 2,
    instructions: bool = True,
    system: str | None = None,
    schema_options: SchemaOptions | None = None,
    **sampling: Any,
) -> Callable[[type[ModelT]], type[ModelT]]: ...


def structured(
    cls: type[ModelT] | None = None, /, **options: Any
) -> type[ModelT] | Callable[[type[ModelT]], type[ModelT]]:
    """Give a Pydantic model class `generate` and `stream` classmethods; returns the same class.

    Bare (`@structured`) or with defaults for every call (`@structured(max_retries=1,
    validators=[...], system="...", max_new_tokens=200)`). `Cls.generate(prompt, lm=None,
    **options)` is `generate_object(lm or default_lm(), Cls, prompt, **options)`;
    `Cls.stream(...)` is `stream_object(...)`. Call options override the decorator's, except
    `validators`, which are added to the class's own.
    """
    if cls is not None:
        return _decorate(cls, {})

    def decorate(target: type[ModelT]) -> type[ModelT]:
        return _decorate(target, options)

    return decorate


def _decorate(cls: type[ModelT], options: dict[str, Any]) -> type[ModelT]:
    if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
        raise TypeError(
            f"@structured applies to pydantic BaseModel subclasses, not {cls!r}; for a dict "
            "schema use LM.json(prompt, schema)"
        )
    clash = sorted(set(_METHODS) & set(cls.model_fields))
    if clash:
        raise TypeError(
            f"{cls.__name__} has field(s) {clash} that the classmethods of @structured would "
            "shadow; rename them or call structgen.api.structured.generate_object(lm, "
            f"{cls.__name__}, prompt) instead"
        )
    settings = {k: v for k, v in options.items() if k != "validators"}
    if "max_retries" in settings:
        _check_retries(settings["max_retries"])
    setattr(  # noqa: B010 - a class attribute on a pydantic model, not a field
        cls, "__structgen_options__", _Options(_checks(options.get("validators", ())), settings)
    )
    setattr(cls, "generate", classmethod(_generate_method))  # noqa: B010
    setattr(cls, "stream", classmethod(_stream_method))  # noqa: B010
    return cls


def _class_options(cls: type[BaseModel]) -> _Options:
    options = getattr(cls, "__structgen_options__", None)
    return options if isinstance(options, _Options) else _Options()


def _generate_method(
    cls: type[ModelT], /, prompt: Prompt, *, lm: LM | None = None, **options: Any
) -> ModelT:
    """An instance of this class answering `prompt` (see `structgen.api.generate_object`)."""
    merged = _class_options(cls).merged(options)
    return generate_object(lm if lm is not None else default_lm(), cls, prompt, **merged)


def _stream_method(
    cls: type[ModelT], /, prompt: Prompt, *, lm: LM | None = None, **options: Any
) -> Iterator[Partial[ModelT]]:
    """`Partial` items of an instance of this class (see `structgen.api.stream_object`)."""
    merged = _class_options(cls).merged(options)
    return stream_object(lm if lm is not None else default_lm(), cls, prompt, **merged)


# ---------------------------------------------------------------------------- the re-ask loop


class _Asker(Generic[ModelT]):
    """The conversation of one request: its messages, its grammar, the failed attempts."""

    def __init__(
        self,
        lm: LM,
        cls: type[ModelT],
        prompt: Prompt,
        validators: Iterable[Check],
        max_retries: int,
        instructions: bool,
        system: str | None,
        schema_options: SchemaOptions | None,
        sampling: dict[str, Any],
    ) -> None:
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
            raise TypeError(f"cls must be a pydantic BaseModel subclass, not {cls!r}")
        _check_retries(max_retries)
        self.lm = lm
        self.cls = cls
        self.checks = _checks(validators)
        self.max_retries = max_retries
        self.params: SamplingParams = lm.params(**sampling)  # unknown names raise here
        schema = generation_schema(cls, unique_items=True)
        try:
            self.grammar: CompiledGrammar = lm.compiler.json_schema(schema, options=schema_options)
        except UnsupportedSchemaError as exc:
            if not (exc.pointer or "").endswith("/uniqueItems"):
                raise
            # a set the guard cannot keep distinct: Pydantic removes the repeats itself
            schema = generation_schema(cls)
            self.grammar = lm.compiler.json_schema(schema, options=schema_options)
        messages = lm.messages(prompt, system=system)
        self.messages = _with_instructions(messages, schema) if instructions else messages
        self.attempts: list[ValidationAttempt] = []

    @property
    def exhausted(self) -> bool:
        return len(self.attempts) > self.max_retries

    def model_input(self) -> tuple[Any, bool]:
        """What `Generator.generate/stream` takes for the conversation, as `LM.run` builds it."""
        return self.lm.model_input(self.messages)

    def judge(self, result: GenerationResult) -> ModelT | None:
        """The validated instance, or None after recording the failure and the re-ask."""
        text = result.text
        if not (result.finish_reason in ("eos", "stop") or result.complete):
            reason = (
                f"max_new_tokens={self.params.max_new_tokens} was reached"
                if result.finish_reason == "length"
                else f"generation stopped ({result.finish_reason})"
            )
            errors = [
                f"the answer was cut off after {result.metrics.output_tokens} tokens before the "
                f"JSON was complete ({reason})"
            ]
            feedback = (
                "Your answer was cut off before the JSON was complete. "
                "Answer again with a shorter JSON object."
            )
        else:
            try:
                value = self.cls.model_validate_json(text)
            except ValidationError as exc:
                errors = _pydantic_errors(exc)
            else:
                errors = _run_checks(self.checks, value)
                if not errors:
                    return value
            feedback = (
                "Your answer is not valid:\n"
                + "\n".join(f"- {e}" for e in errors)
                + "\nWrite the corrected JSON object."
            )
        self.attempts.append(ValidationAttempt(text, "; ".join(errors)))
        self.messages = [
            *self.messages,
            {"role": "assistant", "content": text},
            {"role": "user", "content": feedback},
        ]
        return None

    def error(self) -> ValidationFailedError:
        return ValidationFailedError(self.cls.__name__, tuple(self.attempts))


def _checks(validators: Iterable[Check] | None) -> tuple[Check, ...]:
    if validators is None:
        return ()
    if callable(validators):  # a single check given where a list is expected
        validators = (validators,)
    checks = tuple(validators)
    for check in checks:
        if not callable(check):
            raise TypeError(f"validators must be callables taking the object, got {check!r}")
    return checks


def _check_retries(max_retries: object) -> None:
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise GenerationError(f"max_retries must be an integer >= 0, got {max_retries!r}")


def _run_checks(checks: tuple[Check, ...], value: BaseModel) -> list[str]:
    """The messages of every failing check (all run, so the model hears every problem)."""
    errors: list[str] = []
    for check in checks:
        name = getattr(check, "__name__", None) or repr(check)
        try:
            outcome = check(value)
        except ValidationError as exc:
            errors.extend(_pydantic_errors(exc))
            continue
        except (ValueError, AssertionError) as exc:
            errors.append(str(exc) or f"the check {name} failed")
            continue
        if isinstance(outcome, str):
            errors.append(outcome or f"the check {name} failed")
        elif outcome is False:
            errors.append(f"the check {name} failed")
    return errors


def _pydantic_errors(exc: ValidationError) -> list[str]:
    """One line per error: where (dotted path), what, and the offending value when short."""
    lines = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"])
        if error["type"] == "json_invalid":
            lines.append(f"the answer is not valid JSON: {error['msg']}")
            continue
        line = f"{where}: {error['msg']}" if where else str(error["msg"])
        value = error.get("input")
        if isinstance(value, (str, int, float, bool)) and len(repr(value)) <= 80:
            line += f" (got {value!r})"
        lines.append(line)
    return lines or [str(exc)]


def generation_schema(cls: type[BaseModel], *, unique_items: bool = False) -> dict[str, Any]:
    """The JSON Schema that answers for `cls` are generated under (and shown to the model).

    `cls.model_json_schema()` with changes that keep every answer Pydantic accepts: an object
    with `properties` but no `additionalProperties` (Pydantic's default `extra="ignore"`, whose
    extra keys are dropped anyway) gets `additionalProperties: false`, so the model cannot ramble
    into invented keys; `title` keywords (the field names again) are left out, and so is
    `uniqueItems` (what `set[...]` fields emit; Pydantic removes duplicates itself) unless
    `unique_items` — then `Compiler.json_schema` keeps the items distinct where it can, so a
    set never loses members to deduplication (`generate_object` tries that first).
    """
    schema = _for_generation(cls.model_json_schema(), unique_items)
    return schema if isinstance(schema, dict) else {}


def _for_generation(schema: Any, unique_items: bool) -> Any:
    if isinstance(schema, list):
        return [_for_generation(item, unique_items) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "uniqueItems" and not unique_items:
            continue  # set[...] fields: Pydantic drops duplicates itself
        if key in ("properties", "$defs", "definitions", "patternProperties"):
            out[key] = (
                {name: _for_generation(sub, unique_items) for name, sub in value.items()}
                if isinstance(value, dict)
                else value
            )
        elif key in ("default", "const", "enum", "examples"):
            out[key] = value  # data, not schemas
        else:
            out[key] = _for_generation(value, unique_items)
    if "properties" in out and not {
        "additionalProperties",
        "patternProperties",
        "unevaluatedProperties",
    } & set(out):
        out["additionalProperties"] = False
    return out


def _with_instructions(
    messages: list[dict[str, Any]], schema: dict[str, Any]
) -> list[dict[str, Any]]:
    """The conversation with the JSON Schema appended to the last user message."""
    text = json.dumps(schema, ensure_ascii=False)
    note = f"Answer with JSON that follows this JSON Schema:\n{text}"
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            item = dict(messages[i])
            item["content"] = f"{item.get('content', '')}\n\n{note}"
            return [*messages[:i], item, *messages[i + 1 :]]
    return [*messages, {"role": "user", "content": note}]
