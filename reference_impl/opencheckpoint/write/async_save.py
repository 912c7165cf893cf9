"""Saving in the background: :meth:`Checkpoint.save_async <opencheckpoint.Checkpoint.save_async>` and its handle.

The caller's thread runs the save pipeline's plan stage (:func:`.pipeline.plan_for`)
and takes a :mod:`snapshot <.snapshot>` of the plan (every array copied into
host memory the plan owns: as many bytes as the state's arrays); a background
thread then runs the write and commit stages (:func:`.pipeline.finish`), the
same ones every save runs (staging, fsync, atomic rename; or the upload to an
object store, data objects first and ``manifest.json`` last). For an object
store the target check (R-PUB-21: several requests) runs in that thread too,
before the first upload, so the caller is never blocked by the network.

Rules this module owns:

* **One save in flight per target.** A second ``save_async`` (or a ``save``)
  to a path whose async save has not finished waits for it first.
* **Memory cap.** Snapshots of unfinished saves hold at most
  ``max_pending_bytes`` (argument, else :data:`MAX_PENDING_BYTES`; ``None``:
  no cap): a save whose snapshot would exceed it waits for earlier saves to
  finish; a snapshot larger than the cap on its own raises
  :class:`~opencheckpoint.format.errors.LimitExceeded` before anything is copied.
* **Exit.** The writer threads are not daemons: a normal interpreter exit
  (end of script, ``sys.exit``, an uncaught exception, ``KeyboardInterrupt``)
  finishes every save in flight: a threading exit hook waits for them before
  concurrent.futures stops its pools. A failed save whose handle was never
  waited on is logged as an error at exit; the exit status is left as the
  program set it. A save started once the interpreter has begun to exit (an
  ``atexit`` handler, which may run after the hooks that wait for writer
  threads) is written in the caller's thread before ``save_async`` returns;
  one started while the interpreter is finalizing (a ``__del__`` during module
  teardown) is refused with a :class:`~opencheckpoint.format.errors.CheckpointError`.
  A process killed mid-save publishes nothing: the previous
  checkpoint at the target stays whole (the atomic publication rule).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from ..format.errors import CheckpointError, LimitExceeded
from ..format.producer import utc_timestamp
from ..location import local_path
from ..progress import ProgressArg
from ..progress import check as check_progress
from ..remote.fspath import FsPath
from . import snapshot, stages
from .pipeline import finish, open_target
from .plan import SavePlan, SaveRequest

logger = logging.getLogger("opencheckpoint")

#: Process-wide cap on the bytes held by the snapshots of unfinished async saves (None: no cap).
MAX_PENDING_BYTES: int | None = None

_lock = threading.Condition()
_in_flight: dict[str, SaveHandle] = {}  # target path -> its unfinished save (guarded by _lock)
_pending_bytes = 0  # snapshot bytes of unfinished saves (guarded by _lock)
_unobserved_failures: list[SaveHandle] = []  # failed handles nobody waited on yet
#: Set by the first exit hook: from then on a save runs in the caller's thread (no hook is left to wait for a writer).
_exiting = False
#: In a writer thread, ``handle`` is the save it writes: what that thread (its progress callback) must not wait for.
_writer = threading.local()


class SaveHandle:
    """An async save: :meth:`done`, :meth:`wait`, :meth:`result` (the published path).

    An error of the background save is raised again by :meth:`wait` and
    :meth:`result`; one never asked for is logged when the process exits.
    """

    def __init__(self, target: Path | FsPath, nbytes: int) -> None:
        self.target = target
        #: the target's one key per location (:func:`target_key`): saves with the same key never overlap
        self.key = target_key(target)
        #: host memory held by this save's snapshot until it finishes
        self.nbytes = nbytes
        self._finished = threading.Event()
        self._path: Path | FsPath | None = None
        self._error: BaseException | None = None
        self._observed = False

    def done(self) -> bool:
        """True once the save has published its checkpoint or failed."""
        return self._finished.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the save finished (or ``timeout`` seconds passed); re-raise its error.

        Returns True when finished, False on timeout.
        """
        if _writing(self):
            raise RuntimeError(f"the async save to {self.target} cannot wait for itself: its progress callback "
                               "runs in its writer thread; wait for the handle from another thread")
        if not self._finished.wait(timeout):
            return False
        if self._error is not None:
            if not self._observed and self in _unobserved_failures:
                _unobserved_failures.remove(self)
            self._observed = True
            raise self._error
        self._observed = True
        return True

    def result(self, timeout: float | None = None) -> Path | FsPath:
        """The published checkpoint's path, once written; re-raises the save's error."""
        if not self.wait(timeout):
            raise TimeoutError(f"the async save to {self.target} did not finish within {timeout} s")
        assert self._path is not None
        return self._path

    def __repr__(self) -> str:
        state = "failed" if self._error is not None else "published" if self.done() else "in flight"
        return f"<SaveHandle {self.target} {state}>"

    def _orphan(self, parent: int) -> None:
        """In a forked child: the save runs in process ``parent`` only; waiting here raises at once."""
        self._finished = threading.Event()  # its lock may have been held by a thread the child does not have
        self._error = RuntimeError(f"the async save to {self.target} runs in process {parent}, not in this "
                                   "forked child; wait for it in that process")
        self._observed = True  # the parent reports its own failures
        self._finished.set()

    def _settle(self, path: Path | FsPath | None, error: BaseException | None) -> None:
        self._path, self._error = path, error
        if error is not None:
            _unobserved_failures.append(self)
        self._finished.set()


def target_key(target: Path | FsPath) -> str:
    """One key per place, however the path is spelled: the parent's real path (symbolic links and ``..``
    resolved) joined with the name (the target itself is never followed: a save refuses a link there); an
    object store's location as its URL."""
    if isinstance(target, FsPath):
        return str(target)
    return os.path.join(os.path.realpath(target.parent), target.name)


def _writing(handle: SaveHandle) -> bool:
    """Whether the calling thread is ``handle``'s writer (its progress callback runs there)."""
    return getattr(_writer, "handle", None) is handle


def wait_for_target(location: Path | FsPath) -> None:
    """Wait for an unfinished async save to ``location`` (not from its own writer thread); its error stays its own."""
    key = target_key(location if isinstance(location, FsPath) else local_path(location).absolute())
    handle = _in_flight.get(key)
    if handle is not None and not _writing(handle):
        handle._finished.wait()


#: Runs the write and commit stages in the writer thread and returns the published location; a rotation
#: passes one that prunes after publication.
Around = Callable[[Callable[[], "Path | FsPath"]], "Path | FsPath"]


def save_in_background(location: Path | FsPath, request: SaveRequest, *, progress: ProgressArg = None,
                       max_pending_bytes: int | None = None, around: Around | None = None) -> SaveHandle:
    """:meth:`Checkpoint.save_async <opencheckpoint.Checkpoint.save_async>` of ``request``: the plan stage and a
    snapshot now, the write and commit stages (:func:`.pipeline.finish`) in a writer thread.

    Everything the manifest records is fixed before this returns: the metadata
    (copied), the id and the producer by the caller, the creation time when the
    snapshot is taken (after any wait for an earlier save to the target). A
    target that may not be written (R-PUB-16, R-PUB-21) fails the handle, as
    every error of the background save does.
    """
    check_progress(progress)
    cap = checked_cap(MAX_PENDING_BYTES if max_pending_bytes is None else max_pending_bytes)
    if not isinstance(location, FsPath):
        location = local_path(location).absolute()
    handle = SaveHandle(location, 0)
    key = handle.key
    _claim(handle, key)
    try:
        request.fields["created_at"] = request.given["created_at"] or utc_timestamp()
        planned = _plan(location, request, handle)
        exiting = _exit_begun()
        if planned is None:
            _finish(handle, key, 0)
        elif exiting:
            _write_now(handle, key, planned, progress, around)
        if planned is None or exiting:
            if exiting:
                _report_now(handle)
            return handle
        _reserve(planned, handle, cap)
    except BaseException:
        _finish(handle, key, 0)
        raise
    try:
        snapshot.take(planned)
    except BaseException:
        _release(planned)
        _finish(handle, key, handle.nbytes)
        raise
    handed_back = threading.Event()
    worker = threading.Thread(target=_run_after, args=(handed_back, handle, key, planned, progress, around),
                              name=_thread_name(location), daemon=False)
    try:
        worker.start()
    finally:
        handed_back.set()
    return handle


def refuse_when_finalizing(target: object) -> None:
    """A save cannot start while the interpreter is finalizing (a ``__del__`` run during module teardown,
    after every exit hook): imports fail there and no thread would be waited for. Refuse it in words."""
    if sys.is_finalizing():
        raise CheckpointError("cannot save while the Python interpreter is finalizing (a __del__ or a thread "
                              "running after every exit hook): nothing was written; save before the program "
                              "ends, e.g. in an atexit handler or a `with RunCheckpointer(...)` block",
                              file=str(target))


def _exit_begun() -> bool:
    """Whether the interpreter has begun to exit, so that no exit hook may be left to wait for a writer thread.

    True once an exit hook of this module ran; once threading stopped the main thread (before it joins the
    others; ``atexit`` handlers run after that); or in the main thread when no module body is on the stack:
    an ``atexit`` handler, possibly one that imported threading and this module itself, after the hooks.
    (A host application calling Python from C looks the same: its saves are then written before they return.)
    """
    if _exiting or not threading.main_thread().is_alive():
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>":
            return False
        frame = frame.f_back
    return True


def _write_now(handle: SaveHandle, key: str, planned: SavePlan, progress: ProgressArg,
               around: Around | None) -> None:
    """At interpreter exit: write the plan in the caller's thread, before ``save_async`` returns.

    Exit hooks run last-registered-first, so an ``atexit`` handler registered before this module was
    imported runs after :func:`_at_exit` has waited for the writer threads: a thread started there would be
    cut off, with nothing published and nothing said. No snapshot is needed: the caller waits.
    """
    previous = getattr(_writer, "handle", None)
    try:
        _run(handle, key, planned, progress, around)
    finally:
        _writer.handle = previous


def _report_now(handle: SaveHandle) -> None:
    """A save that failed at interpreter exit is logged at once, as :func:`_at_exit` would have (no hook may be
    left to do it); ``wait()`` still raises its error."""
    if handle._error is not None and not handle._observed:
        handle._observed = True
        logger.error("async save to %s, started at interpreter exit, failed; nothing was published there: %r",
                     handle.target, handle._error)


def _claim(handle: SaveHandle, key: str) -> None:
    """Take the target's one slot, waiting for an earlier save to it."""
    with _lock:
        if key in _in_flight and _writing(_in_flight[key]):
            raise RuntimeError(f"an async save to {handle.target} cannot start from the progress callback of the "
                               "save to that target: it would wait for itself")
        while key in _in_flight:  # one save in flight per target: wait for the previous one
            _lock.wait()
        _in_flight[key] = handle


def _plan(location: Path | FsPath, request: SaveRequest, handle: SaveHandle) -> SavePlan | None:
    """The plan stage, a local target checked first: a target refused fails the handle (None), as in the thread.

    An object store's target is checked by the writer thread instead (:func:`_run`), before it uploads
    anything: that check is several requests over the network (the prefix, its ancestors, a writer's
    debris), which would block the training loop for as many round trips.
    """
    target = open_target(location, form=request.form, durable=request.durable, overwrite=request.overwrite)
    if not isinstance(location, FsPath):
        try:
            target.check()
        except Exception as exc:  # handed to wait()/result(), as any error of the background save
            handle._settle(None, exc)
            return None
    return stages.plan(target, request, check=False)


def _release(planned: SavePlan) -> None:
    """The plan is spent: its scratch removed, its snapshot's buffer kept for the next one."""
    planned.release()
    snapshot.give_back(planned)


def _thread_name(target: Path | FsPath) -> str:
    return f"opencheckpoint-save:{target}"


def checked_cap(cap: object) -> int | None:
    """``max_pending_bytes`` (or :data:`MAX_PENDING_BYTES`): None or a positive int, else a clear error."""
    if cap is None:
        return None
    if isinstance(cap, bool) or not isinstance(cap, int):
        raise TypeError(f"max_pending_bytes must be a positive int (bytes) or None, got {cap!r}")
    if cap <= 0:
        raise ValueError(f"max_pending_bytes must be a positive number of bytes, got {cap}")
    return cap


def _reserve(planned: SavePlan, handle: SaveHandle, cap: int | None) -> None:
    """Count the snapshot's bytes as pending, waiting while that would exceed ``cap``."""
    global _pending_bytes
    nbytes = planned.nbytes
    if cap is not None and nbytes > cap:
        planned.release()
        raise LimitExceeded(f"the state's arrays take {nbytes} bytes, more than max_pending_bytes={cap}: save "
                            "it with save(), or raise the cap", file=str(handle.target), field="max_pending_bytes")
    with _lock:
        while cap is not None and _pending_bytes and _pending_bytes + nbytes > cap:
            if getattr(_writer, "handle", None) is not None:
                planned.release()
                raise RuntimeError("an async save started from a progress callback would wait for memory held by "
                                   f"the save that callback reports on (max_pending_bytes={cap})")
            _lock.wait()
        _pending_bytes += nbytes
        handle.nbytes = nbytes


#: The longest a writer thread waits for ``save_async`` to get the interpreter back: a safety net only (the
#: caller sets the event in a ``finally`` right after ``Thread.start`` returns), long enough for a loaded machine.
_HAND_BACK_TIMEOUT = 10.0


def _run_after(handed_back: threading.Event, handle: SaveHandle, key: str, planned: SavePlan,
               progress: ProgressArg, around: Around | None) -> None:
    """The writer thread: :func:`_run`, once the caller's ``Thread.start`` has returned.

    ``Thread.start`` returns only when the new thread runs, and that thread then holds the GIL: running
    Python between short system calls, it could keep the caller (the training loop, inside ``save_async``)
    waiting for the GIL for up to the switch interval (5 ms), a measured 0.3-6 ms per save. Waiting here
    first hands the GIL straight back; the snapshot was taken already, so nothing waits for the write.
    """
    handed_back.wait(_HAND_BACK_TIMEOUT)
    _run(handle, key, planned, progress, around)


def _run(handle: SaveHandle, key: str, planned: SavePlan, progress: ProgressArg, around: Around | None) -> None:
    """The writer thread: the write and commit stages of the snapshot's plan."""
    path: Path | FsPath | None = None
    error: BaseException | None = None
    _writer.handle = handle
    try:
        def save() -> Path | FsPath:
            if isinstance(planned.target.location, FsPath):
                planned.target.check()  # deferred from the caller's thread (:func:`_plan`); before any upload
            return finish(planned, progress=progress)

        path = save() if around is None else around(save)
    except BaseException as exc:  # handed to wait()/result(), never lost
        error = exc
    finally:
        _release(planned)
    handle._settle(path, error)
    _finish(handle, key, handle.nbytes)


def _finish(handle: SaveHandle, key: str, nbytes: int) -> None:
    global _pending_bytes
    with _lock:
        _pending_bytes -= nbytes
        if _in_flight.get(key) is handle:
            del _in_flight[key]
        _lock.notify_all()
    handle._finished.set()


def wait_all() -> None:
    """Wait for every unfinished async save of this process (errors stay with their handles)."""
    with _lock:
        handles = list(_in_flight.values())
    for handle in handles:
        handle._finished.wait()


def _at_exit() -> None:
    """Finish every save in flight, then report each failed one nobody waited for (logged as an error).

    From here on a new save is written in its caller's thread (:func:`_write_now`)."""
    global _exiting
    _exiting = True
    wait_all()
    for handle in _unobserved_failures:
        if not handle._observed:
            handle._observed = True  # reported once, whichever exit hook runs first
            logger.error("async save to %s failed and nobody waited for it; nothing was published there: %r",
                         handle.target, handle._error)


def _register_exit_hook() -> None:
    """Run :func:`_at_exit` among threading's exit hooks: they run at a normal exit (end of script,
    ``sys.exit``, an uncaught exception or ``KeyboardInterrupt``) before the interpreter joins its threads,
    and in the reverse order of registration, so this one runs before concurrent.futures' own hook (registered
    when :mod:`.tree.encode` imported it) stops the thread pools a save in flight still uses."""
    global _exiting
    register = getattr(threading, "_register_atexit", None)
    if register is None:  # not CPython's threading: the plain atexit hook (the tree writer copes)
        atexit.register(_at_exit)
    else:
        try:
            register(_at_exit)
        except RuntimeError:  # imported by an exit hook, after threading shut down: saves run in their caller
            _exiting = True
    atexit.register(_at_exit)  # also after the thread joins: a save a hook started is reported too


_register_exit_hook()


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's writer threads: forget their saves (their handles raise if
    waited on here) and replace the lock, which one of those threads may have held at the fork."""
    global _lock, _pending_bytes
    _lock = threading.Condition()
    orphans = list(_in_flight.values())
    _in_flight.clear()
    _pending_bytes = 0
    _unobserved_failures.clear()  # the parent's to report
    parent = os.getppid()
    for handle in orphans:
        handle._orphan(parent)


os.register_at_fork(after_in_child=_after_fork_in_child)

__all__ = ["MAX_PENDING_BYTES", "SaveHandle", "refuse_when_finalizing", "save_in_background",
           "target_key", "wait_all", "wait_for_target"]

