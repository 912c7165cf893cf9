"""An OpenCheckpoint checkpoint in the other form: a directory packed into an archive, an archive unpacked.

The archive holds exactly the directory's tree (spec §3.3), so a repack
copies every file byte for byte and writes the same manifest: the same
``checkpoint_id``, creation time, producer, metadata, sizes and checksums;
only the container changes. The source is validated first (every byte,
:func:`~opencheckpoint.validate`): an invalid checkpoint is refused, never
copied into a valid-looking container. The copy streams one chunk at a
time and is published like every save (staging, fsync, rename); an
existing target is never replaced.

>>> import numpy as np, tempfile, os
>>> from opencheckpoint import Checkpoint, manifest, read_component
>>> folder = tempfile.mkdtemp()
>>> source = Checkpoint(w=np.arange(3.0)).save(os.path.join(folder, "ckpt"))
>>> packed = repack(source, os.path.join(folder, "ckpt.zip"))
>>> packed.is_file(), read_component(packed, "w").tolist()
(True, [0.0, 1.0, 2.0])
>>> manifest(packed)["checkpoint_id"] == manifest(source)["checkpoint_id"]
True
>>> repack(packed, os.path.join(folder, "again")).is_dir()
True
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from ...container.staged import StagedCheckpoint
from ...location import local_path
from ...read.reader import CheckpointReader
from ._common import ConversionError


def repack(src: str | os.PathLike[str], dst: str | os.PathLike[str], *,
           form: Literal["directory", "archive"] | None = None, durable: bool = True) -> Path:
    """Write checkpoint ``src`` at ``dst`` in ``form`` (default: the form ``src`` does not have); return ``dst``."""
    from ...read.validate import validate

    source, target = local_path(src), local_path(dst)
    report = validate(source)
    if not report.ok:
        first = report.errors[0]
        raise ConversionError(f"not repacked: the source is not a valid checkpoint ({len(report.errors)} "
                              f"error(s); the first: {first.error}: {first.file}: {first.field}: {first.message})",
                              file=str(source))
    with CheckpointReader(source) as reader:
        chosen = form or ("directory" if reader.source.form == "archive" else "archive")
        body = {key: value for key, value in reader.manifest.items() if key != "manifest_crc32c"}
        with StagedCheckpoint(target, form=chosen, durable=durable, overwrite=False) as staged:
            _copy_files(reader, staged, body["components"])
            staged.commit(body)
    return target


def _copy_files(reader: CheckpointReader, staged: StagedCheckpoint, records: dict[str, Any]) -> None:
    """Every listed file, in manifest order, one chunk at a time (memory: one chunk, not the file)."""
    for record in records.values():
        for rel, entry in record["files"].items():
            member, size = f"{record['path']}/{rel}", int(entry["size"])
            chunks = reader.source.read_chunks(member, size) if size else iter(())
            if staged.archive is not None:
                with staged.archive.stream(member, size) as out:
                    for chunk in chunks:
                        out.write(chunk)
                continue
            path = staged.directory / member
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as handle:
                for chunk in chunks:
                    handle.write(chunk)
                if staged.durable:
                    os.fsync(handle.fileno())
