"""Every request ends exactly once, whatever happens to the loop (issue 19), on the real default
model: `stop(drain=False)`, cancellation, dropped handles, `result(timeout=)`, a loop killed by a
`BaseException`, and a batch that keeps admitting without growing."""

from __future__ import annotations

import gc
import threading
import time

import pytest
import torch

from structgen import GenerationError, SamplingParams
from structgen.generate import Scheduler
from tests.generate.test_generator import QUESTIONS, chat_ids, generator

pytestmark = pytest.mark.slow

torch.set_num_threads(1)

LONG = SamplingParams(max_new_tokens=64, ignore_eos=True)
SHORT = SamplingParams(max_new_tokens=3, ignore_eos=True)


def test_stop_without_drain_ends_queued_and_running_requests_at_once() -> None:
    scheduler = Scheduler(generator(), max_batch=1).start()
    running = scheduler.submit(chat_ids(QUESTIONS[0]), LONG)
    queued = scheduler.submit(chat_ids(QUESTIONS[1]), LONG)
    errors: list[BaseException] = []

    def wait(handle: object) -> None:
        try:
            handle.result()  # type: ignore[attr-defined]
        except BaseException as exc:
            errors.append(exc)

    waiters = [threading.Thread(target=wait, args=(h,)) for h in (running, queued)]
    for t in waiters:
        t.start()
    while not running.request or scheduler.active == 0:
        time.sleep(0.01)
    started = time.perf_counter()
    scheduler.stop(drain=False)
    for t in waiters:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in waiters)
    assert time.perf_counter() - started < 5
    assert len(errors) == 2
    assert all(isinstance(e, GenerationError) and "stopped" in str(e) for e in errors)
    with pytest.raises(GenerationError, match="stopped"):
        list(queued)
    assert scheduler.pending == 0 and scheduler.active == 0


def test_a_with_block_left_by_an_exception_ends_every_request() -> None:
    handles = []
    with pytest.raises(RuntimeError), Scheduler(generator(), max_batch=2) as scheduler:
        handles = [scheduler.submit(chat_ids(q), LONG) for q in QUESTIONS[:3]]
        raise RuntimeError("the caller's own error")
    for handle in handles:
        assert handle.done
        with pytest.raises(GenerationError, match="stopped"):
            handle.result(timeout=1)


def test_a_base_exception_in_the_loop_ends_every_request_it_holds() -> None:
    scheduler = Scheduler(generator(), max_batch=1)
    original = scheduler.step
    calls = 0

    def faulty() -> bool:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise KeyboardInterrupt("simulated")
        return original()

    scheduler.step = faulty  # type: ignore[method-assign]
    handles = [scheduler.submit(chat_ids(q), LONG) for q in QUESTIONS[:3]]
    caught: list[BaseException] = []
    hook = threading.excepthook
    threading.excepthook = lambda args: caught.append(args.exc_value)  # type: ignore[assignment]
    try:
        scheduler.start()
        for handle in handles:
            with pytest.raises(GenerationError, match="KeyboardInterrupt"):
                handle.result(timeout=30)
        assert scheduler._thread is not None
        scheduler._thread.join(timeout=10)
    finally:
        threading.excepthook = hook
    assert not scheduler.running
    assert any(isinstance(e, KeyboardInterrupt) for e in caught)  # it still propagated


def test_cancel_a_queued_and_a_running_request() -> None:
    scheduler = Scheduler(generator(), max_batch=1)
    running = scheduler.submit(chat_ids(QUESTIONS[0]), LONG)
    queued = scheduler.submit(chat_ids(QUESTIONS[1]), LONG)
    other = scheduler.submit(chat_ids(QUESTIONS[2]), SHORT)
    scheduler.step()
    scheduler.step()
    assert scheduler.active == 1 and scheduler.pending == 2
    queued.cancel()
    assert queued.done and queued.cancelled  # at once: it never ran
    result = queued.result(timeout=0)
    assert result.finish_reason == "cancelled" and result.token_ids == () and not result.complete
    running.cancel()  # nobody else steps: it ends now, with what it had produced
    assert running.done
    cut = running.result(timeout=0)
    assert cut.finish_reason == "cancelled" and 1 <= len(cut.token_ids) < 64
    assert scheduler.active == 0 and scheduler._reserved == 0  # its budget is free
    assert other.result().finish_reason == "length"  # the queue goes on
    running.cancel()  # finished: nothing happens
    assert scheduler.metrics.finished == 3


def test_cancel_from_another_thread_while_the_loop_runs() -> None:
    with Scheduler(generator(), max_batch=2) as scheduler:
        handle = scheduler.submit(chat_ids(QUESTIONS[0]), LONG)
        deltas = iter(handle)
        next(deltas)  # it is running
        threading.Thread(target=handle.cancel).start()
        rest = list(deltas)  # the stream ends instead of running to 64 tokens
        result = handle.result(timeout=10)
    assert result.finish_reason == "cancelled"
    assert len(result.token_ids) < 64
    assert isinstance(rest, list)


def test_a_dropped_handle_cancels_its_request() -> None:
    scheduler = Scheduler(generator(), max_batch=2)
    kept = scheduler.submit(chat_ids(QUESTIONS[0]), SHORT)
    scheduler.submit(chat_ids(QUESTIONS[1]), LONG)  # nobody holds its handle
    scheduler.step()
    gc.collect()
    scheduler.run_until_idle()
    assert kept.result(timeout=0).finish_reason == "length"
    metrics = scheduler.metrics
    assert metrics.finished == 2
    assert metrics.output_tokens < 3 + 64  # the dropped one stopped early


def test_result_timeout_raises_and_leaves_the_request_alone() -> None:
    scheduler = Scheduler(generator(), max_batch=1)
    handle = scheduler.submit(chat_ids(QUESTIONS[0]), LONG)
    with pytest.raises(TimeoutError):
        handle.result(timeout=0.05)
    assert not handle.done
    result = handle.result()
    assert result.finish_reason == "length" and len(result.token_ids) == 64


def test_a_batch_that_keeps_admitting_keeps_only_live_rows() -> None:
    scheduler = Scheduler(generator(), max_batch=2)
    handles = [scheduler.submit(chat_ids(QUESTIONS[0]), LONG)]  # keeps the batch alive
    for i in range(12):
        handles.append(scheduler.submit(chat_ids(QUESTIONS[1 + i % 3]), SHORT))
        scheduler.step()
        batch = scheduler._batch
        assert batch is not None and not batch.done
        assert len(batch._rows) <= 2 and len(batch.results) == 0
    scheduler.run_until_idle()
    assert all(h.done for h in handles)
