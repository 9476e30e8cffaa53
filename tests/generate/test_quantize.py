"""Weight-only int8 and int4 (`quantize=`) on the real default model — on the CPU with torch's
kernels, through torchao (the GPU backend, also on the CPU), and on a GPU where there is one: a
quarter of the weight bytes, perplexity within 2% of fp32's, constrained outputs valid, the
quantized copy as an exact speculative draft, and the int8 KV cache."""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import math
from typing import Any

import jsonschema
import pytest
import torch

from structgen import Compiler, GenerationError, Generator, SamplingParams, Scheduler
from structgen.generate import SpeculativeGenerator, quantize_weights, quantized_draft, weight_bytes
from structgen.generate.model_io import ForwardKeywords
from structgen.generate.quantize import cache_bytes
from tests.generate.test_generator import PERSON
from tests.generate.test_generator import model_and_tokenizer as _model_and_tokenizer
from tests.generate.test_speculative import assert_two_letters_follow, exact_distribution

pytestmark = pytest.mark.slow

TEXT = (
    "The city of Lyon lies at the meeting of two rivers, the Rhone and the Saone, in the east "
    "of France. For centuries it was a center of silk weaving, and the narrow covered passages "
    "that the weavers used to carry their cloth through the old town can still be walked today. "
    "Visitors often start on the hill of Fourviere, where a basilica looks down over the red "
    "roofs, and then descend through the Renaissance quarter to the river banks. The food of the "
    "region is famous: small restaurants called bouchons serve sausages, dumplings and salads "
    "with a glass of local wine. In December the whole city is lit by candles and projections "
    "during the Festival of Lights, which draws millions of people every year. Students come for "
    "the universities, engineers for the industries of chemistry and medicine, and many people "
    "simply stay because life there is calm, the markets are good and the mountains are close. "
    "When the weather is fine, families walk along the parks by the water, children ride their "
    "bicycles, and old friends meet in the squares to talk about the news of the day."
)


@functools.cache
def fp32_model() -> Any:
    return _model_and_tokenizer()[0]


@functools.cache
def int8_generator() -> Generator:
    model, tokenizer = _model_and_tokenizer()
    return Generator(copy.deepcopy(model), tokenizer, prefix_cache=None, quantize="int8")


def perplexity(model: Any) -> float:
    tokenizer = _model_and_tokenizer()[1]
    ids = tokenizer(TEXT, return_tensors="pt").input_ids.to(next(model.parameters()).device)
    with torch.inference_mode():
        return math.exp(float(model(ids, labels=ids).loss))


def test_int8_holds_a_quarter_of_the_weight_bytes_and_keeps_the_perplexity() -> None:
    gen = int8_generator()
    assert gen.quantize == "int8"
    assert weight_bytes(gen.model) <= 0.35 * weight_bytes(fp32_model())
    base, quantized = perplexity(fp32_model()), perplexity(gen.model)
    assert abs(quantized / base - 1) < 0.02, (base, quantized)


def assert_sampled_people_are_valid(gen: Generator, *, seeds: int) -> Any:
    """Sampled constrained outputs end and are valid (they are by construction); returns the
    grammar."""
    grammar = Compiler(gen.vocab).json_schema(PERSON)
    for seed in range(seeds):
        params = SamplingParams(max_new_tokens=60, temperature=0.9, seed=seed)
        result = gen.generate("A person as JSON.", params, grammar=grammar, chat=True)
        assert result.finish_reason == "eos", result.text
        jsonschema.validate(json.loads(result.text), PERSON)
    return grammar


def test_constrained_outputs_stay_valid() -> None:
    assert_sampled_people_are_valid(int8_generator(), seeds=3)


def test_the_int8_draft_keeps_the_target_distribution() -> None:
    """The chi-square check of speculative decoding, with the int8 copy as the draft."""
    model, tokenizer = _model_and_tokenizer()
    gen = Generator(model, tokenizer, prefix_cache=None)
    g = Compiler(gen.vocab).regex("[ab]{2}")
    prompt = gen.encode("Two letters:")
    expected = exact_distribution(model, prompt, g, temperature=1.0)
    spec = SpeculativeGenerator(gen, "int8", k=2)
    assert weight_bytes(model) == weight_bytes(fp32_model())  # the target is untouched
    assert_two_letters_follow(spec, prompt, g, expected)


def assert_greedy_draft_is_exact(mode: str, grammar: Any = None) -> None:
    """Greedy decoding with a `mode` copy of the target as the draft gives the target's own
    tokens (a JSON person), and the draft is accepted at least half the time."""
    model, tokenizer = _model_and_tokenizer()
    target = Generator(model, tokenizer, prefix_cache=None)
    if grammar is None:
        grammar = Compiler(target.vocab).json_schema(PERSON)
    params = SamplingParams(max_new_tokens=40)
    plain = target.generate("A person as JSON.", params, grammar=grammar, chat=True)
    spec = SpeculativeGenerator(target, mode, k=4)
    result = spec.generate("A person as JSON.", params, grammar=grammar, chat=True)
    assert result.token_ids == plain.token_ids
    assert result.metrics.acceptance_rate >= 0.5, result.metrics


def test_greedy_int8_draft_is_token_identical_and_mostly_accepted() -> None:
    assert_greedy_draft_is_exact("int8")


def test_bad_modes_and_devices() -> None:
    with pytest.raises(GenerationError, match="quantize must be one of"):
        quantize_weights(torch.nn.Sequential(torch.nn.Linear(2, 2)), "int3")
    gen = int8_generator()
    with pytest.raises(GenerationError, match="quantized already"):
        quantized_draft(gen.model)
    with pytest.raises(GenerationError, match="draft: a causal LM"):
        SpeculativeGenerator(gen, "int2")


def test_a_prefix_cache_hit_is_token_identical_to_a_cold_run() -> None:
    tokenizer = _model_and_tokenizer()[1]
    gen = Generator(int8_generator().model, tokenizer, prefix_cache=4)
    assert gen.quantize == "int8"
    shared = "Here is a long shared context about bread and bakeries. " * 12
    params = SamplingParams(max_new_tokens=16)
    cold = gen.generate(shared + "Name one bread.", params, chat=True)
    warm = gen.generate(shared + "Name one bread.", params, chat=True)
    assert warm.metrics.cached_prompt_tokens > 0
    assert warm.token_ids == cold.token_ids


# ----------------------------------------------------------------------------- int4 weights


needs_int4 = pytest.mark.skipif(
    not __import__("structgen.generate.quantize", fromlist=["_"]).int4_available(),
    reason="this torch has no CPU int4 kernel",
)


@functools.cache
def int4_generator() -> Generator:
    model, tokenizer = _model_and_tokenizer()
    return Generator(copy.deepcopy(model), tokenizer, prefix_cache=None, quantize="int4")


@needs_int4
def test_an_int4_layer_computes_with_its_dequantized_weights() -> None:
    from structgen.generate.quantize import INT4_GROUP, Int4Linear, _int4_groups

    torch.manual_seed(0)
    linear = torch.nn.Linear(128, 64)
    layer = Int4Linear(linear)
    codes, scales_and_zeros = _int4_groups(linear.weight, INT4_GROUP)
    sz = scales_and_zeros.float().transpose(0, 1)  # [N, K / group, 2]
    groups = codes.reshape(64, -1, INT4_GROUP).float() - 8
    weight = (groups * sz[..., :1] + sz[..., 1:]).reshape(64, 128)
    x = torch.randn(5, 128)
    expected = x @ weight.t() + linear.bias
    assert torch.allclose(layer(x), expected, atol=0.05, rtol=0.02)
    # and it is a 4-bit approximation of the original layer
    assert (layer(x) - linear(x)).abs().mean() < 0.1 * linear(x).abs().mean()


@needs_int4
def test_int4_holds_under_a_fifth_of_the_weight_bytes_and_keeps_the_perplexity() -> None:
    """The default model's GGUF weights are quantized already (in groups of 32), so 4-bit
    groups of 32 find them again almost exactly: the perplexity barely moves."""
    gen = int4_generator()
    assert gen.quantize == "int4"
    assert weight_bytes(gen.model) <= 0.20 * weight_bytes(fp32_model())
    base, quantized = perplexity(fp32_model()), perplexity(gen.model)
    assert abs(quantized / base - 1) < 0.02, (base, quantized)


@needs_int4
def test_int4_outputs_stay_valid_and_its_draft_is_exact() -> None:
    grammar = assert_sampled_people_are_valid(int4_generator(), seeds=2)
    assert_greedy_draft_is_exact("int4", grammar)


# ----------------------------------------------------------------------------- int8 KV cache

LONG = "Here is a long context about bread, bakeries and the history of baking in Europe. " * 55


@functools.cache
def int8_cache_generator(prefix_cache: int = 0) -> Generator:
    model, tokenizer = _model_and_tokenizer()
    return Generator(model, tokenizer, prefix_cache=prefix_cache, kv_cache="int8")


def filled_cache_bytes(gen: Generator) -> int:
    cache = gen._runner.new_cache()
    ids = torch.tensor([gen.encode(LONG)], device=gen.device)
    keyword = ForwardKeywords.of(gen.model).cache
    with torch.inference_mode():
        gen.model(ids, **{keyword: cache}, use_cache=True)
    assert ids.shape[1] >= 900
    return cache_bytes(cache)


def test_an_int8_cache_holds_under_30_percent_of_the_bytes_at_1000_tokens() -> None:
    model, tokenizer = _model_and_tokenizer()
    fp32 = Generator(model, tokenizer, prefix_cache=0)
    assert filled_cache_bytes(int8_cache_generator()) <= 0.30 * filled_cache_bytes(fp32)


def test_an_int8_cache_keeps_constrained_outputs_valid_and_prefix_hits_identical() -> None:
    gen = int8_cache_generator(4)
    grammar = Compiler(gen.vocab).json_schema(PERSON)
    params = SamplingParams(max_new_tokens=60)
    prompt = LONG + "Now a person as JSON."
    cold = gen.generate(prompt, params, grammar=grammar, chat=True)
    jsonschema.validate(json.loads(cold.text), PERSON)
    warm = gen.generate(prompt, params, grammar=grammar, chat=True)
    assert warm.metrics.cached_prompt_tokens > 0
    assert warm.token_ids == cold.token_ids


def test_continuous_batching_with_an_int8_cache_is_token_identical_to_alone() -> None:
    gen = int8_cache_generator()
    params = SamplingParams(max_new_tokens=12)
    prompts = ["Name a bread.", "What is rye?", "Say hello."]
    alone = [gen.generate(p, params, chat=True).token_ids for p in prompts]
    scheduler = Scheduler(gen)
    handles = [scheduler.submit(prompts[0], params, chat=True)]
    scheduler.step()
    scheduler.step()
    handles += [scheduler.submit(p, params, chat=True) for p in prompts[1:]]
    while scheduler.active or scheduler.pending:
        scheduler.step()
    assert [h.result().token_ids for h in handles] == alone


def test_bad_cache_modes() -> None:
    model, tokenizer = _model_and_tokenizer()
    with pytest.raises(GenerationError, match="kv_cache must be one of"):
        Generator(model, tokenizer, kv_cache="int4")


# ------------------------------------------------------------------ torchao (the GPU backend)

needs_torchao = pytest.mark.skipif(
    importlib.util.find_spec("torchao") is None, reason="torchao is not installed (the gpu extra)"
)


@needs_torchao
def test_weight_bytes_counts_what_a_quantized_tensor_holds() -> None:
    """torchao's tensors report their original dtype and shape; the bytes are those inside."""
    layer = torch.nn.Sequential(torch.nn.Linear(64, 32))
    quantize_weights(layer, "int8", backend="torchao")
    weight = layer[0].weight
    assert type(weight).__name__ == "Int8Tensor"
    parts = [getattr(weight, name) for name in weight.__tensor_flatten__()[0]]
    assert any(t.dtype == torch.int8 and t.shape == (32, 64) for t in parts)
    inside = sum(t.numel() * t.element_size() for t in [*parts, layer[0].bias])
    assert weight_bytes(layer) == inside
    assert weight_bytes(layer) < 32 * 64 * 2  # (under bf16's bytes: int8 and a scale per row)


@needs_torchao
def test_torchao_int8_on_the_cpu_keeps_the_bytes_the_perplexity_and_valid_outputs() -> None:
    """The GPU backend's int8, run where CI runs it: the same bytes and perplexity targets."""
    model, tokenizer = _model_and_tokenizer()
    gen = Generator(copy.deepcopy(model), tokenizer, prefix_cache=None)
    quantize_weights(gen.model, "int8", backend="torchao")
    assert gen.model.structgen_quantize_backend == "torchao"
    assert weight_bytes(gen.model) <= 0.35 * weight_bytes(fp32_model())
    base, quantized = perplexity(fp32_model()), perplexity(gen.model)
    assert abs(quantized / base - 1) < 0.02, (base, quantized)
    assert_sampled_people_are_valid(gen, seeds=1)


def test_backends_refuse_what_they_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = torch.nn.Sequential(torch.nn.Linear(64, 32))
    with pytest.raises(GenerationError, match="backend must be one of"):
        quantize_weights(layer, "int8", backend="bitsandbytes")
    on_meta = torch.nn.Sequential(torch.nn.Linear(64, 32, device="meta"))
    with pytest.raises(GenerationError, match=r"torch's kernels runs on the CPU.*torchao"):
        quantize_weights(on_meta, "int8", backend="torch")
    monkeypatch.setitem(__import__("sys").modules, "torchao.quantization", None)
    with pytest.raises(GenerationError, match=r"pip install 'structgen\[gpu\]'"):
        quantize_weights(layer, "int8", backend="torchao")
    with pytest.raises(GenerationError, match=r"structgen\[gpu\]"):
        quantize_weights(on_meta, "int4")  # (not the CPU: torchao is the default)


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@functools.cache
def cuda_model() -> Any:
    return copy.deepcopy(fp32_model()).to("cuda")


@functools.cache
def cuda_generator(mode: str | None, kv_cache: str | None = None) -> Generator:
    tokenizer = _model_and_tokenizer()[1]
    model = cuda_model() if mode is None else copy.deepcopy(cuda_model())
    return Generator(model, tokenizer, prefix_cache=4, quantize=mode, kv_cache=kv_cache)


@needs_cuda
@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_on_a_gpu_torchao_keeps_the_bytes_the_perplexity_and_valid_outputs(mode: str) -> None:
    gen = cuda_generator(mode)
    assert gen.model.structgen_quantize_backend == "torchao"
    assert weight_bytes(gen.model) <= 0.35 * weight_bytes(cuda_model())
    base, quantized = perplexity(cuda_model()), perplexity(gen.model)
    assert abs(quantized / base - 1) < 0.02, (base, quantized)
    assert_sampled_people_are_valid(gen, seeds=2)


@needs_cuda
def test_on_a_gpu_the_int8_draft_is_exact() -> None:
    """Greedy: token-identical and mostly accepted; sampled: the chi-square test of the target's
    distribution (computed on the CPU's fp32 copy of the same weights)."""
    target = cuda_generator(None)
    grammar = Compiler(target.vocab).json_schema(PERSON)
    params = SamplingParams(max_new_tokens=40)
    plain = target.generate("A person as JSON.", params, grammar=grammar, chat=True)
    spec = SpeculativeGenerator(target, "int8", k=4)
    result = spec.generate("A person as JSON.", params, grammar=grammar, chat=True)
    assert result.token_ids == plain.token_ids
    assert result.metrics.acceptance_rate >= 0.5, result.metrics
    g = Compiler(target.vocab).regex("[ab]{2}")
    prompt = target.encode("Two letters:")
    expected = exact_distribution(fp32_model(), prompt, g, temperature=1.0)
    assert_two_letters_follow(SpeculativeGenerator(target, "int8", k=2), prompt, g, expected)


@needs_cuda
def test_on_a_gpu_the_int8_cache_saves_bytes_and_prefix_hits_are_identical() -> None:
    gen = cuda_generator(None, "int8")
    assert filled_cache_bytes(gen) <= 0.30 * filled_cache_bytes(cuda_generator(None))
    params = SamplingParams(max_new_tokens=24)
    prompt = LONG + "Now a person as JSON."
    grammar = Compiler(gen.vocab).json_schema(PERSON)
    cold = gen.generate(prompt, params, grammar=grammar, chat=True)
    warm = gen.generate(prompt, params, grammar=grammar, chat=True)
    assert warm.metrics.cached_prompt_tokens > 0
    assert warm.token_ids == cold.token_ids
