"""Batch mask fills: one thread against a thread pool, structgen beside llguidance.

A batch of 16 MaskBench schemas (Llama-3.1 tokenizer, accept mode, the first valid instance of
each) is decoded in lockstep: every step fills the whole batch's bitmask in one call and then
advances every row by its instance's next token. The compile is not timed; the fills are, and
they include the first visits of every lexer and parser state (each run is a fresh process, so
nothing is cached beforehand). structgen: `fill_bitmasks(matchers, bitmask, threads=T)` — which
under the GIL computes the rows on the calling thread (a pool there was slower than one thread),
so a third configuration, "T pool", forces the pool (`structgen.matcher.POOL_UNDER_GIL`);
llguidance: `fill_next_token_bitmask` row by row (T = 1) and `fill_next_token_bitmask_par`
with an `LLExecutor` of T threads. Each configuration runs `--rounds` times, alternated; the
table gives the median of the per-batch totals and of the per-step times.

Run: `python benchmarks/batch_fill.py [--batch 16] [--threads 2] [--rounds 3] [--seed 1]`.
Writes `benchmarks/results/batch_fill.json`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import RESULTS, load_tokenizer, percentile, print_table

SCHEMAS = Path(__file__).resolve().parents[2] / "shared" / "maskbench-dev"


def _cases(tokenizer: Any, batch: int, seed: int, compile_one: Any) -> list[tuple[Any, list[int]]]:
    names = sorted(p.name for p in SCHEMAS.glob("*.json"))
    random.Random(seed).shuffle(names)
    out: list[tuple[Any, list[int]]] = []
    for name in names:
        case = json.loads((SCHEMAS / name).read_text())
        valid = [t for t in case["tests"] if t["valid"]]
        if not valid:
            continue
        compiled = compile_one(case["schema"])
        if compiled is None:
            continue
        text = json.dumps(valid[0]["data"], ensure_ascii=False)
        out.append((compiled, tokenizer.encode(text, add_special_tokens=False)))
        if len(out) == batch:
            break
    return out


def _run(engine: str, threads: int, batch: int, seed: int, pool: bool = False) -> dict[str, Any]:
    """In a fresh process: decode the batch in lockstep, timing each step's fill (`pool`: the
    structgen pool even under the GIL)."""
    tokenizer = load_tokenizer("llama3_1")
    steps: list[float] = []
    if engine == "structgen":
        from peers import StructgenPeer

        import structgen.matcher
        from structgen import Compiler, Matcher, SchemaOptions, StructgenError, fill_bitmasks

        structgen.matcher.POOL_UNDER_GIL = pool

        vocab = StructgenPeer(tokenizer).vocab
        compiler = Compiler(vocab)

        def compile_sg(schema: Any) -> Any:
            try:
                return compiler.json_schema(schema, options=SchemaOptions(mode="accept"))
            except StructgenError:
                return None

        cases = _cases(tokenizer, batch, seed, compile_sg)
        matchers = [Matcher(c) for c, _ in cases]
        from structgen import allocate_bitmask

        bitmask = allocate_bitmask(len(matchers), vocab.size, backend="numpy")
        longest = max(len(ids) for _, ids in cases)
        for step in range(longest):
            start = time.perf_counter()
            fill_bitmasks(matchers, bitmask, threads=threads)
            steps.append(time.perf_counter() - start)
            for m, (_, ids) in zip(matchers, cases):
                if step < len(ids):
                    m.accept_token(ids[step])
    else:
        import llguidance
        import llguidance.hf
        import llguidance.numpy

        table = llguidance.hf.from_tokenizer(tokenizer)

        def compile_llg(schema: Any) -> Any:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                schema, defaults={"whitespace_flexible": True}
            )
            matcher = llguidance.LLMatcher(table, grammar)
            return None if matcher.is_error() else grammar

        cases = _cases(tokenizer, batch, seed, compile_llg)
        matchers = [llguidance.LLMatcher(table, g) for g, _ in cases]
        bitmask = llguidance.numpy.allocate_token_bitmask(len(matchers), table.vocab_size)
        executor = llguidance.LLExecutor(num_threads=threads)
        indexed = [(m, i) for i, m in enumerate(matchers)]
        longest = max(len(ids) for _, ids in cases)
        for step in range(longest):
            start = time.perf_counter()
            if threads == 1:
                for m, i in indexed:
                    llguidance.numpy.fill_next_token_bitmask(m, bitmask, i)
            else:
                llguidance.numpy.fill_next_token_bitmask_par(executor, indexed, bitmask)
            steps.append(time.perf_counter() - start)
            for m, (_, ids) in zip(matchers, cases):
                if step < len(ids) and not m.is_error():
                    m.consume_token(ids[step])
    return {"steps": steps, "rows": len(cases)}


def _in_process(engine: str, threads: int, batch: int, seed: int, pool: bool) -> dict[str, Any]:
    here = str(Path(__file__).parent)
    code = (
        f"import json, sys; sys.path.insert(0, {here!r}); import batch_fill; "
        f"print(json.dumps(batch_fill._run({engine!r}, {threads}, {batch}, {seed}, {pool})))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--engines", default="structgen,llguidance")
    args = parser.parse_args()
    if not SCHEMAS.is_dir():
        sys.exit(f"needs {SCHEMAS}")
    engines = [e for e in args.engines.split(",") if importlib.util.find_spec(e) is not None]
    configs = [(e, t, False) for e in engines for t in (1, args.threads)]
    if "structgen" in engines:
        configs.append(("structgen", args.threads, True))
    runs: dict[tuple[str, int, bool], list[dict[str, Any]]] = {c: [] for c in configs}
    for _ in range(args.rounds):
        for engine, threads, pool in configs:
            runs[(engine, threads, pool)].append(
                _in_process(engine, threads, args.batch, args.seed, pool)
            )
    rows = []
    summary: dict[str, Any] = {}
    for engine, threads, pool in configs:
        results = runs[(engine, threads, pool)]
        totals = [sum(r["steps"]) * 1e3 for r in results]
        steps = [s * 1e3 for r in results for s in r["steps"]]
        one = statistics.median(sum(r["steps"]) for r in runs[(engine, 1, False)]) * 1e3
        total = statistics.median(totals)
        rows.append(
            [
                engine,
                f"{threads} pool" if pool else str(threads),
                str(results[0]["rows"]),
                str(len(results[0]["steps"])),
                f"{total:.1f}",
                f"{percentile(steps, 50):.3f}",
                f"{percentile(steps, 90):.2f}",
                f"{percentile(steps, 99):.2f}",
                f"{one / total:.2f}x",
            ]
        )
        summary[f"{engine}/{threads}" + ("/pool" if pool else "")] = {
            "total_ms": total,
            "step_p50_ms": percentile(steps, 50),
            "step_p90_ms": percentile(steps, 90),
            "step_p99_ms": percentile(steps, 99),
            "speedup": one / total,
        }
    print_table(
        ["engine", "threads", "rows", "steps", "total ms", "step p50", "p90", "p99", "vs 1"],
        rows,
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "batch_fill.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
