"""Shared helpers for the benchmark scripts: fixtures, timing, tables."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).resolve().parent / "results"


def save_figure(fig: Any, name: str, *, dpi: int = 120) -> Path:
    """Write a matplotlib figure to results/`name` and close it; returns the path."""
    import matplotlib.pyplot as plt

    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def pick_named(items: list[Any], wanted: str | None, parser: Any, what: str) -> list[Any]:
    """The `items` whose `.name` is in the comma-separated `wanted` (None: all); an unknown
    name is a usage error of `parser` naming the `what`."""
    if not wanted:
        return items
    names = wanted.split(",")
    unknown = set(names) - {item.name for item in items}
    if unknown:
        parser.error(f"unknown {what}: {', '.join(sorted(unknown))}")
    return [item for item in items if item.name in names]


def load_tokenizer(name: str) -> Any:
    from transformers import AutoTokenizer

    from structgen._assets import tokenizer_dir

    return AutoTokenizer.from_pretrained(str(tokenizer_dir(name)))


def time_call(fn: Callable[[], Any], *, repeat: int = 5) -> tuple[list[float], Any]:
    """Wall times in seconds of `repeat` calls, and the last result."""
    times: list[float] = []
    result: Any = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return times, result


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        padded = [c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        print("  ".join(padded))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def peer(name: str) -> Any | None:
    """Import a peer engine if installed (`make bench` installs them), else None."""
    try:
        return __import__(name, fromlist=["_"])
    except ImportError:
        print(f"(peer {name} is not installed: pip install -e '.[bench]')")
        return None


def mask_allows(bitmask: Any, token: int, row: int = 0) -> bool:
    """Whether `token` is set in row `row` of a packed int32 bitmask (numpy array)."""
    return bool((int(bitmask[row, token >> 5]) >> (token & 31)) & 1)


def fmt(value: float) -> str:
    """A number for a table cell: 3 significant-ish digits, '-' for nan."""
    if value != value:  # nan
        return "-"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"
