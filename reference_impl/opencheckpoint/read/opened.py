"""An opened checkpoint: steps 1-11 of spec §15 passed, its manifest and records at hand (:class:`OpenedCheckpoint`).

Opening checks the container, the manifest (its checksum, every rule of its
members, the paths) and, unless ``check_files=False``, that every listed file
exists with its listed size; no payload byte is read. :func:`~.probe.manifest`,
:func:`~.probe.is_checkpoint` and ``opencheckpoint ls`` need no more, and this
module imports nothing of the tree codec or NumPy, so neither do they (start-up:
docs/benchmarks.md). :class:`~.steps.CheckpointSteps` adds steps 12-15.

>>> import numpy as np, tempfile, os
>>> from opencheckpoint import Checkpoint
>>> path = Checkpoint(w=np.zeros(2)).save(os.path.join(tempfile.mkdtemp(), "c"))
>>> with OpenedCheckpoint(path) as opened:
...     sorted(opened.components), opened.manifest["format_version"]
(['w'], 1)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Self

from ..container.base import Source
from ..format.errors import CheckpointError
from ..format.manifest import UNDERSTOOD_EXTENSIONS
from ..format.records import ComponentRecord
from ..location import Location, PathArg, resolve_location
from .opening import Understood, open_verified


class OpenedCheckpoint:
    """An open checkpoint: steps 1-11 passed (the reads of its components are :class:`~.steps.CheckpointSteps`').

    ``issues``, if given, receives every further error of the steps that can
    report several (manifest members and paths, inventory, file sizes) when
    opening fails; the first error is raised. ``check_files=False`` stops after
    the manifest and paths (steps 1-9), for tools that describe a checkpoint
    from its metadata alone; decoding a component still checks its files.
    """

    #: Open the shard data files of sharded arrays on their first read, not at opening (the read path:
    #: :class:`~opencheckpoint.reader.CheckpointReader`); ``validate`` checks every file in step 11.
    defer_shard_files = False

    def __init__(
        self,
        path: PathArg,
        *,
        understood_extensions: Understood = UNDERSTOOD_EXTENSIONS,
        issues: list[CheckpointError] | None = None,
        check_files: bool = True,
    ) -> None:
        self.path: Location = resolve_location(path)
        self._understood = understood_extensions
        self.location: Location
        self.source: Source
        if isinstance(self.path, Path):
            self.location, self.source, self.parsed = open_verified(self.path, understood_extensions, issues,
                                                                    check_files, self.defer_shard_files)
        else:  # a location on an fsspec filesystem (spec §12.7)
            from .remote_opening import open_remote

            self.location, self.source, self.parsed = open_remote(self.path, understood_extensions, issues,
                                                                  check_files)

    # -- metadata -------------------------------------------------------------
    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest as plain JSON values, ``format_version`` as written in the file.

        The other members are read through the migration chain (R-VER-5), so they have the shape of this
        reader's newest format version; ``format_version`` stays the file's own, as ``inspect`` and the
        file itself say (a format version 1 checkpoint reads ``1``, never the reader's version).
        """
        return {**self.parsed.raw, "format_version": self.parsed.written_version}

    @property
    def components(self) -> dict[str, ComponentRecord]:
        return dict(self.parsed.manifest.components)

    def record(self, name: str) -> ComponentRecord:
        try:
            return self.parsed.manifest.components[name]
        except KeyError:
            raise CheckpointError(f"no component named {name!r} (has: {sorted(self.components)})",
                                  file=str(self.path)) from None

    def _file(self, record: ComponentRecord, rel: str) -> str:
        return f"{record.path}/{rel}"

    def close(self) -> None:
        self.source.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
