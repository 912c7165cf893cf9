"""Writing a checkpoint through a staging directory (spec §12), shared by every writer.

:class:`StagedCheckpoint` hands out a fresh hidden staging directory; the
writer fills it with component files; :meth:`StagedCheckpoint.commit` writes
``manifest.json`` last, makes everything durable, packs the archive form if
asked, and publishes atomically. Whatever is left over on failure is removed
on exit (and by the next save, should the process die).

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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..manifest import MANIFEST_NAME, serialize_manifest
from .archive import ArchiveWriter
from .debris import release
from .publish import (
    clean_stale,
    fault_point,
    fsync_directory,
    fsync_tree_directories,
    publish,
    remove_tree,
    staging_path,
)
from .target import check_replaceable


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

    def __enter__(self) -> StagedCheckpoint:
        try:
            check_replaceable(self.target, overwrite=self.overwrite)
        except BaseException:
            release(self.directory)
            raise
        self.target.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(self.target)
        fault_point("mkdir-staging")
        self.directory.mkdir()
        return self

    def commit(self, body: Mapping[str, Any]) -> None:
        """Write the manifest (``body`` without its checksum) last, then publish."""
        fault_point("write-manifest")
        with open(self.directory / MANIFEST_NAME, "wb") as handle:
            handle.write(serialize_manifest(body))
            if self.durable:
                fault_point("fsync-manifest")
                handle.flush()
                os.fsync(handle.fileno())
        if self.durable:
            fsync_tree_directories(self.directory)
        if self.form == "directory":
            publish(self.directory, self.target, durable=self.durable, overwrite=self.overwrite)
        else:
            self._archive = staging_path(self.target)
            self._pack(body["components"])
            publish(self._archive, self.target, durable=self.durable, overwrite=self.overwrite)
            release(self._archive)
            self._archive = None

    def _pack(self, records: Mapping[str, Mapping[str, Any]]) -> None:
        """Copy the staged tree into a ZIP: component files in manifest order, manifest last."""
        assert self._archive is not None
        fault_point("write-archive")
        with open(self._archive, "wb") as stream:
            writer = ArchiveWriter(stream)
            for record in records.values():
                for rel, entry in record["files"].items():
                    member = f"{record['path']}/{rel}"
                    with open(self.directory / member, "rb") as source:
                        writer.add(member, source, entry["size"])
            with open(self.directory / MANIFEST_NAME, "rb") as source:
                writer.add(MANIFEST_NAME, source, (self.directory / MANIFEST_NAME).stat().st_size)
            writer.close()
            if self.durable:
                fault_point("fsync-archive")
                stream.flush()
                os.fsync(stream.fileno())
        if self.durable:
            fsync_directory(self._archive.parent)

    def __exit__(self, *exc: object) -> None:
        # After a directory-form publish the staging name is gone (or holds nothing);
        # after a failure it holds the partial checkpoint; remove either way.
        for leftover in (self.directory, self._archive):
            if leftover is not None:
                try:
                    remove_tree(leftover)
                finally:
                    release(leftover)
