"""`paused_gc`: the cyclic garbage collector paused around compiles and first-visit masks."""

from __future__ import annotations

import gc
import sysconfig

__all__ = ["paused_gc"]


class paused_gc:  # (named as the function it replaced: `with paused_gc():`)
    """Pause the cyclic garbage collector while compiling or building a first-visit mask.

    Both allocate many small objects, which triggers collections; in a process that also holds
    a tokenizer and a model those scan millions of objects and can cost more than the work
    itself (first-visit masks: 634 young collections in 300 MaskBench schemas' fills, 0.18 ms
    each, and 23 middle ones, 2 ms each). What they build is long-lived (automata, tables,
    parse states, cached masks), and what they drop is freed by reference counting (no
    reference cycles: tests/reliability/test_collector.py), so collecting can wait.

    What they leave is moved straight to the oldest generation (`gc.freeze()` then
    `gc.unfreeze()`), where the young collections that would otherwise scan all of it once or
    twice afterwards do not look. Skipped when the process has frozen objects itself
    (unfreezing would undo that). Whether it has is asked until the answer is yes, then
    remembered: `gc.get_freeze_count()` walks every frozen object (20 ms in a process that
    froze a tokenizer's, more in a server), and a process that freezes (vLLM does after
    start-up) does not thaw. Nested pauses leave it to the outermost. A class, not a
    generator: every mask miss enters it, and `contextlib.contextmanager` cost ~0.9 µs per use
    against ~0.25.

    Free-threaded builds (3.13t, 3.14t) have no generations: there the collector is only
    paused. (Their `gc.freeze()`, `unfreeze()` and `get_freeze_count()` each walk the whole
    heap: ~0.7 ms apiece beside a Llama-3.1 vocabulary, which made first-visit fills 20x
    slower; docs/design/matcher.md.)
    """

    __slots__ = ("_enabled",)

    def __enter__(self) -> None:
        self._enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        global _PROCESS_FREEZES
        if self._enabled:
            if _GENERATIONAL and not _PROCESS_FREEZES:
                if gc.get_freeze_count():
                    _PROCESS_FREEZES = True
                else:
                    gc.freeze()
                    gc.unfreeze()
            gc.enable()


#: whether the collector has generations (not in free-threaded builds; see `paused_gc`)
_GENERATIONAL = not sysconfig.get_config_var("Py_GIL_DISABLED")

#: set once a pause finds objects the process froze itself (see `paused_gc`)
_PROCESS_FREEZES = False
