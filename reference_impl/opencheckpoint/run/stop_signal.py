"""Clean stops: SIGINT/SIGTERM turned into a stop request checked at loop boundaries (:class:`StopOnSignal`).

Split from :mod:`opencheckpoint.run`, which re-exports it.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Collection
from types import FrameType, TracebackType
from typing import Any

logger = logging.getLogger("opencheckpoint.run")


class StopOnSignal:
    """Turn SIGINT/SIGTERM into a stop request checked at loop boundaries.

    The first signal sets :attr:`requested` (finish the step, save, exit); a
    second raises :class:`KeyboardInterrupt` for loops that never reach a
    boundary. Previous handlers come back on exit. Signal handlers can only
    be installed from the main thread; elsewhere the context does nothing.

    >>> import os, signal
    >>> with StopOnSignal() as stop:
    ...     os.kill(os.getpid(), signal.SIGTERM)
    ...     stop.requested, stop.signal_name
    (True, 'SIGTERM')
    """

    def __init__(
        self,
        signals: Collection[int] = (signal.SIGINT, signal.SIGTERM),
        on_request: Callable[[str], None] | None = None,
    ) -> None:
        self.signals = tuple(signals)
        self.on_request = on_request
        self.signal_name: str | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        """Whether a stop was requested."""
        return self.signal_name is not None

    def _handle(self, number: int, frame: FrameType | None) -> None:
        name = signal.Signals(number).name
        if self.signal_name is not None:
            raise KeyboardInterrupt(f"second stop signal ({name})")
        self.signal_name = name
        if self.on_request is not None:
            self.on_request(name)

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is not threading.main_thread():
            logger.warning("StopOnSignal entered outside the main thread: signals will not request a stop")
            return self
        for number in self.signals:
            self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)
        self._previous.clear()
