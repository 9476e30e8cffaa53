"""`Crew`: the helper threads of `fill_bitmasks` share a job with the calling thread, raise
their errors there, never run two jobs at once, and end when replaced."""

from __future__ import annotations

import functools
import sys
import threading
import time

import pytest

import structgen._crew as crew_module
from structgen._crew import Crew, crew_of


def _share_out(items: list[int], done: list[tuple[int, str]]) -> None:
    """A job in the shape `fill_bitmasks` gives: every thread pops from one list."""
    while True:
        try:
            item = items.pop()
        except IndexError:
            return
        time.sleep(0.0005)  # (a row's worth of work: long enough for a helper to join)
        done.append((item, threading.current_thread().name))


def test_every_item_is_done_once_by_the_caller_and_the_helpers() -> None:
    crew = Crew(2)
    try:
        for _ in range(3):  # (the same helpers, job after job)
            items = list(range(60))
            done: list[tuple[int, str]] = []
            crew.run(functools.partial(_share_out, items, done))
            assert sorted(item for item, _ in done) == list(range(60))
            names = {name for _, name in done}
            assert threading.current_thread().name in names
            assert names & {"structgen-fill-0", "structgen-fill-1"}
    finally:
        crew.close()


def test_a_helpers_error_is_raised_on_the_caller() -> None:
    crew = Crew(1)
    started = threading.Event()

    def job() -> None:
        if threading.current_thread() is threading.main_thread():
            assert started.wait(10), "the helper never joined"
            return
        started.set()
        raise ValueError("from a helper")

    try:
        with pytest.raises(ValueError, match="from a helper"):
            crew.run(job)
        items = list(range(10))
        done: list[tuple[int, str]] = []
        crew.run(functools.partial(_share_out, items, done))  # (still works after the error)
        assert sorted(item for item, _ in done) == list(range(10))
    finally:
        crew.close()


def test_a_second_caller_meanwhile_runs_its_job_alone() -> None:
    crew = Crew(1)
    inside = threading.Event()
    release = threading.Event()
    second: list[str] = []

    def long_job() -> None:
        if threading.current_thread().name == "first":
            inside.set()
            assert release.wait(10)

    def first() -> None:
        crew.run(long_job)

    caller = threading.Thread(target=first, name="first")
    caller.start()
    try:
        assert inside.wait(10)
        crew.run(lambda: second.append(threading.current_thread().name))
        assert second == [threading.current_thread().name]  # (no helper was lent to it)
    finally:
        release.set()
        caller.join(10)
        crew.close()
    assert not caller.is_alive()


def test_a_larger_crew_replaces_and_ends_the_smaller_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(crew_module, "_CREW", None)
    small = crew_of(1)
    assert crew_of(1) is small
    large = crew_of(3)
    assert large is not small and large.size == 3 and crew_of(2) is large
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(small):
        time.sleep(0.01)
    assert not _alive(small)
    large.close()


def _alive(crew: Crew) -> bool:
    return any(t.name.startswith("structgen-fill-") and t.is_alive() for t in crew._threads)


def test_helpers_spin_only_without_the_gil(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRUCTGEN_FILL_SPIN_US", "250")
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    assert crew_module._spin_seconds() == (0.0 if gil else 0.00025)
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    assert crew_module._spin_seconds() == 0.00025
    monkeypatch.setenv("STRUCTGEN_FILL_SPIN_US", "soon")
    assert crew_module._spin_seconds() == 0.0005  # (not a number: the default)
