"""Reliability figures: fuzzed and malformed schemas, regexes and grammars under the default limits.

For each category: cases run, how many compiled, how many ended in a typed structgen error,
crashes (any other exception — must be 0), hangs (past the per-case bound — must be 0),
invalid outputs accepted (random walks through the masks that terminate with text the oracle
rejects — must be 0), the slowest compile and the largest memory one case allocated
(tracemalloc peak). The cases come from the seeded generators the tests use
(tests/reliability/fuzzing.py), over a byte-level vocabulary in which any text can be spelled.

Run: `python benchmarks/fuzz.py [--cases N] [--bound S]`.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
import tracemalloc
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lark  # noqa: E402
from _common import print_table  # noqa: E402
from jsonschema import Draft202012Validator  # noqa: E402
from jsonschema.exceptions import SchemaError as MetaSchemaError  # noqa: E402

from structgen import Compiler, Matcher, StructgenError, allocate_bitmask  # noqa: E402
from structgen.grammar.lark_frontend import builtin_names, load_builtin  # noqa: E402
from tests.reliability.fuzzing import (  # noqa: E402
    BAD_GRAMMARS,
    PATHOLOGICAL_REGEXES,
    Hang,
    bounded_fullmatch,
    byte_vocab,
    dumps_ok,
    malformed_schema,
    mutate_text,
    random_regex,
    random_walk,
    time_bound,
    valid_schema,
)

VOCAB = byte_vocab()
HEADERS = [
    "category",
    "cases",
    "compiled",
    "typed err",
    "crashes",
    "hangs",
    "walks checked",
    "invalid accepted",
    "slowest s",
    "peak MiB",
]
FORMATS = Draft202012Validator.FORMAT_CHECKER


@dataclass
class Tally:
    cases: int = 0
    compiled: int = 0
    typed_errors: int = 0
    crashes: int = 0
    hangs: int = 0
    invalid_accepted: int = 0
    walks: int = 0
    slowest_s: float = 0.0
    peak_bytes: int = 0
    notes: list[str] = field(default_factory=list)


def run_case(
    tally: Tally,
    compile_case: Callable[[], Any],
    check: Callable[[Any], None],
    bound: float,
    label: str,
) -> None:
    """Compile one case under the bound and memory tracing, then run its soundness check."""
    tally.cases += 1
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with time_bound(bound), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            grammar = compile_case()
            Matcher(grammar).fill_bitmask(allocate_bitmask(1, VOCAB.size))
    except Hang:
        tally.hangs += 1
        tally.notes.append(f"hang: {label}")
        grammar = None
    except StructgenError:
        tally.typed_errors += 1
        grammar = None
    except Exception as exc:  # a crash: the figure this script exists for
        tally.crashes += 1
        tally.notes.append(f"crash: {label}: {exc!r}")
        grammar = None
    finally:
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    tally.slowest_s = max(tally.slowest_s, elapsed)
    tally.peak_bytes = max(tally.peak_bytes, peak)
    if grammar is None:
        return
    tally.compiled += 1
    try:
        with time_bound(bound):
            check(grammar)
    except Hang:
        tally.hangs += 1
        tally.notes.append(f"hang in walks: {label}")
    except _Invalid as exc:
        tally.invalid_accepted += 1
        tally.notes.append(f"INVALID ACCEPTED: {label}: {exc}")
    except Exception as exc:
        tally.crashes += 1
        tally.notes.append(f"crash in walks: {label}: {exc!r}")


class _Invalid(Exception):
    pass


def _walks(
    tally: Tally, grammar: Any, rng: random.Random, oracle: Callable[[bytes], bool], n: int = 4
) -> None:
    for _ in range(n):
        out = random_walk(grammar, rng, max_tokens=120)
        if out is None:
            continue
        tally.walks += 1
        if not oracle(out):
            raise _Invalid(repr(out[:120]))


def schema_oracle(schema: Any) -> Callable[[bytes], bool]:
    validator = Draft202012Validator(schema, format_checker=FORMATS)

    def ok(out: bytes) -> bool:
        try:
            return validator.is_valid(json.loads(out.decode("utf-8")))
        except ValueError:
            return False

    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", type=int, default=300, help="cases per random category")
    parser.add_argument("--bound", type=float, default=30.0, help="seconds per case")
    args = parser.parse_args()
    n, bound = args.cases, args.bound
    tallies: dict[str, Tally] = {}

    t = tallies["malformed schemas"] = Tally()
    for seed in range(n):
        schema = malformed_schema(random.Random(seed))

        def check(g: Any, schema: Any = schema, seed: int = seed) -> None:
            if not dumps_ok(schema):
                return
            try:
                Draft202012Validator.check_schema(schema)
            except MetaSchemaError:
                return
            _walks(t, g, random.Random(seed), schema_oracle(schema))

        run_case(t, lambda s=schema: Compiler(VOCAB).json_schema(s), check, bound, f"seed {seed}")

    t2 = tallies["random valid schemas"] = Tally()
    for seed in range(n):
        schema = valid_schema(random.Random(seed))
        run_case(
            t2,
            lambda s=schema: Compiler(VOCAB).json_schema(s),
            lambda g, s=schema, seed=seed: _walks(t2, g, random.Random(seed), schema_oracle(s)),
            bound,
            f"seed {seed}",
        )

    t3 = tallies["random regexes"] = Tally()
    for seed in range(n):
        pattern = random_regex(random.Random(seed))
        _regex_case(t3, pattern, seed, bound)

    t4 = tallies["pathological regexes"] = Tally()
    for i, pattern in enumerate(PATHOLOGICAL_REGEXES):
        _regex_case(t4, pattern, i, bound)

    t5 = tallies["bad grammars"] = Tally()
    for i, text in enumerate(BAD_GRAMMARS):
        run_case(t5, lambda x=text: Compiler(VOCAB).grammar(x), lambda g: None, bound, f"#{i}")

    t6 = tallies["mutated grammars"] = Tally()
    names = builtin_names()
    for seed in range(n):
        rng = random.Random(seed)
        text = mutate_text(load_builtin(names[seed % len(names)]), rng)

        def lark_oracle(out: bytes, text: str = text) -> bool:
            try:
                lark.Lark(text, start="start", parser="earley").parse(out.decode("utf-8"))
            except lark.exceptions.LarkError:
                return False
            return True

        run_case(
            t6,
            lambda x=text: Compiler(VOCAB).grammar(x),
            lambda g, seed=seed, o=lark_oracle: _walks(t6, g, random.Random(seed), o, n=2),
            bound,
            f"seed {seed}",
        )

    rows = []
    for name, tally in tallies.items():
        rows.append(
            [
                name,
                str(tally.cases),
                str(tally.compiled),
                str(tally.typed_errors),
                str(tally.crashes),
                str(tally.hangs),
                str(tally.walks),
                str(tally.invalid_accepted),
                f"{tally.slowest_s:.2f}",
                f"{tally.peak_bytes / 2**20:.1f}",
            ]
        )
    print(f"bound {bound:.0f} s per case, default limits, byte-level vocabulary ({VOCAB.size} ids)")
    print_table(
        HEADERS,
        rows,
    )
    for name, tally in tallies.items():
        for note in tally.notes[:10]:
            print(f"  {name}: {note}")
    keys = ("crashes", "hangs", "invalid_accepted")
    total = {k: sum(getattr(t, k) for t in tallies.values()) for k in keys}
    print(f"\ntotal: {total}")
    sys.exit(1 if any(total.values()) else 0)


def _regex_case(tally: Tally, pattern: str, seed: int, bound: float) -> None:
    def check(g: Any) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                python = re.compile(pattern)
            except (re.error, RecursionError, OverflowError):
                raise _Invalid(f"compiled {pattern!r}, which Python's re rejects") from None
        # The oracle's own backtracking may explode on these patterns: unknown counts as fine.
        _walks(
            tally,
            g,
            random.Random(seed),
            lambda out: bounded_fullmatch(python, out.decode(), seconds=5.0) is not False,
        )

    run_case(tally, lambda: Compiler(VOCAB).regex(pattern), check, bound, repr(pattern))


if __name__ == "__main__":
    main()
