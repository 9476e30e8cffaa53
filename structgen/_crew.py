"""`Crew`: helper threads that share one job with the calling thread, handed over in microseconds.

`fill_bitmasks` parallelises a batch step's first-visit masks: a few rows of ~0.1–1.5 ms each,
every ~0.5 ms in a lockstep decode. A `ThreadPoolExecutor` hands work over through a queue and a
condition variable: a round trip of 90–150 µs on a 2-core VM (the sleeping thread is woken by the
kernel), as long as a quarter of the step's parallel work. A crew's helper spins for a short
while after each job (`STRUCTGEN_FILL_SPIN_US`, default 500; 0 under the GIL, where a spinning
thread would hold it) watching a generation counter, so the next job starts at once; only
then does it sleep on a condition variable, from which the caller wakes it as a pool would.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

__all__ = ["Crew", "crew_of", "gil_enabled"]


def gil_enabled() -> bool:
    """Whether this interpreter runs with the GIL (always before 3.13; a free-threaded build may
    have it turned back on)."""
    enabled = getattr(sys, "_is_gil_enabled", None)
    return enabled is None or bool(enabled())


def _spin_seconds() -> float:
    if gil_enabled():
        return 0.0
    text = os.environ.get("STRUCTGEN_FILL_SPIN_US", "").strip()
    return (int(text) if text.isdigit() else 500) / 1e6


class Crew:
    """`size` daemon helper threads; `run(job)` calls `job()` on the caller and on the helpers
    at once and returns when every call has returned (a helper's exception is raised there).
    The job must share its work out itself (the helpers and the caller pop from one list).
    One job at a time: a second caller meanwhile runs its job alone."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._job: Callable[[], None] | None = None
        self._generation = 0
        self._running = 0  # helpers inside a job
        self._parked = 0  # helpers asleep on `_wake`
        self._errors: list[BaseException] = []
        self._closed = False
        self._busy = threading.Lock()  # (held by the caller whose job the helpers share)
        self._spin = _spin_seconds()
        self._threads = [
            threading.Thread(target=self._serve, name=f"structgen-fill-{k}", daemon=True)
            for k in range(size)
        ]
        for thread in self._threads:
            thread.start()

    def run(self, job: Callable[[], None]) -> None:
        if not self._busy.acquire(blocking=False):
            job()
            return
        try:
            self._share(job)
        finally:
            self._busy.release()

    def close(self) -> None:
        """Let the helpers end (after their current job)."""
        with self._wake:
            self._closed = True
            self._generation += 1
            self._wake.notify_all()

    def _share(self, job: Callable[[], None]) -> None:
        with self._wake:
            self._job = job
            self._generation += 1
            if self._parked:
                self._wake.notify_all()
        try:
            job()
        finally:
            with self._lock:
                self._job = None  # (a helper arriving later finds nothing to do)
            while self._running:  # (helpers finish their last row: a few hundred µs at most)
                if not self._spin:
                    time.sleep(0)  # (under the GIL: let them have it)
        if self._errors:
            error = self._errors.pop()
            self._errors.clear()
            raise error

    def _serve(self) -> None:
        seen = 0
        while True:
            if self._generation == seen:
                deadline = time.perf_counter() + self._spin
                while self._generation == seen and time.perf_counter() < deadline:
                    pass
                if self._generation == seen:
                    with self._wake:
                        self._parked += 1
                        while self._generation == seen:
                            self._wake.wait()
                        self._parked -= 1
            with self._lock:
                if self._closed:
                    return
                seen = self._generation
                job = self._job
                if job is None:
                    continue
                self._running += 1
            try:
                job()
            except BaseException as exc:  # (raised on the caller's thread, as a pool would)
                self._errors.append(exc)
            finally:
                with self._lock:
                    self._running -= 1


_CREW: Crew | None = None
_CREW_LOCK = threading.Lock()


def crew_of(size: int) -> Crew:
    """The process's crew, with at least `size` helpers (a smaller one is closed and replaced)."""
    global _CREW
    with _CREW_LOCK:
        if _CREW is None or _CREW.size < size:
            if _CREW is not None:
                _CREW.close()
            _CREW = Crew(size)
        return _CREW


def _forget_after_fork() -> None:
    global _CREW
    _CREW = None  # (a forked child has none of the parent's threads)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
