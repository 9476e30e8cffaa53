"""Batch mask fills: one thread against several, structgen beside llguidance.

A batch of 16 MaskBench schemas (Llama-3.1 tokenizer, accept mode, the first valid instance of
each) is decoded in lockstep: every step fills the whole batch's bitmask in one call and then
advances every row by its instance's next token. The compile is not timed; the fills are, and
they include the first visits of every lexer and parser state (each run is a fresh process, so
nothing is cached beforehand). structgen: `fill_bitmasks(matchers, bitmask, threads=T)` — which
under the GIL computes the rows on the calling thread (threads there were slower than one), so
a third configuration, "T pool", forces its helper threads (`structgen.matcher.POOL_UNDER_GIL`;
on a free-threaded build it is the same as T);
llguidance: `fill_next_token_bitmask` row by row (T = 1) and `fill_next_token_bitmask_par`
with an `LLExecutor` of T threads. Each configuration runs `--rounds` times, alternated; the
table gives the median of the per-batch totals and of the per-step times.

`--python PATH` runs structgen's configurations on another interpreter, such as a free-threaded
CPython (3.13t, 3.14t) with structgen's C extensions built for it (`PATH setup.py build_ext
--inplace`); tokenizing stays here (the vocabulary's token bytes and the instances' token ids
go to it in a file), so it needs only numpy and structgen's pure-Python dependencies. Its
rows are marked with the interpreter and whether the GIL was on.

`--paired` times one thread and `--threads` in the same process: the batch is compiled three
times (no two copies share a lexer or a mask: `max_cached_masks` differs), decoded once
untimed (what a process builds once, such as the vocabulary's first visits' tables), then
on one thread and on `--threads`, which first turning round by round; the table gives the
median of the per-process ratios. On a host whose speed drifts over seconds this pairs what
separate processes cannot.

Run: `python benchmarks/batch_fill.py [--batch 16] [--threads 2] [--rounds 3] [--seed 1]
[--python PATH] [--paired]`. Writes `benchmarks/results/batch_fill.json`
(`batch_fill_paired.json` with `--paired`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
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


class _Encoded:
    """A tokenizer stand-in on another interpreter: the instances' token ids, made here."""

    def __init__(self, ids: dict[str, list[int]]) -> None:
        self.ids = ids

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self.ids[text]


def _export(path: str) -> None:
    """The Llama-3.1 vocabulary's token bytes and the first valid instance of every schema,
    tokenized, for `_run` on another interpreter (`--python`)."""
    from structgen import Vocabulary

    tokenizer = load_tokenizer("llama3_1")
    vocab = Vocabulary.from_hf(tokenizer)
    special = vocab.special_mask
    tokens = [None if special[i] else vocab.token_bytes(i).hex() for i in range(vocab.size)]
    ids = {}
    for schema_path in sorted(SCHEMAS.glob("*.json")):
        valid = [t for t in json.loads(schema_path.read_text())["tests"] if t["valid"]]
        if valid:
            text = json.dumps(valid[0]["data"], ensure_ascii=False)
            ids[text] = tokenizer.encode(text, add_special_tokens=False)
    data = {"tokens": tokens, "eos": list(vocab.eos_token_ids), "size": vocab.size, "ids": ids}
    Path(path).write_text(json.dumps(data))


def _structgen_vocab(exported: str | None) -> tuple[Any, Any]:
    """(tokenizer, vocabulary with the per-vocabulary tables built): read from `exported`
    (`_export`) on another interpreter, else made here."""
    from peers import StructgenPeer

    if exported is None:
        tokenizer = load_tokenizer("llama3_1")
        return tokenizer, StructgenPeer(tokenizer).vocab
    from structgen import Vocabulary

    data = json.loads(Path(exported).read_text())
    tokens = [None if t is None else bytes.fromhex(t) for t in data["tokens"]]
    vocab = Vocabulary.from_tokens(tokens, eos_token_ids=data["eos"], size=data["size"])
    return _Encoded(data["ids"]), StructgenPeer.prepared(vocab)


def _structgen_batch(
    tokenizer: Any, vocab: Any, batch: int, seed: int, copy: int = 0
) -> list[tuple[Any, list[int]]]:
    """The batch compiled by a fresh `Compiler`; copy k with `max_cached_masks` 4096 - k, so no
    two copies share a lexer or a cached mask (`--paired`)."""
    from structgen import CompileLimits, Compiler, SchemaOptions, StructgenError

    compiler = Compiler(vocab, limits=CompileLimits(max_cached_masks=4096 - copy))

    def compile_sg(schema: Any) -> Any:
        try:
            return compiler.json_schema(schema, options=SchemaOptions(mode="accept"))
        except StructgenError:
            return None

    return _cases(tokenizer, batch, seed, compile_sg)


def _structgen_decode(cases: list[tuple[Any, list[int]]], vocab: Any, threads: int) -> list[float]:
    """Decode the batch in lockstep; each step's fill time."""
    from structgen import Matcher, allocate_bitmask, fill_bitmasks

    matchers = [Matcher(c) for c, _ in cases]
    bitmask = allocate_bitmask(len(matchers), vocab.size, backend="numpy")
    steps: list[float] = []
    for step in range(max(len(ids) for _, ids in cases)):
        start = time.perf_counter()
        fill_bitmasks(matchers, bitmask, threads=threads)
        steps.append(time.perf_counter() - start)
        for m, (_, ids) in zip(matchers, cases):
            if step < len(ids):
                m.accept_token(ids[step])
    return steps


def _llguidance_setup(batch: int, seed: int) -> tuple[Any, list[tuple[Any, list[int]]]]:
    import llguidance
    import llguidance.hf

    tokenizer = load_tokenizer("llama3_1")
    table = llguidance.hf.from_tokenizer(tokenizer)

    def compile_llg(schema: Any) -> Any:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            schema, defaults={"whitespace_flexible": True}
        )
        matcher = llguidance.LLMatcher(table, grammar)
        return None if matcher.is_error() else grammar

    return table, _cases(tokenizer, batch, seed, compile_llg)


def _llguidance_decode(table: Any, cases: list[tuple[Any, list[int]]], threads: int) -> list[float]:
    """Decode the batch in lockstep with fresh matchers (each compiles its grammar: nothing is
    shared between two decodes but the tokenizer's tables); each step's fill time."""
    import llguidance
    import llguidance.numpy

    matchers = [llguidance.LLMatcher(table, g) for g, _ in cases]
    bitmask = llguidance.numpy.allocate_token_bitmask(len(matchers), table.vocab_size)
    executor = llguidance.LLExecutor(num_threads=threads)
    indexed = [(m, i) for i, m in enumerate(matchers)]
    steps: list[float] = []
    for step in range(max(len(ids) for _, ids in cases)):
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
    return steps


def _run(
    engine: str,
    threads: int,
    batch: int,
    seed: int,
    pool: bool = False,
    exported: str | None = None,
) -> dict[str, Any]:
    """In a fresh process: decode the batch in lockstep, timing each step's fill (`pool`: the
    structgen helper threads even under the GIL; `exported`: structgen's tokens from `_export`)."""
    if engine == "structgen":
        import structgen.matcher

        structgen.matcher.POOL_UNDER_GIL = pool
        tokenizer, vocab = _structgen_vocab(exported)
        cases = _structgen_batch(tokenizer, vocab, batch, seed)
        steps = _structgen_decode(cases, vocab, threads)
    else:
        table, cases = _llguidance_setup(batch, seed)
        steps = _llguidance_decode(table, cases, threads)
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    return {"steps": steps, "rows": len(cases), "python": sys.version.split()[0], "gil": gil}


def _run_paired(
    engine: str, threads: int, batch: int, seed: int, turn: int, exported: str | None = None
) -> dict[str, Any]:
    """In a fresh process: the batch decoded cold three times — once untimed (what a process
    builds once), then on one thread and on `threads`, in the order `turn` says — so the two
    timed decodes see the same host within a second (`--paired`)."""
    if engine == "structgen":
        tokenizer, vocab = _structgen_vocab(exported)
        copies = [_structgen_batch(tokenizer, vocab, batch, seed, k) for k in range(3)]
        _structgen_decode(copies[0], vocab, 1)

        def decode(k: int, count: int) -> list[float]:
            return _structgen_decode(copies[k], vocab, count)
    else:
        table, cases = _llguidance_setup(batch, seed)
        _llguidance_decode(table, cases, 1)

        def decode(k: int, count: int) -> list[float]:
            return _llguidance_decode(table, cases, count)

    order = [1, threads] if turn % 2 == 0 else [threads, 1]
    timed = {count: decode(k + 1, count) for k, count in enumerate(order)}
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    return {
        "one": timed[1],
        "many": timed[threads],
        "rows": len(cases) if engine != "structgen" else len(copies[1]),
        "python": sys.version.split()[0],
        "gil": gil,
    }


def _in_process(
    engine: str,
    threads: int,
    batch: int,
    seed: int,
    pool: bool,
    python: str = sys.executable,
    exported: str | None = None,
    turn: int | None = None,
) -> dict[str, Any]:
    """`_run` in a fresh process of `python` (`turn`: `_run_paired`)."""
    here = str(Path(__file__).parent)
    call = (
        f"_run({engine!r}, {threads}, {batch}, {seed}, {pool}, {exported!r})"
        if turn is None
        else f"_run_paired({engine!r}, {threads}, {batch}, {seed}, {turn}, {exported!r})"
    )
    code = (
        f"import json, sys; sys.path.insert(0, {here!r}); import batch_fill; print(json.dumps("
        f"batch_fill.{call}))"
    )
    done = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{python} failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--engines", default="structgen,llguidance")
    parser.add_argument(
        "--python", default=None, help="run structgen's configurations on this interpreter"
    )
    parser.add_argument(
        "--paired",
        action="store_true",
        help="time one thread and --threads in the same process, on two cold copies",
    )
    args = parser.parse_args()
    if not SCHEMAS.is_dir():
        sys.exit(f"needs {SCHEMAS}")
    exported = None
    if args.python:
        handle, exported = tempfile.mkstemp(suffix=".json", prefix="batch_fill_")
        os.close(handle)
        _export(exported)
    engines = [e for e in args.engines.split(",") if importlib.util.find_spec(e) is not None]
    if args.paired:
        try:
            _paired(args, engines, exported)
        finally:
            if exported is not None:
                os.unlink(exported)
        return
    configs = [(e, t, False) for e in engines for t in (1, args.threads)]
    if "structgen" in engines:
        configs.append(("structgen", args.threads, True))
    runs: dict[tuple[str, int, bool], list[dict[str, Any]]] = {c: [] for c in configs}
    try:
        for _ in range(args.rounds):
            for engine, threads, pool in configs:
                other = engine == "structgen" and args.python is not None
                runs[(engine, threads, pool)].append(
                    _in_process(
                        engine,
                        threads,
                        args.batch,
                        args.seed,
                        pool,
                        python=args.python if other else sys.executable,
                        exported=exported if other else None,
                    )
                )
    finally:
        if exported is not None:
            os.unlink(exported)
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
                _label(engine, results[0], args.python),
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
            "python": results[0].get("python"),
            "gil": results[0].get("gil"),
        }
    print_table(
        ["engine", "threads", "rows", "steps", "total ms", "step p50", "p90", "p99", "vs 1"],
        rows,
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "batch_fill.json").write_text(json.dumps(summary, indent=2))


def _label(engine: str, result: dict[str, Any], python: str | None) -> str:
    """The engine's row label; structgen on another interpreter names it and the GIL."""
    if engine != "structgen" or not python:
        return engine
    gil = "GIL" if result["gil"] else "no GIL"
    return f"structgen ({result['python']}, {gil})"


def _paired(args: argparse.Namespace, engines: list[str], exported: str | None) -> None:
    """`--paired`: every round a fresh process per engine times one thread and `--threads` on
    two cold copies of the batch, in turns; the table gives the median per-process ratio."""
    runs: dict[str, list[dict[str, Any]]] = {e: [] for e in engines}
    for turn in range(args.rounds):
        for engine in engines:
            other = engine == "structgen" and args.python is not None
            runs[engine].append(
                _in_process(
                    engine,
                    args.threads,
                    args.batch,
                    args.seed,
                    False,
                    python=args.python if other else sys.executable,
                    exported=exported if other else None,
                    turn=turn,
                )
            )
    rows = []
    summary: dict[str, Any] = {}
    for engine in engines:
        results = runs[engine]
        one = [sum(r["one"]) * 1e3 for r in results]
        many = [sum(r["many"]) * 1e3 for r in results]
        ratios = sorted(a / b for a, b in zip(one, many))
        rows.append(
            [
                _label(engine, results[0], args.python),
                str(args.threads),
                str(results[0]["rows"]),
                f"{statistics.median(one):.1f}",
                f"{statistics.median(many):.1f}",
                f"{statistics.median(ratios):.2f}x",
                f"{ratios[0]:.2f}–{ratios[-1]:.2f}x",
            ]
        )
        summary[f"{engine}/paired"] = {
            "threads": args.threads,
            "one_ms": one,
            "many_ms": many,
            "ratio_median": statistics.median(ratios),
            "python": results[0].get("python"),
            "gil": results[0].get("gil"),
        }
    print_table(
        ["engine", "threads", "rows", "1 thread ms", "T threads ms", "ratio (median)", "range"],
        rows,
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "batch_fill_paired.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
