"""`LRU`, the bounded map behind the module-level caches: recency, the size bound, and reads
without a lock while other threads write and evict."""

from __future__ import annotations

import random
import threading

import pytest

from structgen._lru import LRU


def test_reading_makes_an_entry_the_most_recent() -> None:
    cache: LRU[str, int] = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)  # evicts b, the least recent
    assert cache.get("b") is None
    assert cache.get("a") == 1 and cache.get("c") == 3
    assert cache.put("a", 9) == 1  # the first value stored stands
    assert cache.get_or_make("d", lambda: 4) == 4 and len(cache) == 2


def test_concurrent_reads_and_evictions_keep_the_bound_and_never_raise() -> None:
    cache: LRU[int, int] = LRU(8)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(20000):
                key = rng.randrange(32)
                if rng.random() < 0.5:
                    found = cache.get(key)
                    assert found is None or found == key * 10
                else:
                    assert cache.put(key, key * 10) == key * 10
                if rng.random() < 0.001:
                    cache.clear()
        except BaseException as exc:  # (reported by the main thread)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(cache) <= 8


def test_a_read_compares_an_equal_key_once() -> None:
    # Regex trees are keys: an equal but distinct tree is compared node by node. The read
    # finds the entry by it once; the move to the end goes by the stored key (identity).
    compared = 0

    class Tree:
        def __init__(self, label: str) -> None:
            self.label = label

        def __hash__(self) -> int:
            return hash(self.label)

        def __eq__(self, other: object) -> bool:
            nonlocal compared
            compared += 1
            return isinstance(other, Tree) and other.label == self.label

    cache: LRU[Tree, int] = LRU(4)
    stored = Tree("x")
    cache.put(stored, 1)
    compared = 0
    assert cache.get(Tree("x")) == 1
    assert compared == 1
    compared = 0
    assert cache.put(Tree("x"), 2) == 1  # (the stored value stands, found by one comparison)
    assert compared == 1


def test_a_weighed_cache_keeps_its_weight_bound_and_reweighs() -> None:
    sizes = {"a": 40, "b": 30, "c": 50, "huge": 500}
    # (reweigh_every=1: each insertion re-weighs every stored entry)
    cache: LRU[str, str] = LRU(10, max_weight=100, weigh=lambda v: sizes[v], reweigh_every=1)
    cache.put("a", "a")
    cache.put("b", "b")
    assert cache.weight == 70
    assert cache.get("a") == "a"  # (a read moves "a" after "b"; no weighing)
    cache.put("c", "c")  # 120 > 100: "b", the least recent, goes
    assert cache.get("b") is None and cache.weight == 90
    sizes["a"], sizes["b"] = 70, 5  # "a" grew since it was stored: seen when re-weighed
    cache.put("b", "b")  # (all weighed again: 40 + 50 + 5 would have fit)
    assert cache.get("a") is None and cache.weight == 55  # (70 + 50 + 5 > 100: "a" went)
    cache.put("huge", "huge")  # over the bound alone: the newest always stays
    assert len(cache) == 1 and cache.weight == 500
    cache.discard("huge")
    assert cache.weight == 0 and len(cache) == 0
    cache.put("a", "a")
    cache.clear()
    assert cache.weight == 0


def test_a_weighed_cache_needs_both_bounds() -> None:
    with pytest.raises(ValueError):
        LRU(4, max_weight=10)


def test_re_weighing_is_spread_over_insertions() -> None:
    # Values grow after they are stored; each is weighed again within `reweigh_every`
    # insertions, a few per insertion (never all at once: that was a pause inside a compile).
    sizes: dict[int, int] = {}
    weighed: list[int] = []

    def weigh(value: int) -> int:
        weighed.append(value)
        return sizes[value]

    cache: LRU[int, int] = LRU(1000, max_weight=10**9, weigh=weigh, reweigh_every=16)
    for n in range(100):
        sizes[n] = 1
        weighed.clear()
        cache.put(n, n)
        assert len(weighed) <= 2 + len(cache) // 16  # the new one and a share of the rest
    assert cache.weight == 100
    for n in range(100):
        sizes[n] = 2  # every value doubles
    for n in range(100, 100 + 2 * 16):
        sizes[n] = 2
        cache.put(n, n)
    assert cache.weight == 2 * len(cache)  # (every growth seen within two rounds)


def test_an_entry_grown_past_the_entry_bound_leaves_alone() -> None:
    """With `max_entry_weight`, a value found too heavy when re-weighed leaves by itself; the
    older, small entries it would have pushed out stay."""
    sizes = {k: 10 for k in "abcdefgh"}
    cache: LRU[str, str] = LRU(
        10, max_weight=100, weigh=lambda v: sizes[v], reweigh_every=1, max_entry_weight=40
    )
    for key in "abcde":
        cache.put(key, key)
    assert cache.weight == 50
    sizes["c"] = 60  # ("c" grew: 100 in all, over no bound but its own)
    cache.put("f", "f")  # (every stored one re-weighed: "c" leaves, "a" and "b" stay)
    assert cache.get("c") is None
    assert [cache.get(k) for k in "abdef"] == list("abdef")
    assert cache.weight == 50
    sizes["g"] = 60  # the newest stays, whatever it weighs, until it is re-weighed
    cache.put("g", "g")
    assert cache.get("g") == "g" and cache.get("a") is None  # (110: the oldest went)
    assert cache.weight == 100
