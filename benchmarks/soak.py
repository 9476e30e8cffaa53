"""A longer soak of the own loop (issue 19): one background `Scheduler` on the default model,
several client threads submitting a seeded mix (regexes, choices, JSON schemas, free text,
mixed sampling), bad requests, cancellations mid-stream, handles dropped unread, one injected
loop fault and a `stop(drain=False)` mid-stream (tests/reliability/soak.py).

Prints throughput, how every request ended, the error counts (requests that ended twice or never
and complete outputs the oracle rejects must be 0) and the RSS curve. Writes
`benchmarks/results/soak.json`.

Run: `python benchmarks/soak.py [--clients 8] [--requests 30] [--threads 2]`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from _common import RESULTS, print_table  # noqa: E402

from structgen import Generator  # noqa: E402
from structgen._assets import load_default_model  # noqa: E402
from tests.reliability.soak import run_soak  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=30, help="per client")
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_default_model()
    generator = Generator(model, tokenizer)
    report = run_soak(
        generator,
        clients=args.clients,
        requests_per_client=args.requests,
        max_batch=args.max_batch,
        fault_after_steps=40,
    )
    print_table(
        ["submitted", "refused at submit", "output tokens", "seconds", "tokens/s"],
        [
            [
                report.submitted,
                report.refused,
                report.output_tokens,
                f"{report.seconds:.1f}",
                f"{report.tokens_per_second:.1f}",
            ]
        ],
    )
    print()
    print_table(["ended as", "requests"], sorted(report.outcomes.items()))
    print()
    print_table(
        ["ended twice", "never ended", "invalid complete outputs"],
        [[report.finished_twice, report.unfinished, len(report.invalid)]],
    )
    curve = report.rss_mb
    step = max(1, len(curve) // 12)
    print()
    print_table(["t (s)", "RSS (MB)"], [[f"{t:.1f}", f"{mb:.0f}"] for t, mb in curve[::step]])
    warm = [mb for _, mb in curve[len(curve) // 3 :]]
    print(f"\nRSS after warm-up: min {min(warm):.0f} MB, max {max(warm):.0f} MB")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "soak.json").write_text(
        json.dumps(
            {
                "submitted": report.submitted,
                "refused": report.refused,
                "outcomes": dict(report.outcomes),
                "finished_twice": report.finished_twice,
                "unfinished": report.unfinished,
                "invalid": report.invalid,
                "output_tokens": report.output_tokens,
                "seconds": report.seconds,
                "rss_mb": curve,
            },
            indent=1,
        )
    )
    if report.finished_twice or report.unfinished or report.invalid:
        sys.exit(1)


if __name__ == "__main__":
    main()
