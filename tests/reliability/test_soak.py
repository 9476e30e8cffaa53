"""The small soak (issue 19): mixed requests from several threads, bad requests, cancellations,
dropped handles, a loop fault and a stop mid-stream on the default model; every request ends
exactly once, no complete output is invalid, and memory after warm-up stays bounded.
`benchmarks/soak.py` runs a longer one and prints the figures."""

from __future__ import annotations

import pytest
import torch

from tests.generate.test_generator import generator
from tests.reliability.soak import run_soak

pytestmark = pytest.mark.slow


def test_soak() -> None:
    torch.set_num_threads(1)
    report = run_soak(generator(), clients=4, requests_per_client=10)
    assert report.submitted >= 30
    assert report.unfinished == 0 and report.finished_twice == 0
    assert not report.invalid, report.invalid
    assert report.outcomes["cancelled"] >= 1
    assert report.outcomes["error"] >= 1  # the injected fault, or the stop
    assert sum(report.outcomes.values()) <= report.submitted
    warm = [mb for _, mb in report.rss_mb[len(report.rss_mb) // 3 :]]
    assert max(warm) - min(warm) < 200, report.rss_mb
