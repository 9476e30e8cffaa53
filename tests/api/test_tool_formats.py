"""Native tool-call formats on real tokenizers and their chat templates.

The oracle is each family's own template: an assistant message with `tool_calls`, rendered by
the real chat template (Qwen2.5, Qwen3, DeepSeek-V3), is exactly the text the model was trained
to write; the format's grammar must accept it token by token (tokenized by the real tokenizer)
and its parser must give the same calls back. Llama 3.1, Mistral and gpt-oss Harmony texts are
written from their format descriptions. Random walks under the masks always parse into calls of
known tools with valid arguments, free text never holds a call's opening tag, and tags that are
special tokens appear only as those tokens.
"""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import numpy as np
import pytest

from structgen import Compiler, Matcher, Vocabulary
from structgen.api.tools.formats import FORMATS, detect_tool_format, render_tokens
from structgen.api.tools.spec import Tool
from structgen.masks import unpack_bitmask
from tests.conftest import load_tokenizer, load_vocab

WEATHER = Tool(
    "get_weather",
    "The weather in a city.",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)
TIME = Tool(
    "get_time",
    "The time in a timezone.",
    {
        "type": "object",
        "properties": {"tz": {"type": "string", "enum": ["CET", "UTC"]}},
        "required": ["tz"],
        "additionalProperties": False,
    },
)
TOOLS = [WEATHER, TIME]
CALLS = [("get_weather", {"city": "Lyon"}), ("get_time", {"tz": "CET"})]
FAMILIES = [  # (format, a tokenizer of its family)
    ("hermes", "qwen2_5"),
    ("deepseek_v3", "deepseek_v3"),
    ("harmony", "gptoss"),
    ("llama3_json", "llama3_1"),
    ("mistral", "mistral"),
]


def openai_calls(calls: list[tuple[str, dict[str, Any]]], *, as_text: bool) -> list[Any]:
    return [
        {
            "type": "function",
            "function": {"name": n, "arguments": json.dumps(a) if as_text else a},
        }
        for n, a in calls
    ]


def template_output(name: str, calls: list[tuple[str, dict[str, Any]]], content: Any) -> str:
    """What the template renders after the generation prompt for an assistant tool-call turn,
    up to the end-of-turn token."""
    tok = load_tokenizer(name)
    specs = [t.openai_spec() for t in TOOLS]
    as_text = name == "deepseek_v3"  # its template concatenates arguments as text
    messages = [
        {"role": "user", "content": "Weather and time in Lyon?"},
        {
            "role": "assistant",
            "content": content,
            "tool_calls": openai_calls(calls, as_text=as_text),
        },
    ]
    full = render(tok, messages, specs, generation_prompt=False)
    prompt = render(tok, messages[:1], specs, generation_prompt=True)
    assert full.startswith(prompt)
    out = full[len(prompt) :]
    for end in ("<|im_end|>", "<｜end▁of▁sentence｜>"):
        out = out.split(end)[0]
    return out


def render(tok: Any, messages: list[Any], tools: list[Any], *, generation_prompt: bool) -> str:
    """The chat template's text. DeepSeek-V3's template is rendered by jinja2 as transformers
    does (sandboxed, trimmed blocks): transformers 5 rewrites its tool calls first and the
    template then reads a key they no longer have."""
    if "<｜tool▁calls▁begin｜>" not in tok.chat_template:
        return str(
            tok.apply_chat_template(
                messages, tools=tools, tokenize=False, add_generation_prompt=generation_prompt
            )
        )
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(tok.chat_template).render(
        messages=messages,
        tools=tools,
        bos_token=tok.bos_token,
        eos_token=tok.eos_token,
        add_generation_prompt=generation_prompt,
    )


def accepts_tokens(grammar: Any, tokenizer: Any, text: str) -> bool:
    m = Matcher(grammar)
    if grammar.vocab.family == "sentencepiece":  # (its normaliser adds a leading space)
        return m.accept_bytes(text.encode()) and m.can_terminate()
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return all(m.accept_token(i) for i in ids) and m.can_terminate()


def compiled(fmt: str, vocab_name: str, choice: str = "auto", max_calls: int | None = None) -> Any:
    return FORMATS[fmt].grammar(Compiler(load_vocab(vocab_name)), TOOLS, choice, max_calls)


class TestTemplatesRoundTrip:
    @pytest.mark.parametrize(
        ("tokenizer", "fmt", "content"),
        [
            ("qwen2_5", "hermes", "Let me check."),
            ("qwen2_5", "hermes", None),
            ("qwen3", "hermes", "Checking both."),
            ("qwen3", "hermes", ""),
            ("deepseek_v3", "deepseek_v3", None),
        ],
    )
    def test_the_templates_rendering_is_accepted_and_parses_back(
        self, tokenizer: str, fmt: str, content: Any
    ) -> None:
        text = template_output(tokenizer, CALLS, content)
        grammar = compiled(fmt, tokenizer)
        assert accepts_tokens(grammar, load_tokenizer(tokenizer), text), text
        turn = FORMATS[fmt].parse(text)
        assert [(c.name, c.arguments) for c in turn.calls] == CALLS
        one = template_output(tokenizer, CALLS[:1], content)
        if fmt != "deepseek_v3":  # (its template leaves a single call's list open)
            assert accepts_tokens(
                compiled(fmt, tokenizer, max_calls=1), load_tokenizer(tokenizer), one
            )
            assert not accepts_tokens(
                compiled(fmt, tokenizer, max_calls=1), load_tokenizer(tokenizer), text
            )

    @pytest.mark.parametrize("tokenizer", ["qwen2_5", "qwen3", "deepseek_v3", "gptoss"])
    def test_the_format_is_detected(self, tokenizer: str) -> None:
        expected = {
            "qwen2_5": "hermes",
            "qwen3": "hermes",
            "deepseek_v3": "deepseek_v3",
            "gptoss": "harmony",
        }[tokenizer]
        assert detect_tool_format(load_tokenizer(tokenizer), load_vocab(tokenizer)) == expected

    def test_templates_without_tools_fall_back_to_json(self) -> None:
        assert detect_tool_format(load_tokenizer("llama3_1"), load_vocab("llama3_1")) == "json"


DOCUMENTED = {  # (format, tokenizer): a turn with both calls, written from the format's docs
    ("llama3_json", "llama3_1"): '{"name": "get_weather", "parameters": {"city": "Lyon"}}; '
    '{"name": "get_time", "parameters": {"tz": "CET"}}',
    ("mistral", "mistral"): '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Lyon"}},'
    ' {"name": "get_time", "arguments": {"tz": "CET"}}]',
    ("harmony", "gptoss"): "<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Lyon"}<|call|>',
}


class TestDocumentedFormats:
    @pytest.mark.parametrize(("key", "text"), list(DOCUMENTED.items()), ids=lambda x: str(x)[:30])
    def test_accepted_and_parsed(self, key: tuple[str, str], text: str) -> None:
        fmt, tokenizer = key
        assert accepts_tokens(compiled(fmt, tokenizer), load_tokenizer(tokenizer), text)
        turn = FORMATS[fmt].parse(text)
        expected = CALLS[:1] if fmt == "harmony" else CALLS
        assert [(c.name, c.arguments) for c in turn.calls] == expected

    def test_harmony_answers_on_the_final_channel(self) -> None:
        tok = load_tokenizer("gptoss")
        text = "<|channel|>final<|message|>It is sunny."
        assert accepts_tokens(compiled("harmony", "gptoss"), tok, text)
        assert FORMATS["harmony"].parse(text).answer == "It is sunny."
        assert not accepts_tokens(compiled("harmony", "gptoss", "required"), tok, text)


class TestToolChoice:
    def test_choices_on_hermes_tokens(self) -> None:
        tok, vocab = load_tokenizer("qwen2_5"), load_vocab("qwen2_5")
        begin = vocab.token_id("<tool_call>")
        none = Matcher(compiled("hermes", "qwen2_5", "none"))
        assert not none.is_allowed(begin) and none.accept_bytes(b"Sunny.")
        required = Matcher(compiled("hermes", "qwen2_5", "required"))
        assert required.is_allowed(begin) and not required.accept_bytes(b"Sunny")
        named = Matcher(compiled("hermes", "qwen2_5", "get_time"))
        assert named.accept_token(begin)
        assert not named.copy().accept_bytes(b'\n{"name": "get_weather"')
        assert named.accept_bytes(b'\n{"name": "get_time"')
        auto = compiled("hermes", "qwen2_5", "auto")
        assert accepts_tokens(auto, tok, "Just an answer.")


def walk(grammar: Any, vocab: Vocabulary, seed: int, steps: int = 30) -> list[int]:
    rng = random.Random(seed)
    m = Matcher(grammar)
    out: list[int] = []
    eos = set(vocab.eos_token_ids)
    while not m.is_terminated() and len(out) < steps + 200:
        ids = [int(t) for t in np.flatnonzero(unpack_bitmask(m.allowed_mask(), vocab.size))]
        text = [t for t in ids if t not in eos]
        if m.can_terminate() and (not text or len(out) > steps):
            break
        special = [t for t in text if t in grammar.token_ids]
        if len(out) > steps:
            plan = m.completion_tokens()
            assert plan, out
            token = plan[0]
        elif special and rng.random() < 0.5:
            token = rng.choice(special)
        else:
            token = rng.choice(text)
        assert m.accept_token(token)
        out.append(token)
    assert m.can_terminate()
    return out


class TestRandomWalks:
    @pytest.mark.parametrize(("fmt", "tokenizer"), FAMILIES)
    def test_walks_parse_into_valid_calls_of_known_tools(self, fmt: str, tokenizer: str) -> None:
        vocab = load_vocab(tokenizer)
        grammar = compiled(fmt, tokenizer, "required")
        by_name = {t.name: t for t in TOOLS}
        for seed in range(3):
            ids = walk(grammar, vocab, seed)
            turn = FORMATS[fmt].parse(render_tokens(vocab, ids))
            assert turn.calls, render_tokens(vocab, ids)
            for call in turn.calls:
                jsonschema.validate(call.arguments, by_name[call.name].parameters)
            # tags that are tokens appear only as those tokens
            for t in ids:
                if vocab.token_bytes(t) and t not in grammar.token_ids:
                    assert b"<tool_call>" not in vocab.token_bytes(t)

    @pytest.mark.parametrize(("fmt", "tokenizer"), FAMILIES)
    def test_every_tool_choice_and_a_single_call(self, fmt: str, tokenizer: str) -> None:
        vocab = load_vocab(tokenizer)
        named = walk(compiled(fmt, tokenizer, "get_time"), vocab, 5)
        turn = FORMATS[fmt].parse(render_tokens(vocab, named))
        assert turn.calls and {c.name for c in turn.calls} == {"get_time"}
        single = walk(compiled(fmt, tokenizer, "required", max_calls=1), vocab, 6)
        assert len(FORMATS[fmt].parse(render_tokens(vocab, single)).calls) == 1
        none = walk(compiled(fmt, tokenizer, "none"), vocab, 7, steps=10)
        answer = FORMATS[fmt].parse(render_tokens(vocab, none))
        assert answer.answer is not None and not answer.calls

    def test_free_text_never_holds_an_opening_tag(self) -> None:
        vocab = load_vocab("qwen2_5")
        grammar = compiled("hermes", "qwen2_5", "none")
        for seed in range(3):
            text = render_tokens(vocab, walk(grammar, vocab, seed, steps=40))
            assert "<tool_call>" not in text


class TestRunTools:
    """`run_tools` with a native format on the default model (SmolLM2, whose template has no
    tools: the format is forced; its tags are text there)."""

    def test_a_hermes_run_calls_then_answers(self) -> None:
        import structgen as sg
        from structgen.api import LM

        lm = LM.default()
        seen: list[str] = []

        @sg.tool
        def get_weather(city: str) -> str:
            """The weather in a city."""
            seen.append(city)
            return f"Sunny in {city}, 21 C"

        run = sg.run_tools(
            lm,
            "What is the weather in Lyon?",
            [get_weather],
            tool_choice="required",
            tool_format="hermes",
            max_new_tokens=60,
        )
        assert run.calls and run.calls[0].name == "get_weather" and seen
        assert run.turns[0].text.startswith("<tool_call>\n{")
        assert run.answer and "<tool_call>" not in run.answer
        calls = [m for m in run.messages if m.get("tool_calls")]
        assert calls[0]["tool_calls"][0]["function"]["name"] == "get_weather"

    def test_auto_is_json_for_a_template_without_tools(self) -> None:
        from structgen.api import LM
        from structgen.api.tools.formats import resolve_tool_format

        assert resolve_tool_format(LM.default(), "auto") == "json"
        with pytest.raises(Exception, match="unknown tool format"):
            resolve_tool_format(LM.default(), "nope")


class TestRender:
    @pytest.mark.parametrize(("fmt", "tokenizer"), FAMILIES)
    def test_rendered_calls_are_accepted_and_parse_back(self, fmt: str, tokenizer: str) -> None:
        calls = CALLS[:1] if fmt == "harmony" else CALLS
        text = FORMATS[fmt].render(calls)
        assert accepts_tokens(compiled(fmt, tokenizer), load_tokenizer(tokenizer), text)
        assert [(c.name, c.arguments) for c in FORMATS[fmt].parse(text).calls] == calls

    def test_the_prompt_says_the_native_format_or_leaves_it_to_the_template(self) -> None:
        from structgen.api.tools.templates import tool_prompt

        messages = [{"role": "user", "content": "Weather in Lyon?"}]
        qwen = tool_prompt(load_tokenizer("qwen2_5"), messages, TOOLS, tool_format="hermes")
        assert "tool_calls" not in qwen and "<tool_call>" in qwen  # the template's own words
        history = [
            *messages,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": openai_calls(CALLS, as_text=False),
            },
            {"role": "tool", "tool_call_id": "c0", "name": "get_weather", "content": "Sunny"},
        ]
        again = tool_prompt(load_tokenizer("qwen2_5"), history, TOOLS, tool_format="hermes")
        assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon"}}' in again
        assert "<tool_response>" in again and "Sunny" in again

    def test_the_demos_native_round(self, capsys: pytest.CaptureFixture[str]) -> None:
        from structgen import _demo
        from structgen.api import LM, Tool

        load_tokenizer("qwen2_5")  # (the fixture must be there: under CI=true, a failure)
        weather = Tool.from_function(_demo._weather, name="weather")
        _demo._native_tool_demo(LM.default(), [weather], "Weather in Paris?")
        out = capsys.readouterr().out
        assert "native format (hermes" in out and '<tool_call>\\n{"name": "weather"' in out
        assert "call  weather(" in out


class TestReasoning:
    def test_harmony_thinks_on_its_analysis_channel_first(self) -> None:
        tok = load_tokenizer("gptoss")
        grammar = FORMATS["harmony"].grammar(
            Compiler(load_vocab("gptoss")), TOOLS, "required", None, reasoning=True
        )
        call = DOCUMENTED[("harmony", "gptoss")]
        thought = "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant"
        assert accepts_tokens(grammar, tok, thought + call)
        assert accepts_tokens(grammar, tok, call)  # (thinking is optional)
        assert not accepts_tokens(grammar, tok, thought)
        turn = FORMATS["harmony"].parse(thought + call)
        assert [(c.name, c.arguments) for c in turn.calls] == CALLS[:1]

    def test_hermes_thinks_in_a_think_block_first(self) -> None:
        tok = load_tokenizer("qwen3")
        grammar = FORMATS["hermes"].grammar(
            Compiler(load_vocab("qwen3")), TOOLS, "required", None, reasoning=True
        )
        call = FORMATS["hermes"].render(CALLS[:1])
        assert accepts_tokens(grammar, tok, "<think>\nweather first\n</think>\n\n" + call)
        assert not accepts_tokens(grammar, tok, "<think>\nweather first\n</think>\n\nhello")


class TestTagsAddedAsSpecialTokens:
    """Llama 3.1's `<|python_tag|>` and Mistral v3's `[TOOL_CALLS]` are special tokens in the
    models that use them; the fixtures' vocabularies predate them, so they are added the way a
    tokenizer gets special tokens (`add_special_tokens`): the tag is then matched as that token."""

    def _with(self, name: str, tag: str) -> tuple[Any, Any]:
        import copy

        from structgen.vocab import Vocabulary

        tokenizer = copy.deepcopy(load_tokenizer(name))
        tokenizer.add_special_tokens({"additional_special_tokens": [tag]})
        return tokenizer, Vocabulary.from_hf(tokenizer)

    def test_llama_python_tag(self) -> None:
        tokenizer, vocab = self._with("llama3_1", "<|python_tag|>")
        tag = vocab.token_id("<|python_tag|>")
        assert tag is not None
        grammar = FORMATS["llama3_json"].grammar(Compiler(vocab), TOOLS, "required", None)
        call = DOCUMENTED[("llama3_json", "llama3_1")]
        assert accepts_tokens(grammar, tokenizer, "<|python_tag|>" + call)
        assert accepts_tokens(grammar, tokenizer, call)  # (the tag is optional)
        m = Matcher(grammar)
        assert tag in allowed_ids(m)
        assert not m.accept_bytes(b"<|python_tag|>")  # the text is not the token
        turn = FORMATS["llama3_json"].parse("<|python_tag|>" + call)
        assert [(c.name, c.arguments) for c in turn.calls] == CALLS

    def test_mistral_tool_calls_token(self) -> None:
        _, vocab = self._with("mistral", "[TOOL_CALLS]")
        tag = vocab.token_id("[TOOL_CALLS]")
        assert tag is not None
        grammar = FORMATS["mistral"].grammar(Compiler(vocab), TOOLS, "required", None)
        m = Matcher(grammar)
        assert allowed_ids(m) == {tag}  # the call list opens with the token only
        assert m.accept_token(tag)
        body = DOCUMENTED[("mistral", "mistral")].removeprefix("[TOOL_CALLS]")
        assert m.accept_bytes(body.encode()) and m.can_terminate()


def allowed_ids(m: Matcher) -> set[int]:
    from structgen.masks import unpack_bitmask

    mask = unpack_bitmask(m.allowed_mask(), m.grammar.vocab.size)
    return set(np.flatnonzero(mask).tolist())
