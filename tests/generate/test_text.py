"""TextTracker (stop strings across token boundaries, UTF-8, stream deltas) and PrefixCache."""

from __future__ import annotations

import torch

from structgen.generate.prefix_cache import PrefixCache
from structgen.generate.text import TextTracker


class TestStop:
    def test_stop_split_across_pieces_cuts_before_it(self) -> None:
        t = TextTracker(["END"])
        assert not t.push(b"value E")
        assert not t.push(b"N")
        assert t.push(b"D and more")
        assert t.text == "value "

    def test_earliest_of_several_stops(self) -> None:
        t = TextTracker(["bb", "a"])
        assert t.push(b"xxbba")
        assert t.text == "xx"

    def test_stream_holds_back_a_possible_stop(self) -> None:
        t = TextTracker(["</s>"])
        t.push(b"hello <")
        assert t.delta() == "hello "
        t.push(b"/")
        assert t.delta() == ""
        t.push(b"x")  # not the stop after all
        assert t.delta() == "</x"
        t.push(b" </s")
        t.push(b">")
        assert t.stopped
        assert t.delta() == " "
        assert t.text == "hello </x "

    def test_utf8_split_across_tokens(self) -> None:
        data = "héllo 中".encode()
        t = TextTracker()
        pieces = []
        for i in range(len(data)):
            t.push(data[i : i + 1])
            pieces.append(t.delta())
        t.finish()
        pieces.append(t.delta(final=True))
        assert "".join(pieces) == "héllo 中"
        assert all("\ufffd" not in p for p in pieces)


def kv(length: int, tag: float) -> list[tuple[torch.Tensor, torch.Tensor]]:
    base = torch.arange(length, dtype=torch.float32).view(1, 1, length, 1) + tag
    return [(base.clone(), base.clone()) for _ in range(2)]


class TestPrefixCache:
    def test_longest_common_prefix_and_lru(self) -> None:
        cache = PrefixCache(2, min_tokens=3)
        cache.store(list(range(10)), kv(10, 0.0))
        assert cache.lookup([0, 1, 9]) is None  # shorter than min_tokens in common
        hit = cache.lookup([*range(6), 99, 98])
        assert hit is not None and hit.length == 6
        assert len(cache) == 2  # the shared part became its own entry
        again = cache.lookup([*range(6), 50])
        assert again is not None and again.length == 6
        assert again.kv[0][0].shape[2] == 6
        cache.store([7, 7, 7, 7], kv(4, 1.0))  # evicts the least recently used (the long one)
        assert len(cache) == 2
        assert cache.lookup(list(range(10))) is not None  # still served by the 6-token entry
        assert cache.lookup(list(range(10))).length == 6  # type: ignore[union-attr]
