"""Timing helpers: best-of-N wall-clock time of an operation, with untimed setup before each try.

>>> t = measure(lambda: sum(range(1000)), repeat=2)
>>> t.best > 0 and len(t.samples) == 2
True
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Timing:
    """Every sample in seconds; ``best`` is what the report uses (least disturbed by the shared machine)."""

    samples: list[float] = field(default_factory=list)

    @property
    def best(self) -> float:
        return min(self.samples)

    @property
    def median(self) -> float:
        ordered = sorted(self.samples)
        return ordered[len(ordered) // 2]


def measure(
    operation: Callable[[], Any],
    *,
    repeat: int,
    setup: Callable[[], Any] | None = None,
    teardown: Callable[[Any], Any] | None = None,
) -> Timing:
    """Run ``setup`` (untimed), ``operation`` (timed), ``teardown(result)`` (untimed) ``repeat`` times."""
    timing = Timing()
    for _ in range(repeat):
        if setup is not None:
            setup()
        gc.collect()
        gc.disable()  # a collection in the middle of a timed run is noise, not cost
        try:
            start = time.perf_counter()
            result = operation()
            timing.samples.append(time.perf_counter() - start)
        finally:
            gc.enable()
        if teardown is not None:
            teardown(result)
        del result
    return timing


def settle_writes() -> None:
    """Flush dirty pages before a timed write, so each write starts without a writeback backlog."""
    os.sync()
