"""Threads sharing compiled grammars: T threads walk the first valid instances of N MaskBench
schemas (Llama-3.1 tokenizer, accept mode), each thread a share of R passes over all of them in
a turned order, every mask filled on cold grammars that all threads share — against one thread
doing all R passes. Every pass's masks must equal a single thread's on grammars of their own.

This is what a server's request threads do with one compile cache; on a free-threaded CPython
(3.13t, 3.14t) they run at once, under the GIL they take turns. Run it on each:
`python benchmarks/threads.py [--schemas 100] [--passes 8] [--threads 1,2,8] [--rounds 3]`
(for a free-threaded build: `make test-free-threaded` makes `.venv-ft`, then
`PYTHONPATH=. .venv-ft/bin/python benchmarks/threads.py`). Prints the medians; writes
`benchmarks/results/threads.json` (an entry per interpreter).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from _common import RESULTS, load_tokenizer, print_table

SCHEMAS = Path(__file__).resolve().parents[2] / "shared" / "maskbench-dev"


def _cases(count: int, tokenizer: Any, compile_one: Any) -> list[tuple[Any, list[int]]]:
    """`count` (schema, token ids of its first valid instance) that compile, seeded order."""
    names = sorted(p.name for p in SCHEMAS.glob("*.json"))
    random.Random(1).shuffle(names)
    out: list[tuple[Any, list[int]]] = []
    for name in names:
        case = json.loads((SCHEMAS / name).read_text())
        valid = [t for t in case["tests"] if t["valid"]]
        if valid and compile_one(case["schema"]) is not None:
            text = json.dumps(valid[0]["data"], ensure_ascii=False)
            out.append((case["schema"], tokenizer.encode(text, add_special_tokens=False)))
            if len(out) == count:
                break
    return out


def _digest(grammar: Any, ids: list[int], size: int) -> str:
    """The masks along `ids` (a digest), or "rejected" where the instance is not accepted."""
    from structgen import Matcher, allocate_bitmask

    matcher = Matcher(grammar)
    bitmask = allocate_bitmask(1, size, backend="numpy")
    digest = hashlib.sha256()
    for token in ids:
        matcher.fill_bitmask(bitmask)
        digest.update(bitmask.tobytes())
        if not matcher.accept_token(token):
            return "rejected"
    matcher.fill_bitmask(bitmask)
    digest.update(bitmask.tobytes())
    return digest.hexdigest()


def _round(cases: Any, vocab: Any, threads: int, passes: int, limit: int) -> tuple[float, int]:
    """One round on fresh grammars (cache limits unique to it: nothing shared with earlier
    rounds): (seconds, passes whose masks differ from a single thread's)."""
    from structgen import CompileLimits, Compiler, SchemaOptions

    accept = SchemaOptions(mode="accept")
    reference = Compiler(vocab, limits=CompileLimits(max_cached_masks=limit))
    shared = Compiler(vocab, limits=CompileLimits(max_cached_masks=limit + 1))
    want = [_digest(reference.json_schema(s, options=accept), ids, vocab.size) for s, ids in cases]
    grammars = [(shared.json_schema(s, options=accept), ids) for s, ids in cases]
    got: dict[int, list[str]] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def work(first: int) -> None:
        try:
            barrier.wait()
            for turn in range(first, passes, threads):
                order = list(range(len(grammars)))
                order = order[turn:] + order[:turn]
                found = {i: _digest(*grammars[i], vocab.size) for i in order}
                got[turn] = [found[i] for i in range(len(grammars))]
        except BaseException as exc:  # reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - started
    if errors:
        raise errors[0]
    return seconds, sum(digests != want for digests in got.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--schemas", type=int, default=100)
    parser.add_argument("--passes", type=int, default=8)
    parser.add_argument("--threads", default="1,2,8")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not SCHEMAS.is_dir():
        sys.exit(f"needs {SCHEMAS}")
    from peers import StructgenPeer

    from structgen import Compiler, SchemaOptions, StructgenError

    tokenizer = load_tokenizer("llama3_1")
    vocab = StructgenPeer(tokenizer).vocab  # (its tables built before any timing)
    probe = Compiler(vocab)

    def compiles(schema: Any) -> Any:
        try:
            return probe.json_schema(schema, options=SchemaOptions(mode="accept"))
        except StructgenError:
            return None

    cases = _cases(args.schemas, tokenizer, compiles)
    counts = [int(t) for t in args.threads.split(",")]
    times: dict[int, list[float]] = {t: [] for t in counts}
    wrong = 0
    limit = 4000  # (two fresh cache limits per round and thread count)
    for _ in range(args.rounds):
        for count in counts:
            seconds, bad = _round(cases, vocab, count, args.passes, limit)
            limit -= 2
            times[count].append(seconds)
            wrong += bad
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    label = f"{sys.version.split()[0]}{'' if gil else ', no GIL'}"
    one = statistics.median(times[counts[0]])
    rows = []
    for t in counts:
        median = statistics.median(times[t])
        rows.append([label, str(t), f"{median:.2f}", f"{one / median:.2f}x"])
    print(f"{len(cases)} schemas, {args.passes} passes, {args.rounds} rounds", end="; ")
    print(f"passes whose masks differ from one thread's: {wrong}")
    print_table(["python", "threads", "seconds", f"vs {counts[0]}"], rows)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "threads.json"  # (one entry per interpreter: run it on each)
    summary = json.loads(path.read_text()) if path.exists() else {}
    summary[label] = {"schemas": len(cases), "passes": args.passes, "wrong": wrong}
    summary[label]["seconds"] = {str(t): statistics.median(times[t]) for t in counts}
    path.write_text(json.dumps(summary, indent=2))
    if wrong:
        sys.exit(f"{wrong} passes gave other masks than a single thread")


if __name__ == "__main__":
    main()
