"""The persistent compile cache: compile + first mask after a restart, cold vs loaded.

Three fresh processes over the same MaskBench schemas (Llama-3.1 tokenizer, accept mode as in
benchmarks/maskbench.py), each timing compile + first mask per schema with the in-memory
grammar cache cleared before each (automata shared between schemas stay, as in a server):

* `compile`: no compile cache (what every restart pays today);
* `save`: an empty cache directory (the first run after enabling it: compile, then write);
* `load`: the same directory again (the next restart: read the files).

llguidance compiles the same schemas in a fourth process when it is installed (a reference:
it has no persistent cache). The first masks of `compile` and `load` must be identical (the
script counts differences). Run: `python benchmarks/compile_cache.py [--limit N] [--seed S]`.
Writes `benchmarks/results/compile_cache.json`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import RESULTS, fmt, load_tokenizer, percentile, print_table

SCHEMAS = Path(__file__).resolve().parents[2] / "shared" / "maskbench-dev"


def _phase(phase: str, files: list[str], cache: str | None) -> dict[str, Any]:
    """Run in a fresh process: time compile + first mask of each schema."""
    tokenizer = load_tokenizer("llama3_1")
    out: dict[str, Any] = {"times": {}, "masks": {}, "second": {}, "errors": 0}
    if phase == "llguidance":
        from peers import LLGuidancePeer

        peer = LLGuidancePeer(tokenizer)
        llg = peer.llg
        for name in files:
            schema = json.loads((SCHEMAS / name).read_text())["schema"]
            peer.release()
            start = time.perf_counter()
            try:
                peer.use(
                    llg.LLMatcher.grammar_from_json_schema(
                        schema, defaults={"whitespace_flexible": True}
                    )
                )
                peer.fill()
            except Exception:
                out["errors"] += 1
                continue
            out["times"][name] = time.perf_counter() - start
        return out

    from peers import StructgenPeer

    import structgen.compiler
    from structgen import Compiler, SchemaOptions, StructgenError

    peer = StructgenPeer(tokenizer)
    compiler = Compiler(peer.vocab, cache_dir=cache)
    accept = SchemaOptions(mode="accept")
    for name in files:
        schema = json.loads((SCHEMAS / name).read_text())["schema"]
        peer.release()  # (the previous schema's teardown is not timed, as in maskbench.py)
        structgen.compiler._CACHE.clear()
        start = time.perf_counter()
        try:
            peer.use(compiler.json_schema(schema, options=accept))
            peer.fill()
        except StructgenError:
            out["errors"] += 1
            continue
        out["times"][name] = time.perf_counter() - start
        out["masks"][name] = hashlib.sha256(peer.bitmask.tobytes()).hexdigest()[:16]
        # the next step: a loaded grammar restores its automata here (the first mask is read)
        allowed = np.flatnonzero(np.unpackbits(peer.bitmask[0].view(np.uint8), bitorder="little"))
        if len(allowed):
            start = time.perf_counter()
            peer.accept(int(allowed[0]))
            peer.fill()
            out["second"][name] = time.perf_counter() - start
    disk = compiler.disk_cache
    if disk is not None:
        out["hits"], out["misses"], out["rejected"] = disk.hits, disk.misses, disk.rejected
    return out


def _run_phase(phase: str, files: list[str], cache: str | None) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(files, handle)
    args = [sys.executable, __file__, "--phase", phase, "--files", handle.name]
    if cache is not None:
        args += ["--cache", cache]
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _stats(times: list[float]) -> list[float]:
    ms = [t * 1e3 for t in times]
    return [percentile(ms, 50), percentile(ms, 90), percentile(ms, 99), sum(ms) / len(ms)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=200, help="schemas sampled (0: all)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--files", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        files = json.loads(Path(args.files).read_text())
        print(json.dumps(_phase(args.phase, files, args.cache)))
        return

    names = sorted(p.name for p in SCHEMAS.glob("*.json"))
    if args.limit:
        names = random.Random(args.seed).sample(names, min(args.limit, len(names)))
    with tempfile.TemporaryDirectory() as cache:
        runs = {
            "compile": _run_phase("compile", names, None),
            "save": _run_phase("save", names, cache),
            "load": _run_phase("load", names, cache),
        }
        files = list(Path(cache).glob("*.sgc"))
        sizes = sorted(f.stat().st_size for f in files)
    try:
        runs["llguidance"] = _run_phase("llguidance", names, None)
    except subprocess.CalledProcessError:
        print("(llguidance is not installed: pip install -e '.[bench]')")

    loaded = runs["load"]
    # schemas compiled by every structgen run; the loaded ones are those the cache saved
    common = sorted(
        set(runs["compile"]["times"]) & set(runs["save"]["times"]) & set(loaded["times"])
    )
    same = sum(runs["compile"]["masks"][n] == loaded["masks"][n] for n in common)
    rows = []
    table: dict[str, Any] = {}
    for label, run in runs.items():
        times = [run["times"][n] for n in common if n in run["times"]]
        if not times:
            continue
        stats = _stats(times)
        table[label] = dict(zip(("p50_ms", "p90_ms", "p99_ms", "mean_ms"), stats))
        rows.append([label, len(times), *(fmt(v) for v in stats)])
    print(f"compile + first mask, {len(common)} MaskBench schemas, fresh process each run (ms)")
    print_table(["run", "schemas", "p50", "p90", "p99", "mean"], rows)
    ratio = {
        k: table["compile"][k] / table["load"][k] for k in ("p50_ms", "p90_ms", "p99_ms", "mean_ms")
    }
    print(
        "compile / load: "
        + ", ".join(f"{k.split('_')[0]} {v:.1f}x" for k, v in ratio.items())
        + f"; loaded from a file {loaded.get('hits', 0)} of {len(common)}"
        f" (the rest compiled again: not saved); first masks identical {same} of"
        f" {len(common)}; files {len(sizes)}, median {sizes[len(sizes) // 2] / 1024:.0f} KiB,"
        f" total {sum(sizes) / 2**20:.1f} MiB"
    )
    seconds = {
        label: _stats([run["second"][n] for n in common if n in run.get("second", {})])
        for label, run in runs.items()
        if label != "llguidance"
    }
    print(
        "the next step (accept the lowest allowed token, fill the second mask; a loaded grammar"
        " restores its automata here), p50 / p90 / mean (ms): "
        + "; ".join(f"{k} {fmt(v[0])} / {fmt(v[1])} / {fmt(v[3])}" for k, v in seconds.items())
    )
    # what a restart saves over the first two masks: a load defers work to the next step
    both = {
        label: _stats(
            [
                run["times"][n] + run["second"][n]
                for n in common
                if n in run.get("second", {}) and n in runs["compile"].get("second", {})
            ]
        )
        for label, run in runs.items()
        if label in ("compile", "load")
    }
    two = {
        k: both["compile"][i] / both["load"][i] for i, k in enumerate(("p50", "p90", "p99", "mean"))
    }
    print(
        "the first two masks (compile or load + first mask, then the next step), p50 / p90 / mean"
        f" (ms): compile {fmt(both['compile'][0])} / {fmt(both['compile'][1])} /"
        f" {fmt(both['compile'][3])}; load {fmt(both['load'][0])} / {fmt(both['load'][1])} /"
        f" {fmt(both['load'][3])}; compile / load: "
        + ", ".join(f"{k} {v:.1f}x" for k, v in two.items())
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "compile_cache.json").write_text(
        json.dumps(
            {
                "schemas": len(common),
                "seed": args.seed,
                "runs": table,
                "next_step": {
                    k: dict(zip(("p50_ms", "p90_ms", "p99_ms", "mean_ms"), v))
                    for k, v in seconds.items()
                },
                "ratio_compile_over_load": ratio,
                "first_two_masks": {
                    k: dict(zip(("p50_ms", "p90_ms", "p99_ms", "mean_ms"), v))
                    for k, v in both.items()
                },
                "ratio_first_two_masks": two,
                "loaded": loaded.get("hits", 0),
                "rejected": loaded.get("rejected", 0),
                "identical_first_masks": same,
                "file_bytes": {"median": sizes[len(sizes) // 2], "total": sum(sizes)},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
