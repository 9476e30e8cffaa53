"""Serving: static batching vs continuous batching on a stream of mixed requests over time.

A seeded Poisson arrival schedule of `--requests` requests (free text of 8-64 tokens with EOS
ignored, and constrained ones — a regex, a choice, two JSON schemas — that end when the grammar
completes), replayed in real time twice with the default model (SmolLM2-135M-Instruct):

- static: wait until `--batch` requests are waiting (or the stream is over), run them with
  `Generator.generate_batch`, then take the next batch; requests arriving meanwhile wait;
- continuous: `structgen.generate.Scheduler(max_batch=--batch)` on its background thread; each
  request is submitted when it arrives and joins the running batch at the next step.

Reported per mode: throughput (all output tokens over first arrival → last finish), TTFT and
end-to-end latency percentiles measured from each request's arrival, mean rows per forward, and
whether the constrained outputs are valid and the greedy outputs agree between the two modes.
Target (issue 9): continuous >= 2x static throughput.

Run: `python benchmarks/serving.py [--requests 20] [--rate 4] [--batch 8] [--seed 0]
[--continuous-first]`.
Writes `benchmarks/results/serving.json`.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import time
from dataclasses import dataclass
from typing import Any

from _common import RESULTS, fmt, percentile, print_table

from structgen import Compiler, Generator, SamplingParams, SchemaOptions
from structgen.generate import GenerationResult, Scheduler

DATE = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
DRINKS = ["coffee", "tea", "hot chocolate", "orange juice", "water"]
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string", "maxLength": 16},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
PRODUCT = {
    "type": "object",
    "properties": {
        "item": {"type": "string", "maxLength": 20},
        "price": {"type": "number", "minimum": 0},
        "in_stock": {"type": "boolean"},
    },
    "required": ["item", "price", "in_stock"],
    "additionalProperties": False,
}
QUESTIONS = {
    "free": [
        "Tell me about the history of bread in France.",
        "Write a short poem about the sea.",
        "Explain how a bicycle works to a child.",
        "What should I pack for a weekend of hiking in the Alps in early autumn?",
        "Describe your ideal breakfast.",
    ],
    "date": ["When did the Berlin Wall fall? Answer as YYYY-MM-DD.", "Give me a date in 1999."],
    "choice": ["What would you like to drink?", "Pick a drink for a cold morning."],
    "person": ["Invent a person and describe them as JSON.", "Describe a famous chef as JSON."],
    "product": ["Describe a bakery product as JSON.", "A camping item for sale, as JSON."],
}


@dataclass(frozen=True)
class Item:
    """One request of the stream: when it arrives and what it asks for."""

    arrival: float
    kind: str
    question: str
    max_new_tokens: int


def schedule(count: int, rate: float, seed: int) -> list[Item]:
    """A seeded stream: exponential gaps (Poisson arrivals), kinds and lengths drawn at random."""
    rng = random.Random(seed)
    kinds = ["free", "free", "date", "choice", "person", "product"]
    items, now = [], 0.0
    for _ in range(count):
        kind = rng.choice(kinds)
        tokens = rng.choice([8, 16, 32, 64]) if kind == "free" else 64
        items.append(Item(now, kind, rng.choice(QUESTIONS[kind]), tokens))
        now += rng.expovariate(rate)
    return items


class Workload:
    """Prompts, parameters and grammars of a stream, built once for both modes."""

    def __init__(self, gen: Generator, items: list[Item]) -> None:
        compiler = Compiler(gen.vocab)
        compact = SchemaOptions(whitespace="compact")
        grammars = {
            "free": None,
            "date": compiler.regex(DATE),
            "choice": compiler.choice(DRINKS),
            "person": compiler.json_schema(PERSON, options=compact),
            "product": compiler.json_schema(PRODUCT, options=compact),
        }
        self.items = items
        self.prompts = [gen.encode(i.question, chat=True) for i in items]
        self.params = [
            SamplingParams(max_new_tokens=i.max_new_tokens, ignore_eos=i.kind == "free")
            for i in items
        ]
        self.grammars = [grammars[i.kind] for i in items]


def valid(kind: str, result: GenerationResult) -> bool:
    if kind == "free":
        return True
    if result.finish_reason != "eos":
        return False
    text = result.text
    if kind == "date":
        return re.fullmatch(DATE, text) is not None
    if kind == "choice":
        return text in DRINKS
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), PERSON if kind == "person" else PRODUCT)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def warm_up(gen: Generator, work: Workload) -> None:
    """Run each distinct request once, unmeasured, so neither mode fills the lazy mask caches.

    Greedy decoding then visits the same grammar states in both modes.
    """
    seen: dict[tuple[str, int], int] = {}
    for i, item in enumerate(work.items):
        seen.setdefault((item.question, item.max_new_tokens), i)
    scheduler = Scheduler(gen, max_batch=len(seen))
    for i in seen.values():
        scheduler.submit(work.prompts[i], work.params[i], grammar=work.grammars[i])
    scheduler.run_until_idle()


def wait_until(t0: float, at: float) -> None:
    delay = t0 + at - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


def run_static(gen: Generator, work: Workload, batch: int) -> dict[str, Any]:
    """Wait for `batch` waiting requests (or the end of the stream), run them, repeat."""
    n = len(work.items)
    first_token: list[float] = [0.0] * n
    finished: list[float] = [0.0] * n
    results: list[GenerationResult | None] = [None] * n
    forwards: list[int] = []
    t0 = time.perf_counter()
    start = 0
    while start < n:
        end = min(start + batch, n)
        wait_until(t0, work.items[end - 1].arrival)  # the batch's last request has arrived
        began = time.perf_counter() - t0
        out = gen.generate_batch(
            [work.prompts[i] for i in range(start, end)],
            [work.params[i] for i in range(start, end)],
            grammars=[work.grammars[i] for i in range(start, end)],
            use_prefix_cache=False,
        )
        for i, r in zip(range(start, end), out):
            results[i] = r
            first_token[i] = began + r.metrics.time_to_first_token
            finished[i] = began + r.metrics.total_time
        forwards.append(max(r.metrics.forward_passes for r in out))
        start = end
    rows_fed = sum(r.metrics.forward_passes for r in results if r is not None)
    return summarize(
        "static", work, results, first_token, finished, rows_fed / max(1, sum(forwards))
    )


def run_continuous(gen: Generator, work: Workload, batch: int) -> dict[str, Any]:
    """Submit each request at its arrival; the scheduler's thread admits it at the next step."""
    scheduler = Scheduler(gen, max_batch=batch)
    handles = []
    t0 = time.perf_counter()
    with scheduler:
        for i, item in enumerate(work.items):
            wait_until(t0, item.arrival)
            handles.append(
                scheduler.submit(work.prompts[i], work.params[i], grammar=work.grammars[i])
            )
        results: list[GenerationResult | None] = [h.result() for h in handles]
    first_token = [
        h.submitted_at - t0 + r.metrics.time_to_first_token
        for h, r in zip(handles, results)
        if r is not None
    ]
    finished = [
        h.submitted_at - t0 + r.metrics.total_time
        for h, r in zip(handles, results)
        if r is not None
    ]
    return summarize(
        "continuous", work, results, first_token, finished, scheduler.metrics.mean_batch_size
    )


def summarize(
    mode: str,
    work: Workload,
    results: list[GenerationResult | None],
    first_token: list[float],
    finished: list[float],
    mean_batch: float,
) -> dict[str, Any]:
    done = [r for r in results if r is not None]
    arrivals = [i.arrival for i in work.items]
    ttft = [f - a for f, a in zip(first_token, arrivals)]
    e2e = [f - a for f, a in zip(finished, arrivals)]
    tokens = sum(r.metrics.output_tokens for r in done)
    span = max(finished) - min(arrivals)
    return {
        "mode": mode,
        "requests": len(done),
        "output_tokens": tokens,
        "span_s": span,
        "tokens_per_s": tokens / span,
        "ttft_p50_s": percentile(ttft, 50),
        "ttft_p90_s": percentile(ttft, 90),
        "ttft_p99_s": percentile(ttft, 99),
        "e2e_p50_s": percentile(e2e, 50),
        "e2e_p90_s": percentile(e2e, 90),
        "e2e_p99_s": percentile(e2e, 99),
        "e2e_mean_s": statistics.fmean(e2e),
        "mean_rows_per_forward": mean_batch,
        "valid": sum(valid(i.kind, r) for i, r in zip(work.items, done)),
        "token_ids": [list(r.token_ids) for r in done],
        "per_request": [
            {
                "kind": i.kind,
                "arrival_s": i.arrival,
                "ttft_s": t,
                "e2e_s": e,
                "tokens": len(r.token_ids),
            }
            for i, t, e, r in zip(work.items, ttft, e2e, done)
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--rate", type=float, default=4.0, help="mean arrivals per second")
    parser.add_argument("--batch", type=int, default=8, help="static batch size = max_batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--continuous-first", action="store_true", help="run that mode first")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    args = parser.parse_args()

    import torch

    from structgen._assets import load_default_model

    if args.threads:
        torch.set_num_threads(args.threads)
    model, tok = load_default_model(device="cpu")
    gen = Generator(model, tok, prefix_cache=0)
    items = schedule(args.requests, args.rate, args.seed)
    work = Workload(gen, items)
    warm_up(gen, work)

    if args.continuous_first:  # the machine's load drifts: run in both orders to see how much
        continuous = run_continuous(gen, work, args.batch)
        static = run_static(gen, work, args.batch)
    else:
        static = run_static(gen, work, args.batch)
        continuous = run_continuous(gen, work, args.batch)
    same = sum(a == b for a, b in zip(static.pop("token_ids"), continuous.pop("token_ids")))
    ratio = continuous["tokens_per_s"] / static["tokens_per_s"]

    keys = ["tokens_per_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "e2e_p50_s", "e2e_p90_s",
            "e2e_p99_s", "mean_rows_per_forward"]  # fmt: skip
    print(
        f"{len(items)} requests over {items[-1].arrival:.1f} s (rate {args.rate}/s, seed "
        f"{args.seed}), batch {args.batch}, {torch.get_num_threads()} torch threads"
    )
    print_table(
        ["mode", *keys, "valid"],
        [
            [r["mode"], *(fmt(r[k]) for k in keys), f"{r['valid']}/{r['requests']}"]
            for r in (static, continuous)
        ],
    )
    print(f"continuous / static throughput: {ratio:.2f}x (target >= 2x)")
    print(f"identical token ids between the modes: {same}/{len(items)}")
    RESULTS.mkdir(exist_ok=True)
    out = {
        "config": vars(args) | {"torch_threads": torch.get_num_threads()},
        "schedule": [i.__dict__ for i in items],
        "static": static,
        "continuous": continuous,
        "throughput_ratio": ratio,
        "identical_outputs": same,
    }
    (RESULTS / "serving.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
