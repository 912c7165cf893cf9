"""What a rotation directory remembers about itself: its identity, its failures, and one writer at a time.

A :class:`~opencheckpoint.run.Rotation` keeps a small file of its own in its
directory, ``.opencheckpoint-rotation.json``::

    {"rotation_id": "<32 hex>", "failed": {"<checkpoint name>": "<why it failed verification>"}}

* ``rotation_id`` is random, made on the first save into the directory. Every
  checkpoint the rotation writes records it (spec R-PUB-19), so a checkpoint
  moved in from another run's directory (another id) is never taken for one
  of this directory's own, and never pruned.
* ``failed`` outlives the process that found a checkpoint failing
  verification at resume: a later process that prunes or replaces it says so
  in a warning, naming it and why.

The short bookkeeping steps of a save (the id, the write sequence) and
pruning take an exclusive advisory lock on the directory itself
(``flock(2)``), so two processes rotating the same folder (a preempted job's
old instance still running beside the restarted one) take turns instead of
deleting each other's checkpoints. Writing the checkpoint itself is outside
the lock: a writer that is suspended (``SIGSTOP``, a scheduler's suspend)
or slow mid-write never blocks the others. A lock still not free after
:data:`LOCK_WAIT_S` (a writer suspended mid-prune) is given up: the caller
skips what needs it (pruning waits for the next save) rather than hang.
Where the file system has no ``flock`` the lock is skipped (one debug line).

>>> import tempfile, pathlib
>>> directory = pathlib.Path(tempfile.mkdtemp())
>>> read_state(directory).rotation_id is None
True
>>> with locked(directory) as held:
...     first = ensure_identity(directory)
>>> held
True
>>> read_state(directory).rotation_id == first and len(first) == 32
True
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

try:  # POSIX only: elsewhere saves of one directory are not serialized across processes
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger("opencheckpoint.run")

#: The rotation's own file in its directory.
STATE_NAME = ".opencheckpoint-rotation.json"
#: How long to wait for another process's lock on a rotation directory before going on without it (seconds).
LOCK_WAIT_S = 60.0
_POLL_S = 0.05


@dataclass
class RotationState:
    """The parsed state file (``rotation_id`` None: no rotation has saved here yet)."""

    rotation_id: str | None = None
    failed: dict[str, str] = field(default_factory=dict)


def read_state(directory: Path) -> RotationState:
    """The state of ``directory``'s rotation; empty if the file is missing or not what the library writes."""
    try:
        with open(directory / STATE_NAME, "rb") as handle:
            data = json.loads(handle.read(1 << 20))
    except (OSError, ValueError):
        return RotationState()
    if not isinstance(data, dict):
        return RotationState()
    rotation_id = data.get("rotation_id")
    failed = data.get("failed")
    return RotationState(
        rotation_id if isinstance(rotation_id, str) and rotation_id else None,
        {k: v for k, v in failed.items() if isinstance(k, str) and isinstance(v, str)}
        if isinstance(failed, dict) else {},
    )


def write_state(directory: Path, state: RotationState) -> None:
    """Replace the state file atomically (call with :func:`locked` held: one writer at a time)."""
    temporary = directory / f"{STATE_NAME}.tmp"
    body = json.dumps({"rotation_id": state.rotation_id, "failed": state.failed}, indent=1, sort_keys=True)
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(body + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, directory / STATE_NAME)


def ensure_identity(directory: Path) -> str:
    """The directory's rotation id, made and recorded on first use (call with :func:`locked` held)."""
    state = read_state(directory)
    if state.rotation_id is None:
        state.rotation_id = uuid.uuid4().hex
        write_state(directory, state)
    return state.rotation_id


def record_failures(directory: Path, failures: dict[str, str | None], *, lock: bool = True) -> None:
    """Add (reason) or drop (None) checkpoint names in the ``failed`` record; best effort.

    Only a directory a rotation has saved into (it has the state file) keeps a
    record: elsewhere no rotation owns, hence prunes, anything. One that cannot
    be written (a read-only copy being resumed from) keeps none either; the
    warnings at resume still name every failure. ``lock=False``: the caller
    holds :func:`locked` already.
    """
    if not os.path.exists(directory / STATE_NAME):
        return
    try:
        with locked(directory) if lock else contextlib.nullcontext(True) as held:
            if not held:
                return
            state = read_state(directory)
            before = dict(state.failed)
            for name, reason in failures.items():
                if reason is None:
                    state.failed.pop(name, None)
                else:
                    state.failed[name] = reason
            if state.failed != before:
                write_state(directory, state)
    except OSError as exc:
        logger.debug("could not record verification failures in %s: %s", directory / STATE_NAME, exc)


@contextlib.contextmanager
def locked(directory: Path, *, wait: float | None = None) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on ``directory`` (made if missing) for the block; yield whether it is held.

    Waits up to ``wait`` seconds (default :data:`LOCK_WAIT_S`) for another
    holder; False then (or where the file system has no ``flock``): the
    caller does without what needs the lock.
    """
    directory.mkdir(parents=True, exist_ok=True)
    if fcntl is None:  # pragma: no cover - Windows
        yield False
        return
    deadline = time.monotonic() + (LOCK_WAIT_S if wait is None else wait)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        held = False
        while not held:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    logger.warning("another process has held the lock on %s for %.0f s; going on without it",
                                   directory, LOCK_WAIT_S if wait is None else wait)
                    break
                time.sleep(_POLL_S)
            except OSError as exc:  # a file system without flock: saves of one directory are not serialized
                logger.debug("no advisory lock on %s (%s): concurrent rotations are not serialized", directory, exc)
                break
        yield held
    finally:
        os.close(fd)  # closing the descriptor releases the lock
