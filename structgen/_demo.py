"""The README's demo: the embedded default model (SmolLM2-135M-Instruct) under constraints.

It asks the model a few questions free, as a choice among labels and as a regex through
`model.generate(..., logits_processor=[structgen.LogitsProcessor(...)])` (checked with Python's
`re`); then, on structgen's own loop, extracts a contact card into a Pydantic model and runs a
tool-calling round with two tools, printing the objects, the token counts and the time to first
token / time per token.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = ["run_demo"]

_EXAMPLES: list[tuple[str, str, str | list[str]]] = [
    ("free", "What is the capital of France? Answer in one sentence.", ""),
    (
        "choice",
        "Classify the sentiment of this review: 'The battery died after two days.'",
        ["positive", "negative", "neutral"],
    ),
    (
        "regex",
        "Give the date of the first Moon landing in ISO format (YYYY-MM-DD).",
        r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])",
    ),
    (
        "regex",
        "Write a US phone number for a pizza place.",
        r"\(\d{3}\) \d{3}-\d{4}",
    ),
]


def _chat_ids(tokenizer: Any, prompt: str) -> Any:
    messages = [{"role": "user", "content": prompt}]
    encoded = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    return encoded["input_ids"]


def run_demo(*, prompt: str | None = None, max_new_tokens: int = 48) -> None:
    """Print the default model's answers, free and constrained."""
    import torch

    from structgen import Compiler, LogitsProcessor, Vocabulary
    from structgen._assets import load_default_model

    started = time.perf_counter()
    model, tokenizer = load_default_model()
    vocab = Vocabulary.from_hf(
        tokenizer, size=model.config.vocab_size, generation_config=model.generation_config
    )
    compiler = Compiler(vocab)
    print(f"loaded SmolLM2-135M-Instruct in {time.perf_counter() - started:.1f}s; {vocab}")
    examples = [("free", prompt, "")] if prompt else _EXAMPLES
    for kind, text, constraint in examples:
        input_ids = _chat_ids(tokenizer, text)
        processors = []
        if kind == "choice":
            assert isinstance(constraint, list)
            processors.append(LogitsProcessor(compiler.choice(constraint)))
        elif kind == "regex":
            assert isinstance(constraint, str)
            processors.append(LogitsProcessor(compiler.regex(constraint)))
        tick = time.perf_counter()
        with torch.no_grad():
            output = model.generate(
                input_ids,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                logits_processor=processors,
                pad_token_id=tokenizer.eos_token_id,
            )
        elapsed = time.perf_counter() - tick
        answer = tokenizer.decode(output[0, input_ids.shape[1] :], skip_special_tokens=True)
        print(f"\n> {text}")
        if kind == "free":
            print(f"  free:   {answer.strip()}")
            continue
        pattern = "|".join(map(re.escape, constraint)) if kind == "choice" else str(constraint)
        valid = re.fullmatch(pattern, answer) is not None
        label = "choice" if kind == "choice" else "regex"
        print(f"  {label}: {answer!r}  ({'valid' if valid else 'INVALID'}, {elapsed:.2f}s)")
        print(f"          constraint: {constraint}")
    if prompt is None:
        from structgen.api import LM

        _structured_demo(LM(model, tokenizer))


class Contact(BaseModel):  # no docstring: it would become the schema's description
    name: str = Field(max_length=40)
    company: str = Field(max_length=40)
    role: Literal["engineer", "sales", "manager", "support", "other"]
    email: str = Field(
        pattern=r"^[a-z0-9._-]+@[a-z0-9-]+(\.[a-z0-9-]+)*\.[a-z]{2,6}$", max_length=48
    )
    phone: str = Field(pattern=r"^\(\d{3}\) \d{3}-\d{4}$")


_MESSAGE = (
    "Hi, this is Dana Whitfield from Northwind Traders. I lead the sales team there. "
    "Write to dana.whitfield@northwind.com or call (555) 214-7789."
)


def _weather(city: str) -> dict[str, Any]:
    """Current weather in a city.

    Args:
        city: The city name, e.g. "Paris".
    """
    table = {"paris": (18, "cloudy"), "lyon": (21, "sunny"), "london": (14, "rain")}
    temp, sky = table.get(city.strip().lower(), (20, "clear"))
    return {"city": city, "temperature_c": temp, "sky": sky}


def _to_fahrenheit(celsius: float) -> float:
    """Convert a temperature from degrees Celsius to degrees Fahrenheit.

    Args:
        celsius: The temperature in degrees Celsius.
    """
    return round(celsius * 9 / 5 + 32, 1)


def _metrics(m: Any) -> str:
    return (
        f"{m.output_tokens} tokens, time to first token {m.time_to_first_token * 1e3:.0f} ms, "
        f"{m.time_per_output_token * 1e3:.1f} ms per token"
    )


def _structured_demo(lm: Any) -> None:
    """Extraction into a Pydantic model on structgen's own loop, and a tool-calling round."""
    from structgen.api import Tool, generate_object, run_tools

    print("\n> Extract a contact card (Pydantic model, own KV-cached loop):")
    print(f"  message: {_MESSAGE}")
    results: list[Any] = []
    contact = generate_object(
        lm,
        Contact,
        f"Extract the sender's contact details from this message:\n\n{_MESSAGE}",
        results=results,
        # The grammar alone enforces the structure; a 135M model copes better without the
        # schema's text in its prompt.
        instructions=False,
        max_new_tokens=160,
    )
    print(f"  {contact!r}")
    print(f"          valid {type(contact).__name__}; {_metrics(results[-1].metrics)}")
    if len(results) > 1:
        print(f"          after {len(results) - 1} re-ask(s)")

    tools = [
        Tool.from_function(_weather, name="weather"),
        Tool.from_function(_to_fahrenheit, name="celsius_to_fahrenheit"),
    ]
    question = "What is the weather in Paris right now?"
    print(f"\n> Tool calling with two tools (weather, celsius_to_fahrenheit): {question}")
    run = run_tools(
        lm,
        question,
        tools,
        tool_choice="required",
        parallel_tool_calls=False,
        max_steps=2,
        max_answer_chars=100,
    )
    for call in run.calls:
        outcome = call.result if call.ok else f"error: {call.error}"
        print(f"  call  {call.name}({json.dumps(call.arguments)}) -> {outcome}")
    print(f"  answer: {run.answer}")
    for turn in run.turns:
        print(f"          turn {turn.step} ({turn.tool_choice}): {_metrics(turn.metrics)}")
    _native_tool_demo(lm, tools[:1], question)


def _native_tool_demo(lm: Any, tools: list[Any], question: str) -> None:
    """The same call in a model-native format: Qwen2.5's chat template (a fixture; ChatML, as
    SmolLM2's) renders the tools and asks for `<tool_call>` tags, and structgen detects the
    format from it (SmolLM2's own template has no tools)."""
    import copy

    from structgen._assets import tokenizer_dir
    from structgen.api import LM, run_tools
    from structgen.api.tools.formats import detect_tool_format

    try:
        config = json.loads(
            (tokenizer_dir("qwen2_5", fetch=False) / "tokenizer_config.json").read_text()
        )
    except (FileNotFoundError, OSError, ValueError):
        print("\n> (the Qwen2.5 template fixture is not fetched: `structgen fetch` adds it)")
        return
    tokenizer = copy.deepcopy(lm.tokenizer)
    tokenizer.chat_template = config["chat_template"]
    native = LM(lm.model, tokenizer, compiler=lm.compiler)
    name = detect_tool_format(tokenizer, lm.compiler.vocab)
    print(f"\n> The same call in a native format ({name}, Qwen2.5's template): {question}")
    run = run_tools(
        native,
        question,
        tools,
        tool_choice="required",
        parallel_tool_calls=False,
        max_steps=2,
        max_new_tokens=80,
    )
    print("  turn 1: " + run.turns[0].text.replace("\n", "\\n"))
    for call in run.calls:
        print(f"  call  {call.name}({json.dumps(call.arguments)}) -> {call.result}")
    print(f"  answer: {run.answer[:120]}")
