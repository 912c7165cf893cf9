"""Opening a checkpoint on an fsspec filesystem: steps 1-11 of spec §15 for a prefix (§12.7).

The same steps as :mod:`opencheckpoint.read.opening` with the remote container: the
prefix must hold ``manifest.json`` (R-CON-1: on an object store the manifest is
the commit point, so a prefix without one is an unfinished save, never a
checkpoint), then the manifest, its paths, the inventory and every size. There
is no ``.NAME.oc-old-*`` fallback (R-PUB-13): nothing on an object store is
renamed, and a published checkpoint is never replaced in place.
"""

from __future__ import annotations

from ..container.base import Source
from ..format.errors import CheckpointError, NotACheckpoint, UnsupportedLocation
from ..format.manifest import ParsedManifest
from ..read.opening import Understood, parse_and_pin
from ..rules import raise_if
from ..rules.container import CON
from .failures import storage_errors
from .fspath import FsPath
from .source import RemoteSource


def open_remote(
    location: FsPath, understood: Understood, issues: list[CheckpointError] | None, check_files: bool = True
) -> tuple[FsPath, Source, ParsedManifest]:
    """Steps 1-11 for a remote location: the location, its open source, its parsed manifest.

    A storage failure (unreachable endpoint, no credentials, access denied) is a
    :class:`CheckpointError` naming the location (:mod:`.failures`); nothing there is :class:`NotACheckpoint`.
    """
    with storage_errors(location, "open a checkpoint here", missing=NotACheckpoint):
        return _open(location, understood, issues, check_files)


def _open(
    location: FsPath, understood: Understood, issues: list[CheckpointError] | None, check_files: bool
) -> tuple[FsPath, Source, ParsedManifest]:
    raise_if(CON.check("R-PUB-12", None, location.name, file=str(location)))
    try:
        is_file = bool(location.fs.isfile(location.path))
    except OSError:
        is_file = False
    if is_file:
        raise UnsupportedLocation("a single-file archive on a remote filesystem: archives are read from local "
                                  "paths (copy it first); remote checkpoints are stored in directory form",
                                  file=str(location))
    source = RemoteSource(location)
    try:
        try:
            manifest = source.read_manifest()
        except NotACheckpoint:
            raise_if(CON.check("R-PUB-10", None, location.is_dir(), "nothing at this location",
                               file=str(location)))
            raise
        parsed = parse_and_pin(source, manifest, understood, issues, check_files)
    except BaseException:
        source.close()
        raise
    return location, source, parsed
