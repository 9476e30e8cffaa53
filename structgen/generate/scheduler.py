"""`Scheduler`: continuous batching — requests join and leave one running batch at any step.

A static batch (`Generator.generate_batch`) runs until its longest request ends, and a request
that arrives meanwhile waits for all of it. The scheduler keeps one `DecodeBatch` running instead:
before every step it admits queued requests (their prompts are prefilled in the same forward as
the running rows' decode tokens, see `DecodeBatch.admit`), and rows leave the moment they finish.

Admission is first come, first served (the head of the queue is never overtaken, so no request
starves) under two limits: `max_batch` rows, and a KV budget in tokens — each request reserves
`len(prompt) + max_new_tokens` (capped at the model's context), the most cache it can ever use,
until it finishes. A request larger than the whole budget still runs, alone.

Drive it synchronously (`step()`, `run_until_idle()`, or just `handle.result()` / iterating a
handle, which step while they wait) or on a background thread (`start()` / `stop()`); `submit()`
is thread-safe either way. See docs/design/generation.md.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import torch

from structgen.compiler import CompiledGrammar
from structgen.errors import GenerationError
from structgen.generate.batch import DecodeBatch
from structgen.generate.loop import Generator
from structgen.generate.params import SamplingParams
from structgen.generate.requests import Prompt, Request
from structgen.generate.results import GenerationResult, RequestMetrics

__all__ = ["RequestHandle", "Scheduler", "SchedulerMetrics"]


@dataclass(frozen=True, slots=True)
class SchedulerMetrics:
    """Totals since the scheduler was created (times in seconds).

    `elapsed` runs from the first submission to the last finished request (to now while busy);
    `tokens_per_second` is every finished request's output tokens over it. `mean_batch_size` is
    the mean number of rows per forward; `busy_time` the time spent inside `step()`.
    """

    submitted: int
    finished: int
    output_tokens: int
    steps: int
    mean_batch_size: float
    busy_time: float
    elapsed: float

    @property
    def tokens_per_second(self) -> float:
        return self.output_tokens / self.elapsed if self.elapsed > 0 else 0.0


_END = object()  # the end of a handle's stream of deltas


class _Entry:
    """A submitted request's state inside the scheduler (the handle the user holds is separate,
    so that the scheduler can tell when it is dropped)."""

    __slots__ = (
        "cost",
        "deltas",
        "error",
        "finalizer",
        "finished",
        "request",
        "result",
        "submitted_at",
    )

    def __init__(self, request: Request, cost: int, submitted_at: float) -> None:
        self.request = request
        self.cost = cost
        self.submitted_at = submitted_at
        self.deltas: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.finished = threading.Event()
        self.result: GenerationResult | None = None
        self.error: BaseException | None = None
        self.finalizer: Any = None  # weakref.finalize of the handle

    def finish(self, result: GenerationResult | None, error: BaseException | None) -> bool:
        """End the request (once: later calls are ignored); wakes every waiter."""
        if self.finished.is_set():
            return False
        self.result, self.error = result, error
        self.finished.set()
        self.deltas.put(_END)
        if self.finalizer is not None:
            self.finalizer.detach()
        return True


class RequestHandle:
    """One submitted request: iterate it for text deltas, `result()` for the `GenerationResult`.

    Without a background thread, `result()` and iteration drive the scheduler themselves.
    `cancel()` ends the request at the next step; a handle dropped before its request finished
    cancels it too (nobody can read the result any more).
    """

    def __init__(self, scheduler: Scheduler, entry: _Entry) -> None:
        self._scheduler = scheduler
        self._entry = entry
        self.request = entry.request
        self.submitted_at = entry.submitted_at
        self.cost = entry.cost

    @property
    def done(self) -> bool:
        """True once the request finished (or failed, or was cancelled)."""
        return self._entry.finished.is_set()

    @property
    def cancelled(self) -> bool:
        """True once the request ended by `cancel()` (its result says "cancelled")."""
        result = self._entry.result
        return result is not None and result.finish_reason == "cancelled"

    def cancel(self) -> None:
        """Stop the request at the next step (at once while it is queued): its KV-cache rows
        and its share of the budget are freed, and `result()` returns what it had produced,
        with `finish_reason="cancelled"`. Does nothing once the request has finished."""
        self._scheduler._cancel(self._entry)

    def result(self, timeout: float | None = None) -> GenerationResult:
        """The finished result; waits (or steps the scheduler) until it is there.

        `timeout` (seconds): raise `TimeoutError` if it is not there by then; the request goes
        on (cancel it to stop it).
        """
        entry = self._entry
        deadline = None if timeout is None else time.perf_counter() + timeout
        scheduler = self._scheduler
        while not entry.finished.is_set() and not scheduler.running:
            if deadline is not None and time.perf_counter() >= deadline:
                break
            if not scheduler.step():
                break
        left = None if deadline is None else max(0.0, deadline - time.perf_counter())
        if not entry.finished.wait(left):
            raise TimeoutError(f"the request did not finish within {timeout} s")
        if entry.error is not None:
            raise _failed(entry.error)
        assert entry.result is not None
        return entry.result

    def __iter__(self) -> Iterator[str]:
        """Text deltas as they are decoded (never ending inside a character or a stop string)."""
        entry = self._entry
        while True:
            try:
                item = entry.deltas.get_nowait()
            except queue.Empty:
                if self._scheduler.running or not self._scheduler.step():
                    item = entry.deltas.get()
                else:
                    continue
            if item is _END:
                if entry.error is not None:
                    raise _failed(entry.error)
                return
            assert isinstance(item, str)
            yield item


def _failed(error: BaseException) -> GenerationError:
    if isinstance(error, GenerationError):
        return error
    exc = GenerationError(f"the request failed: {error}")
    exc.__cause__ = error
    return exc


def _cancelled_result(entry: _Entry) -> GenerationResult:
    """The result of a request cancelled before it was admitted: nothing generated."""
    waited = time.perf_counter() - entry.submitted_at
    metrics = RequestMetrics(
        prompt_tokens=len(entry.request.prompt_ids),
        output_tokens=0,
        time_to_first_token=0.0,
        time_per_output_token=0.0,
        total_time=waited,
        forward_passes=0,
        forced_tokens=0,
        cached_prompt_tokens=0,
    )
    return GenerationResult("", (), "cancelled", metrics, complete=False)


def _abandon(abandoned: deque[_Entry], entry: _Entry) -> None:
    """A handle was garbage-collected before its request ended: cancel it at the next step.
    (Runs inside the garbage collector, on any thread: a lock-free append, nothing more.)"""
    abandoned.append(entry)


class Scheduler:
    """Continuous batching over `generator`'s model: `submit()` any time, from any thread.

    `max_batch`: the most rows in one forward. `kv_budget_tokens`: the most tokens the running
    requests may reserve (`len(prompt) + max_new_tokens` each); None: no limit. Admitted rows do
    not use the prefix cache (their prompts are fed whole).
    """

    def __init__(
        self,
        generator: Generator,
        *,
        max_batch: int = 16,
        kv_budget_tokens: int | None = None,
    ) -> None:
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise GenerationError(f"max_batch must be an integer >= 1, got {max_batch!r}")
        if kv_budget_tokens is not None and (
            isinstance(kv_budget_tokens, bool)
            or not isinstance(kv_budget_tokens, int)
            or kv_budget_tokens < 1
        ):
            raise GenerationError(
                f"kv_budget_tokens must be an integer >= 1 or None, got {kv_budget_tokens!r}"
            )
        self.generator = generator
        self.max_batch = max_batch
        self.kv_budget_tokens = kv_budget_tokens
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # guards the queue and the counters
        self._step_lock = threading.Lock()  # one step at a time, whoever drives
        self._queue: deque[_Entry] = deque()
        self._batch: DecodeBatch | None = None
        self._running: dict[int, _Entry] = {}  # batch row index → entry
        self._cancels: deque[_Entry] = deque()  # cancel() and dropped handles, for the next step
        self._reserved = 0
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._drain = True
        self._submitted = 0
        self._finished = 0
        self._output_tokens = 0
        self._steps = 0
        self._rows_fed = 0
        self._busy = 0.0
        self._first_submit: float | None = None
        self._last_finish: float | None = None

    # ------------------------------------------------------------------ submitting

    def submit(
        self,
        prompt: Prompt,
        params: SamplingParams | None = None,
        *,
        grammar: CompiledGrammar | None = None,
        chat: bool = False,
    ) -> RequestHandle:
        """Queue one request (checked now: a bad one raises `GenerationError` here)."""
        now = time.perf_counter()
        (request,) = self.generator._requests([prompt], params, [grammar], chat)
        entry = _Entry(request, self._cost(request), now)
        handle = RequestHandle(self, entry)
        entry.finalizer = weakref.finalize(handle, _abandon, self._cancels, entry)
        entry.finalizer.atexit = False
        with self._wake:
            self._queue.append(entry)
            self._submitted += 1
            if self._first_submit is None:
                self._first_submit = now
            self._wake.notify_all()
        return handle

    def _cost(self, request: Request) -> int:
        """The KV tokens a request reserves: its prompt plus every token it may generate."""
        cost = len(request.prompt_ids) + request.params.max_new_tokens
        context = self.generator.context_length
        return min(cost, context) if context is not None else cost

    # ------------------------------------------------------------------ driving

    @property
    def running(self) -> bool:
        """True while the background thread runs the loop."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def pending(self) -> int:
        """Requests submitted but not yet admitted."""
        with self._lock:
            return len(self._queue)

    @property
    def active(self) -> int:
        """Requests admitted and not yet finished."""
        with self._lock:
            return len(self._running)

    def _idle(self) -> bool:
        return not self._queue and not self._running

    def step(self) -> bool:
        """Admit what fits, run one forward for every active row, hand out deltas and results.

        Returns False when there was nothing to do (no active and no queued requests).
        """
        with self._step_lock:
            self._apply_cancels()
            with self._lock:
                admitted = self._take_admissible()
                if not admitted and not self._running:
                    return False
            start = time.perf_counter()
            try:
                with torch.inference_mode():
                    batch = self._admit(admitted)
                    rows = batch.size
                    batch.step()
            except BaseException as exc:
                self._fail(exc, admitted=admitted, queued=False)
                raise
            self._deliver(batch)
            with self._wake:
                self._steps += 1
                self._rows_fed += rows
                self._busy += time.perf_counter() - start
                self._wake.notify_all()
            return True

    def run_until_idle(self) -> None:
        """Step until every submitted request has finished."""
        while self.step():
            pass

    def _take_admissible(self) -> list[_Entry]:
        """Pop the queue's head while it fits the row limit and the KV budget (caller locks)."""
        taken: list[_Entry] = []
        budget = self.kv_budget_tokens
        while self._queue and len(self._running) + len(taken) < self.max_batch:
            head = self._queue[0]
            busy = self._running or taken
            if budget is not None and busy and self._reserved + head.cost > budget:
                break
            self._queue.popleft()
            self._reserved += head.cost
            taken.append(head)
        return taken

    def _admit(self, handles: list[_Entry]) -> DecodeBatch:
        batch = self._batch
        if batch is None or batch.done:  # start afresh: the old rows' state can go
            batch = self._batch = self.generator._batch([], use_prefix_cache=False)
        if handles:
            indices = batch.admit(
                [h.request for h in handles], arrived=[h.submitted_at for h in handles]
            )
            with self._lock:
                self._running.update(zip(indices, handles))
        return batch

    def _deliver(self, batch: DecodeBatch) -> None:
        for index, entry in list(self._running.items()):
            result = batch.results.get(index)
            delta = batch.row_text_delta(index, final=result is not None)
            if delta:
                entry.deltas.put(delta)
            if result is not None:
                with self._lock:
                    del self._running[index]
                    self._reserved -= entry.cost
                    self._finished += 1
                    self._output_tokens += result.metrics.output_tokens
                    self._last_finish = time.perf_counter()
                batch.release(index)  # the batch forgets it: memory stays flat under load
                entry.finish(result, None)

    def _cancel(self, entry: _Entry) -> None:
        """`RequestHandle.cancel()`: a queued request ends now, a running one at the next step
        (now, when nobody else is stepping)."""
        if entry.finished.is_set():
            return
        with self._wake:
            self._cancels.append(entry)
            self._wake.notify_all()
        if not self.running and self._step_lock.acquire(blocking=False):
            try:
                self._apply_cancels()
            finally:
                self._step_lock.release()

    def _apply_cancels(self) -> None:
        """End the requests cancelled since the last step (caller holds the step lock)."""
        batch = self._batch
        while self._cancels:
            entry = self._cancels.popleft()
            if entry.finished.is_set():
                continue
            with self._lock:
                if entry in self._queue:
                    self._queue.remove(entry)
                    queued = True
                else:
                    index = next((i for i, e in self._running.items() if e is entry), None)
                    queued = False
            if queued:
                entry.finish(_cancelled_result(entry), None)
                with self._lock:
                    self._finished += 1
            elif index is not None and batch is not None:
                batch.cancel(index)
        if batch is not None:
            self._deliver(batch)

    def _fail(
        self,
        error: BaseException,
        *,
        admitted: Sequence[_Entry] = (),
        queued: bool,
    ) -> None:
        """End the running requests (and those just `admitted`) with `error`, and with `queued`
        the queue too; the batch state is dropped (a step raised, or the loop is gone)."""
        with self._lock:
            entries = {id(e): e for e in [*self._running.values(), *admitted]}
            if queued:
                entries.update((id(e), e) for e in self._queue)
                self._queue.clear()
            self._running.clear()
            self._reserved = 0
            self._batch = None
        for entry in entries.values():
            entry.finish(None, error)

    # ------------------------------------------------------------------ background thread

    def start(self) -> Scheduler:
        """Run the loop on a daemon thread until `stop()`; returns self."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return self
            self._stopping = False
            self._thread = threading.Thread(
                target=self._loop, name="structgen-scheduler", daemon=True
            )
            self._thread.start()
        return self

    def stop(self, *, drain: bool = True, timeout: float | None = None) -> None:
        """Stop the background loop; with `drain` (default) after every submitted request ended.

        Without it the loop stops after the current step and every request not finished by then
        (queued or running) ends with a `GenerationError` ("the scheduler stopped"), so no
        waiter blocks; that also holds for a scheduler stepped without a thread.
        """
        thread = self._thread
        if thread is not None:
            with self._wake:
                self._stopping = True
                self._drain = drain
                self._wake.notify_all()
            thread.join(timeout)
            if not thread.is_alive():
                self._thread = None
        if not drain:
            with self._step_lock:  # after the step in progress, if any
                stopped = GenerationError("the scheduler stopped before this request finished")
                self._fail(stopped, queued=True)

    def _loop(self) -> None:
        try:
            while True:
                with self._wake:
                    while not self._stopping and self._idle() and not self._cancels:
                        self._wake.wait()
                    if self._stopping and (not self._drain or self._idle()):
                        return
                with contextlib.suppress(Exception):  # delivered to the failed requests
                    self.step()  # (applies the cancellations first, also when idle)
        except BaseException as exc:  # KeyboardInterrupt, SystemExit...: nobody may hang
            error = GenerationError(f"the scheduler loop stopped: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            self._fail(error, queued=True)
            raise

    def __enter__(self) -> Scheduler:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop(drain=exc_type is None)

    # ------------------------------------------------------------------ metrics

    @property
    def metrics(self) -> SchedulerMetrics:
        """Totals so far (see `SchedulerMetrics`)."""
        with self._lock:
            now = time.perf_counter()
            end = now if (self._queue or self._running) else (self._last_finish or now)
            elapsed = end - self._first_submit if self._first_submit is not None else 0.0
            return SchedulerMetrics(
                submitted=self._submitted,
                finished=self._finished,
                output_tokens=self._output_tokens,
                steps=self._steps,
                mean_batch_size=self._rows_fed / self._steps if self._steps else 0.0,
                busy_time=self._busy,
                elapsed=elapsed,
            )
