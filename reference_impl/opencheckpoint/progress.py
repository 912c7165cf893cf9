"""Progress of long saves, loads and validations: the ``progress=`` argument.

``progress`` is ``None``/``False`` (silent, the default), ``True`` (a rich
progress bar on standard error when it is a terminal and the work covers at
least :func:`min_bytes` bytes; silent otherwise) or a callable
``progress(done_bytes, total_bytes)`` that gets every update, whatever the
size. The total is known before the first byte moves (the planned sizes of a
save, the manifest's file sizes of a read); ``done`` never decreases and the
last call has ``done == total``.

The byte counters deep in the writer and the readers call :func:`advance`;
the active reporter lives in a context variable, so the code between the
public call and the byte loops passes nothing around, and a nested call
(``save`` inside ``save_async``'s thread) reports to the outer one.

>>> updates = []
>>> with reporting(lambda done, total: updates.append((done, total)), 10):
...     advance(4); advance(4); advance(4)
>>> updates
[(0, 10), (4, 10), (8, 10), (10, 10)]
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Any, Protocol

#: ``progress=`` as the public functions take it.
ProgressArg = bool | Callable[[int, int], Any] | None

#: ``progress=True`` shows a bar only for work of at least this many bytes (about 256 MiB), unless
#: the environment variable ``OPENCHECKPOINT_PROGRESS_MIN_BYTES`` says otherwise.
MIN_BYTES = 256 << 20
_ENV_MIN_BYTES = "OPENCHECKPOINT_PROGRESS_MIN_BYTES"


class _Sink(Protocol):
    def update(self, done: int, total: int) -> None: ...

    def close(self) -> None: ...


class _CallableSink:
    def __init__(self, callback: Callable[[int, int], Any]) -> None:
        self.callback = callback

    def update(self, done: int, total: int) -> None:
        self.callback(done, total)

    def close(self) -> None:
        """Nothing to release: the callable owns its own output."""


class _RichSink:
    """A transient rich bar on standard error (imported only when a bar is actually shown)."""

    def __init__(self, description: str, total: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

        # A terminal's console (a bar is shown on a terminal only); progress must not import cli/.
        self._bar = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                             TransferSpeedColumn(), TimeRemainingColumn(),
                             console=Console(stderr=True, highlight=False),
                             transient=True)
        self._task = self._bar.add_task(description, total=total)
        self._bar.start()

    def update(self, done: int, total: int) -> None:
        self._bar.update(self._task, completed=done, total=total)

    def close(self) -> None:
        self._bar.stop()


class Reporter:
    """Counts bytes done against a known total and hands monotonic updates to a sink."""

    def __init__(self, sink: _Sink, total: int) -> None:
        self.sink = sink
        self.total = max(0, total)
        self.done = 0
        sink.update(0, self.total)

    def advance(self, nbytes: int) -> None:
        """``nbytes`` more are done (clamped to the total: padding and documents are not counted exactly)."""
        done = min(self.total, self.done + nbytes)
        if done > self.done:
            self.done = done
            self.sink.update(done, self.total)

    def finish(self) -> None:
        """The work is complete: the last update says ``done == total``."""
        if self.done < self.total:
            self.done = self.total
            self.sink.update(self.total, self.total)


_ACTIVE: ContextVar[Reporter | None] = ContextVar("opencheckpoint_progress", default=None)


def min_bytes() -> int:
    """The size from which ``progress=True`` shows a bar (:data:`MIN_BYTES`, or the environment's override)."""
    value = os.environ.get(_ENV_MIN_BYTES, "")
    return int(value) if value.isdigit() else MIN_BYTES


def may_be_terminal(stream: Any) -> bool:
    """False when rich would certainly not call ``stream`` a terminal, found without importing rich.

    rich calls a stream a terminal when its ``isatty()`` is true, or when ``TTY_COMPATIBLE`` or
    ``FORCE_COLOR`` is set; a pipe or a file with neither variable needs no rich at all (start-up).

    >>> import io
    >>> may_be_terminal(io.StringIO()) or "FORCE_COLOR" in os.environ or "TTY_COMPATIBLE" in os.environ
    False
    """
    if "TTY_COMPATIBLE" in os.environ or "FORCE_COLOR" in os.environ:
        return True
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # a closed stream
        return False


def _sink_for(progress: ProgressArg, total: int, description: str) -> _Sink | None:
    if progress is None or progress is False:
        return None
    if progress is True:
        if total < min_bytes() or not may_be_terminal(sys.stderr):
            return None
        from rich.console import Console

        if not Console(stderr=True).is_terminal:
            return None
        return _RichSink(description, total)
    if callable(progress):
        return _CallableSink(progress)
    raise TypeError(f"progress must be None, a bool or a callable (done_bytes, total_bytes), got {progress!r}")


def check(progress: ProgressArg) -> None:
    """Reject a bad ``progress=`` before any work starts."""
    if not (progress is None or isinstance(progress, bool) or callable(progress)):
        raise TypeError(f"progress must be None, a bool or a callable (done_bytes, total_bytes), got {progress!r}")


@contextlib.contextmanager
def reporting(progress: ProgressArg, total: int, description: str = "working") -> Iterator[Reporter | None]:
    """Report the bytes :func:`advance` counts in this context to ``progress``; finish at ``total`` on success.

    With no ``progress`` the context is silent, except that an enclosing
    reporter (a nested call) keeps receiving the counts.
    """
    check(progress)
    if _ACTIVE.get() is not None and not progress:
        yield _ACTIVE.get()
        return
    sink = _sink_for(progress, total, description)
    reporter = None if sink is None else Reporter(sink, total)
    token = _ACTIVE.set(reporter)
    try:
        yield reporter
        if reporter is not None:
            reporter.finish()
    finally:
        _ACTIVE.reset(token)
        if sink is not None:
            sink.close()


def files_bytes(records: Iterable[Any]) -> int:
    """The bytes of every file the manifest lists for ``records`` (component records): a read's total."""
    return sum(entry.size for record in records for entry in record.files.values())


def advance(nbytes: int) -> None:
    """Count ``nbytes`` done for the active reporter (nothing when no one listens)."""
    reporter = _ACTIVE.get()
    if reporter is not None:
        reporter.advance(nbytes)


__all__ = ["MIN_BYTES", "ProgressArg", "Reporter", "advance", "check", "files_bytes", "may_be_terminal", "min_bytes",
           "reporting"]
