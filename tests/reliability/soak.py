"""A soak of the own loop: one background `Scheduler`, several client threads, every kind of
request and every way a request can end (issue 19). Shared by the suite's small soak test and
`benchmarks/soak.py` (longer, with a report).

Each client submits a seeded mix: regexes, choices, JSON schemas, free text, mixed sampling, bad
requests (refused at `submit`), cancellations mid-stream and handles dropped unread. One step
raises an injected fault (the requests in that batch fail, the loop goes on), and the run ends
with `stop(drain=False)` while requests are still queued and running. Every entry must end
exactly once; every complete constrained output must validate.
"""

from __future__ import annotations

import contextlib
import gc
import json
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from structgen import Compiler, GenerationError, SamplingParams, StructgenError
from structgen.generate import Scheduler
from structgen.generate import scheduler as scheduler_module
from structgen.generate.batch import DecodeBatch
from tests.generate.test_generator import PERSON, PHONE

CHOICES = ["croissant", "baguette", "brioche"]
QUESTIONS = [
    "When do you open?",
    "A phone number for the bakery?",
    "Which bread should I buy?",
    "Describe the baker as JSON.",
]


@dataclass
class SoakReport:
    submitted: int = 0
    refused: int = 0  # bad requests, refused at submit with a typed error
    outcomes: Counter[str] = field(default_factory=Counter)  # finish reason or "error"
    invalid: list[str] = field(default_factory=list)  # complete outputs the oracle rejects
    finished_twice: int = 0
    unfinished: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    rss_mb: list[tuple[float, float]] = field(default_factory=list)  # (seconds, RSS MB)

    @property
    def tokens_per_second(self) -> float:
        return self.output_tokens / self.seconds if self.seconds else 0.0


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@contextlib.contextmanager
def _count_finishes(counts: Counter[int]) -> Iterator[None]:
    """Count, per entry, how often it really ended (`_Entry.finish` returning True)."""
    original = scheduler_module._Entry.finish

    def finish(self: Any, result: Any, error: Any) -> bool:
        done: bool = original(self, result, error)
        if done:
            counts[id(self)] += 1
        return done

    scheduler_module._Entry.finish = finish  # type: ignore[method-assign]
    try:
        yield
    finally:
        scheduler_module._Entry.finish = original  # type: ignore[method-assign]


@contextlib.contextmanager
def _one_fault(after_steps: int) -> Iterator[None]:
    """The `after_steps`-th batch step raises (once)."""
    original = DecodeBatch.step
    calls = [0]

    def step(self: DecodeBatch) -> None:
        calls[0] += 1
        if calls[0] == after_steps:
            raise RuntimeError("injected fault")
        original(self)

    DecodeBatch.step = step  # type: ignore[method-assign]
    try:
        yield
    finally:
        DecodeBatch.step = original  # type: ignore[method-assign]


def _validate(kind: str, text: str) -> bool:
    if kind == "phone":
        return re.fullmatch(PHONE, text) is not None
    if kind == "choice":
        return text in CHOICES
    if kind == "person":
        try:
            jsonschema.validate(json.loads(text), PERSON)
        except (ValueError, jsonschema.ValidationError):
            return False
    return True


def run_soak(
    generator: Any,
    *,
    clients: int = 4,
    requests_per_client: int = 12,
    max_batch: int = 6,
    seed: int = 0,
    fault_after_steps: int = 15,
) -> SoakReport:
    """Run the soak (see the module docstring) and report what happened."""
    compiler = Compiler(generator.vocab)
    grammars = {
        "phone": compiler.regex(PHONE),
        "choice": compiler.choice(CHOICES),
        "person": compiler.json_schema(PERSON),
        "free": None,
    }
    report = SoakReport()
    lock = threading.Lock()
    kept: list[tuple[str, Any]] = []
    counts: Counter[int] = Counter()
    entries: list[Any] = []
    started = time.perf_counter()

    def client(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        for _ in range(requests_per_client):
            roll = rng.random()
            kind = rng.choice(list(grammars))
            params = SamplingParams(
                max_new_tokens=rng.choice([24, 32]),
                temperature=rng.choice([0.0, 0.7, 1.0]),
                seed=rng.randrange(1000),
            )
            prompt = [{"role": "user", "content": rng.choice(QUESTIONS)}]
            if roll < 0.08:  # a bad request: refused at the door
                bad = rng.choice([42, b"bytes", {"max_new_tokens": 4}])
                try:
                    if isinstance(bad, dict):
                        scheduler.submit(prompt, bad)  # type: ignore[arg-type]
                    else:
                        scheduler.submit(bad)  # type: ignore[arg-type]
                except StructgenError:
                    with lock:
                        report.refused += 1
                continue
            handle = scheduler.submit(prompt, params, grammar=grammars[kind], chat=True)
            with lock:
                report.submitted += 1
                entries.append(handle._entry)
            if roll < 0.2:  # cancelled after its first delta
                with contextlib.suppress(GenerationError, StopIteration):
                    next(iter(handle))
                handle.cancel()
                with lock:
                    kept.append((kind, handle))
            elif roll < 0.3:  # dropped unread
                del handle
                gc.collect()
            else:
                with lock:
                    kept.append((kind, handle))
            with lock:
                report.rss_mb.append((time.perf_counter() - started, rss_mb()))
            time.sleep(rng.random() * 0.05)

    with _count_finishes(counts), _one_fault(fault_after_steps):
        scheduler = Scheduler(generator, max_batch=max_batch).start()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # some requests finish, then stop mid-stream
        for _, handle in kept[: len(kept) // 2]:
            with contextlib.suppress(GenerationError):
                handle.result(timeout=120)
        scheduler.stop(drain=False)
    report.seconds = time.perf_counter() - started
    for kind, handle in kept:
        try:
            result = handle.result(timeout=5)
        except GenerationError:
            report.outcomes["error"] += 1
            continue
        except TimeoutError:
            report.unfinished += 1
            continue
        report.outcomes[result.finish_reason] += 1
        report.output_tokens += result.metrics.output_tokens
        if (
            result.complete
            and result.finish_reason != "cancelled"
            and not _validate(kind, result.text)
        ):
            report.invalid.append(f"{kind}: {result.text!r}")
    for entry in entries:
        n = counts[id(entry)]
        if n == 0:
            report.unfinished += 1
        elif n > 1:
            report.finished_twice += 1
    return report
