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
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from ..format.errors import CheckpointError, ConcurrentModification, TargetExists
from ..rules import raise_if, required
from ..rules.publication import PUB
from .debris import holds_what_we_write, logger, parse, release, removable, working_path
from .target import check_replaceable, is_empty_directory, not_a_checkpoint_reason, reason_unless_replaced

#: Test hook: called with an operation name before each filesystem step.
FAULT_HOOK: Callable[[str], None] | None = None

_OLD_MARK = ".oc-old-"

#: What ``rename(2)`` answers when the new name holds something it will not replace.
_SOMETHING_THERE = frozenset({errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR})


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


def fsync_together(files: list[Path], root: Path | None = None) -> None:
    """fsync ``files`` and every directory below and including ``root``, all at once; raise the first error.

    Each fsync runs in its own thread (it releases the GIL): fsyncs that wait
    together are committed by one journal commit on ext4 and XFS, where one
    after the other each waits for its own (a collective save's coordinator
    measured 10 sequential fsyncs at about 60 ms before its rename).
    """
    fault_point("fsync-dir")
    directories = [] if root is None else [Path(d) for d, _, _ in os.walk(root)]
    paths = [*files, *directories]
    if len(paths) <= 1:
        for path in paths:
            _fsync_path(path)
        return
    futures: list[Future[None]] = []
    try:
        with ThreadPoolExecutor(min(len(paths), 8), "oc-fsync") as pool:
            for path in paths:
                futures.append(pool.submit(_fsync_path, path))
    except RuntimeError:  # at interpreter exit concurrent.futures takes no work: an async save finishing then
        for path in paths[len(futures):]:  # fsyncs the rest here, one after the other
            _fsync_path(path)
    for done in futures:
        done.result()


def _fsync_path(path: Path) -> None:
    """fsync one file or directory by name."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_libc: ctypes.CDLL | bool | None = None  # None: not looked up yet; False: no C library


def _renameat2() -> Callable[..., int] | None:
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        _libc = ctypes.CDLL(name, use_errno=True) if name else False
    function: Callable[..., int] | None = getattr(_libc, "renameat2", None) if _libc else None
    return function


_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2


def _rename2(a: Path, b: Path, flags: int) -> bool:
    """``renameat2(a, b, flags)``; False where the OS or filesystem does not have ``flags``."""
    function = _renameat2()
    if function is None:
        return False
    result = function(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), flags)
    if result == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def exchange(a: Path, b: Path) -> bool:
    """Atomically swap two names; False where the OS or filesystem cannot."""
    fault_point("exchange")
    return _rename2(a, b, _RENAME_EXCHANGE)


def _rename_new(staged: Path, target: Path) -> None:
    """Rename ``staged`` to the missing name ``target`` without ever replacing what appears there meanwhile.

    ``rename(2)`` would silently replace a file (or an empty directory) created at ``target`` since it was
    checked; ``RENAME_NOREPLACE`` fails instead. Where the flag is missing, a file is linked (``link(2)``
    fails on an existing name) and a directory renamed (``rename(2)`` fails on a non-empty directory, and an
    empty one holds nothing to lose).
    """
    fault_point("rename")
    if USE_EXCHANGE and _rename2(staged, target, _RENAME_NOREPLACE):
        return
    if staged.is_file() and not staged.is_symlink():
        try:
            os.link(staged, target)
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links: the plain rename is all there is
            os.rename(staged, target)
            return
        os.unlink(staged)
    else:
        os.rename(staged, target)


def _appeared(target: Path, exc: OSError) -> CheckpointError:
    """The error for something put at ``target`` by another process while this save was publishing.

    Another writer's checkpoint: the two saves raced (R-RDR-14's writer side), and saving again replaces it.
    Anything else: the target is not this library's to replace (R-PUB-16).
    """
    reason, replaced = reason_unless_replaced(target)
    if not os.path.lexists(target) or reason is None or replaced:  # gone again, or replaced: a writer's too
        return ConcurrentModification(
            "another process published or is publishing a checkpoint at this path while this save was writing "
            f"it; this save published nothing ({exc.strerror}); save again to replace it", file=str(target))
    return required(PUB.check(
        "R-PUB-16", None, f"something was put here while the checkpoint was being written ({exc.strerror})",
        "the new checkpoint was not published and nothing at this path was changed", file=str(target)))


def _swapped_away_ours(swapped: Path, target: Path) -> None:
    """After an exchange or a move aside: undo it unless what left ``target`` is a checkpoint (or nothing).

    The target was checked just before; this closes the window between that check and the rename, in which
    another process may have put its own folder or file there (R-PUB-16: only a checkpoint is replaced).
    """
    if is_empty_directory(swapped):
        return
    raise_if(PUB.check("R-PUB-16", None, not_a_checkpoint_reason(swapped),
                       "it was put here while the checkpoint was being written: nothing at this path was changed",
                       file=str(target)))


#: Tests set this to False to exercise the fallback without RENAME_EXCHANGE.
USE_EXCHANGE = True


def _old_copies(target: Path) -> list[Path]:
    """``.NAME.oc-old-<writer token>`` entries next to ``target`` that are whole checkpoints a writer moved aside."""
    prefix = f".{target.name}{_OLD_MARK}"
    copies = []
    for name in sorted(os.listdir(target.parent)):
        entry = parse(target.parent / name) if name.startswith(prefix) else None
        if (entry is not None and entry.kind == "old" and entry.target_name == target.name
                and holds_what_we_write(entry)):
            copies.append(entry.path)
    return copies


def publish(staged: Path, target: Path, *, durable: bool, overwrite: bool = True) -> None:
    """Make ``staged`` (a complete checkpoint) visible as ``target``, atomically.

    The last step before the rename or exchange checks ``target`` again
    (:func:`~opencheckpoint.container.target.check_replaceable`, R-PUB-16):
    whatever another process put there while the checkpoint was being written
    (or packed) stays, and :class:`TargetExists` is raised. What an exchange or
    a move aside takes away is checked once more, and put back unless it is a
    checkpoint, so even a folder created between that check and the rename is
    never deleted.
    """
    parent = target.parent
    check_replaceable(target, overwrite=overwrite)
    if not os.path.lexists(target):
        _publish_new(staged, target)
    elif USE_EXCHANGE and exchange(staged, target):
        try:
            _swapped_away_ours(staged, target)
        except TargetExists:
            exchange(staged, target)  # swap back: the user's entry returns to its name, untouched
            raise
        if durable:
            fsync_directory(parent)
        remove_tree(staged)  # now holds the old checkpoint
    elif staged.is_file() and target.is_file() and not target.is_symlink():
        # Replacing a file with a file: rename(2) swaps the name atomically.
        fault_point("rename")
        os.replace(staged, target)
    else:
        _publish_aside(staged, target, durable=durable)
    if durable:
        fsync_directory(parent)


def _publish_new(staged: Path, target: Path) -> None:
    """Publish at a missing name; then remove an old copy a writer that died between its renames left."""
    try:
        _rename_new(staged, target)
    except (FileExistsError, IsADirectoryError, NotADirectoryError) as exc:
        raise _appeared(target, exc) from None
    except OSError as exc:
        if exc.errno != errno.ENOTEMPTY:
            raise
        raise _appeared(target, exc) from None
    # The new checkpoint now supersedes the copy left aside (a live writer's copy is its own to remove).
    for old in _old_copies(target):
        entry = parse(old)
        if entry is not None and removable(entry):
            remove_tree(old)


def _publish_aside(staged: Path, target: Path, *, durable: bool) -> None:
    """Without an atomic exchange: move the previous checkpoint aside, rename the new one in, delete the old."""
    _remove_ended_old_copies(target)
    old = working_path(target, "old")
    try:
        fault_point("rename-old")
        os.rename(target, old)
        try:
            _swapped_away_ours(old, target)
        except TargetExists:
            os.rename(old, target)
            raise
        fault_point("rename")
        try:
            os.rename(staged, target)
        except OSError as exc:
            _settle_old_copy(old, target)
            if exc.errno in _SOMETHING_THERE:  # another writer published at the name this save emptied
                raise _appeared(target, exc) from None
            raise
        if durable:
            fsync_directory(target.parent)
        remove_tree(old)
    finally:
        release(old)


def _remove_ended_old_copies(target: Path) -> None:
    """R-PUB-6's first step: delete the old copies that ended writers left (at most one may ever exist).

    An old copy of a writer still running is that writer's, between its two renames or about to delete it
    (R-PUB-17, R-PUB-18): the name may already be missing, and that copy the only one of the checkpoint. It is
    left alone, and this save reports the race instead of publishing beside it.
    """
    for previous in _old_copies(target):
        entry = parse(previous)
        if entry is None or not removable(entry):
            raise ConcurrentModification(
                "another process is publishing a checkpoint at this path (its previous checkpoint is moved aside "
                f"as {previous.name!r}); this save published nothing; save again to replace it", file=str(target))
        remove_tree(previous)


def _settle_old_copy(old: Path, target: Path) -> None:
    """After a failed final rename: drop the copy moved aside if another writer's checkpoint now holds the name,
    else put it back, so no copy of this writer outlives its save (it would stop every other writer, above)."""
    if os.path.lexists(target):
        if not_a_checkpoint_reason(target) is None:
            remove_tree(old)
        return
    with contextlib.suppress(OSError):
        os.rename(old, target)
