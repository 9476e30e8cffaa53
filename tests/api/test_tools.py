"""Tool calling: schemas from functions, the constrained turn, and the loop on the default model."""

from __future__ import annotations

import copy
import enum
import json
import warnings
from typing import Any, Literal, Optional

import jsonschema
import pytest
from pydantic import BaseModel

from structgen import GenerationError, Matcher, StructgenError
from structgen.api.tools import (
    DEFAULT_MAX_CALLS_PER_TURN,
    Tool,
    ToolCall,
    execute_tool_calls,
    parse_tool_turn,
    run_tools,
    template_support,
    tool,
    tool_call_grammar,
    tool_prompt,
    turn_schema,
)
from tests.api.conftest import default_lm
from tests.oracles.checks import assert_ajv_accepts

pytestmark = pytest.mark.slow

# Short, greedy generations: the whole file runs on two CPU cores.
SHORT = {"max_new_tokens": 64, "max_answer_chars": 24}


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Point(BaseModel):
    x: float
    y: float = 0.0


CALLS: list[tuple[str, Any]] = []


@tool
def get_weather(city: str, unit: Unit = Unit.CELSIUS) -> dict[str, Any]:
    """Get the current weather in a city.

    Args:
        city: Name of the city, for example Paris.
        unit: Temperature unit.
    """
    CALLS.append(("get_weather", (city, unit)))
    return {"city": city, "temperature": 21, "unit": unit.value, "sky": "sunny"}


@tool(name="calculator")
def calculate(expression: str) -> float:
    """Evaluate an arithmetic expression.

    :param expression: The expression, for example 2 * (3 + 4).
    """
    CALLS.append(("calculator", expression))
    return float(eval(expression, {"__builtins__": {}}))


@tool
def population(city: str) -> int:
    """Get the number of people living in a city."""
    raise RuntimeError("the population service is down")


def accepts(grammar: Any, text: str) -> bool:
    """Whether the grammar's matcher takes `text` token by token and can then end."""
    ids = default_lm().tokenizer.encode(text, add_special_tokens=False)
    matcher = Matcher(grammar)
    return matcher.accept_tokens(ids) == len(ids) and matcher.can_terminate()


def call_text(*calls: tuple[str, dict[str, Any]]) -> str:
    return json.dumps(
        {"tool_calls": [{"name": n, "arguments": a} for n, a in calls]}, separators=(",", ":")
    )


ANSWER = '{"answer":"It is sunny."}'


# ---------------------------------------------------------------------- schemas from functions


class TestFromFunction:
    def test_types_defaults_and_required(self) -> None:
        def book(room: str, people: int, hours: float = 1.0, projector: bool = False) -> str:
            return room

        assert Tool.from_function(book).parameters == {
            "type": "object",
            "properties": {
                "room": {"type": "string"},
                "people": {"type": "integer"},
                "hours": {"type": "number", "default": 1.0},
                "projector": {"type": "boolean", "default": False},
            },
            "required": ["room", "people"],
            "additionalProperties": False,
        }

    def test_optional_literal_list_enum_and_model_arguments(self) -> None:
        def plot(
            points: list[Point],
            unit: Unit,
            style: Literal["line", "dots"] = "line",
            title: Optional[str] = None,  # noqa: UP045 - the spelling under test
            origin: Point | None = None,
        ) -> str:
            return "ok"

        schema = Tool.from_function(plot).parameters
        assert schema == {
            "$defs": {
                "Point": {
                    "type": "object",
                    "properties": {
                        "x": {"type": "number"},
                        "y": {"type": "number", "default": 0.0},
                    },
                    "required": ["x"],
                    "additionalProperties": False,
                },
                "Unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "type": "object",
            "properties": {
                "points": {"type": "array", "items": {"$ref": "#/$defs/Point"}},
                "unit": {"$ref": "#/$defs/Unit"},
                "style": {"type": "string", "enum": ["line", "dots"], "default": "line"},
                "title": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
                "origin": {"anyOf": [{"$ref": "#/$defs/Point"}, {"type": "null"}], "default": None},
            },
            "required": ["points", "unit"],
            "additionalProperties": False,
        }
        validator = jsonschema.Draft202012Validator(schema)
        assert validator.is_valid({"points": [{"x": 1}], "unit": "celsius", "title": None})
        assert not validator.is_valid({"points": [], "unit": "kelvin"})
        assert not validator.is_valid({"points": [], "unit": "celsius", "colour": "red"})
        assert not validator.is_valid({"unit": "celsius"})

    def test_arguments_are_validated_into_models_and_enums(self) -> None:
        seen: list[Any] = []

        @tool
        def move(to: Point, unit: Unit = Unit.CELSIUS) -> str:
            seen.extend([to, unit])
            return "moved"

        assert move.invoke({"to": {"x": 2}, "unit": "fahrenheit"}) == "moved"
        assert seen == [Point(x=2.0), Unit.FAHRENHEIT]
        with pytest.raises(ValueError, match="x"):
            move.invoke({"to": {"y": 1}})

    def test_google_style_docstring(self) -> None:
        assert get_weather.description == "Get the current weather in a city."
        props = get_weather.parameters["properties"]
        assert props["city"]["description"] == "Name of the city, for example Paris."
        assert props["unit"]["description"] == "Temperature unit."

    def test_numpy_style_docstring(self) -> None:
        def convert(amount: float, currency: str = "EUR") -> float:
            """Convert an amount of money
            into another currency.

            Parameters
            ----------
            amount : float
                How much money,
                in US dollars.
            currency : str, optional
                ISO code of the target currency.

            Returns
            -------
            float
            """
            return amount

        t = Tool.from_function(convert)
        assert t.description == "Convert an amount of money into another currency."
        props = t.parameters["properties"]
        assert props["amount"]["description"] == "How much money, in US dollars."
        assert props["currency"]["description"] == "ISO code of the target currency."

    def test_rest_style_docstring(self) -> None:
        assert calculate.description == "Evaluate an arithmetic expression."
        assert calculate.parameters["properties"]["expression"]["description"] == (
            "The expression, for example 2 * (3 + 4)."
        )

    def test_decorated_tool_is_still_callable_like_the_function(self) -> None:
        assert calculate.name == "calculator"
        assert calculate("2 + 3") == 5.0
        assert get_weather.name == "get_weather"

    def test_names_clashing_with_pydantic_are_kept(self) -> None:
        def search(json: str, schema: int = 1) -> str:
            return f"{json}:{schema}"

        t = Tool.from_function(search)
        assert list(t.parameters["properties"]) == ["json", "schema"]
        assert t.invoke({"json": "a", "schema": 2}) == "a:2"

    def test_star_arguments_and_bad_names_are_refused(self) -> None:
        def variadic(*items: int) -> int:
            return 0

        with pytest.raises(StructgenError, match="items"):
            Tool.from_function(variadic)
        with pytest.raises(StructgenError, match="name"):
            Tool.from_function(calculate, name="get weather")
        with pytest.raises(StructgenError, match="two tools"):
            turn_schema([get_weather, get_weather])


class TestOpenAISpecs:
    def test_round_trip(self) -> None:
        spec = get_weather.openai_spec()
        assert spec["type"] == "function"
        assert spec["function"]["name"] == "get_weather"
        back = Tool.from_openai(spec, get_weather.function)
        assert back.openai_spec() == spec
        assert back.invoke({"city": "Oslo"})["city"] == "Oslo"

    def test_bare_function_object_and_no_parameters(self) -> None:
        t = Tool.from_openai({"name": "now", "description": "The time."})
        assert t.parameters == {"type": "object", "properties": {}, "additionalProperties": False}
        assert t.function is None

    def test_spec_arguments_are_checked_with_jsonschema(self) -> None:
        spec = {
            "type": "function",
            "function": {
                "name": "echo",
                "parameters": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                },
            },
        }
        t = Tool.from_openai(spec, lambda text: text.upper())
        assert t.invoke({"text": "hi"}) == "HI"
        with pytest.raises(jsonschema.ValidationError):
            t.invoke({"text": 3})


# ---------------------------------------------------------------------- the turn constraint


class TestTurnGrammar:
    tools = (get_weather, calculate)

    def grammar(self, choice: Any = "auto", **kw: Any) -> Any:
        return tool_call_grammar(default_lm(), self.tools, choice, **kw)

    def test_auto_allows_a_call_or_an_answer(self) -> None:
        g = self.grammar()
        assert accepts(g, call_text(("get_weather", {"city": "Paris"})))
        assert accepts(g, call_text(("calculator", {"expression": "1+1"})))
        assert accepts(g, ANSWER)

    def test_two_calls_in_one_turn_parse_and_execute(self) -> None:
        text = call_text(
            ("get_weather", {"city": "Rome", "unit": "fahrenheit"}),
            ("calculator", {"expression": "6*7"}),
        )
        assert accepts(self.grammar(), text)
        jsonschema.validate(json.loads(text), turn_schema(self.tools))  # the oracle agrees
        assert_ajv_accepts(turn_schema(self.tools), [text])  # and so does ajv
        turn = parse_tool_turn(text, self.tools)
        assert [c.name for c in turn.calls] == ["get_weather", "calculator"]
        CALLS.clear()
        records = execute_tool_calls(turn, self.tools)
        assert CALLS == [("get_weather", ("Rome", Unit.FAHRENHEIT)), ("calculator", "6*7")]
        assert [r.ok for r in records] == [True, True]
        assert json.loads(records[0].result)["city"] == "Rome"
        assert records[1].result == "42.0"

    def test_unknown_tool_and_invalid_arguments_are_rejected(self) -> None:
        g = self.grammar()
        assert not accepts(g, call_text(("delete_files", {})))
        assert not accepts(g, call_text(("get_weather", {})))  # city is required
        assert not accepts(g, call_text(("get_weather", {"city": "Oslo", "unit": "kelvin"})))
        assert not accepts(g, call_text(("get_weather", {"city": "Oslo", "extra": 1})))
        assert not accepts(g, '{"tool_calls":[]}')
        assert not accepts(g, '{"answer":"x","tool_calls":[]}')

    def test_tool_choice_none_allows_only_an_answer(self) -> None:
        g = self.grammar("none")
        assert accepts(g, ANSWER)
        assert not accepts(g, call_text(("get_weather", {"city": "Paris"})))

    def test_tool_choice_required_forbids_an_answer(self) -> None:
        g = self.grammar("required")
        assert not accepts(g, ANSWER)
        assert accepts(g, call_text(("calculator", {"expression": "2"})))

    def test_tool_choice_by_name_allows_only_that_tool(self) -> None:
        for choice in ("calculator", {"type": "function", "function": {"name": "calculator"}}):
            g = self.grammar(choice)
            assert accepts(g, call_text(("calculator", {"expression": "2"})))
            assert not accepts(g, call_text(("get_weather", {"city": "Paris"})))
            assert not accepts(g, ANSWER)
        with pytest.raises(StructgenError, match="nope"):
            self.grammar("nope")

    def test_parallel_tool_calls_false_allows_one_call(self) -> None:
        g = self.grammar(parallel_tool_calls=False)
        one = ("calculator", {"expression": "2"})
        assert accepts(g, call_text(one))
        assert not accepts(g, call_text(one, one))

    def test_max_answer_chars_bounds_the_answer(self) -> None:
        g = self.grammar(max_answer_chars=5)
        assert accepts(g, '{"answer":"Sunny"}')
        assert not accepts(g, '{"answer":"Sunny today"}')

    def test_tools_with_their_own_defs_do_not_collide(self) -> None:
        class Box(BaseModel):
            side: int

        def a(p: Point) -> None: ...

        def b(p: Box) -> None: ...

        tools = [Tool.from_function(a), Tool.from_function(b)]
        # a third tool whose own $defs also has a "Point", of another shape
        clash = Tool(
            "c",
            "",
            {
                "type": "object",
                "$defs": {"Point": {"type": "string"}},
                "properties": {"p": {"$ref": "#/$defs/Point"}},
                "required": ["p"],
            },
        )
        tools.append(clash)
        g = tool_call_grammar(default_lm(), tools)
        assert accepts(g, call_text(("a", {"p": {"x": 1}})))
        assert accepts(g, call_text(("b", {"p": {"side": 2}})))
        assert accepts(g, call_text(("c", {"p": "here"})))
        assert not accepts(g, call_text(("c", {"p": {"x": 1}})))
        assert not accepts(g, call_text(("a", {"p": "here"})))

    def test_parse_checks_text_from_elsewhere(self) -> None:
        assert parse_tool_turn(ANSWER).answer == "It is sunny."
        with pytest.raises(GenerationError, match="unknown tool"):
            parse_tool_turn(call_text(("rm", {})), self.tools)
        with pytest.raises(GenerationError, match="invalid arguments"):
            parse_tool_turn(call_text(("calculator", {"expression": 3})), self.tools)
        with pytest.raises(GenerationError, match="not JSON"):
            parse_tool_turn("call calculator")


# ---------------------------------------------------------------------- chat templates

TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools:{% for t in tools %} {{ t.function.name }}"
    "{% endfor %}<|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'tool' %}[{{ m.name }}] {% endif %}{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
STRICT_TEMPLATE = (
    "{% for m in messages %}{% if m.role not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown role') }}{% endif %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
HISTORY = [
    {"role": "user", "content": "Weather in Paris and 6*7?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            ToolCall("call_1_0", "get_weather", {"city": "Paris"}).openai(),
            ToolCall("call_1_1", "calculator", {"expression": "6*7"}).openai(),
        ],
    },
    {"role": "tool", "tool_call_id": "call_1_0", "name": "get_weather", "content": '{"t":21}'},
    {"role": "tool", "tool_call_id": "call_1_1", "name": "calculator", "content": "42.0"},
]


def tokenizer_with(template: str) -> Any:
    tokenizer = copy.deepcopy(default_lm().tokenizer)
    tokenizer.chat_template = template
    return tokenizer


class TestTemplates:
    tools = (get_weather, calculate)

    def test_smollm2_template_gets_tools_in_the_system_message(self) -> None:
        support = template_support(default_lm().tokenizer)
        assert (support.tools, support.tool_role, support.tool_name) == (False, True, False)
        text = tool_prompt(default_lm(), HISTORY, self.tools)
        system = text.split("<|im_end|>")[0]
        assert '"name": "get_weather"' in system and '"name": "calculator"' in system
        assert '{"answer":"<text>"}' in system
        # the calls appear as turn text; results carry their tool name and call id
        calls = call_text(("get_weather", {"city": "Paris"}), ("calculator", {"expression": "6*7"}))
        assert f"<|im_start|>assistant\n{calls}<|im_end|>" in text
        result = '{"tool": "get_weather", "call_id": "call_1_0", "result": {"t": 21}}'
        assert f"<|im_start|>tool\n{result}<|im_end|>" in text
        assert text.endswith("<|im_start|>assistant\n")

    def test_template_that_takes_tools_renders_them_itself(self) -> None:
        text = tool_prompt(tokenizer_with(TOOLS_TEMPLATE), HISTORY, self.tools)
        assert "Tools: get_weather calculator" in text
        assert '"parameters"' not in text  # the template described the tools
        assert "<|im_start|>tool\n[calculator] 42.0<|im_end|>" in text
        assert '{"answer":"<text>"}' in text

    def test_template_without_a_tool_role_gets_results_as_one_user_message(self) -> None:
        text = tool_prompt(tokenizer_with(STRICT_TEMPLATE), HISTORY, self.tools)
        assert "<|im_start|>tool" not in text
        assert (
            '<|im_start|>user\nResult of get_weather (call_1_0): {"t":21}\n'
            "Result of calculator (call_1_1): 42.0<|im_end|>"
        ) in text


# ---------------------------------------------------------------------- the loop on the model


class TestRunTools:
    tools = (get_weather, calculate)

    def test_a_conversation_calls_tools_and_ends_with_an_answer(self) -> None:
        CALLS.clear()
        run = run_tools(
            default_lm(),
            "What is the weather in Paris?",
            self.tools,
            max_steps=2,
            tool_choice="required",
            parallel_tool_calls=2,
            **SHORT,
        )
        assert run.calls and run.steps == 2 and run.forced_answer
        by_name = {t.name: t for t in self.tools}
        for record in run.calls:
            jsonschema.validate(record.arguments, by_name[record.name].parameters)
            assert_ajv_accepts(by_name[record.name].parameters, [json.dumps(record.arguments)])
            assert record.ok and record.step == 1 and record.duration >= 0
        assert [name for name, _ in CALLS] == [r.name for r in run.calls]  # really executed
        # the results went back into the conversation, and through the template to the model
        tool_messages = [m for m in run.messages if m["role"] == "tool"]
        assert [m["content"] for m in tool_messages] == [r.result for r in run.calls]
        assert [m["tool_call_id"] for m in tool_messages] == [r.id for r in run.calls]
        prompt = tool_prompt(default_lm(), run.messages[:-1], self.tools)
        assert json.dumps(json.loads(run.calls[0].result)) in prompt
        assert isinstance(run.answer, str) and 0 < len(run.answer) <= 24
        assert run.messages[-1] == {"role": "assistant", "content": run.answer}
        assert run.turns[1].tool_choice == "none"
        assert all(m.output_tokens > 0 for m in run.metrics)

    def test_a_raising_tool_sends_its_error_to_the_model(self) -> None:
        run = run_tools(
            default_lm(),
            "How many people live in Paris?",
            [population],
            max_steps=2,
            tool_choice="population",
            parallel_tool_calls=False,
            **SHORT,
        )
        (record,) = run.calls
        assert not record.ok and "the population service is down" in (record.error or "")
        tool_message = next(m for m in run.messages if m["role"] == "tool")
        assert tool_message["content"] == "Error: RuntimeError: the population service is down"
        assert isinstance(run.answer, str) and run.answer

    def test_tool_choice_none_answers_at_once(self) -> None:
        run = run_tools(default_lm(), "Say hello.", self.tools, tool_choice="none", **SHORT)
        assert run.steps == 1 and not run.calls and not run.forced_answer and run.answer

    def test_a_turn_cut_short_raises(self) -> None:
        with pytest.raises(GenerationError, match="max_new_tokens"):
            run_tools(default_lm(), "Weather in Paris?", self.tools, max_new_tokens=4)

    def test_bad_setups_are_refused_before_generating(self) -> None:
        spec_only = Tool.from_openai(get_weather.openai_spec())
        with pytest.raises(GenerationError, match="no Python function"):
            run_tools(default_lm(), "Hi", [spec_only])
        with pytest.raises(GenerationError, match="max_steps"):
            run_tools(default_lm(), "Hi", self.tools, max_steps=1, tool_choice="required")
        with pytest.raises(StructgenError, match="tool_choice"):
            run_tools(default_lm(), "Hi", self.tools, tool_choice="weather")


class TestLoopBounds:
    """The README example on the default model: the model repeats its call until the tokens
    run out unless the turn guard stops it, and rambles in its answer unless it is bounded."""

    def test_one_call_then_an_answer(self) -> None:
        made: list[str] = []

        @tool
        def weather(city: str) -> dict[str, Any]:
            """Current weather in a city."""
            made.append(city)
            return {"city": city, "temperature": 18, "unit": "celsius", "sky": "cloudy"}

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run = run_tools(default_lm(), "Weather in Lyon?", [weather], **SHORT)
        assert [(c.name, c.arguments) for c in run.calls] == [("weather", {"city": "Lyon"})]
        assert made == ["Lyon"]  # run once, though the model asked for it again
        # greedy SmolLM2 writes the call twice in turn 1 (closed at the repeat, which is
        # dropped) and once more in turn 2 (nothing new: the next turn answers)
        assert run.repeated_calls
        assert all(
            (c.name, c.arguments) == ("weather", {"city": "Lyon"}) for c in run.repeated_calls
        )
        first = json.loads(run.turns[0].text)["tool_calls"]
        assert len(first) <= 2 < DEFAULT_MAX_CALLS_PER_TURN  # stopped at the first repeat
        assert run.turns[-1].tool_choice == "none" and run.steps <= 3
        assert isinstance(run.answer, str) and 0 < len(run.answer) <= SHORT["max_answer_chars"]
        assert run.messages[-1] == {"role": "assistant", "content": run.answer}
        # the rambling answer reached max_answer_chars: the result and a warning say so
        assert run.answer_cut
        assert any("max_answer_chars=24" in str(w.message) for w in caught)

    def test_an_answer_is_closed_within_max_new_tokens(self) -> None:
        with pytest.warns(UserWarning, match="max_new_tokens=24"):
            run = run_tools(
                default_lm(),
                "Tell me a long story about a dragon and a knight.",
                self_tools(),
                tool_choice="none",
                max_new_tokens=24,
            )
        (turn,) = run.turns
        assert turn.metrics.output_tokens <= 24
        assert json.loads(turn.text) == {"answer": run.answer} and len(run.answer) > 10
        assert run.answer_cut

    def test_an_answer_that_ends_by_itself_is_not_cut(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            run = run_tools(
                default_lm(), "Say hello.", self_tools(), tool_choice="none", max_new_tokens=64
            )
        assert not run.answer_cut and run.answer

    def test_repeated_calls_can_be_allowed(self) -> None:
        calls: list[str] = []

        @tool
        def weather(city: str) -> str:
            """Current weather in a city."""
            calls.append(city)
            return "cloudy"

        run = run_tools(
            default_lm(),
            "Weather in Lyon?",
            [weather],
            max_steps=2,
            max_calls_per_turn=3,
            allow_repeated_calls=True,
            **SHORT,
        )
        # without the guard greedy SmolLM2 repeats the call up to the bound, and each one runs
        assert calls == ["Lyon"] * 3 and not run.repeated_calls


def self_tools() -> tuple[Tool, ...]:
    return TestRunTools.tools
