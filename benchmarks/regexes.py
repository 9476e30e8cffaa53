"""Regex constraints: compile time, first mask and per-token mask time, structgen vs peers.

Realistic patterns (phone, email, ISO date-time, UUID, IPv4, semver, URL, a 1,000-word alternation,
`[a-z]{1,256}`, `.{0,500}` and a `pattern` taken from a real JSON schema) over the Llama-3.1
tokenizer (128,256 ids). Every engine compiles each pattern from scratch, fills the first mask,
then is fed a matching sample token by token (fill the mask, check the token is in it, accept it;
only the fill is timed) and must be able to terminate at the end.

Targets (issue): per-token mask p50 no slower than llguidance; compile + first mask within 2x of
llguidance and at least 10x faster than outlines-core on the large patterns (the 1,000-word
alternation, `[a-z]{1,256}`, `.{0,500}`).

outlines-core builds its whole index eagerly, so it runs in a worker process with a time budget
per pattern (and an 8 GiB address-space limit). Run: `python benchmarks/regexes.py [--patterns
phone,url] [--runs N] [--outlines-timeout S]`. Writes `benchmarks/results/regex.{json,png}`.
"""

from __future__ import annotations

import argparse
import glob
import json
import multiprocessing
import random
import re
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import (
    RESULTS,
    fmt,
    load_tokenizer,
    mask_allows,
    median,
    peer,
    percentile,
    pick_named,
    print_table,
    save_figure,
)
from peers import (
    EngineError,
    LLGuidancePeer,
    OutlinesCorePeer,
    StructgenPeer,
    XGrammarPeer,
    cold_compile,
    stop_worker,
    token_table,
)

import structgen
from structgen import Compiler, StructgenError, Vocabulary

# This file is named like the PyPI `regex` package that `transformers` imports; with the script's
# folder first on sys.path that import would load this file instead. Move the folder to the end.
_HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if str(Path(p or ".").resolve()) != _HERE] + [_HERE]

SCHEMAS = Path(__file__).resolve().parents[2] / "shared" / "maskbench-dev"
LARGE = ("words1000", "az256", "dot500")
ENGINES = ("structgen", "llguidance", "xgrammar", "outlines-core")
XGRAMMAR_THREADS = 1  # one core per engine: the others compile on one thread too
RUN_BUDGET_S = 10.0  # stop repeating a (pattern, engine) pair once its runs took this long
OUTLINES_MEMORY = 8 << 30
WARM_UP = r"[a-z]+\d\w\s."  # compiled once per engine, untimed: imports and one-time tables
# structgen's caches are all cleared before each compile (`structgen.clear_caches()`, like the
# compile cache), then what is per process or per vocabulary — the `\w`/`\d`/`\s` code point
# sets and their UTF-8 automata, the C walk's token table, the tokens by first byte — is built
# again, untimed, by compiling `WARM_UP` (the peers keep their compiled-in Unicode tables and
# tokenizer tables too). Clearing a hand-picked list of memos instead left later ones (a
# string's NFA piece, NFA sizes, programs) warm between runs of the same pattern.
# ---------------------------------------------------------------------------------- patterns

LOREM = (
    "Lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut "
    "labore et dolore magna aliqua Ut enim ad minim veniam quis nostrud exercitation ullamco "
    "laboris nisi ut aliquip ex ea commodo consequat Duis aute irure dolor in reprehenderit in "
    "voluptate velit esse cillum dolore eu fugiat nulla pariatur"
)
ENGLISH = (
    "The committee met on Tuesday, as planned, to review the quarterly figures. Revenue rose by "
    "12% (well above the forecast), but costs grew faster: shipping alone was up a third! "
    '"We can\'t keep absorbing this," the treasurer said; others disagreed. After a long '
    "debate - and two coffee breaks - they agreed to renegotiate the freight contracts, trim the "
    "travel budget, and revisit the matter in May. Was it the right call? Only time will tell; "
    "for now, the mood in the office is cautiously hopeful."
)
SEMVER = (
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?"
)
URL = (
    r"https?://(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)+[a-zA-Z]{2,63}(?::\d{1,5})?"
    r"(?:/[a-zA-Z0-9._~%!$&'()*+,;=:@-]*)*"
    r"(?:\?[a-zA-Z0-9._~%!$&'()*+,;=:@/?-]*)?(?:#[a-zA-Z0-9._~%!$&'()*+,;=:@/?-]*)?"
)
# The hand-written sample for the schema pattern chosen by `schema_pattern()`; checked at run time.
SCHEMA_SAMPLE = "required_with_all:billing_address,shipping_address"
_UNSUPPORTED = re.compile(r"\(\?<?[=!]|\\[1-9]|\(\?P=|\\k<")  # lookarounds and backreferences


@dataclass
class Case:
    name: str
    pattern: str
    sample: str
    note: str = ""
    tokens: list[int] = field(default_factory=list)


def pseudo_words(count: int, seed: int = 0) -> list[str]:
    """`count` distinct pronounceable pseudo-words (1-4 syllables), deterministic in `seed`."""
    rng = random.Random(seed)
    onsets = ["b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z"]
    onsets += ["br", "ch", "cl", "dr", "fl", "gr", "pl", "qu", "sh", "st", "th", "tr"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "io", "ou"]
    codas = ["", "", "", "n", "r", "s", "t", "l", "m", "nd", "st"]
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < count:
        word = "".join(
            rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
            for _ in range(rng.randint(1, 4))
        )
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def schema_pattern(rank: int = 5) -> tuple[str, str] | None:
    """The `rank`-th longest distinct schema `pattern` that Python compiles and that has no
    lookaround or backreference, with a leading `^` / trailing `$` removed; and its source file."""
    found: dict[str, str] = {}

    def walk(node: Any, source: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "pattern" and isinstance(value, str):
                    found.setdefault(value, source)
                walk(value, source)
        elif isinstance(node, list):
            for value in node:
                walk(value, source)

    for path in sorted(glob.glob(str(SCHEMAS / "*.json"))):
        with open(path, encoding="utf-8") as f:
            walk(json.load(f).get("schema"), Path(path).name)
    usable = []
    for pattern in found:
        if _UNSUPPORTED.search(pattern):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                re.compile(pattern)
            except re.error:
                continue
        usable.append(pattern)
    usable.sort(key=lambda p: (-len(p), p))
    if len(usable) < rank:
        return None
    pattern = usable[rank - 1]
    if pattern.startswith("^"):
        pattern = pattern[1:]
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1]
    return pattern, found[usable[rank - 1]]


def build_cases() -> list[Case]:
    words = pseudo_words(1000)
    octet = r"(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
    hexes = "[0-9a-fA-F]"
    cases = [
        Case("phone", r"\(\d{3}\) \d{3}-\d{4}", "(555) 123-4567"),
        Case(
            "email",
            r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}",
            "jane.doe+newsletter@mail.example-corp.co.uk",
        ),
        Case(
            "iso_datetime",
            r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d"
            r"(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)",
            "2024-03-15T14:30:05.123+02:00",
        ),
        Case(
            "uuid",
            f"{hexes}{{8}}-{hexes}{{4}}-{hexes}{{4}}-{hexes}{{4}}-{hexes}{{12}}",
            "123e4567-e89b-12d3-a456-426614174000",
        ),
        Case("ipv4", rf"({octet}\.){{3}}{octet}", "192.168.1.254"),
        Case("semver", SEMVER, "1.0.0-alpha.1+build.20240315.sha.5114f85"),
        Case("url", URL, "https://docs.example.com:8443/api/v2/items?id=42&sort=desc#results"),
        Case("words1000", "|".join(words), words[500], "1,000 pseudo-words, Random(0)"),
        Case("az256", "[a-z]{1,256}", re.sub("[^a-z]", "", LOREM.lower())[:200]),
        Case("dot500", ".{0,500}", ENGLISH[:400]),
    ]
    chosen = schema_pattern() if SCHEMAS.is_dir() else None
    if chosen is None:
        cases.append(Case("schema", "", "", f"skipped: no schema patterns in {SCHEMAS}"))
    else:
        pattern, source = chosen
        note = f"5th longest pattern, from {source}"
        if not re.fullmatch(pattern, SCHEMA_SAMPLE):
            note = f"skipped: the sample does not match the chosen pattern ({source})"
        cases.append(Case("schema", pattern, SCHEMA_SAMPLE, note))
    for case in cases:
        if case.pattern and not case.note.startswith("skipped"):
            assert re.fullmatch(case.pattern, case.sample), case.name
    return cases


# ---------------------------------------------------------------------------------- engines


class StructgenEngine(StructgenPeer):
    def clear_caches(self) -> None:
        structgen.clear_caches()
        self.compile(WARM_UP)  # (untimed: the per-process and per-vocabulary tables)
        self.fill()

    def compile(self, pattern: str) -> None:
        try:
            self.use(Compiler(self.vocab).regex(pattern))
        except StructgenError as e:
            raise EngineError(str(e)) from e


class LLGuidanceEngine(LLGuidancePeer):
    def clear_caches(self) -> None:
        pass

    def compile(self, pattern: str) -> None:
        self.use(self.llg.grammar_from("regex", pattern))


class XGrammarEngine(XGrammarPeer):
    def compile(self, pattern: str) -> None:
        try:
            self.use(self.compiler.compile_regex(pattern))
        except RuntimeError as e:
            raise EngineError(str(e).splitlines()[0]) from e


class OutlinesCoreEngine(OutlinesCorePeer):
    def clear_caches(self) -> None:
        pass

    def compile(self, pattern: str) -> None:
        self.use_regex(pattern)


# ---------------------------------------------------------------------------------- driver


def warm_up(engine: Any) -> None:
    engine.clear_caches()
    engine.compile(WARM_UP)
    engine.fill()


def measure(engine: Any, pattern: str, tokens: list[int], runs: int) -> dict[str, Any]:
    """Cold runs (fresh compile each): compile, first fill, then the fills along `tokens`."""
    out: dict[str, Any] = {"compile_ms": [], "first_ms": [], "token_us": [], "failure": None}
    started = time.perf_counter()
    for _ in range(runs):
        try:
            compile_ms, first_ms = cold_compile(engine, pattern)
        except EngineError as e:
            return {"error": f"error: {e}"[:200]}
        out["compile_ms"].append(compile_ms)
        out["first_ms"].append(first_ms)
        for n, token in enumerate(tokens):
            if n:
                t0 = time.perf_counter()
                engine.fill()
                out["token_us"].append((time.perf_counter() - t0) * 1e6)
            if not mask_allows(engine.bitmask, token):
                out["failure"] = f"token {n} ({token}) not in the mask"
                break
            if not engine.accept(token):
                out["failure"] = f"token {n} ({token}) refused"
                break
        else:
            if not engine.can_terminate():
                out["failure"] = "cannot terminate at the end"
        if time.perf_counter() - started > RUN_BUDGET_S:
            break
    return out


def _outlines_worker(conn: Any, eos: int, tokens: dict[bytes, list[int]], size: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (OUTLINES_MEMORY, OUTLINES_MEMORY))
    start = time.perf_counter()
    engine = OutlinesCoreEngine(eos, tokens, size)
    setup_s = time.perf_counter() - start
    warm_up(engine)
    conn.send(setup_s)
    while (request := conn.recv()) is not None:
        conn.send(measure(engine, *request))


class OutlinesCoreRunner:
    """Runs `OutlinesCoreEngine` in a worker process; a pattern over budget kills the worker."""

    name = "outlines-core"

    def __init__(self, vocab: Vocabulary, timeout_s: float) -> None:
        self.args = (vocab.eos_token_ids[0], token_table(vocab), vocab.size)
        self.timeout_s = timeout_s
        self.process: Any = None
        self.setup_s = float("nan")

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=_outlines_worker, args=(child, *self.args), daemon=True
        )
        self.process.start()
        self.setup_s = self.conn.recv()

    def stop(self) -> None:
        if self.process is not None:
            stop_worker(self.process, self.conn)
            self.process = None

    def measure(self, pattern: str, tokens: list[int], runs: int) -> dict[str, Any]:
        if self.process is None:
            self._start()
        self.conn.send((pattern, tokens, runs))
        if self.conn.poll(self.timeout_s):
            try:
                return self.conn.recv()  # type: ignore[no-any-return]
            except EOFError:
                self.stop()
                return {"error": "error: worker died (over the memory limit?)"}
        self.process.kill()
        self.stop()
        return {"error": "timeout", "timeout_s": self.timeout_s}


class InProcess:
    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.name = engine.name
        warm_up(engine)

    def measure(self, pattern: str, tokens: list[int], runs: int) -> dict[str, Any]:
        return measure(self.engine, pattern, tokens, runs)

    def stop(self) -> None:
        pass


# ---------------------------------------------------------------------------------- report


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    if "error" in result:
        return result
    both = [c + f for c, f in zip(result["compile_ms"], result["first_ms"])]
    result.update(
        compile=median(result["compile_ms"]),
        first=median(result["first_ms"]),
        compile_first=median(both),
        p50=percentile(result["token_us"], 50),
        p99=percentile(result["token_us"], 99),
        ok=result["failure"] is None,
    )
    return result


def cell(result: dict[str, Any] | None, key: str) -> str:
    if result is None:
        return "n/a"
    if "error" in result:
        return "timeout" if result["error"] == "timeout" else "error"
    return fmt(result[key]) + ("" if result["ok"] else " ✗")


def ratio(ours: dict[str, Any] | None, theirs: dict[str, Any] | None, key: str) -> float:
    if not ours or not theirs or "error" in ours or "error" in theirs:
        return float("nan")
    return float(ours[key] / theirs[key]) if theirs[key] else float("nan")


def report(cases: list[Case], engines: list[str], results: dict[str, dict[str, Any]]) -> None:
    rows = [
        [c.name, len(c.pattern), len(c.tokens), c.note or c.pattern[:50].replace("\n", " ")]
        for c in cases
    ]
    print_table(["pattern", "chars", "sample tokens", "pattern / note"], rows)
    live = [c for c in cases if c.tokens]
    titles = [
        ("compile", "compile, ms (median of runs)"),
        ("first", "first mask after compile, ms"),
        ("compile_first", "compile + first mask, ms"),
        ("p50", "per-token mask fill p50, µs"),
        ("p99", "per-token mask fill p99, µs"),
    ]
    for key, title in titles:
        print(f"\n{title} (lower is better; ✗ = a sample token refused or cannot terminate)")
        headers = ["pattern", *engines]
        with_ratio = key in ("compile_first", "p50") and {"structgen", "llguidance"} <= set(engines)
        if with_ratio:
            headers.append("structgen/llguidance")
        rows = []
        for c in live:
            row = [c.name, *(cell(results[c.name].get(e), key) for e in engines)]
            if with_ratio:
                r = results[c.name]
                row.append(fmt(ratio(r.get("structgen"), r.get("llguidance"), key)))
            rows.append(row)
        print_table(headers, rows)
    failures = [
        f"{c.name}/{e}: {r.get('failure') or r.get('error')}"
        for c in live
        for e, r in results[c.name].items()
        if r.get("failure") or ("error" in r and r["error"] != "timeout")
    ]
    if failures:
        print("\nproblems:\n  " + "\n  ".join(failures))
    if {"structgen", "llguidance"} <= set(engines):
        print_targets(live, results)


def print_targets(cases: list[Case], results: dict[str, dict[str, Any]]) -> None:
    p50_ok, cf_ok, oc_ok = [], [], []
    rows = []
    for c in cases:
        r = results[c.name]
        ours, llg, oc = r.get("structgen"), r.get("llguidance"), r.get("outlines-core")
        p50 = ratio(ours, llg, "p50")
        cf = ratio(ours, llg, "compile_first")
        p50_ok.append((c.name, p50 <= 1.0))
        cf_ok.append((c.name, cf <= 2.0))
        speedup = "-"
        if c.name in LARGE and ours and "error" not in ours and oc is not None:
            if oc.get("error") == "timeout":
                bound = oc["timeout_s"] * 1e3 / ours["compile_first"]
                speedup, met = f">{bound:.0f}x", bound >= 10
            elif "error" in oc:
                speedup, met = "error", False
            else:
                value = oc["compile_first"] / ours["compile_first"]
                speedup, met = f"{value:.0f}x", value >= 10
            oc_ok.append((c.name, met))
            speedup += " ✓" if met else " ✗"
        rows.append(
            [
                c.name,
                f"{fmt(p50)} {'✓' if p50 <= 1.0 else '✗'}",
                f"{fmt(cf)} {'✓' if cf <= 2.0 else '✗'}",
                speedup,
            ]
        )
    print("\ntargets, structgen vs peers")
    print_table(
        [
            "pattern",
            "p50 / llguidance (<= 1)",
            "compile+first / llguidance (<= 2)",
            "outlines-core / structgen compile+first (>= 10x)",
        ],
        rows,
    )

    def line(label: str, marks: list[tuple[str, bool]]) -> None:
        missed = [name for name, ok in marks if not ok]
        if not marks:
            print(f"  {label}: n/a (no such pattern run)")
            return
        verdict = "NOT MET" if missed else "MET"
        tail = f" (missed: {', '.join(missed)})" if missed else ""
        print(f"  {label}: {verdict}, {len(marks) - len(missed)}/{len(marks)}{tail}")

    print("summary:")
    line("per-token mask p50 no slower than llguidance", p50_ok)
    line("compile + first mask within 2x of llguidance", cf_ok)
    line("compile + first mask >= 10x faster than outlines-core (large patterns)", oc_ok)


def plot(cases: list[Case], engines: list[str], results: dict[str, dict[str, Any]]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    live = [c for c in cases if c.tokens]
    fig, ax = plt.subplots(figsize=(12, 5))
    width = 0.8 / max(1, len(engines))
    for k, engine in enumerate(engines):
        xs, ys, hatches = [], [], []
        for n, c in enumerate(live):
            r = results[c.name].get(engine)
            if r and "error" not in r and r["p50"] == r["p50"]:
                xs.append(n + (k - (len(engines) - 1) / 2) * width)
                ys.append(r["p50"])
                hatches.append("" if r["ok"] else "//")
        ax.bar(xs, ys, width, label=engine, color=f"C{k}", hatch=hatches)
    ax.set_xticks(range(len(live)), [c.name for c in live], rotation=30, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("per-token mask fill p50 (µs, log)")
    ax.set_title(
        "Regex constraints, Llama-3.1 tokenizer "
        "(missing bar: error or timeout; hatched: a sample token refused)"
    )
    ax.legend()
    fig.tight_layout()
    return save_figure(fig, "regex.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--patterns", help="comma-separated pattern names (default: all)")
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated engines")
    parser.add_argument("--runs", type=int, default=3, help="cold runs per pattern and engine")
    parser.add_argument("--outlines-timeout", type=float, default=60.0, help="seconds per pattern")
    args = parser.parse_args()

    cases = pick_named(build_cases(), args.patterns, parser, "patterns")
    wanted_engines = args.engines.split(",")

    tokenizer = load_tokenizer("llama3_1")
    for case in cases:
        if case.pattern and not case.note.startswith("skipped"):
            case.tokens = tokenizer.encode(case.sample, add_special_tokens=False)

    runners: list[Any] = []
    setup: dict[str, float] = {}
    start = time.perf_counter()
    ours = StructgenEngine(tokenizer)
    setup["structgen"] = time.perf_counter() - start
    vocab = ours.vocab
    if "structgen" in wanted_engines:
        runners.append(InProcess(ours))
    if "llguidance" in wanted_engines and peer("llguidance") is not None:
        start = time.perf_counter()
        runners.append(InProcess(LLGuidanceEngine(tokenizer, vocab.size)))
        setup["llguidance"] = time.perf_counter() - start
    if "xgrammar" in wanted_engines and peer("xgrammar") is not None:
        start = time.perf_counter()
        runners.append(InProcess(XGrammarEngine(tokenizer, vocab.size, threads=XGRAMMAR_THREADS)))
        setup["xgrammar"] = time.perf_counter() - start
    if "outlines-core" in wanted_engines and peer("outlines_core") is not None:
        runners.append(OutlinesCoreRunner(vocab, args.outlines_timeout))
    engines = [r.name for r in runners]

    results: dict[str, dict[str, Any]] = {c.name: {} for c in cases}
    try:
        for case in cases:
            if not case.tokens:
                continue
            for runner in runners:
                started = time.perf_counter()
                result = summarize(runner.measure(case.pattern, case.tokens, args.runs))
                results[case.name][runner.name] = result
                status = result.get("error") or ("ok" if result["ok"] else result["failure"])
                elapsed = time.perf_counter() - started
                print(f"  {case.name:<13} {runner.name:<14} {elapsed:6.1f} s  {status}", flush=True)
    finally:
        for runner in runners:
            if isinstance(runner, OutlinesCoreRunner):
                setup["outlines-core"] = runner.setup_s
            runner.stop()

    print(
        f"\nLlama-3.1 tokenizer, {vocab.size} ids; {args.runs} cold runs per cell (fresh compile, "
        f"caches cleared; fewer when runs exceed {RUN_BUDGET_S:.0f} s); outlines-core in a worker "
        f"process, {args.outlines_timeout:.0f} s per pattern; xgrammar max_threads="
        f"{XGRAMMAR_THREADS}"
    )
    print("one-time setup, s: " + ", ".join(f"{k} {v:.2f}" for k, v in setup.items()))
    print()
    report(cases, engines, results)

    RESULTS.mkdir(parents=True, exist_ok=True)
    raw = {
        "tokenizer": "llama3_1",
        "vocab_size": vocab.size,
        "runs": args.runs,
        "outlines_timeout_s": args.outlines_timeout,
        "setup_s": setup,
        "cases": [
            {
                "name": c.name,
                "pattern": c.pattern,
                "sample": c.sample,
                "note": c.note,
                "tokens": c.tokens,
                "results": results[c.name],
            }
            for c in cases
        ],
    }
    json_path = RESULTS / "regex.json"
    json_path.write_text(json.dumps(raw, indent=1, default=float) + "\n", encoding="utf-8")
    print(f"\nwrote {json_path} and {plot(cases, engines, results)}")


if __name__ == "__main__":
    main()
