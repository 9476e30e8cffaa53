"""MaskBench: JSON Schema compile time, mask time and correctness, structgen vs peers.

Protocol (../shared/README.md): compile the schema and fill the first mask (TTFM); for each test
instance serialise `data` with `json.dumps(data, ensure_ascii=False)`, tokenize it with the
Llama-3.1 tokenizer, and for every token fill the mask (TBM), check the token is allowed and
commit it. A valid instance must be accepted to its end (and the engine able to stop); an invalid
one must be rejected at some token (or be unable to stop). A schema passes when it compiles and
every instance gets the right verdict. Accepting an invalid instance is an *invalidation error*.
structgen runs in accept mode (`SchemaOptions(mode="accept")`: every spelling and layout of a
valid text), since the protocol validates existing text; generation uses generate mode.

Every engine runs in its own worker process (one core each) and each schema has a time limit
(compile plus all instances); a schema over it counts as a timeout and the worker is restarted.
Each schema runs on every engine before the next schema starts, the engines' order turning from
one schema to the next: on a shared host whose speed drifts over minutes, running every schema
on one engine and then on the next gave whichever ran second 20-30% longer tails in some runs
(`--in-turn` runs them that way).
outlines-core builds its whole index eagerly, so its time limit matters most.

With `--freeze-gc` each worker freezes its heap after start-up, as vLLM's engine core does
(`gc.freeze()`): what a serving process that freezes sees. With `--keep-cache` structgen keeps
its compiled grammars (up to 128) between schemas instead of clearing them before each compile,
as a long-running process does: each compile is still cold, and also pays the cache's upkeep.

Run: `python benchmarks/maskbench.py [--limit N] [--engines structgen,llguidance]
[--timeout S] [--sample] [--freeze-gc] [--keep-cache] [--in-turn]`.
Writes `benchmarks/results/maskbench.{json,png}`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import RESULTS, mask_allows, percentile, print_table
from peers import (
    EngineError,
    LLGuidancePeer,
    OutlinesCorePeer,
    StructgenPeer,
    XGrammarPeer,
    stop_worker,
    token_table,
)

SCHEMAS = Path(__file__).resolve().parents[2] / "shared" / "maskbench-dev"
ENGINES = ("structgen", "llguidance", "xgrammar", "outlines-core")
MEMORY = 8 << 30


# ---------------------------------------------------------------------------------- engines


CompileError = EngineError  # the engine refused the schema


class _Structgen(StructgenPeer):
    #: keep the compiled grammars between schemas, as a process serving many does
    #: (`--keep-cache`; each schema still compiles cold: no two share a cache key)
    keep_cache = False

    def release(self) -> None:
        import structgen.compiler

        super().release()
        if not self.keep_cache:
            structgen.compiler._CACHE.clear()  # (the compiled grammars: each compile is cold)

    def compile(self, schema: Any) -> None:
        import structgen.compiler
        from structgen import Compiler, SchemaOptions, StructgenError

        if not self.keep_cache:
            structgen.compiler._CACHE.clear()
        try:
            accept = SchemaOptions(mode="accept")
            self.use(Compiler(self.vocab).json_schema(schema, options=accept))
        except StructgenError as exc:
            raise CompileError(f"{type(exc).__name__}: {exc}") from exc


class _LLGuidance(LLGuidancePeer):
    def compile(self, schema: Any) -> None:
        self.use(
            self.llg.LLMatcher.grammar_from_json_schema(
                schema, defaults={"whitespace_flexible": True}
            )
        )


class _XGrammar(XGrammarPeer):
    def compile(self, schema: Any) -> None:
        self.clear_caches()  # a compiler per schema, inside the timed compile (as before)
        try:
            compiled = self.compiler.compile_json_schema(
                json.dumps(schema), any_whitespace=True, strict_mode=False
            )
        except Exception as exc:
            raise CompileError(str(exc).splitlines()[0][:300]) from exc
        self.use(compiled)


class _OutlinesCore(OutlinesCorePeer):
    def __init__(self, tokenizer: Any) -> None:
        from structgen import Vocabulary

        vocab = Vocabulary.from_hf(tokenizer)
        super().__init__(vocab.eos_token_ids[0], token_table(vocab), vocab.size)

    def compile(self, schema: Any) -> None:
        from outlines_core.json_schema import build_regex_from_schema

        try:
            regex = build_regex_from_schema(json.dumps(schema))
        except Exception as exc:
            raise CompileError(str(exc).splitlines()[0][:300] if str(exc) else repr(exc)) from exc
        self.use_regex(regex)


_ADAPTERS = {
    "structgen": _Structgen,
    "llguidance": _LLGuidance,
    "xgrammar": _XGrammar,
    "outlines-core": _OutlinesCore,
}


def installed(name: str) -> bool:
    module = {"outlines-core": "outlines_core"}.get(name, name)
    try:
        __import__(module)
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------------------- worker


def run_schema(engine: Any, schema: Any, tests: list[tuple[list[int], bool]]) -> dict[str, Any]:
    """Compile + first mask (TTFM), then every instance token by token (TBM per fill). The
    previous schema's state is freed first, outside the timing (`release`: since 2026-12-03
    09:00; before, each engine's TTFM included tearing down the schema before it)."""
    out: dict[str, Any] = {"tbm_us": [], "verdicts": []}
    release = getattr(engine, "release", None)
    if release is not None:
        release()
    t0 = time.perf_counter()
    try:
        engine.compile(schema)
        engine.start()
        engine.fill()
    except CompileError as exc:
        return {"status": "compile_error", "error": str(exc)[:300]}
    except Exception as exc:  # a crash inside a peer is a compile error too
        return {"status": "compile_error", "error": f"{type(exc).__name__}: {exc}"[:300]}
    out["ttfm_ms"] = (time.perf_counter() - t0) * 1e3
    for n, (tokens, valid) in enumerate(tests):
        if n:
            engine.start()
        accepted = True
        for k, token in enumerate(tokens):
            if n or k:
                t = time.perf_counter()
                engine.fill()
                out["tbm_us"].append((time.perf_counter() - t) * 1e6)
            if not mask_allows(engine.bitmask, token) or not engine.accept(token):
                accepted = False
                break
        if accepted:
            accepted = engine.can_terminate()
        out["verdicts"].append((valid, accepted))
    out["status"] = "ok"
    return out


def _worker(conn: Any, name: str, freeze_gc: bool = False, keep_cache: bool = False) -> None:
    import gc
    import os
    import resource

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from _common import load_tokenizer

    engine = _ADAPTERS[name](load_tokenizer("llama3_1"))
    if keep_cache:
        engine.keep_cache = True
    if freeze_gc:  # (as vLLM's engine core does after start-up: `freeze_gc_heap`)
        gc.collect()
        gc.freeze()
    conn.send("ready")
    while (request := conn.recv()) is not None:
        conn.send(run_schema(engine, *request))


class Runner:
    """One engine in a worker process; a schema over the time limit restarts the worker."""

    def __init__(
        self, name: str, timeout_s: float, *, freeze_gc: bool = False, keep_cache: bool = False
    ) -> None:
        self.name = name
        self.timeout_s = timeout_s
        self.freeze_gc = freeze_gc
        self.keep_cache = keep_cache
        self.process: Any = None

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=_worker,
            args=(child, self.name, self.freeze_gc, self.keep_cache),
            daemon=True,
        )
        self.process.start()
        if not self.conn.poll(300) or self.conn.recv() != "ready":
            raise RuntimeError(f"{self.name} worker did not start")

    def stop(self) -> None:
        if self.process is None:
            return
        stop_worker(self.process, self.conn)
        self.process = None

    def run(self, schema: Any, tests: list[tuple[list[int], bool]]) -> dict[str, Any]:
        if self.process is None:
            self._start()
        self.conn.send((schema, tests))
        if self.conn.poll(self.timeout_s):
            try:
                return self.conn.recv()  # type: ignore[no-any-return]
            except EOFError:
                self.stop()
                return {"status": "compile_error", "error": "worker died (memory limit?)"}
        self.process.kill()
        self.stop()
        return {"status": "timeout"}


# ---------------------------------------------------------------------------------- driver


def load_cases(limit: int | None, sample: bool) -> list[tuple[str, Any, list[tuple[str, bool]]]]:
    files = sorted(SCHEMAS.glob("*.json"))
    if limit is not None and limit < len(files):
        files = sorted(random.Random(0).sample(files, limit)) if sample else files[:limit]
    cases = []
    for path in files:
        data = json.loads(path.read_text())
        tests = [
            (json.dumps(t["data"], ensure_ascii=False), bool(t["valid"])) for t in data["tests"]
        ]
        cases.append((path.stem, data["schema"], tests))
    return cases


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    s: dict[str, Any] = {
        "schemas": len(results), "passing": 0, "compile_errors": 0, "validation_errors": 0,
        "invalidation_errors": 0, "timeouts": 0, "tbm_us": [], "ttfm_ms": [],
    }  # fmt: skip
    for r in results:
        if r["status"] == "timeout":
            s["timeouts"] += 1
            continue
        if r["status"] == "compile_error":
            s["compile_errors"] += 1
            continue
        s["ttfm_ms"].append(r["ttfm_ms"])
        s["tbm_us"].extend(r["tbm_us"])
        rejected_valid = sum(1 for valid, ok in r["verdicts"] if valid and not ok)
        accepted_invalid = sum(1 for valid, ok in r["verdicts"] if not valid and ok)
        s["validation_errors"] += rejected_valid
        s["invalidation_errors"] += accepted_invalid
        if not rejected_valid and not accepted_invalid:
            s["passing"] += 1
    return s


def report(summaries: dict[str, dict[str, Any]]) -> None:
    headers = ["engine", "pass", "pass %", "compile err", "valid. err", "invalid. err",
               "timeouts", "TBM p50", "p90", "p99", "mean (us)", "TTFM p50", "p90", "p99",
               "mean (ms)"]  # fmt: skip
    rows = []
    for name, s in summaries.items():
        tbm, ttfm = s["tbm_us"], s["ttfm_ms"]
        rows.append(
            [
                name, s["passing"], f"{100 * s['passing'] / max(1, s['schemas']):.1f}",
                s["compile_errors"], s["validation_errors"], s["invalidation_errors"],
                s["timeouts"], *_timing_cells(tbm, ttfm),
            ]
        )  # fmt: skip
    print_table(headers, rows)


def _timing_cells(tbm: list[float], ttfm: list[float]) -> list[str]:
    """TBM p50, p90, p99, mean (µs), then TTFM's (ms), as table cells."""
    return [
        *(f"{percentile(tbm, q):.0f}" for q in (50, 90, 99)),
        f"{np.mean(tbm):.1f}" if tbm else "-",
        *(f"{percentile(ttfm, q):.1f}" for q in (50, 90, 99)),
        f"{np.mean(ttfm):.1f}" if ttfm else "-",
    ]


def _timing_summary(tbm: list[float], ttfm: list[float]) -> dict[str, Any]:
    """TBM and TTFM percentiles and means, as `maskbench.json` keeps them."""
    return {
        "tbm_us": {q: percentile(tbm, q) for q in (50, 90, 99)}
        | {"mean": float(np.mean(tbm)) if tbm else None},
        "ttfm_ms": {q: percentile(ttfm, q) for q in (50, 90, 99)}
        | {"mean": float(np.mean(ttfm)) if ttfm else None},
    }


def same_schemas(
    per_schema: dict[str, list[dict[str, Any]]],
) -> tuple[int, dict[str, dict[str, list[float]]]] | None:
    """Each engine's TTFM and TBM over only the schemas every engine compiled (None with fewer
    than two engines): the timings of the same inputs side by side."""
    if len(per_schema) < 2:
        return None
    runs = list(per_schema.values())
    both = [i for i in range(len(runs[0])) if all(r[i]["status"] == "ok" for r in runs)]
    shared: dict[str, dict[str, list[float]]] = {}
    for name, results in per_schema.items():
        shared[name] = {
            "ttfm_ms": [results[i]["ttfm_ms"] for i in both],
            "tbm_us": [t for i in both for t in results[i]["tbm_us"]],
        }
    return len(both), shared


def report_timings(timings: dict[str, dict[str, list[float]]]) -> None:
    headers = ["engine", "TBM p50", "p90", "p99", "mean (us)", "TTFM p50", "p90", "p99",
               "mean (ms)"]  # fmt: skip
    rows = []
    for name, t in timings.items():
        rows.append([name, *_timing_cells(t["tbm_us"], t["ttfm_ms"])])
    print_table(headers, rows)


def plot(summaries: dict[str, dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib is not installed: no plot)")
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    names = list(summaries)
    passing = [100 * summaries[n]["passing"] / max(1, summaries[n]["schemas"]) for n in names]
    axes[0].bar(names, passing, color="tab:green")
    axes[0].set_ylabel("schemas passing (%)")
    axes[0].set_ylim(0, 100)
    for name in names:
        for ax, key, label in ((axes[1], "tbm_us", "TBM (µs)"), (axes[2], "ttfm_ms", "TTFM (ms)")):
            values = sorted(summaries[name][key])
            if values:
                ax.plot(values, np.linspace(0, 1, len(values)), label=name)
            ax.set_xscale("log")
            ax.set_xlabel(label)
            ax.set_ylabel("fraction ≤ x")
    axes[1].legend()
    axes[2].legend()
    fig.suptitle("MaskBench-dev, Llama-3.1 tokenizer")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="number of schemas")
    parser.add_argument(
        "--sample", action="store_true", help="a seeded sample instead of the first N"
    )
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per schema")
    parser.add_argument("--failures", action="store_true", help="list structgen's failing schemas")
    parser.add_argument(
        "--in-turn",
        action="store_true",
        help="run every schema on one engine, then on the next (default: each schema on every"
        " engine in turn, so that a host slowing down or speeding up meets all engines alike)",
    )
    parser.add_argument(
        "--freeze-gc",
        action="store_true",
        help="each worker freezes its heap after start-up (gc.freeze(), as vLLM's engine core)",
    )
    parser.add_argument(
        "--keep-cache",
        action="store_true",
        help="structgen keeps its compiled grammars between schemas (default: cleared before"
        " each compile), as a long-running process does: every compile then also pays the"
        " cache's upkeep",
    )
    args = parser.parse_args()
    from _common import load_tokenizer

    tokenizer = load_tokenizer("llama3_1")
    cases = load_cases(args.limit, args.sample)
    encoded = [
        (stem, schema, [(tokenizer.encode(text, add_special_tokens=False), v) for text, v in tests])
        for stem, schema, tests in cases
    ]
    engines = [e for e in args.engines.split(",") if e]
    if "structgen" in engines:
        from structgen import _compiled

        built = "compiled (mypyc)" if _compiled.COMPILED_FRONT_END else "pure Python"
        print(f"structgen's schema front end: {built}", flush=True)
    summaries: dict[str, dict[str, Any]] = {}
    details: dict[str, dict[str, Any]] = {}
    per_schema: dict[str, list[dict[str, Any]]] = {}
    available = []
    for name in engines:
        if installed(name):
            available.append(name)
        else:
            print(f"(peer {name} is not installed: pip install -e '.[bench]')")
    runners = {
        name: Runner(name, args.timeout, freeze_gc=args.freeze_gc, keep_cache=args.keep_cache)
        for name in available
    }
    elapsed = dict.fromkeys(available, 0.0)

    def run_one(name: str, stem: str, schema: Any, tests: Any) -> None:
        started = time.perf_counter()
        result = runners[name].run(schema, tests)
        elapsed[name] += time.perf_counter() - started
        per_schema.setdefault(name, []).append(result)
        details.setdefault(name, {})[stem] = {k: v for k, v in result.items() if k != "tbm_us"}

    try:
        if args.in_turn:  # every schema on one engine, then on the next
            for name in available:
                for stem, schema, tests in encoded:
                    run_one(name, stem, schema, tests)
                runners[name].stop()
        else:  # each schema on every engine, the order turning from one schema to the next
            for i, (stem, schema, tests) in enumerate(encoded):
                turn = i % max(1, len(available))
                for name in available[turn:] + available[:turn]:
                    run_one(name, stem, schema, tests)
    finally:
        for runner in runners.values():
            runner.stop()
    for name in available:
        summaries[name] = summarize(per_schema.get(name, []))
        print(f"{name}: {len(encoded)} schemas in {elapsed[name]:.0f} s", flush=True)
    report(summaries)
    common = same_schemas(per_schema)
    if common is not None:
        count, shared = common
        print(f"\nthe same {count} schemas, those every engine above compiled (an engine's")
        print("percentiles above also count the schemas only it compiles, the harder ones):")
        report_timings(shared)
    if args.failures and "structgen" in details:
        for stem, r in details["structgen"].items():
            bad = r["status"] != "ok" or any(v != ok for v, ok in r.get("verdicts", []))
            if bad:
                print(stem, r["status"], r.get("error", ""), r.get("verdicts", ""))
    RESULTS.mkdir(parents=True, exist_ok=True)
    compact = {
        n: {k: v for k, v in s.items() if k not in ("tbm_us", "ttfm_ms")}
        | _timing_summary(s["tbm_us"], s["ttfm_ms"])
        for n, s in summaries.items()
    }
    out: dict[str, Any] = {"summary": compact}
    if common is not None:
        out["same_schemas"] = {"schemas": common[0]} | {
            n: _timing_summary(t["tbm_us"], t["ttfm_ms"]) for n, t in common[1].items()
        }
    # every schema's time to first mask per engine (`None`: it did not compile), to find the
    # schemas an engine trails on
    out["ttfm_by_schema"] = {
        n: {stem: r.get("ttfm_ms") if r["status"] == "ok" else None for stem, r in d.items()}
        for n, d in details.items()
    }
    (RESULTS / "maskbench.json").write_text(json.dumps(out, indent=1))
    plot(summaries, RESULTS / "maskbench.png")


if __name__ == "__main__":
    main()
