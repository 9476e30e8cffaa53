"""structgen inside vLLM's real V1 structured-output manager, on the CPU, with a real tokenizer.

Every mask vLLM builds through the structgen backend is compared with structgen's own `Matcher`
walked over the same tokens; requests are validated by vLLM's own `SamplingParams.verify`, the
backend is chosen by vLLM's own config and CLI parsing, and speculative rounds go through the
manager's draft-token bitmask path and its rollback.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from structgen import Compiler, Matcher
from structgen.vocab import Vocabulary
from tests.conftest import default_model_dir
from tests.engines._cases import TAG

if importlib.util.find_spec("vllm") is not None:
    # vLLM picks its platform at import; without a GPU and without a CPU build of vLLM it finds
    # none, and its config classes need one. The CPU platform is what a GPU-less machine is.
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
pytest.importorskip("vllm")
import torch
from vllm.engine.arg_utils import EngineArgs
from vllm.exceptions import VLLMValidationError
from vllm.plugins import load_general_plugins
from vllm.sampling_params import SamplingParams, StructuredOutputsParams
from vllm.tokenizers import cached_tokenizer_from_config
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from structgen.integrations import vllm as plugin

load_general_plugins()  # what every vLLM process does: runs structgen's entry point

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
EBNF = 'root ::= "(" expr ")"\nexpr ::= term ("+" term)*\nterm ::= [0-9]+ | root\n'
LARK = 'start: "(" expr ")"\nexpr: term ("+" term)*\nterm: /[0-9]+/ | start\n'


CASES: list[tuple[dict[str, Any], str]] = [
    ({"json": SCHEMA}, json.dumps({"name": "Ada", "age": 36})),
    ({"json_object": True}, '{"ok": [1, 2.5, null]}'),
    ({"regex": r"\d{3}-\d{4}"}, "555-1234"),
    ({"choice": ["positive", "negative", "neutral"]}, "neutral"),
    ({"grammar": EBNF}, "((1+2)+34)"),
    ({"grammar": LARK}, "(7+(8))"),
    ({"structural_tag": TAG}, 'Checking. <function=get_weather>{"city": "Oslo"}</function> ok'),
]


def _config(**extra: Any) -> Any:
    args = EngineArgs(
        model=str(default_model_dir()),
        structured_outputs_config={"backend": "structgen"},
        max_model_len=512,
        max_num_seqs=8,
        enforce_eager=True,
        **extra,
    )
    return args.create_engine_config()


@pytest.fixture(scope="module")
def config() -> Any:
    return _config()


@pytest.fixture(scope="module")
def spec_config() -> Any:
    return _config(
        speculative_config={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}
    )


@pytest.fixture(scope="module")
def tokenizer(config: Any) -> Any:
    return cached_tokenizer_from_config(config.model_config)


@pytest.fixture(scope="module")
def compiler(config: Any, tokenizer: Any) -> Compiler:
    size = max(config.model_config.get_vocab_size(), len(tokenizer))
    return Compiler(Vocabulary.from_hf(tokenizer, size))


def _request(config: Any, tokenizer: Any, rid: str, structured: dict[str, Any]) -> Any:
    params = SamplingParams(max_tokens=64, structured_outputs=StructuredOutputsParams(**structured))
    params.verify(config.model_config, None, config.structured_outputs_config, tokenizer)
    return Request(rid, [1, 2, 3], params, None)


def _ready(manager: Any, request: Any) -> Any:
    manager.grammar_init(request)
    deadline = time.monotonic() + 60
    while not request.structured_output_request.is_grammar_ready:
        assert time.monotonic() < deadline, "grammar compilation did not finish"
        time.sleep(0.005)
    grammar = request.structured_output_request.grammar
    assert isinstance(grammar, plugin.StructgenGrammar), grammar
    return grammar


def _own_compiled(compiler: Compiler, structured: dict[str, Any]) -> Any:
    (kind, value), *_ = structured.items()
    if kind == "json":
        return compiler.json_schema(value)
    if kind == "json_object":
        return compiler.json_schema({"type": "object"})
    if kind == "regex":
        return compiler.regex(value)
    if kind == "choice":
        return compiler.choice(value)
    if kind == "structural_tag":
        return compiler.structural_tag(value)
    return compiler.ebnf(value) if "::=" in value else compiler.grammar(value)


def _row(matcher: Matcher, width: int) -> np.ndarray:
    row = np.zeros(width, dtype=np.int32)
    matcher.fill_bitmask(row[None, :], 0)
    return row


# ----------------------------------------------------------------------------- the plugin


def test_the_entry_point_adds_structgen_to_the_backend_choices() -> None:
    from vllm.config.structured_outputs import StructuredOutputsConfig

    assert StructuredOutputsConfig(backend="structgen").backend == "structgen"
    with pytest.raises(ValueError, match="structgen"):  # the error lists it among the choices
        StructuredOutputsConfig(backend="no-such-backend")


def test_the_cli_flag_selects_structgen() -> None:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    args = parser.parse_args(
        [
            "--model",
            str(default_model_dir()),
            "--structured-outputs-config.backend",
            "structgen",
            "--max-model-len",
            "512",
        ]
    )
    config = EngineArgs.from_cli_args(args).create_engine_config()
    assert config.structured_outputs_config.backend == "structgen"


def test_registering_twice_changes_nothing() -> None:
    plugin.register()
    plugin.register()
    from vllm.config.structured_outputs import StructuredOutputsConfig

    assert StructuredOutputsConfig(backend="structgen").backend == "structgen"


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize("structured", [c[0] for c in CASES], ids=lambda s: next(iter(s)))
def test_vllm_validation_routes_every_request_kind_to_structgen(
    config: Any, tokenizer: Any, structured: dict[str, Any]
) -> None:
    request = _request(config, tokenizer, "v", structured)
    assert request.sampling_params.structured_outputs._backend == "structgen"


@pytest.mark.parametrize(
    ("structured", "message"),
    [
        ({"regex": "(ab"}, "offset 0"),
        ({"grammar": 'root ::= "a" missing'}, "line 1, column 14"),
        ({"grammar": "start: undefined_rule"}, "undefined_rule"),
        ({"json": '{"type": '}, "Expecting value"),
        ({"structural_tag": "[1]"}, "a structural tag is a JSON object"),
    ],
)
def test_malformed_requests_are_refused_with_structgens_message(
    config: Any, tokenizer: Any, structured: dict[str, Any], message: str
) -> None:
    with pytest.raises(VLLMValidationError, match=message):
        _request(config, tokenizer, "bad", structured)


def test_a_schema_structgen_cannot_enforce_fails_the_request_with_its_pointer(
    config: Any, tokenizer: Any
) -> None:
    manager = StructuredOutputManager(config)
    schema = {"type": "array", "uniqueItems": True}
    request = _request(config, tokenizer, "u", {"json": schema})
    manager.grammar_init(request)
    deadline = time.monotonic() + 60
    while not request.structured_output_request.is_grammar_ready:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    error = request.structured_output_request.grammar
    assert isinstance(error, Exception) and "uniqueItems" in str(error)


# ----------------------------------------------------------------------------- masks


@pytest.mark.parametrize(("structured", "text"), CASES, ids=lambda c: str(c)[:24])
def test_manager_masks_equal_structgens_own_matcher_token_by_token(
    config: Any, tokenizer: Any, compiler: Compiler, structured: dict[str, Any], text: str
) -> None:
    manager = StructuredOutputManager(config)
    request = _request(config, tokenizer, "r", structured)
    grammar = _ready(manager, request)
    own = Matcher(_own_compiled(compiler, structured))
    ids = tokenizer.encode(text, add_special_tokens=False)
    for token in [*ids, tokenizer.eos_token_id]:
        bitmask = manager.grammar_bitmask({"r": request}, ["r"], {})
        assert bitmask is not None
        np.testing.assert_array_equal(bitmask[0], _row(own, bitmask.shape[1]))
        assert manager.accept_tokens(request, [token])
        assert own.accept_token(token)
    assert grammar.is_terminated()


def test_a_ready_grammar_has_its_first_mask_cached(config: Any, tokenizer: Any) -> None:
    # computed on vLLM's compile thread, not in the first batch step (a new schema: no cache)
    manager = StructuredOutputManager(config)
    schema = {"type": "object", "properties": {"first_mask_probe": {"type": "integer"}}}
    grammar = _ready(manager, _request(config, tokenizer, "r", {"json": schema}))
    assert grammar.matcher._allowed(cached_only=True) is not None


def test_a_ready_grammar_has_the_masks_of_a_few_outputs_cached(config: Any, tokenizer: Any) -> None:
    # and of a few random outputs' states (`prefetch_masks(samples=...)`): the states after
    # the first value, whatever its words, are among them
    manager = StructuredOutputManager(config)
    schema = {
        "type": "object",
        "properties": {"sample_probe": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["sample_probe", "n"],
    }
    grammar = _ready(manager, _request(config, tokenizer, "r", {"json": schema}))
    compiled = grammar.matcher.grammar
    state = compiled.advance(compiled.initial_state, b'{"sample_probe": "Oslo", "n": ')
    assert compiled.cached_token_mask(state) is not None


def test_the_batch_bitmask_is_made_when_the_backend_starts(config: Any, tokenizer: Any) -> None:
    backend = plugin.StructgenBackend(config, tokenizer=tokenizer, vocab_size=len(tokenizer))
    rows = config.scheduler_config.max_num_seqs
    made = backend.allocate_token_bitmask(rows)
    assert made.shape == (rows, (len(tokenizer) + 31) // 32) and made.dtype == torch.int32
    assert bool((made == -1).all())
    again = backend.allocate_token_bitmask(rows)  # (handed out once: a second is new)
    assert again.data_ptr() != made.data_ptr() and again.shape == made.shape
    other = backend.allocate_token_bitmask(3)
    assert other.shape == (3, made.shape[1]) and bool((other == -1).all())


def test_a_batch_gets_one_row_per_request(config: Any, tokenizer: Any, compiler: Compiler) -> None:
    manager = StructuredOutputManager(config)
    requests = {
        f"r{i}": _request(config, tokenizer, f"r{i}", structured)
        for i, (structured, _) in enumerate(CASES[:4])
    }
    own = {}
    for i, (structured, text) in enumerate(CASES[:4]):
        _ready(manager, requests[f"r{i}"])
        own[f"r{i}"] = Matcher(_own_compiled(compiler, structured))
        prefix = tokenizer.encode(text, add_special_tokens=False)[: i + 1]
        assert manager.accept_tokens(requests[f"r{i}"], prefix)
        assert own[f"r{i}"].accept_tokens(prefix) == len(prefix)
    order = ["r2", "r0", "r3", "r1"]
    bitmask = manager.grammar_bitmask(requests, order, {})
    for row, rid in enumerate(order):
        np.testing.assert_array_equal(bitmask[row], _row(own[rid], bitmask.shape[1]))


def test_a_refused_token_ends_the_request_as_vllm_expects(config: Any, tokenizer: Any) -> None:
    manager = StructuredOutputManager(config)
    request = _request(config, tokenizer, "r", {"regex": r"\d+"})
    _ready(manager, request)
    letter = tokenizer.encode("abc", add_special_tokens=False)
    assert manager.accept_tokens(request, letter) is False


def test_stop_token_ids_are_allowed_only_where_the_output_is_complete(
    config: Any, tokenizer: Any
) -> None:
    manager = StructuredOutputManager(config)
    newline = tokenizer.encode("\n", add_special_tokens=False)[0]
    params = SamplingParams(
        max_tokens=16,
        stop_token_ids=[newline],
        structured_outputs=StructuredOutputsParams(regex="[a-z\n]+"),
    )
    params.verify(config.model_config, None, config.structured_outputs_config, tokenizer)
    request = Request("s", [1, 2], params, None)
    _ready(manager, request)

    def allowed(token: int) -> bool:
        bitmask = manager.grammar_bitmask({"s": request}, ["s"], {})
        return bool((int(bitmask[0][token >> 5]) >> (token & 31)) & 1)

    assert not allowed(newline)  # a stop token, and the output is still empty
    assert manager.accept_tokens(request, tokenizer.encode("ab", add_special_tokens=False))
    assert allowed(newline)  # complete now: the stop token ends it, never as text
    assert manager.accept_tokens(request, [newline])
    assert request.structured_output_request.grammar.is_terminated()


# ----------------------------------------------------------------------------- speculation


def test_speculative_round_masks_each_draft_position_and_rolls_back(
    spec_config: Any, tokenizer: Any, compiler: Compiler
) -> None:
    manager = StructuredOutputManager(spec_config)
    request = _request(spec_config, tokenizer, "d", {"json": SCHEMA})
    grammar = _ready(manager, request)
    ids = tokenizer.encode(json.dumps({"name": "Bo", "age": 7}), add_special_tokens=False)
    assert manager.accept_tokens(request, ids[:2])
    drafts = ids[2:5]  # three valid draft tokens
    before = grammar.num_processed_tokens

    bitmask = manager.grammar_bitmask({"d": request}, ["d"], {"d": drafts})
    own = Matcher(compiler.json_schema(SCHEMA))
    own.accept_tokens(ids[:2])
    for position in range(len(drafts) + 1):  # one row per draft position plus the bonus token
        np.testing.assert_array_equal(bitmask[position], _row(own, bitmask.shape[1]))
        if position < len(drafts):
            own.accept_token(drafts[position])
    assert grammar.num_processed_tokens == before  # the manager rolled its advances back

    # vLLM's scheduler keeps the longest grammar-valid draft prefix, without advancing
    bad = tokenizer.encode("\n", add_special_tokens=False)[0]  # raw newline: never in a string
    assert manager.validate_tokens(request, [drafts[0], drafts[1], bad]) == drafts[:2]
    assert grammar.num_processed_tokens == before

    # the target accepts two drafts, then a rejected tail is rolled back by count
    assert manager.accept_tokens(request, drafts)
    grammar.rollback(1)
    own = Matcher(compiler.json_schema(SCHEMA))
    own.accept_tokens(ids[:4])
    after = manager.grammar_bitmask({"d": request}, ["d"], {})
    np.testing.assert_array_equal(after[0], _row(own, after.shape[1]))


def test_a_draft_the_grammar_refuses_keeps_the_last_valid_mask(
    spec_config: Any, tokenizer: Any, compiler: Compiler
) -> None:
    manager = StructuredOutputManager(spec_config)
    request = _request(spec_config, tokenizer, "d", {"regex": r"[0-9]{2,6}"})
    _ready(manager, request)
    digits = tokenizer.encode("12", add_special_tokens=False)
    letter = tokenizer.encode("x", add_special_tokens=False)[0]
    bitmask = manager.grammar_bitmask({"d": request}, ["d"], {"d": [digits[0], letter, digits[0]]})
    own = Matcher(compiler.regex(r"[0-9]{2,6}"))
    first = _row(own, bitmask.shape[1])
    own.accept_token(digits[0])
    second = _row(own, bitmask.shape[1])
    np.testing.assert_array_equal(bitmask[0], first)
    for row in (1, 2, 3):  # from the refused draft on, rows repeat the last valid state's mask
        np.testing.assert_array_equal(bitmask[row], second)


# ----------------------------------------------------------------------------- beam search


def test_offline_beam_search_builds_structgens_backend(config: Any, tokenizer: Any) -> None:
    from vllm.entrypoints.generate.beam_search import offline

    owner = next(
        obj
        for obj in vars(offline).values()
        if isinstance(obj, type) and hasattr(obj, "_init_beam_search_structured_output")
    )
    fake_llm = SimpleNamespace(
        llm_engine=SimpleNamespace(vllm_config=config), model_config=config.model_config
    )
    structured = StructuredOutputsParams(regex="(yes|no)")
    backend, key, bitmask = owner._init_beam_search_structured_output(
        fake_llm, structured, tokenizer
    )
    assert isinstance(backend, plugin.StructgenBackend)
    grammar = backend.compile_grammar(*key)
    assert grammar.accept_tokens("b", tokenizer.encode("yes", add_special_tokens=False))
    assert bitmask.shape[0] == 1


# ----------------------------------------------------------------------------- versions


def test_an_unverified_vllm_fails_loudly_unless_the_user_opts_in(
    config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import vllm

    monkeypatch.setattr(vllm, "__version__", "0.99.0")
    with pytest.raises(RuntimeError, match=r"verified against vLLM 0\.33\.0.*0\.99\.0"):
        StructuredOutputManager(config)
    monkeypatch.setenv(plugin.UNVERIFIED_ENV, "1")
    StructuredOutputManager(config)


# ----------------------------------------------------------------------------- reasoning


@pytest.fixture(scope="module")
def reasoning_config() -> Any:
    """The default model's config with Qwen3's tokenizer, its logits width and vLLM's `qwen3`
    reasoning parser (the manager needs the tokenizer's think tokens, not the weights)."""
    from structgen._assets import tokenizer_dir

    try:
        folder = tokenizer_dir("qwen3", fetch=False)
    except FileNotFoundError:
        from tests.conftest import missing

        missing("tokenizer fixture 'qwen3'")
    args = EngineArgs(
        model=str(default_model_dir()),
        tokenizer=str(folder),
        hf_overrides={"vocab_size": 151936},  # Qwen3's logits width (no forward runs here)
        structured_outputs_config={"backend": "structgen", "reasoning_parser": "qwen3"},
        max_model_len=512,
        max_num_seqs=8,
        enforce_eager=True,
    )
    return args.create_engine_config()


def test_the_reasoning_parser_keeps_the_think_block_out_of_structgens_grammar(
    reasoning_config: Any,
) -> None:
    """As for vLLM's own backends: while the model thinks, rows allow everything and the
    grammar is not advanced; from the first token after `</think>` the masks are structgen's."""
    tokenizer = cached_tokenizer_from_config(reasoning_config.model_config)
    manager = StructuredOutputManager(reasoning_config)
    request = _request(reasoning_config, tokenizer, "think", {"json": SCHEMA})
    grammar = _ready(manager, request)
    size = max(reasoning_config.model_config.get_vocab_size(), len(tokenizer))
    own = Matcher(Compiler(Vocabulary.from_hf(tokenizer, size)).json_schema(SCHEMA))
    think = tokenizer.encode(
        "<think>\nsix times seven { not json\n</think>", add_special_tokens=False
    )
    assert tokenizer.convert_tokens_to_ids("</think>") == think[-1]
    answer = tokenizer.encode(json.dumps({"name": "Ada", "age": 42}), add_special_tokens=False)
    for token in think:
        bitmask = manager.grammar_bitmask({"think": request}, ["think"], {})
        if bitmask is not None:  # everything, less the few implicit reasoning ends vLLM masks
            bits = np.unpackbits(bitmask[0].view(np.uint8), bitorder="little")
            assert bits[token] and (bits[: len(tokenizer)] == 0).sum() < 16
        request.append_output_token_ids(token)
        assert manager.accept_tokens(request, [token])
    assert len(grammar.matcher._history) == 1  # nothing of the block reached the grammar
    for token in [*answer, tokenizer.eos_token_id]:
        bitmask = manager.grammar_bitmask({"think": request}, ["think"], {})
        assert bitmask is not None
        np.testing.assert_array_equal(bitmask[0], _row(own, bitmask.shape[1]))
        request.append_output_token_ids(token)
        assert manager.accept_tokens(request, [token])
        assert own.accept_token(token)
    assert grammar.is_terminated()
