"""The tool loop: run a turn's calls (an exception becomes a message for the model) and
`run_tools`, which loops until the model answers.
"""

from __future__ import annotations

import enum
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from structgen.api.lm import split_think
from structgen.api.tools import formats
from structgen.api.tools.formats import resolve_tool_format
from structgen.api.tools.guard import _ANSWER_RESERVE, tool_call_grammar
from structgen.api.tools.spec import (
    DEFAULT_MAX_CALLS_PER_TURN,
    Tool,
    ToolChoice,
    ToolLike,
    as_tools,
)
from structgen.api.tools.templates import tool_prompt
from structgen.api.tools.turn import (
    ToolCall,
    ToolCallRecord,
    ToolTurn,
    _call_key,
    _choice_name,
    _max_calls,
    parse_tool_turn,
)
from structgen.errors import GenerationError, StructgenError
from structgen.schema import SchemaOptions

if TYPE_CHECKING:
    from structgen.api.lm import LM, Prompt
    from structgen.generate import RequestMetrics, SamplingParams


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
    tool_format: str = "auto",
    reasoning: bool = False,
    max_think_tokens: int | None = None,
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
    `max_new_tokens`, or bound the calls with `max_calls_per_turn`). `tool_format`: the calls
    as the model's family writes them, detected from its chat template by default ("auto";
    see `tool_call_grammar`); results go back through the template as `tool` messages.
    `reasoning`: each turn may start with a free `<think>` block (see `LM.run`), of at most
    `max_think_tokens` tokens when given (see `tool_call_grammar`).
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
    chosen_format = resolve_tool_format(lm, tool_format)
    native = None if chosen_format == "json" else formats.tool_format(chosen_format)
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
            tool_format=chosen_format,
            reasoning=reasoning,
            max_think_tokens=max_think_tokens,
        )  # (no max_new_tokens: the loop's budget-aware closing ends the turn in time)
        text = tool_prompt(
            lm,
            conversation,
            tool_list,
            parallel_tool_calls=parallel_tool_calls,
            tool_format=chosen_format,
        )
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
        if reasoning:
            result = lm.split_reasoning(result)
        if native is not None:  # (special tokens carry its tags: read them from the ids)
            written = formats.render_tokens(lm.generator.vocab, result.token_ids)
            turn = native.parse(
                split_think(written)[1] if reasoning else written,
                id_prefix=f"call_{step}_",
                drop_repeats=not allow_repeated_calls,
            )
        else:
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
