"""`Scheduler` (continuous batching) on the real default model (SmolLM2-135M-Instruct), on the CPU.

The oracle is `Generator.generate` alone: a request that joins a running batch at any step, with
any neighbours, must produce the same tokens (greedy, and seeded sampling with its own generator).
Short generations only.
"""

from __future__ import annotations

import functools
import json
import re
import threading

import jsonschema
import pytest
import torch

from structgen import Compiler, GenerationError, SamplingParams, SchemaOptions
from structgen.compiler import CompiledGrammar
from structgen.generate import GenerationResult, RequestHandle, Scheduler
from tests.generate.test_generator import PERSON, PHONE, QUESTIONS, chat_ids, generator

pytestmark = pytest.mark.slow

torch.set_num_threads(1)  # the forwards are tiny; more threads only contend on a busy machine

CHOICES = ("croissant", "baguette", "brioche")


@functools.cache
def grammars() -> dict[str, CompiledGrammar]:
    compiler = Compiler(generator().vocab)
    return {
        "phone": compiler.regex(PHONE),
        "choice": compiler.choice(list(CHOICES)),
        "person": compiler.json_schema(PERSON, options=SchemaOptions(whitespace="compact")),
    }


# name → (question, params, grammar name or None)
SPECS: dict[str, tuple[str, SamplingParams, str | None]] = {
    "free": (QUESTIONS[1], SamplingParams(max_new_tokens=10), None),
    "phone": ("A phone number for the bakery?", SamplingParams(max_new_tokens=16), "phone"),
    "choice": ("Which bread should I buy?", SamplingParams(max_new_tokens=8), "choice"),
    "person": ("Describe the baker as JSON.", SamplingParams(max_new_tokens=24), "person"),
    "sampled": (QUESTIONS[0], SamplingParams(max_new_tokens=8, temperature=0.9, seed=7), None),
    "penalty": (QUESTIONS[3], SamplingParams(max_new_tokens=8, repetition_penalty=1.5), None),
}


def submit(scheduler: Scheduler, name: str) -> RequestHandle:
    question, params, grammar = SPECS[name]
    g = grammars()[grammar] if grammar else None
    return scheduler.submit(chat_ids(question), params, grammar=g)


@functools.cache
def alone(name: str) -> GenerationResult:
    question, params, grammar = SPECS[name]
    g = grammars()[grammar] if grammar else None
    return generator().generate(chat_ids(question), params, grammar=g)


def check_valid(name: str, result: GenerationResult) -> None:
    """Every constrained output is a valid (prefix of a) match; complete ones fully match."""
    grammar = SPECS[name][2]
    if grammar is None:
        return
    assert result.finish_reason in ("eos", "length"), result
    if result.finish_reason != "eos":
        return
    text = result.text
    if grammar == "phone":
        assert re.fullmatch(PHONE, text), text
    elif grammar == "choice":
        assert text in CHOICES, text
    else:
        jsonschema.validate(json.loads(text), PERSON)


def test_joining_at_different_steps_is_token_identical() -> None:
    scheduler = Scheduler(generator())
    joins = {0: ["free", "phone"], 2: ["choice"], 3: ["person", "sampled"], 6: ["penalty"]}
    handles: dict[str, RequestHandle] = {}
    step = 0
    while step <= max(joins) or scheduler.active or scheduler.pending:
        for name in joins.get(step, []):
            handles[name] = submit(scheduler, name)
        scheduler.step()
        step += 1
    for name, handle in handles.items():
        assert handle.done
        result = handle.result()
        expected = alone(name)
        assert result.token_ids == expected.token_ids, name
        assert result.text == expected.text
        assert result.finish_reason == expected.finish_reason
        check_valid(name, result)
    metrics = scheduler.metrics
    assert metrics.finished == metrics.submitted == len(joins) + 2
    assert metrics.steps == step
    assert metrics.output_tokens == sum(len(h.result().token_ids) for h in handles.values())
    assert 1 < metrics.mean_batch_size <= len(handles)
    assert metrics.tokens_per_second > 0


def test_a_late_request_gets_its_first_token_before_the_others_finish() -> None:
    scheduler = Scheduler(generator())
    long = SamplingParams(max_new_tokens=20, ignore_eos=True)
    early = [scheduler.submit(chat_ids(q), long) for q in QUESTIONS[:2]]
    for _ in range(3):
        scheduler.step()
    late = submit(scheduler, "free")
    scheduler.step()  # the late prompt is prefilled in the same forward as the others' tokens
    assert scheduler.active == 3 and not any(h.done for h in early)
    scheduler.run_until_idle()
    first_token = late.submitted_at + late.result().metrics.time_to_first_token
    for handle in early:
        result = handle.result()
        assert len(result.token_ids) == 20 and result.finish_reason == "length"
        assert first_token < handle.submitted_at + result.metrics.total_time
    assert late.result().token_ids == alone("free").token_ids
    assert late.result().metrics.forward_passes == len(alone("free").token_ids)


def test_columns_left_by_finished_rows_are_dropped_when_rows_join() -> None:
    """White box: a finished row's prompt columns are holes for everyone left; admit drops them."""
    scheduler = Scheduler(generator())
    long_params = SamplingParams(max_new_tokens=16, ignore_eos=True)
    long_prompt = chat_ids(QUESTIONS[2])
    first = scheduler.submit(long_prompt, long_params)
    scheduler.step()
    short = submit(scheduler, "choice")  # joins, prefills its prompt, ends after a few tokens
    while not short.done:
        scheduler.step()
    late = submit(scheduler, "free")
    scheduler.step()
    batch = scheduler._batch
    assert batch is not None and batch.size == 2
    late_prompt = len(chat_ids(SPECS["free"][0]))
    # the long row's real columns, then the late prompt's chunk (its last column shared)
    assert batch._attention.shape[1] == batch._positions[0] - 1 + late_prompt
    scheduler.run_until_idle()
    assert first.result().token_ids == generator().generate(long_prompt, long_params).token_ids
    assert late.result().token_ids == alone("free").token_ids
    assert short.result().token_ids == alone("choice").token_ids


def test_kv_budget_defers_admission_in_arrival_order() -> None:
    names = ["phone", "free", "choice", "penalty"]
    costs = [len(chat_ids(SPECS[n][0])) + SPECS[n][1].max_new_tokens for n in names]
    budget = costs[0] + costs[1]  # the first two fit together, the others must wait
    scheduler = Scheduler(generator(), kv_budget_tokens=budget)
    handles = [submit(scheduler, n) for n in names]
    scheduler.step()
    assert scheduler.active == 2 and scheduler.pending == 2
    scheduler.run_until_idle()
    for name, handle in zip(names, handles):
        assert handle.result().token_ids == alone(name).token_ids, name
        check_valid(name, handle.result())
    assert scheduler.metrics.mean_batch_size <= 2
    # the head of the queue is never overtaken: admission order is submission order
    firsts = [h.submitted_at + h.result().metrics.time_to_first_token for h in handles]
    assert firsts == sorted(firsts)


def test_max_batch_and_a_request_larger_than_the_budget() -> None:
    scheduler = Scheduler(generator(), max_batch=1, kv_budget_tokens=8)
    handles = [submit(scheduler, n) for n in ("choice", "free")]
    scheduler.step()
    assert scheduler.active == 1 and scheduler.pending == 1
    scheduler.run_until_idle()
    assert [h.result().token_ids for h in handles] == [
        alone("choice").token_ids,
        alone("free").token_ids,
    ]
    assert scheduler.metrics.mean_batch_size == 1


def test_stop_strings_eos_and_length_retire_rows() -> None:
    scheduler = Scheduler(generator())
    free = alone("free")  # greedy text of the "free" question
    cut = free.text.index(",") if "," in free.text else len(free.text) // 2
    stop = free.text[cut : cut + 2]
    handles = {
        "stop": scheduler.submit(
            chat_ids(SPECS["free"][0]), SamplingParams(max_new_tokens=10, stop=(stop,))
        ),
        "eos": submit(scheduler, "choice"),  # the grammar completes: an EOS ends it
        "length": scheduler.submit(chat_ids(QUESTIONS[2]), SamplingParams(max_new_tokens=3)),
    }
    results = {k: h.result() for k, h in handles.items()}  # result() drives the scheduler
    assert results["stop"].finish_reason == "stop"
    assert results["stop"].text == free.text[: free.text.index(stop)]
    assert results["eos"].finish_reason == "eos" and results["eos"].text in CHOICES
    assert results["eos"].token_ids[-1] in generator().eos_token_ids
    assert results["length"].finish_reason == "length"
    assert len(results["length"].token_ids) == 3
    assert scheduler.active == 0 and scheduler.pending == 0


def test_background_thread_with_two_submitting_threads() -> None:
    names = [["free", "phone", "choice"], ["person", "sampled", "penalty"]]
    handles: dict[str, RequestHandle] = {}
    streamed: dict[str, str] = {}
    lock = threading.Lock()

    def client(mine: list[str]) -> None:
        for name in mine:
            handle = submit(scheduler, name)
            with lock:
                handles[name] = handle
        first = handles[mine[0]]
        text = "".join(first)  # iterate the text deltas as they arrive
        with lock:
            streamed[mine[0]] = text

    with Scheduler(generator(), max_batch=4) as scheduler:
        assert scheduler.running
        threads = [threading.Thread(target=client, args=(m,)) for m in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert not scheduler.running
    assert sorted(handles) == sorted(n for m in names for n in m)
    for name, handle in handles.items():
        result = handle.result(timeout=0)
        assert result.token_ids == alone(name).token_ids, name
        check_valid(name, result)
    for name, text in streamed.items():
        assert text == handles[name].result().text
    assert scheduler.metrics.finished == 6


def test_bad_requests_fail_at_submit() -> None:
    scheduler = Scheduler(generator())
    with pytest.raises(GenerationError, match="prompt"):
        scheduler.submit([])
    with pytest.raises(GenerationError, match="max_batch"):
        Scheduler(generator(), max_batch=0)
    with pytest.raises(GenerationError, match="kv_budget_tokens"):
        Scheduler(generator(), kv_budget_tokens=0)
    assert not scheduler.step()  # nothing queued: idle


def test_a_row_joining_after_the_last_penalty_row_finished() -> None:
    """Regression: penalty counts outlived their last user and had fewer rows than the batch."""
    scheduler = Scheduler(generator(), max_batch=4)
    short_penalty = SamplingParams(max_new_tokens=1, repetition_penalty=1.5)
    long = SamplingParams(max_new_tokens=6, ignore_eos=True)
    penalty = scheduler.submit(chat_ids(QUESTIONS[3]), short_penalty)
    running = scheduler.submit(chat_ids(QUESTIONS[1]), long)
    scheduler.step()  # both prefilled; the penalty row's single token ends it
    scheduler.step()
    assert penalty.done
    late = submit(scheduler, "free")  # joins a batch whose rows use no penalties
    scheduler.run_until_idle()
    assert running.result(timeout=0).finish_reason == "length"
    assert late.result(timeout=0).token_ids == alone("free").token_ids
