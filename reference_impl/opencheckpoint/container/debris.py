"""Debris of the library's own naming, and knowing when its writer is gone (spec §12.4, R-PUB-17, R-PUB-18).

A save works under hidden sibling names: ``.NAME.oc-staging-*`` (the new
checkpoint being written), ``.NAME.oc-old-*`` (the previous checkpoint moved
aside where no atomic exchange exists) and ``.NAME.oc-delete-*`` (a checkpoint
that rotation pruning is deleting). A writer killed at the wrong moment leaves
them behind. Each name ends in a *writer token* ``PID-MMMMMMMMSSSSSSSSRRRRRRRRRRRR``:

* ``PID``: the writer's process id (decimal, as R-PUB-1 requires);
* ``M`` (8 hex): the machine instance in which that pid means something:
  host name, boot id and pid namespace, hashed;
* ``S`` (8 hex): the process's start time (clock ticks since boot, low 32
  bits), so a recycled pid is not mistaken for the writer;
* ``R`` (12 hex): random.

An entry's writer is *gone* when the token says it ran on this machine
instance and no process with that pid and start time runs now (or it is this
process and the entry is not in use). Where the token is missing or names
another machine instance (another host on a shared file system, a previous
boot, another container), nothing can be asked, and the writer counts as gone
only when nothing in the entry has been modified for :data:`STALE_AFTER_S`.

Only entries whose name parses exactly as this naming (a writer token, or the
``PID-RANDOM`` suffix of R-PUB-1 that older versions wrote: ``.notes.txt.oc-old-2024``
is not debris), whose writer is gone, and whose content is exactly what a
writer of ours puts there are ever removed (:func:`.publish.clean_debris`): a ZIP file
being written or deleted (or an empty file), or a directory holding nothing but a
``components`` folder of plain folders and files and, if it is there, a
``manifest.json`` that makes it a recognisable checkpoint. An old copy stays while the target is not a checkpoint: it
is then the only copy (R-PUB-13).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import socket
import stat
import threading
import time
import uuid
from dataclasses import dataclass
from functools import cache
from pathlib import Path

logger = logging.getLogger("opencheckpoint")

#: The kinds of hidden working names, in the order a save uses them.
KINDS = ("staging", "old", "delete")

#: A writer whose machine cannot be asked counts as gone after this long without a change (seconds).
STALE_AFTER_S = 3600.0

#: What a writer of this library puts at the top of a checkpoint directory.
_OWN_TOP_LEVEL = frozenset({"manifest.json", "components"})

_DEBRIS_NAME = re.compile(r"\.(?P<name>.+)\.oc-(?P<kind>staging|old|delete)-(?P<token>.+)", re.DOTALL)
_TOKEN = re.compile(r"(?P<pid>[0-9]+)-(?P<machine>[0-9a-f]{8})(?P<start>[0-9a-f]{8})[0-9a-f]{12}")
_PROCESS = re.compile(r"(?P<pid>[0-9]+)-(?P<machine>[0-9a-f]{8})(?P<start>[0-9a-f]{8})")
#: R-PUB-1's suffix (``PID-RANDOM``, 8+ alphanumerics), as versions before the writer token named debris.
_LEGACY_SUFFIX = re.compile(r"[0-9]+-[A-Za-z0-9]{8,}")
#: The first bytes of a ZIP local file header: what a staging archive starts with.
_ZIP_START = b"PK\x03\x04"

#: Paths this process is using right now (never debris, whatever their name says).
_ACTIVE: set[Path] = set()
_LOCK = threading.Lock()


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""


@cache
def machine_token() -> str:
    """8 hex digits naming this host, boot and pid namespace (pids mean something only within one)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    identity = "\0".join([socket.gethostname(), _read_text("/proc/sys/kernel/random/boot_id"), namespace])
    return hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:8]


def process_start(pid: int) -> str | None:
    """8 hex digits of the start time of process ``pid`` (None: no such process or not knowable)."""
    text = _read_text(f"/proc/{pid}/stat")
    if not text:
        return None
    # The command name (field 2) may contain spaces and parentheses: count fields after the last ')'.
    fields = text.rsplit(")", 1)[-1].split()
    try:
        return f"{int(fields[19]) & 0xFFFFFFFF:08x}"
    except (IndexError, ValueError):
        return None


def process_token() -> str:
    """``PID-MMMMMMMMSSSSSSSS``: this process, as the writer token names it (without the random part)."""
    start = process_start(os.getpid()) or "0" * 8
    return f"{os.getpid()}-{machine_token()}{start}"


def writer_token() -> str:
    """A fresh token for one working name of this process."""
    return f"{process_token()}{uuid.uuid4().hex[:12]}"


def process_running(token: str) -> bool | None:
    """Whether the process named by a :func:`process_token` runs now; None where this machine cannot tell.

    None: the token is malformed or names another machine instance (another host,
    boot or container), whose processes cannot be asked about.
    """
    match = _PROCESS.fullmatch(token)
    if match is None or match["machine"] != machine_token():
        return None
    pid, started = int(match["pid"]), match["start"]
    start = process_start(pid)
    if start is not None and started != "0" * 8:
        return start == started  # another start time: the pid was recycled, the process ended
    return _pid_exists(pid)


def working_path(target: Path, kind: str) -> Path:
    """A fresh hidden sibling of ``target`` for ``kind`` (see :data:`KINDS`), marked in use.

    The path counts as in use until :func:`release` is called for it.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    path = target.parent / f".{target.name}.oc-{kind}-{writer_token()}"
    with _LOCK:
        _ACTIVE.add(path)
    return path


def release(path: Path) -> None:
    """Mark a working path as no longer in use (it is debris if it still exists)."""
    with _LOCK:
        _ACTIVE.discard(path)


@dataclass(frozen=True)
class Debris:
    """One entry of the library's hidden naming."""

    path: Path
    target_name: str
    kind: str
    token: str


def parse(path: Path) -> Debris | None:
    """The debris naming of ``path``'s last segment, or None if it is not exactly of that naming.

    The suffix must be a writer token or R-PUB-1's ``PID-RANDOM``: a name that
    merely contains ``.oc-old-`` (``.notes.txt.oc-old-2024``) is not debris.
    """
    match = _DEBRIS_NAME.fullmatch(path.name)
    if match is None:
        return None
    token = match["token"]
    if _TOKEN.fullmatch(token) is None and _LEGACY_SUFFIX.fullmatch(token) is None:
        return None
    return Debris(path, match["name"], match["kind"], token)


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process (or a pid we cannot ask about): assume it runs
    return True


def _newest_change(path: Path) -> float:
    """The newest modification time of ``path`` and everything below it (symlinks not followed)."""
    info = os.lstat(path)
    newest = info.st_mtime
    if stat.S_ISDIR(info.st_mode):
        for root, directories, files in os.walk(path):
            for name in [*directories, *files]:
                with contextlib.suppress(OSError):
                    newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
    return newest


def writer_gone(entry: Debris, *, now: float | None = None) -> bool:
    """Whether the process that made ``entry`` has ended (see the module docstring)."""
    token = _TOKEN.fullmatch(entry.token)
    if token is not None and token["machine"] == machine_token():
        pid, started = int(token["pid"]), token["start"]
        unknown = "0" * 8  # the writer could not read its start time: only the pid can be asked about
        if pid == os.getpid() and started in (process_start(pid), unknown):
            with _LOCK:
                return entry.path not in _ACTIVE
        start = process_start(pid)
        if start is not None and started != unknown:
            return start != started  # a process with another start time has that pid now: the writer ended
        return not _pid_exists(pid)
    try:
        age = (time.time() if now is None else now) - _newest_change(entry.path)
    except OSError:
        return False
    return age >= STALE_AFTER_S


def writer_runs(entry: Debris) -> bool:
    """Whether ``entry``'s writer token names a process of this machine instance that still runs (a save of it
    may be in progress); False for a token of another machine or R-PUB-1's ``PID-RANDOM``, which cannot tell."""
    token = _TOKEN.fullmatch(entry.token)
    return token is not None and token["machine"] == machine_token() and not writer_gone(entry)


def _partial_staging(path: Path) -> bool:
    """What a killed writer leaves at a working name: exactly what the library writes, nothing of anyone else's.

    A file: empty, or beginning as a ZIP archive does. A directory: ``components``
    holding only folders and regular files (no link, no special file), and, if
    the manifest was written, a ``manifest.json`` that names the format (the
    tree is then a complete checkpoint, judged as one).
    """
    from .target import not_a_checkpoint_reason  # target imports the readers; load them only when needed

    try:
        info = os.lstat(path)
        if stat.S_ISREG(info.st_mode):
            with open(path, "rb") as handle:
                start = handle.read(len(_ZIP_START))
            return start in (b"", _ZIP_START)
        if not stat.S_ISDIR(info.st_mode):
            return False
        top = set(os.listdir(path))
        if not top <= _OWN_TOP_LEVEL:
            return False
        if "manifest.json" in top:
            return not_a_checkpoint_reason(path) is None
        if "components" not in top:
            return True
        if not stat.S_ISDIR(os.lstat(path / "components").st_mode):
            return False
        for root, directories, files in os.walk(path / "components"):
            for name in directories:
                if not stat.S_ISDIR(os.lstat(os.path.join(root, name)).st_mode):
                    return False
            for name in files:
                if not stat.S_ISREG(os.lstat(os.path.join(root, name)).st_mode):
                    return False
        return True
    except OSError:
        return False


def holds_what_we_write(entry: Debris) -> bool:
    """Whether ``entry`` holds exactly what this library puts at a name of its kind (see the module docstring).

    Every kind is judged alike: a staging entry is a checkpoint being written, an
    old copy or a tombstone one that was being deleted when its writer died.
    """
    return _partial_staging(entry.path)


def target_is_checkpoint(entry: Debris) -> bool:
    """Whether the name ``entry`` was made for holds a recognisable checkpoint (not nothing, not a stray folder)."""
    from .target import not_a_checkpoint_reason  # target imports the readers; load them only when needed

    target = entry.path.parent / entry.target_name
    return os.path.lexists(target) and not_a_checkpoint_reason(target) is None


def removable(entry: Debris) -> bool:
    """Whether ``entry`` is debris this library may remove now (R-PUB-18)."""
    if entry.kind == "old" and not target_is_checkpoint(entry):
        return False  # the only copy of the checkpoint while its name holds none (R-PUB-13)
    return holds_what_we_write(entry) and writer_gone(entry)

