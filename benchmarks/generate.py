"""Generation: time per output token (TPOT) and tokens/s, unconstrained vs constrained, in
structgen's own loop and through `model.generate` (structgen's, llguidance's and xgrammar's logits
processors), TTFT with and without the prefix cache, forward passes saved by jump forward.

Default model (SmolLM2-135M-Instruct). Constraints are JSON schemas from ../shared/maskbench-dev
(the first ones, by name, that all three engines compile), one per row, cycling through the
batch. Unconstrained rows ignore EOS so every row produces `--tokens` tokens; constrained rows
stop when their schema is complete (or at `--tokens`).

TPOT is the mean gap between a request's output tokens after the first (the own loop measures it
per request; for `model.generate` a last logits processor records when each step's logits
arrive). tokens/s is all output tokens of the batch over the batch's wall time.

Targets (issue 6): constrained TPOT within 5% of unconstrained in the own loop at batch 1 and 8;
structgen's processor overhead no larger than the peers'; the prefix cache cutting the TTFT of a
second request sharing a 1,000-token prefix by at least 3x.

Run: `python benchmarks/generate.py [--batches 1,8,32] [--tokens 16] [--schemas 4] [--repeats 3]
[--device cpu|cuda]`. Writes `benchmarks/results/generate.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from _common import RESULTS, fmt, peer, print_table
from peers import LLGuidanceProcessors, XGrammarProcessors
from quantization import quantization

import structgen as sg
from structgen import Compiler, Generator, LogitsProcessor, SamplingParams

SCHEMAS = Path(__file__).resolve().parents[2] / "shared" / "maskbench-dev"
NAME_JSON = r'\{"name": "[a-z]+"\}'
PREFIX_SENTENCES = (
    "You are the support assistant of Northwind Outfitters, a shop for hiking and camping gear.",
    "Answer briefly and politely; never invent prices, stock levels or delivery dates.",
    "Orders ship from Lyon within two working days; returns are free within thirty days.",
    "Tents, sleeping bags, stoves, backpacks and boots are the main product lines.",
    "When a customer is upset, apologise once and offer a concrete next step.",
    "Escalate warranty claims older than two years to a human agent by email.",
)

# ---------------------------------------------------------------------------------- setup


def pick_schemas(
    vocab: sg.Vocabulary, count: int, engines: dict[str, Any], folder: Path = SCHEMAS
) -> list[Any]:
    """The first `count` maskbench-dev schemas (by name) that every installed engine compiles."""
    compiler = Compiler(vocab)
    chosen: list[Any] = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        if data.get("meta", {}).get("stripped_size", 10**9) > 1500:
            continue
        schema = data["schema"]
        try:
            compiler.json_schema(schema)
            for engine in engines.values():
                engine.check(schema)
        except Exception:  # an engine cannot compile it: skip the schema
            continue
        chosen.append((path.stem, schema))
        if len(chosen) == count:
            break
    return chosen


class Timer:
    """A last logits processor: records when each step's logits are ready."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        self.times.append(time.perf_counter())
        return scores


# ---------------------------------------------------------------------------------- runs


def own_run(gen: Generator, prompts: list[list[int]], params: Any, grammars: Any) -> dict[str, Any]:
    start = time.perf_counter()
    results = gen.generate_batch(prompts, params, grammars=grammars, use_prefix_cache=False)
    wall = time.perf_counter() - start
    out = sum(r.metrics.output_tokens for r in results)
    return {
        "tpot_ms": 1000 * statistics.mean(r.metrics.time_per_output_token for r in results),
        "ttft_ms": 1000 * statistics.mean(r.metrics.time_to_first_token for r in results),
        "tokens_per_s": out / wall,
        "output_tokens": out,
        "forced_tokens": sum(r.metrics.forced_tokens for r in results),
    }


def hf_run(
    model: Any, tokenizer: Any, prompts: list[list[int]], tokens: int, processor: Any
) -> dict[str, Any]:
    import torch

    pad = tokenizer.pad_token_id
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=model.device)
    mask = torch.tensor(
        [[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device
    )
    timer = Timer()
    extra = {"min_new_tokens": tokens} if processor is None else {}
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=tokens,
            do_sample=False,
            logits_processor=[p for p in (processor, timer) if p is not None],
            pad_token_id=pad,
            **extra,
        )
    wall = time.perf_counter() - start
    new = out[:, width:]
    produced = 0
    for row in new.tolist():
        produced += row.index(pad) + 1 if pad in row else len(row)
    steps = len(timer.times)
    tpot = (timer.times[-1] - timer.times[0]) / (steps - 1) if steps > 1 else float("nan")
    return {
        "tpot_ms": 1000 * tpot,
        "ttft_ms": 1000 * (timer.times[0] - start),
        "tokens_per_s": produced / wall,
        "output_tokens": produced,
    }


def throughput(args: argparse.Namespace, ctx: dict[str, Any]) -> list[dict[str, Any]]:
    gen, model, tok = ctx["gen"], ctx["model"], ctx["tok"]
    schemas, compiled, peers = ctx["schemas"], ctx["compiled"], ctx["peers"]
    rows: list[dict[str, Any]] = []
    jf_off = Generator(model, tok, prefix_cache=0, jump_forward=False)
    for batch in args.batches:
        picks = [i % len(schemas) for i in range(batch)]
        prompts = [ctx["prompts"][i] for i in picks]
        free = SamplingParams(max_new_tokens=args.tokens, ignore_eos=True)
        bound = SamplingParams(max_new_tokens=args.tokens)
        grammars = [compiled[i] for i in picks]
        row_schemas = [schemas[i][1] for i in picks]
        labels = [
            "own loop",
            "own loop + schema (no jump fwd)",
            "own loop + schema",
            "model.generate",
            "model.generate + structgen",
            *(f"model.generate + {name}" for name in peers),
        ]
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
        # Rounds over every path, so slow drifts of a shared machine hit them all alike; each
        # path's figures are the medians over the rounds (one run each was noise-bound: +15%
        # and 0% for the same path on the same quiet CPU).
        for _ in range(args.repeats):
            for label in labels:
                if label == "own loop":
                    result = own_run(gen, prompts, free, None)
                elif label == "own loop + schema (no jump fwd)":
                    result = own_run(jf_off, prompts, bound, grammars)
                elif label == "own loop + schema":
                    result = own_run(gen, prompts, bound, grammars)
                elif label == "model.generate":
                    result = hf_run(model, tok, prompts, args.tokens, None)
                elif label == "model.generate + structgen":
                    result = hf_run(model, tok, prompts, args.tokens, LogitsProcessor(grammars))
                else:
                    engine = peers[label.rsplit(" ", 1)[1]]
                    result = hf_run(model, tok, prompts, args.tokens, engine.processor(row_schemas))
                runs[label].append(result)
        for label in labels:
            result = {key: statistics.median(r[key] for r in runs[label]) for key in runs[label][0]}
            result.update(path=label, batch=batch, runs=len(runs[label]))
            rows.append(result)
            print(
                f"  batch {batch:>2}  {label:<34} TPOT {fmt(result['tpot_ms']):>6} ms  "
                f"{fmt(result['tokens_per_s']):>6} tok/s  (median of {len(runs[label])})",
                flush=True,
            )
    return rows


def prefix_ttft(ctx: dict[str, Any], repeats: int) -> dict[str, Any]:
    model, tok = ctx["model"], ctx["tok"]
    probe = Generator(model, tok, prefix_cache=0)
    system, n = "", 0
    while n < 1000:
        system += " ".join(PREFIX_SENTENCES) + " "
        n = len(
            probe.encode([{"role": "system", "content": system}, {"role": "user", "content": "x"}])
        )
    questions = [
        "Can I return boots I wore once?",
        "Do you ship to Belgium?",
        "Which stove is lightest?",
        "My tent pole broke after three years. What now?",
        "Is the 40 litre backpack waterproof?",
    ][: repeats + 1]
    prompts = [
        probe.encode([{"role": "system", "content": system}, {"role": "user", "content": q}])
        for q in questions
    ]
    params = SamplingParams(max_new_tokens=2)
    probe.generate(prompts[0], params)  # warm up
    cached = Generator(model, tok, prefix_cache=4)
    first = cached.generate(prompts[0], params).metrics  # a miss: prefills and stores the prefix
    without, later = [], []
    for prompt in prompts[1:]:  # interleaved, so load changes on a shared machine hit both
        without.append(probe.generate(prompt, params).metrics.time_to_first_token)
        later.append(cached.generate(prompt, params).metrics)
    result = {
        "prompt_tokens": len(prompts[1]),
        "cached_tokens": later[0].cached_prompt_tokens,
        "ttft_no_cache_ms": 1000 * statistics.median(without),
        "ttft_first_request_ms": 1000 * first.time_to_first_token,
        "ttft_cached_ms": 1000 * statistics.median(m.time_to_first_token for m in later),
    }
    result["speedup"] = result["ttft_no_cache_ms"] / result["ttft_cached_ms"]
    return result


def jump_forward(ctx: dict[str, Any], tokens: int) -> list[dict[str, Any]]:
    model, tok, gen = ctx["model"], ctx["tok"], ctx["gen"]
    off = Generator(model, tok, prefix_cache=0, jump_forward=False)
    cases = [("regex " + NAME_JSON, ctx["name_prompt"], Compiler(gen.vocab).regex(NAME_JSON))]
    cases += [
        (name, ctx["prompts"][i], ctx["compiled"][i]) for i, (name, _) in enumerate(ctx["schemas"])
    ]
    rows = []
    params = SamplingParams(max_new_tokens=max(tokens, 48))
    for label, prompt, grammar in cases:
        on = gen.generate(prompt, params, grammar=grammar, use_prefix_cache=False).metrics
        plain = off.generate(prompt, params, grammar=grammar, use_prefix_cache=False).metrics
        rows.append(
            {
                "constraint": label,
                "output_tokens": on.output_tokens,
                "forced_tokens": on.forced_tokens,
                "passes_with_jump": on.forward_passes,
                "passes_without": plain.forward_passes,
                "saved": plain.forward_passes - on.forward_passes,
            }
        )
    return rows


# ---------------------------------------------------------------------------------- main


def load_model_dir(folder: Path, device: str) -> tuple[Any, Any, str]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    if (folder / "model.safetensors").is_file():
        model = AutoModelForCausalLM.from_pretrained(str(folder))
        weights = "trained"
    else:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(folder)))
        weights = "random (timing only)"
    return model.to(device).eval(), tok, weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", default="1,8,32", help="comma-separated batch sizes")
    parser.add_argument("--tokens", type=int, default=16, help="max new tokens per request")
    parser.add_argument("--schemas", type=int, default=4, help="number of JSON schemas")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--prefix-repeats", type=int, default=3)
    parser.add_argument(
        "--repeats", type=int, default=3, help="rounds over the throughput paths (medians)"
    )
    parser.add_argument("--schemas-dir", default=str(SCHEMAS), help="maskbench-dev folder")
    parser.add_argument(
        "--model-dir",
        default=None,
        help="a folder with config + tokenizer (+ model.safetensors; without it the weights are "
        "random: same architecture, same cost per token, for timing where the weights can't go)",
    )
    args = parser.parse_args()
    args.batches = [int(b) for b in args.batches.split(",") if b]

    import torch

    from structgen._assets import load_default_model

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    weights = "trained"
    if args.model_dir is None:
        model, tok = load_default_model(device=device)
    else:
        model, tok, weights = load_model_dir(Path(args.model_dir), device)
    gen = Generator(model, tok, prefix_cache=0)
    size = gen.vocab.size
    peers: dict[str, Any] = {}
    if peer("llguidance") is not None:
        peers["llguidance"] = LLGuidanceProcessors(tok, size)
    if peer("xgrammar") is not None:
        peers["xgrammar"] = XGrammarProcessors(tok, size)
    schemas = pick_schemas(gen.vocab, args.schemas, peers, Path(args.schemas_dir))
    if not schemas:
        raise SystemExit("no maskbench-dev schema compiles in every engine")
    compiler = Compiler(gen.vocab)
    compiled = [compiler.json_schema(s) for _, s in schemas]
    prompts = [
        gen.encode(f"Reply with a JSON object for this schema: {json.dumps(s)[:200]}", chat=True)
        for _, s in schemas
    ]
    ctx = {
        "gen": gen, "model": model, "tok": tok, "schemas": schemas, "compiled": compiled,
        "peers": peers, "prompts": prompts,
        "name_prompt": gen.encode('Output {"name": "..."} for the capital of France.', chat=True),
    }  # fmt: skip
    names = ", ".join(n for n, _ in schemas)
    print(f"device {device}; weights {weights}; schemas: {names}; tokens {args.tokens}")
    gen.generate(prompts[0], SamplingParams(max_new_tokens=4), grammar=compiled[0])  # warm up

    print("\nThroughput (greedy):")
    through = throughput(args, ctx)
    print()
    print_table(
        ["batch", "path", "TPOT ms", "tok/s", "TTFT ms", "out tokens"],
        [
            [r["batch"], r["path"], fmt(r["tpot_ms"]), fmt(r["tokens_per_s"]),
             fmt(r["ttft_ms"]), r["output_tokens"]]
            for r in through
        ],
    )  # fmt: skip
    overhead = []
    for batch in args.batches:
        by = {r["path"]: r for r in through if r["batch"] == batch}
        base = by["own loop"]["tpot_ms"]
        own = by["own loop + schema (no jump fwd)"]["tpot_ms"]
        hf = by["model.generate"]["tpot_ms"]
        line = {"batch": batch, "own_constrained_vs_free_pct": 100 * (own / base - 1)}
        for name in ["structgen", *ctx["peers"]]:
            line[f"processor_{name}_pct"] = 100 * (
                by[f"model.generate + {name}"]["tpot_ms"] / hf - 1
            )
        overhead.append(line)
    print("\nConstraint overhead on TPOT (% over unconstrained, same path):")
    keys = list(overhead[0])
    print_table(
        keys, [[fmt(v) if isinstance(v, float) else v for v in o.values()] for o in overhead]
    )

    print("\nTTFT with a shared ~1,000-token prefix (second request):")
    prefix = prefix_ttft(ctx, args.prefix_repeats)
    print_table(list(prefix), [[fmt(v) if isinstance(v, float) else v for v in prefix.values()]])

    print("\nJump forward (greedy, batch 1):")
    jumps = jump_forward(ctx, args.tokens)
    print_table(list(jumps[0]), [list(r.values()) for r in jumps])

    quantized: dict[str, Any] | None = None
    if weights == "trained":
        print(f"\nQuantized weights ({device}, greedy):")
        quantized = quantization(model, tok, args.repeats, max(args.tokens, 32))

    RESULTS.mkdir(exist_ok=True)
    out = {
        "device": device,
        "weights": weights,
        "torch_threads": torch.get_num_threads(),
        "tokens": args.tokens,
        "schemas": [n for n, _ in schemas],
        "throughput": through,
        "overhead": overhead,
        "prefix_cache": prefix,
        "jump_forward": jumps,
        "quantization": quantized,
    }
    path = RESULTS / "generate.json"
    path.write_text(json.dumps(out, indent=1, default=float) + "\n", encoding="utf-8")
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
