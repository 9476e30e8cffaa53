"""Quantized weights in the own loop, and quantized copies of the target as speculative drafts.

Side by side in one run on one model (the default SmolLM2-135M-Instruct): weight bytes, time to
first token and time per output token (medians over rounds, greedy) for fp32, int8 and int4
weights (on a GPU also bf16, and int8/int4 through torchao; int4 there runs in bf16), KV-cache
bytes and TPOT at ~1,000 tokens for the fp32 and the int8 cache, how many greedy outputs of the
prompts each leaves unchanged, the perplexity of a fixed text, and speculative decoding with the
int8 and int4 drafts (acceptance rate, speed-up over plain decoding) on an extraction prompt
(constrained) and a free-text one. `structgen bench generate`
prints this table too; alone: `python benchmarks/quantization.py [--rounds 3] [--tokens 48]
[--device cuda]`.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import time
from typing import Any

from _common import RESULTS, fmt, print_table

from structgen import Compiler, Generator, SamplingParams
from structgen.generate import SpeculativeGenerator, weight_bytes

PROMPTS = [
    "Why is the sky blue?",
    "Write a short poem about the sea.",
    "List three uses of a paperclip.",
    "Explain what a hash table is.",
    "Give me a recipe idea for dinner.",
    "What should I pack for a weekend hike?",
]
EXTRACTION = (
    "Extract the person as JSON: 'Ann Smith is a 31-year-old nurse from Lyon who joined the "
    "hospital in 2015.'"
)
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "city": {"type": "string"},
        "job": {"type": "string"},
    },
    "required": ["name", "age", "city", "job"],
}
TEXT = (
    "The city of Lyon lies at the meeting of two rivers, the Rhone and the Saone, in the east of "
    "France. For centuries it was a center of silk weaving, and the narrow covered passages that "
    "the weavers used to carry their cloth through the old town can still be walked today."
)


def perplexity(model: Any, tokenizer: Any) -> float:
    import torch

    ids = tokenizer(TEXT, return_tensors="pt").input_ids.to(next(model.parameters()).device)
    with torch.inference_mode():
        return math.exp(float(model(ids, labels=ids).loss))


def timings(gen: Generator, rounds: int, tokens: int) -> dict[str, float]:
    """Median TTFT and TPOT of greedy free text over the prompts, `rounds` times."""
    ttft: list[float] = []
    tpot: list[float] = []
    params = SamplingParams(max_new_tokens=tokens)
    for _ in range(rounds):
        for prompt in PROMPTS:
            m = gen.generate(prompt, params, chat=True).metrics
            ttft.append(m.time_to_first_token * 1000)
            if m.output_tokens > 1:
                tpot.append(m.time_per_output_token * 1000)
    return {"ttft_ms": statistics.median(ttft), "tpot_ms": statistics.median(tpot)}


def speculative(gen: Generator, draft: Any, rounds: int, tokens: int) -> list[dict[str, Any]]:
    grammar = Compiler(gen.vocab).json_schema(PERSON)
    spec = SpeculativeGenerator(gen, draft, k=4)
    rows = []
    for label, prompt, g in (
        ("extraction (schema)", EXTRACTION, grammar),
        ("free text", PROMPTS[0], None),
    ):
        params = SamplingParams(max_new_tokens=tokens)
        plain_s, spec_s, rates = [], [], []
        same = True
        for _ in range(rounds):
            started = time.perf_counter()
            plain = gen.generate(prompt, params, grammar=g, chat=True)
            plain_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            result = spec.generate(prompt, params, grammar=g, chat=True)
            spec_s.append(time.perf_counter() - started)
            rates.append(result.metrics.acceptance_rate)
            same = same and result.token_ids == plain.token_ids
        rows.append(
            {
                "prompt": label,
                "acceptance": statistics.median(rates),
                "plain_s": statistics.median(plain_s),
                "speculative_s": statistics.median(spec_s),
                "speed_up": statistics.median(plain_s) / statistics.median(spec_s),
                "token_identical": same,
            }
        )
    return rows


LONG = "Here is a long context about bread, bakeries and the history of baking in Europe. " * 55


def kv_cache_rows(model: Any, tokenizer: Any, rounds: int, tokens: int) -> list[dict[str, Any]]:
    """KV-cache bytes after a ~1,000-token prompt, and TPOT there, per cache type."""
    import torch

    from structgen.generate.model_io import ForwardKeywords
    from structgen.generate.quantize import cache_bytes

    rows = []
    for mode in (None, "int8"):
        gen = Generator(model, tokenizer, prefix_cache=0, kv_cache=mode)
        cache = gen._runner.new_cache()
        ids = torch.tensor([gen.encode(LONG)], device=gen.device)
        with torch.inference_mode():
            model(ids, **{ForwardKeywords.of(model).cache: cache}, use_cache=True)
        params = SamplingParams(max_new_tokens=tokens)
        tpot = []
        for _ in range(rounds):
            m = gen.generate(LONG + "Summarize.", params, chat=True).metrics
            tpot.append(m.time_per_output_token * 1000)
        rows.append({"kv_cache": mode or "fp32", "context_tokens": int(ids.shape[1]),
                     "cache_MB": cache_bytes(cache) / 2**20,
                     "tpot_ms": statistics.median(tpot)})  # fmt: skip
    for row in rows:
        row["bytes_vs_fp32"] = row["cache_MB"] / rows[0]["cache_MB"]
        row["tpot_vs_fp32"] = row["tpot_ms"] / rows[0]["tpot_ms"]
    return rows


def _cells(row: dict[str, Any]) -> list[Any]:
    return [fmt(v) if isinstance(v, float) else v for v in row.values()]


def quantization(
    model: Any, tokenizer: Any, rounds: int = 3, tokens: int = 48, modes: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The whole comparison; prints its tables and returns the figures."""
    import torch

    from structgen.generate.quantize import int4_available

    on_cpu = next(model.parameters()).device.type == "cpu"
    fp32 = Generator(model, tokenizer, prefix_cache=0)
    runs = [("fp32", fp32)]
    if not on_cpu:  # (the dtype a GPU usually runs; int4 there is bf16 too)
        bf16 = copy.deepcopy(model).to(torch.bfloat16)
        runs.append(("bf16", Generator(bf16, tokenizer, prefix_cache=0)))
    if not modes:
        modes = ("int8", "int4") if int4_available() or not on_cpu else ("int8",)
    for mode in modes:
        quantized = Generator(copy.deepcopy(model), tokenizer, prefix_cache=0, quantize=mode)
        runs.append((mode, quantized))
    rows = []
    greedy: dict[str, list[tuple[int, ...]]] = {}
    for name, gen in runs:
        gen.generate("Hi", SamplingParams(max_new_tokens=2))  # warm up
        row: dict[str, Any] = {"weights": name, "weight_MB": weight_bytes(gen.model) / 2**20}
        row.update(timings(gen, rounds, tokens))
        row["perplexity"] = perplexity(gen.model, tokenizer)
        rows.append(row)
        params = SamplingParams(max_new_tokens=tokens)
        greedy[name] = [gen.generate(p, params, chat=True).token_ids for p in PROMPTS]
    unchanged = {
        name: sum(a == b for a, b in zip(greedy["fp32"], greedy[name])) for name, _ in runs[1:]
    }
    base = rows[0]
    for row in rows:
        row["bytes_vs_fp32"] = row["weight_MB"] / base["weight_MB"]
        row["tpot_vs_fp32"] = row["tpot_ms"] / base["tpot_ms"]
        row["perplexity_vs_fp32_pct"] = 100 * (row["perplexity"] / base["perplexity"] - 1)
    print_table(list(rows[0]), [_cells(r) for r in rows])
    for name, count in unchanged.items():
        print(f"greedy outputs ({tokens} tokens) {name} leaves unchanged: {count}/{len(PROMPTS)}")
    print("\nKV cache (fp32 weights, a ~1,000-token prompt):")
    kv = kv_cache_rows(model, tokenizer, rounds, tokens)
    print_table(list(kv[0]), [_cells(r) for r in kv])
    out = {"weights": rows, "greedy_unchanged": unchanged, "prompts": len(PROMPTS), "kv_cache": kv}
    for mode, _ in runs[1:]:
        if mode == "bf16":
            continue
        print(f"\nSpeculative decoding, {mode} copy of the target as the draft (k=4, greedy):")
        spec = speculative(fp32, mode, rounds, tokens)
        print_table(list(spec[0]), [_cells(r) for r in spec])
        out[f"speculative_{mode}"] = spec
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (quantized through torchao)")
    parser.add_argument("--modes", default="", help="comma-separated (default: int8,int4)")
    args = parser.parse_args()
    import torch

    from structgen._assets import load_default_model

    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_default_model(device=args.device)
    where = "the CPU" if args.device == "cpu" else torch.cuda.get_device_name()
    print(f"default model on {where}, {torch.get_num_threads()} threads, {args.rounds} rounds\n")
    modes = tuple(m for m in args.modes.split(",") if m)
    out = quantization(model, tokenizer, args.rounds, args.tokens, modes)
    out["device"] = where
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / ("quantization.json" if args.device == "cpu" else "quantization-cuda.json")
    path.write_text(json.dumps(out, indent=1, default=float) + "\n", encoding="utf-8")
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
