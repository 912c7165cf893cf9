"""Atomic, durable publication (spec "Atomic publication").

A save writes into a hidden staging directory in the target's parent, fsyncs
every file and directory, and only then makes it visible under the target
name. Replacing an existing checkpoint uses ``renameat2(RENAME_EXCHANGE)``
where the kernel and filesystem have it, so the name always resolves to a
complete checkpoint; elsewhere the old one is first renamed to
``.NAME.oc-old-*``, which readers consult while the name is missing.

Every filesystem step calls :func:`fault_point`, so tests can inject a
failure between any two operations and check that the previous checkpoint
survives.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from .debris import holds_only_our_files, logger, parse, release, removable, working_path

#: Test hook: called with an operation name before each filesystem step.
FAULT_HOOK: Callable[[str], None] | None = None

_OLD_MARK = ".oc-old-"


def fault_point(operation: str) -> None:
    """Give an injected fault the chance to fire before ``operation``."""
    if FAULT_HOOK is not None:
        FAULT_HOOK(operation)


def staging_path(target: Path) -> Path:
    """A fresh hidden sibling name for the new checkpoint: ``.NAME.oc-staging-<writer token>`` (R-PUB-1).

    The path counts as in use until :func:`release` is called for it.
    """
    return working_path(target, "staging")


def clean_stale(target: Path) -> list[Path]:
    """Remove debris of ended writers next to ``target`` (any name, R-PUB-18); return what was removed."""
    return clean_debris(target.parent)


def remove_tree(path: Path) -> None:
    """Delete a file or directory tree (never following symlinks out of it)."""
    fault_point("remove")
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def clean_debris(directory: Path) -> list[Path]:
    """Remove every removable debris entry directly in ``directory``; return what was removed."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed: list[Path] = []
    for name in sorted(names):
        if not name.startswith("."):
            continue
        entry = parse(directory / name)
        if entry is None or not removable(entry):
            continue
        remove_tree(entry.path)
        if not os.path.lexists(entry.path):
            removed.append(entry.path)
            logger.info("removed %s (debris of a save whose writer is gone)", entry.path)
    return removed


def fsync_directory(path: Path) -> None:
    """Make a directory's entries durable."""
    fault_point("fsync-dir")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree_directories(root: Path) -> None:
    """fsync every directory below and including ``root`` (deepest first)."""
    directories = [Path(d) for d, _, _ in os.walk(root)]
    for directory in reversed(directories):
        fsync_directory(directory)


_libc: ctypes.CDLL | bool | None = None  # None: not looked up yet; False: no C library


def _renameat2() -> Callable[..., int] | None:
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        _libc = ctypes.CDLL(name, use_errno=True) if name else False
    function: Callable[..., int] | None = getattr(_libc, "renameat2", None) if _libc else None
    return function


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> bool:
    """Atomically swap two names; False where the OS or filesystem cannot."""
    function = _renameat2()
    if function is None:
        return False
    fault_point("exchange")
    result = function(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if result == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


#: Tests set this to False to exercise the fallback without RENAME_EXCHANGE.
USE_EXCHANGE = True


def _old_copies(target: Path) -> list[Path]:
    """``.NAME.oc-old-*`` entries next to ``target`` that hold nothing but a checkpoint writer's files."""
    prefix = f".{target.name}{_OLD_MARK}"
    return [target.parent / name for name in sorted(os.listdir(target.parent))
            if name.startswith(prefix) and holds_only_our_files(target.parent / name)]


def publish(staged: Path, target: Path, *, durable: bool) -> None:
    """Make ``staged`` (a complete checkpoint) visible as ``target``, atomically.

    The caller has checked that ``target`` is nothing or a checkpoint it may
    replace (:func:`~opencheckpoint.container.target.check_replaceable`).
    """
    parent = target.parent
    if not os.path.lexists(target):
        fault_point("rename")
        os.rename(staged, target)
        # A writer that died between its two renames left the previous checkpoint aside;
        # the new one now supersedes it (a live writer's copy is its own to remove).
        for old in _old_copies(target):
            entry = parse(old)
            if entry is not None and removable(entry):
                remove_tree(old)
    elif USE_EXCHANGE and exchange(staged, target):
        if durable:
            fsync_directory(parent)
        remove_tree(staged)  # now holds the old checkpoint
    elif staged.is_file() and target.is_file() and not target.is_symlink():
        # Replacing a file with a file: rename(2) swaps the name atomically.
        fault_point("rename")
        os.replace(staged, target)
    else:
        for previous in _old_copies(target):  # R-PUB-6: at most one old copy may ever exist
            remove_tree(previous)
        old = working_path(target, "old")
        try:
            fault_point("rename-old")
            os.rename(target, old)
            fault_point("rename")
            os.rename(staged, target)
            if durable:
                fsync_directory(parent)
            remove_tree(old)
        finally:
            release(old)
    if durable:
        fsync_directory(parent)
