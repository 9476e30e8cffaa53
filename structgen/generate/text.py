"""`TextTracker`: a row's output text, built incrementally, with stop strings and stream deltas.

Text comes from the exact token bytes (`Vocabulary.token_bytes`, the bytes the grammar checked),
through an incremental UTF-8 decoder, so a character split across tokens appears once it is
complete and never as a replacement character in the middle of a stream. Stop strings are
searched only in the newly decoded tail (plus the longest stop's length of overlap), so they match
across token boundaries at O(new text) per step. A stream holds back any tail that could still
grow into a stop string.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence

__all__ = ["TextTracker"]


class TextTracker:
    """Accumulates output bytes into text; reports a stop-string hit and stream deltas."""

    __slots__ = ("_decoder", "_emitted", "_longest", "_stops", "stopped", "text")

    def __init__(self, stop: Sequence[str] = ()) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = tuple(stop)
        self._longest = max((len(s) for s in self._stops), default=0)
        self._emitted = 0
        self.text = ""
        self.stopped = False

    def push(self, data: bytes) -> bool:
        """Append output bytes; True when a stop string appeared (the text is cut before it)."""
        if self.stopped or not data:
            return self.stopped
        start = max(0, len(self.text) - self._longest + 1)
        self.text += self._decoder.decode(data)
        if self._stops:
            hits = [i for i in (self.text.find(s, start) for s in self._stops) if i >= 0]
            if hits:
                self.text = self.text[: min(hits)]
                self.stopped = True
        return self.stopped

    def finish(self) -> None:
        """Flush an incomplete trailing character (as U+FFFD) unless a stop string ended it."""
        if not self.stopped:
            self.text += self._decoder.decode(b"", final=True)

    def delta(self, *, final: bool = False) -> str:
        """The text not yet streamed that can no longer change (everything when `final`)."""
        end = len(self.text)
        if not final and not self.stopped:
            end -= self._pending_stop_prefix()
        if end <= self._emitted:
            return ""
        piece = self.text[self._emitted : end]
        self._emitted = end
        return piece

    def _pending_stop_prefix(self) -> int:
        """Length of the longest tail of the text that is a proper prefix of a stop string."""
        best = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(self.text)), best, -1):
                if self.text.endswith(stop[:n]):
                    best = n
                    break
        return best
