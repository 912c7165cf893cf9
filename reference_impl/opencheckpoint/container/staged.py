"""Writing a checkpoint through a staging directory (spec §12), shared by every writer.

:class:`StagedCheckpoint` hands out a fresh hidden staging directory; the
writer fills it with component files; :meth:`StagedCheckpoint.commit` writes
``manifest.json`` last, makes everything durable, and publishes atomically.
Whatever is left over on failure is removed on exit (and by the next save,
should the process die).

The archive form is written in one pass into a hidden staging *file*
(spec R-PUB-9): writers that can stream a file (trees, JSON) write it straight
into :attr:`StagedCheckpoint.archive` as a member; files an adapter writes by
itself go to the staging directory, created only then, and are copied into the
archive by :meth:`StagedCheckpoint.pack` in manifest order. Before, the whole
checkpoint was staged as a directory and then copied into the archive: two full
writes, twice the disk space, 6x slower than the directory form.

Before anything on disk changes, the target must be nothing or a checkpoint
(:func:`~.target.check_replaceable`, spec R-PUB-16); :func:`~.publish.publish`
checks it again as its last step before the rename, in case something else was
put there meanwhile.

>>> import tempfile, pathlib
>>> target = pathlib.Path(tempfile.mkdtemp()) / "ckpt"
>>> body = {"format": "opencheckpoint", "format_version": 1, "checkpoint_id": "x",
...         "created_at": "2026-01-01T00:00:00Z", "producer": {"name": "doc", "version": "1"},
...         "metadata": {}, "extensions": {}, "components": {}}
>>> with StagedCheckpoint(target, form="directory", durable=False) as staged:
...     staged.commit(body)
>>> sorted(p.name for p in target.iterdir())
['manifest.json']
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from ..format.manifest import MANIFEST_NAME, serialize_manifest
from .archive_writer import ArchiveWriter
from .debris import release
from .publish import (
    clean_stale,
    fault_point,
    fsync_directory,
    fsync_together,
    publish,
    remove_tree,
    staging_path,
)
from .target import check_replaceable
from .writeback import start_writeback


class StagedCheckpoint:
    """A checkpoint under construction that becomes ``target`` atomically on :meth:`commit`."""

    def __init__(self, target: Path, *, form: str, durable: bool, overwrite: bool = True) -> None:
        if form not in ("directory", "archive"):
            raise ValueError(f"form must be 'directory' or 'archive', got {form!r}")
        self.target = target
        self.form = form
        self.durable = durable
        self.overwrite = overwrite
        self.directory = staging_path(target)
        self._archive: Path | None = None
        self._stream: BinaryIO | None = None
        #: Archive form: members are written here as they are produced (see :meth:`pack`).
        self.archive: ArchiveWriter | None = None

    def __enter__(self) -> StagedCheckpoint:
        try:
            check_replaceable(self.target, overwrite=self.overwrite)
        except BaseException:
            release(self.directory)
            raise
        self.target.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(self.target)
        fault_point("mkdir-staging")
        if self.form == "directory":
            self.directory.mkdir()
        else:
            self._archive = staging_path(self.target)
            fault_point("write-archive")
            self._stream = open(self._archive, "x+b", buffering=0)  # closed by commit() or __exit__
            self.archive = ArchiveWriter(self._stream, writeback=start_writeback() if self.durable else None)
        return self

    def pack(self, records: Mapping[str, Mapping[str, Any]]) -> None:
        """Copy the files of ``records`` not yet in the archive from the staging directory (manifest order).

        Call it after each component to keep the archive in manifest order when streamed components and
        adapter-written files are mixed; :meth:`commit` calls it for whatever is left.
        """
        writer = self.archive
        if writer is None:
            return
        for record in records.values():
            for rel, entry in record["files"].items():
                member = f"{record['path']}/{rel}"
                if member in writer:
                    continue
                with open(self.directory / member, "rb", buffering=0) as source:
                    writer.add(member, source, entry["size"])

    def commit(self, body: Mapping[str, Any], unsynced: Sequence[Path] = ()) -> None:
        """Write the manifest (``body`` without its checksum) last, then publish.

        ``unsynced``: files of the staging directory written without an fsync;
        a durable commit fsyncs them with the manifest and the directories, all
        at once (:func:`~.publish.fsync_together`), before the rename.
        """
        if self.form == "directory":
            fault_point("write-manifest")
            with open(self.directory / MANIFEST_NAME, "wb") as handle:
                handle.write(serialize_manifest(body))
            if self.durable:
                fault_point("fsync-manifest")
                fsync_together([self.directory / MANIFEST_NAME, *unsynced], self.directory)
            publish(self.directory, self.target, durable=self.durable, overwrite=self.overwrite)
            return
        assert self.archive is not None and self._stream is not None and self._archive is not None
        self.pack(body["components"])
        fault_point("write-manifest")
        self.archive.add_bytes(MANIFEST_NAME, serialize_manifest(body))
        self.archive.close()
        if self.durable:
            fault_point("fsync-archive")
            os.fsync(self._stream.fileno())
        self._stream.close()
        if self.durable:
            fsync_directory(self._archive.parent)
        publish(self._archive, self.target, durable=self.durable, overwrite=self.overwrite)
        release(self._archive)
        self._archive = None

    def __exit__(self, *exc: object) -> None:
        # After a directory-form publish the staging name is gone (or holds nothing);
        # after a failure it holds the partial checkpoint; remove either way.
        if self.archive is not None:
            self.archive.shutdown()
        if self._stream is not None:
            self._stream.close()
        for leftover in (self.directory, self._archive):
            if leftover is not None:
                try:
                    remove_tree(leftover)
                finally:
                    release(leftover)
