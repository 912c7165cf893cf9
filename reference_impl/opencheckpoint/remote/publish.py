"""Publishing a checkpoint on an object store, where nothing can be renamed (spec §12.7).

The manifest is the commit point: a prefix holds a checkpoint from the moment
its ``manifest.json`` exists, and readers already treat a prefix without one as
"not a checkpoint" (R-CON-1). So a save

1. refuses a target that is inside a checkpoint, holds a checkpoint (never
   overwritten in place: a rotation writes new prefixes), or holds any object
   (R-PUB-21), after removing the debris of ended writers of that target;
2. writes the checkpoint into a local temporary directory with the ordinary
   writer (trees, JSON, adapters' files, every checksum: the save pipeline's
   :class:`~opencheckpoint.write.object_store.ObjectStoreTarget`);
3. writes a *writer marker*, the sibling object ``.NAME.oc-staging-<writer token>``
   (the staging naming of §12.1) holding the upload plan (every object name it
   will write), before any object below the target, so the debris of a killed
   save is recognisably ours, by name; then uploads every data object, and
   ``manifest.json`` strictly last (R-PUB-22);
4. deletes the marker. A failed save deletes what it uploaded, then its marker.

A writer killed in step 3 leaves data objects without a manifest (not a
checkpoint) and its marker; the next save to that target, or a rotation's
pruning, deletes the planned objects and the marker once the writer has ended,
and nothing else (R-PUB-24).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from ..container.debris import STALE_AFTER_S, process_running, process_token, writer_token
from ..container.publish import fault_point
from ..format.errors import CheckpointError, ConcurrentModification, UnsupportedLocation
from ..format.manifest import MANIFEST_NAME
from ..rules.publication import PUB
from .fspath import FsPath, is_folder_marker

#: ``.NAME.oc-staging-<writer token>`` (a save) or ``.NAME.oc-delete-<writer token>`` (a deletion): a writer
#: marker, with the token of :func:`~.debris.writer_token`.
_MARKER = re.compile(r"\.(?P<name>.+)\.oc-(?:staging|delete)-(?P<process>\d+-[0-9a-f]{16})[0-9a-f]{12}")
#: Markers this process is working under now (its own ended saves' markers are debris, these are not).
_ACTIVE: set[str] = set()
_ACTIVE_LOCK = threading.Lock()


@contextlib.contextmanager
def _marker(target: FsPath, kind: str, content: bytes) -> Iterator[FsPath]:
    """Write the writer marker ``.NAME.oc-<kind>-<writer token>`` beside ``target``; removed on success."""
    marker = target.parent / f".{target.name}.oc-{kind}-{writer_token()}"
    with _ACTIVE_LOCK:
        _ACTIVE.add(marker.path)
    try:
        fault_point(f"write-marker:{kind}")
        target.fs.pipe_file(marker.path, content)
        yield marker
        with contextlib.suppress(OSError):  # the work is done; a marker left over is cleaned later
            target.fs.rm_file(marker.path)
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE.discard(marker.path)


def upload_checkpoint(staged: Path, target: FsPath) -> None:
    """Publish the complete local checkpoint ``staged`` at ``target``: data objects first, manifest last.

    The writer marker records the upload plan (every object name the save will write), so that what a killed
    save leaves is deleted by name and nothing else below the prefix ever is (R-PUB-24). The caller checked
    the target (:func:`check_remote_target`) before writing anything.
    """
    objects = sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file())
    plan = {"target": target.name, "started": time.time(), "objects": objects}
    with _marker(target, "staging", json.dumps(plan).encode()) as marker:
        try:
            _claim(target, marker, set(objects))
        except ConcurrentModification:
            _withdraw(target, [], marker)  # nothing was uploaded: only the marker goes
            raise
        _upload(staged, objects, target, marker)


def _claim(target: FsPath, marker: FsPath, objects: set[str]) -> None:
    """Go on only if no other live writer's marker for ``target`` plans any of ``objects``, now that this
    writer's marker exists.

    :func:`check_remote_target` looked for other writers before this writer's marker existed, so two saves
    starting together could both pass it and then overwrite each other's same-named objects. Checking again
    after writing the marker closes that window on a store that lists what was written before (S3, GCS and
    fsspec's memory filesystem do): of two writers, the later one to list sees the other's marker, so at most one
    uploads anything, and none uploads over a checkpoint published since that check. Both may step back (each
    saw the other): each gets :class:`ConcurrentModification`, and nothing below the target was written.

    The ranks of a collective save upload their own shard objects under their own markers before the
    coordinator's upload (:class:`RankUpload`): their plans name none of the coordinator's objects, so they
    are no other writer here; a competing save's plan names at least ``manifest.json``, and a deletion's
    marker the checkpoint's objects.
    """
    directory, prefix = target.parent, f".{target.name}.oc-"
    directory.fs.invalidate_cache(directory.path)
    try:
        names = [str(n).rstrip("/").rsplit("/", 1)[-1] for n in directory.fs.ls(directory.path, detail=False)]
    except (FileNotFoundError, NotADirectoryError):
        names = []
    for name in sorted(names):
        match = _MARKER.fullmatch(name)
        if match is None or not name.startswith(prefix) or (directory / name).path == marker.path:
            continue
        other = directory / name
        if not _writer_ended(other, match["process"]) and _plan_overlaps(other, objects):
            raise ConcurrentModification(f"another writer started saving to this prefix at the same time (its "
                                         f"marker {name!r}); a checkpoint has one writer, and this save wrote "
                                         "nothing", file=str(target))
    # A writer whose marker was already gone had published first (its manifest is written before its marker is
    # removed), so the manifest is looked for after the markers: this writer must not overwrite its objects.
    target.fs.invalidate_cache(target.path)
    if target.fs.exists(target.key(MANIFEST_NAME)):
        raise ConcurrentModification("another writer published a checkpoint at this prefix just before this save "
                                     "started uploading; this save wrote nothing", file=str(target))


def _upload(staged: Path, objects: list[str], target: FsPath, marker: FsPath) -> None:
    """Upload the data objects, then ``manifest.json``; on failure delete what was uploaded."""
    fs = target.fs
    uploaded: list[str] = []
    try:
        _put_objects(staged, [rel for rel in objects if rel != MANIFEST_NAME], target, uploaded, marker)
        fs.invalidate_cache(target.path)
        if fs.exists(target.key(MANIFEST_NAME)):
            # A writer that did not claim the prefix (an older version, or one that took this writer's marker for
            # an ended one) published here: the same-named objects are its checkpoint's now, never ours to delete.
            listed = set(_listed_objects(target))
            theirs = set(objects) if listed == {MANIFEST_NAME} else listed  # unreadable: assume every name is
            uploaded[:] = [rel for rel in uploaded if rel not in theirs]
            raise ConcurrentModification("another writer published a checkpoint at this prefix while this save "
                                         "was uploading; this save published nothing", file=str(target))
        fault_point("upload:manifest.json")
        fs.pipe_file(target.key(MANIFEST_NAME), (staged / MANIFEST_NAME).read_bytes())
    except BaseException:
        _withdraw(target, uploaded, marker)
        raise


def _put_objects(staged: Path, objects: list[str], target: FsPath, uploaded: list[str], marker: FsPath) -> None:
    """Upload each of ``objects`` (below ``staged``) to the same name below ``target``, noting each in ``uploaded``
    before it is sent (a failed put may have left it half there).

    Another machine takes a marker for its ended writer's once it is :data:`STALE_AFTER_S` old (it cannot ask
    whether a process there still runs), so an upload that lasts longer rewrites its marker between objects
    well before then: a writer that still runs never looks ended.
    """
    written = time.monotonic()
    for rel in objects:
        if time.monotonic() - written > STALE_AFTER_S / 4:
            target.fs.pipe_file(marker.path, target.fs.cat_file(marker.path))  # same plan, new modification time
            written = time.monotonic()
        fault_point(f"upload:{rel}")
        uploaded.append(rel)
        target.fs.put_file(str(staged / rel), target.key(rel))


def _withdraw(target: FsPath, uploaded: list[str], marker: FsPath) -> None:
    """Delete this writer's own uploaded objects, then its marker; what cannot be deleted stays marked debris."""
    try:
        for rel in uploaded:  # ours: this save's own data objects, never a committed checkpoint's
            with contextlib.suppress(FileNotFoundError):
                target.fs.rm_file(target.key(rel))
        target.fs.rm_file(marker.path)
    except OSError:  # what is left stays marked: debris, removed by a later save or prune
        pass


class RankUpload:
    """One rank's shard objects in a collective save to an object store, uploaded before the coordinator publishes.

    :meth:`upload` writes this rank's own writer marker (its upload plan, as a single writer's) and then its
    objects straight below ``target``; they are no checkpoint until the coordinator writes ``manifest.json``,
    which it does only after every rank reported its upload done. :meth:`settle` then removes the marker
    (published) or the objects and the marker (not published). A rank killed in between leaves marked debris
    that the next save to ``target`` removes by name (R-PUB-24), as a killed single writer's.

    >>> import fsspec, pathlib, tempfile
    >>> scratch = pathlib.Path(tempfile.mkdtemp()); _ = (scratch / "part.bin").write_bytes(b"x")
    >>> target = FsPath(fsspec.filesystem("memory"), "/doc-rank/ckpt")
    >>> part = RankUpload(scratch, ["part.bin"], target); part.upload()
    >>> target.fs.cat_file(target.key("part.bin")), len(target.fs.find("/doc-rank"))  # the object and the marker
    (b'x', 2)
    >>> part.settle(published=False); target.fs.find("/doc-rank")  # not published: both deleted
    []
    """

    def __init__(self, staged: Path, objects: list[str], target: FsPath) -> None:
        self.staged, self.objects, self.target = staged, sorted(objects), target
        self._uploaded: list[str] = []
        self._marker: FsPath | None = None

    def upload(self) -> None:
        """Write the marker, then every object; on failure withdraw what was uploaded and raise."""
        marker = self.target.parent / f".{self.target.name}.oc-staging-{writer_token()}"
        with _ACTIVE_LOCK:
            _ACTIVE.add(marker.path)  # this process's writer is alive: its marker is no debris
        self._marker = marker
        try:
            fault_point("write-marker:staging")
            plan = {"target": self.target.name, "started": time.time(), "objects": self.objects}
            self.target.fs.pipe_file(marker.path, json.dumps(plan).encode())
            _put_objects(self.staged, self.objects, self.target, self._uploaded, marker)
        except BaseException:
            self.settle(published=False)
            raise

    def abandon(self) -> None:
        """Leave the objects and the marker (the outcome is unknown): this writer has ended, its marker is debris."""
        marker, self._marker = self._marker, None
        if marker is not None:
            with _ACTIVE_LOCK:
                _ACTIVE.discard(marker.path)

    def settle(self, *, published: bool) -> None:
        """After the coordinator's outcome: keep the objects (``published``), or delete them; the marker goes."""
        marker, self._marker = self._marker, None
        if marker is None:
            return
        try:
            if published:  # the objects belong to the published checkpoint now
                with contextlib.suppress(OSError):  # a marker left over is cleaned later
                    self.target.fs.rm_file(marker.path)
            else:
                _withdraw(self.target, self._uploaded, marker)
        finally:
            with _ACTIVE_LOCK:
                _ACTIVE.discard(marker.path)


def delete_remote_checkpoint(target: FsPath) -> None:
    """Delete a checkpoint (the caller checked it is one it may delete): ``manifest.json`` first (R-PUB-23).

    From the first step the prefix is no checkpoint any more, so a reader never takes a half-deleted
    one for valid; a ``.NAME.oc-delete-<token>`` marker, written before and removed after, makes what a
    killed deletion leaves recognisable debris (:func:`clean_remote_debris`).
    """
    fs = target.fs
    listed = _listed_objects(target)
    with _marker(target, "delete", json.dumps({"target": target.name, "objects": listed}).encode()):
        fault_point("delete-manifest")
        fs.rm_file(target.key(MANIFEST_NAME))
        _remove_objects(target, [rel for rel in _objects_below(target) if rel in set(listed)])


def _listed_objects(target: FsPath) -> list[str]:
    """The objects the manifest of the checkpoint at ``target`` lists (its files), and the manifest itself."""
    try:
        manifest = json.loads(target.fs.cat_file(target.key(MANIFEST_NAME)))
        components = manifest["components"]
        listed = [f"{record['path']}/{rel}" for record in components.values() for rel in record["files"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return [MANIFEST_NAME]  # unreadable: nothing but the manifest is known to be the checkpoint's
    return sorted({MANIFEST_NAME, *(str(rel) for rel in listed)})


def _plan_overlaps(marker: FsPath, objects: set[str]) -> bool:
    """Whether the writer of ``marker`` plans to write (or delete) any of ``objects``; True if its plan
    cannot be read (the safe answer: then it may)."""
    try:
        planned = json.loads(marker.fs.cat_file(marker.path))["objects"]
        return not isinstance(planned, list) or not objects.isdisjoint(str(rel) for rel in planned)
    except (OSError, ValueError, KeyError, TypeError):
        return True


def _planned_objects(marker: FsPath) -> set[str]:
    """The object names a writer marker records as its writer's plan (none when it records none)."""
    try:
        plan = json.loads(marker.fs.cat_file(marker.path))
        objects = plan.get("objects") if isinstance(plan, dict) else None
    except (OSError, ValueError):
        return set()
    return {rel for rel in objects if isinstance(rel, str)} if isinstance(objects, list) else set()


def check_remote_target(target: FsPath) -> None:
    """R-PUB-21: ``target`` must be an empty prefix outside any checkpoint (after debris cleanup)."""
    fs = target.fs
    if not fs.root_marker and "/" not in target.path.strip("/"):  # an object store's bucket, not a prefix in it
        raise UnsupportedLocation("a bucket's root: a checkpoint is saved to a prefix in a bucket "
                                  f"({target}/NAME), never to the bucket itself", file=str(target))
    ancestor, seen = target.parent, {target.path}
    while ancestor.path not in seen:
        if fs.exists(ancestor.key(MANIFEST_NAME)):
            raise _refused(target, f"inside the checkpoint {ancestor}: a checkpoint is never modified")
        seen.add(ancestor.path)
        ancestor = ancestor.parent
    clean_remote_debris(target.parent, only=target.name)
    _refuse_a_checkpoint(target)
    if fs.isfile(target.path):
        raise _refused(target, "an object (a file) is there; nothing is ever deleted that a save did not write")
    if _objects_below(target):
        # Another writer may have written its marker and started uploading since the markers were looked at: a
        # writer's marker exists before its first object and goes only after its manifest (or after it deleted
        # what it uploaded), so a second look at the markers, then for a manifest, tells its upload (reported as
        # ConcurrentModification) from objects nobody is writing.
        clean_remote_debris(target.parent, only=target.name)
        _refuse_a_checkpoint(target)
        leftover = _objects_below(target)
        if leftover:
            raise _refused(target, f"the prefix holds {len(leftover)} object(s) but no manifest.json (for example "
                           f"{leftover[0]!r}): not a checkpoint, and not debris of an ended save of this library; "
                           "delete them or save elsewhere")


def _refuse_a_checkpoint(target: FsPath) -> None:
    """R-PUB-21: a checkpoint at ``target`` is never overwritten in place."""
    if target.fs.exists(target.key(MANIFEST_NAME)):
        raise _refused(target, "a checkpoint is there, and on an object store a checkpoint is never overwritten in "
                       "place (nothing can be renamed, so a replacement could be seen half-written): save to a new "
                       "prefix, or delete the old checkpoint first")


def _refused(target: FsPath, why: str) -> CheckpointError:
    """R-PUB-21's refusal of ``target`` (the one place that names the rule)."""
    return PUB.error("R-PUB-21", why, file=str(target))


def _remove_objects(prefix: FsPath, rels: list[str]) -> None:
    """Delete the objects ``rels`` below ``prefix``, then what is left of it (pseudo-directories only)."""
    for rel in rels:
        fault_point(f"delete:{rel}")
        with contextlib.suppress(FileNotFoundError):
            prefix.fs.rm_file(prefix.key(rel))
    if "/" not in prefix.path.strip("/"):
        return  # a top-level path (a bucket) is never removed
    try:  # filesystems that keep directories (memory): empty ones only, deepest first; never recursive
        folders = prefix.fs.find(prefix.path, withdirs=True, detail=True)
    except OSError:
        return
    for name in sorted((n for n, info in folders.items() if info.get("type") == "directory"), key=len, reverse=True):
        with contextlib.suppress(OSError):
            prefix.fs.rmdir(name)
    with contextlib.suppress(OSError):
        prefix.fs.rmdir(prefix.path)


def _objects_below(prefix: FsPath) -> list[str]:
    """Relative names of every object below ``prefix``, folder markers left out (a pseudo-directory, §12.7)."""
    root = prefix.path.rstrip("/") + "/"
    prefix.fs.invalidate_cache(prefix.path)  # fsspec's listing cache may predate another process's writes
    try:
        found = prefix.fs.find(prefix.path, detail=True)
    except OSError:
        return []
    return sorted(str(name)[len(root):] for name, info in found.items()
                  if str(name).startswith(root) and info.get("type") == "file" and not is_folder_marker(name, info))


def clean_remote_debris(directory: FsPath, *, only: str | None = None) -> list[str]:
    """Delete the debris of ended writers in ``directory`` (only of the target ``only`` if given).

    For each writer marker whose writer has ended (R-PUB-24): if its target has no manifest, the
    objects below it that the marker's plan names (what that writer could have written; any other
    object stays, and keeps the prefix non-empty), then the marker; if the target was committed
    (killed after the manifest), the marker alone. A marker of a writer that still
    runs (or may: another machine's, younger than an hour) makes a save to its target fail with
    :class:`ConcurrentModification` (``only``), and is otherwise left alone. Returns the markers removed.
    """
    fs = directory.fs
    fs.invalidate_cache(directory.path)
    try:
        names = [str(n).rstrip("/").rsplit("/", 1)[-1] for n in fs.ls(directory.path, detail=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed: list[str] = []
    for name in sorted(names):
        match = _MARKER.fullmatch(name)
        if match is None or (only is not None and match["name"] != only):
            continue
        marker, target = directory / name, directory / match["name"]
        if not _writer_ended(marker, match["process"]):
            if only is not None:
                raise ConcurrentModification(f"another writer is saving to this prefix (its marker {name!r}); a "
                                             "checkpoint has one writer", file=str(target))
            continue
        if not fs.exists(target.key(MANIFEST_NAME)):
            planned = _planned_objects(marker)  # only what the dead writer could have written; anything else
            _remove_objects(target, [rel for rel in _objects_below(target) if rel in planned])  # stays

        fs.rm_file(marker.path)
        removed.append(name)
    return removed


def _writer_ended(marker: FsPath, process: str) -> bool:
    """Whether the writer of ``marker`` has ended: asked of this machine, else the marker is an hour old."""
    if process == process_token():
        with _ACTIVE_LOCK:
            return marker.path not in _ACTIVE  # this process's own: ended unless a save or deletion is under way
    running = process_running(process)
    if running is not None:
        return not running
    try:
        modified = marker.fs.modified(marker.path)
    except (NotImplementedError, OSError):
        return False  # its age cannot be known: never taken for ended
    return bool(time.time() - modified.timestamp() >= STALE_AFTER_S)
