"""Pydantic models as answers on the real default model: valid instances, re-asks, streaming.

Generations are greedy, short (compact JSON, small `max_new_tokens`) and few; what needs no
model (the decorator's argument checks, the generation schema) runs without one.
"""

from __future__ import annotations

import enum
import itertools
import json
import re
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, field_validator

from structgen import GenerationError, SchemaOptions
from structgen.api.structured import (
    Partial,
    generate_object,
    generation_schema,
    stream_object,
    structured,
)
from structgen.errors import ValidationAttempt, ValidationFailedError
from tests.api.conftest import default_lm
from tests.api.test_partial import is_structural_prefix

pytestmark = pytest.mark.slow

COMPACT = SchemaOptions(whitespace="compact")


class Priority(str, enum.Enum):
    low = "low"
    high = "high"


class Address(BaseModel):
    city: str = Field(max_length=20)
    zip_code: str = Field(pattern=r"^[0-9]{5}$")


@structured(schema_options=COMPACT, max_new_tokens=80)
class Person(BaseModel):
    name: str = Field(max_length=20)
    age: int = Field(ge=0, le=120)
    nickname: str | None = None
    languages: list[str] = Field(max_length=3)
    address: Address


@structured(schema_options=COMPACT, max_new_tokens=40)
class Ticket(BaseModel):
    priority: Priority
    team: Literal["billing", "network"]


@structured(schema_options=COMPACT, max_new_tokens=60)
class Node(BaseModel):
    name: str = Field(max_length=10)
    children: list[Node] = Field(default_factory=list, max_length=2)


@structured(schema_options=COMPACT, max_new_tokens=20, max_retries=1)
class City(BaseModel):
    name: str = Field(max_length=20)


def depth(node: Node) -> int:
    return 1 + max((depth(child) for child in node.children), default=0)


class Spy:
    """Records each conversation sent to the real generator, then lets it run."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, method: str = "generate") -> None:
        self.prompts: list[Any] = []
        generator = default_lm().generator
        real = getattr(generator, method)

        def spy(prompt: Any, *args: Any, **kwargs: Any) -> Any:
            self.prompts.append(json.loads(json.dumps(prompt)))
            return real(prompt, *args, **kwargs)

        monkeypatch.setattr(generator, method, spy)

    def text(self, i: int) -> str:
        return json.dumps(self.prompts[i], ensure_ascii=False)


class TestValidInstances:
    def test_nested_constrained_optional_and_list_fields(self) -> None:
        person = Person.generate("Ada is 36, lives in London (zip 12345) and speaks English.")
        assert isinstance(person, Person)
        assert isinstance(person.address, Address)
        assert 0 <= person.age <= 120 and len(person.name) <= 20
        assert len(person.languages) <= 3
        assert len(person.address.zip_code) == 5 and person.address.zip_code.isdigit()
        Person.model_validate(person.model_dump())

    def test_enum_and_literal_fields(self) -> None:
        ticket = Ticket.generate("Ticket: 'I was charged twice this month!' Urgent, billing.")
        assert isinstance(ticket.priority, Priority)
        assert ticket.team in ("billing", "network")

    def test_recursive_model(self) -> None:
        example = '{"name":"x","children":[{"name":"y","children":[]}]}'
        node = Node.generate(f"Example tree: {example}\nNow a tree: root 'a' with leaves 'b', 'c'.")
        assert isinstance(node, Node)
        assert all(isinstance(child, Node) for child in node.children)
        assert depth(node) >= 2

    def test_generate_object_without_the_decorator(self) -> None:
        class Country(BaseModel):
            capital: str = Field(max_length=20)

        country = generate_object(
            default_lm(), Country, "France", schema_options=COMPACT, max_new_tokens=20
        )
        assert isinstance(country, Country)


class TestReAsk:
    def test_a_rejected_answer_is_re_asked_with_the_error(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        spy = Spy(monkeypatch)
        seen: list[str] = []

        def reject_first(city: City) -> str | None:
            seen.append(city.name)
            return "the first answer is never accepted (test)" if len(seen) == 1 else None

        city = City.generate("The capital of Italy.", validators=[reject_first])
        assert isinstance(city, City)
        assert len(seen) == 2 and len(spy.prompts) == 2
        assert "JSON Schema" in spy.text(0)  # instructions=True: the schema is in the prompt
        assert "never accepted" not in spy.text(0)
        second = spy.prompts[1]
        assert second[-2]["role"] == "assistant"
        assert json.loads(second[-2]["content"]) == {"name": seen[0]}
        assert second[-1]["role"] == "user"
        assert "the first answer is never accepted (test)" in second[-1]["content"]

    def test_an_always_failing_check_raises_with_every_attempt(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        spy = Spy(monkeypatch)

        def never(city: City) -> None:
            raise ValueError(f"{city.name} is not acceptable")

        with pytest.raises(ValidationFailedError) as info:
            City.generate("The capital of Italy.", validators=[never], instructions=False)
        assert spy.prompts[0] == [{"role": "user", "content": "The capital of Italy."}]
        error = info.value
        assert error.model == "City"
        assert len(error.attempts) == 2  # max_retries=1 from the decorator
        for attempt in error.attempts:
            assert isinstance(attempt, ValidationAttempt)
            name = City.model_validate_json(attempt.text).name
            assert attempt.error == f"{name} is not acceptable"
            assert attempt.error in str(error)
        assert "after 2 attempt(s)" in str(error)

    def test_a_pydantic_validator_failure_is_reported_by_field(self) -> None:
        class Word(BaseModel):
            word: str = Field(max_length=10)

            @field_validator("word")
            @classmethod
            def never(cls, value: str) -> str:
                raise ValueError("no word is good enough")

        with pytest.raises(ValidationFailedError) as info:
            generate_object(
                default_lm(), Word, "Say hi.", max_retries=0, max_new_tokens=20,
                schema_options=COMPACT,
            )  # fmt: skip
        (attempt,) = info.value.attempts
        assert attempt.error.startswith("word: Value error, no word is good enough (got ")

    def test_a_budget_below_the_shortest_object_fails_before_generating(self) -> None:
        # no attempt is made (nor re-asked): the shortest Person takes more than 4 tokens
        with pytest.raises(GenerationError, match=r"takes \d+ tokens, more than max_new_tokens=4"):
            Person.generate("Describe Ada Lovelace.", max_new_tokens=4, max_retries=2)

    def test_a_tight_budget_closes_the_object_in_time(self) -> None:
        with pytest.raises(GenerationError) as info:
            Person.generate("Describe Ada Lovelace.", max_new_tokens=4)
        match = re.search(r"takes (\d+) tokens", str(info.value))
        assert match
        need = int(match.group(1))  # the shortest object; the model gets two tokens more
        person = Person.generate("Describe Ada Lovelace.", max_new_tokens=need + 2, max_retries=0)
        assert isinstance(person, Person)

    def test_an_answer_cut_short_is_a_failed_attempt_not_a_partial_object(self) -> None:
        # without budget-aware closing the budget cuts the object off
        with pytest.raises(ValidationFailedError, match="cut off") as info:
            Person.generate(
                "Describe Ada Lovelace.",
                max_new_tokens=4,
                max_retries=0,
                close_within_budget=False,
            )
        (attempt,) = info.value.attempts
        assert attempt.text.startswith("{") and "max_new_tokens=4" in attempt.error


class TestStreaming:
    def test_partial_values_grow_and_end_with_the_validated_instance(self) -> None:
        items = list(Ticket.stream("Ticket: 'The wifi is down everywhere!' Urgent."))
        assert len(items) >= 3
        assert all(isinstance(item, Partial) and item.attempt == 1 for item in items)
        *partials, last = items
        assert not any(p.complete for p in partials) and last.complete
        assert isinstance(last.value, Ticket)
        assert last.data == last.value.model_dump(mode="json")
        for before, after in itertools.pairwise(items):
            assert is_structural_prefix(before.data, after.data)
            assert after.text.startswith(before.text)
        assert isinstance(partials[0].data, dict)

    def test_stream_checks_options_before_the_first_item(self) -> None:
        with pytest.raises(GenerationError, match="temprature"):
            stream_object(default_lm(), Ticket, "Hi", temprature=0.5)


class TestOptions:
    def test_the_decorator_returns_the_same_class(self) -> None:
        class Plain(BaseModel):
            x: int

        assert structured(Plain) is Plain
        assert structured(max_retries=0)(Plain) is Plain
        assert callable(Plain.generate) and callable(Plain.stream)  # type: ignore[attr-defined]

    def test_non_models_are_rejected(self) -> None:
        with pytest.raises(TypeError, match="BaseModel"):
            structured(dict)  # type: ignore[type-var]

        with pytest.raises(TypeError, match="BaseModel"):

            @structured(max_retries=1)  # type: ignore[type-var]
            class NotAModel:
                pass

    def test_fields_named_like_the_classmethods_are_rejected(self) -> None:
        class Flags(BaseModel):
            stream: bool

        with pytest.raises(TypeError, match="stream"):
            structured(Flags)

    def test_bad_option_values(self) -> None:
        with pytest.raises(GenerationError, match="max_retries"):
            structured(max_retries=-1)(type("M", (BaseModel,), {"__annotations__": {"x": int}}))
        with pytest.raises(TypeError, match="validators"):
            generate_object(default_lm(), City, "x", validators=[42])  # type: ignore[list-item]
        with pytest.raises(GenerationError, match="temprature"):
            City.generate("x", temprature=0.5)

    def test_generation_schema_closes_objects_and_drops_titles(self) -> None:
        class Loose(BaseModel):
            model_config = ConfigDict(extra="allow")
            x: int

        class Outer(BaseModel):
            inner: Loose
            tags: set[str]
            counts: dict[str, int]

        schema = generation_schema(Outer)
        assert schema["additionalProperties"] is False
        assert schema["$defs"]["Loose"]["additionalProperties"] is True  # extra="allow" kept
        assert schema["properties"]["counts"]["additionalProperties"] == {"type": "integer"}
        assert "uniqueItems" not in schema["properties"]["tags"]
        assert "title" not in json.dumps(schema)
        default_lm().compiler.json_schema(schema)  # compiles (set[str] included)
        kept = generation_schema(Outer, unique_items=True)
        assert kept["properties"]["tags"]["uniqueItems"] is True

    def test_sets_stay_distinct_where_the_guard_can_and_fall_back_where_not(self) -> None:
        from structgen import Matcher
        from structgen.api.structured import _Asker

        class Tagged(BaseModel):
            tags: set[str]

        class Pairs(BaseModel):
            pairs: set[tuple[int, int]]  # items are arrays: no guard, Pydantic dedupes

        asker = _Asker(default_lm(), Tagged, "x", (), 0, True, None, None, {})
        matcher = Matcher(asker.grammar)
        assert matcher.accept_bytes(b'{"tags": ["a", ')
        assert not matcher.accept_bytes(b'"a"')
        pairs = _Asker(default_lm(), Pairs, "x", (), 0, True, None, None, {})
        assert Matcher(pairs.grammar).accept_bytes(b'{"pairs": [[1, 2], [1, 2]]}')

    def test_the_error_lists_every_attempt_and_pickles(self) -> None:
        import pickle

        attempts = (ValidationAttempt('{"name":"a"}', "too short"), ValidationAttempt("{", "cut"))
        error = ValidationFailedError("City", attempts)
        assert "no valid City after 2 attempt(s)" in str(error)
        assert "attempt 1: too short" in str(error) and "attempt 2: cut" in str(error)
        copy = pickle.loads(pickle.dumps(error))
        assert copy.attempts == attempts and str(copy) == str(error)
