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

Only entries of this naming whose writer is gone, and whose content is what a
writer of ours puts there (a regular file, or a directory holding nothing but
``manifest.json`` and ``components``), are ever removed (:func:`.publish.clean_debris`).
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


def writer_token() -> str:
    """A fresh token for one working name of this process."""
    start = process_start(os.getpid()) or "0" * 8
    return f"{os.getpid()}-{machine_token()}{start}{uuid.uuid4().hex[:12]}"


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
    """The debris naming of ``path``'s last segment, or None if it is not of that naming."""
    match = _DEBRIS_NAME.fullmatch(path.name)
    if match is None:
        return None
    return Debris(path, match["name"], match["kind"], match["token"])


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


def holds_only_our_files(path: Path) -> bool:
    """A regular file (an archive), or a directory with nothing but ``manifest.json`` and ``components``."""
    try:
        mode = os.lstat(path).st_mode
        if stat.S_ISREG(mode):
            return True
        if not stat.S_ISDIR(mode):
            return False
        return set(os.listdir(path)) <= _OWN_TOP_LEVEL
    except OSError:
        return False


def removable(entry: Debris) -> bool:
    """Whether ``entry`` is debris this library may remove now (R-PUB-18)."""
    if entry.kind == "old" and not os.path.lexists(entry.path.parent / entry.target_name):
        return False  # the only copy of the checkpoint while its name is missing (R-PUB-13)
    return holds_only_our_files(entry.path) and writer_gone(entry)
