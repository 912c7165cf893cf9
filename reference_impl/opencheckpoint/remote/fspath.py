"""A checkpoint location on an fsspec filesystem: the filesystem object and a path on it.

:class:`FsPath` is what every entry point accepts besides a local path or a URL
string: ``FsPath(fs, "bucket/run/ckpt")`` for a filesystem the caller configured
(credentials, endpoint), or :meth:`FsPath.from_url` with fsspec
``storage_options``. Importing this module imports no fsspec: the optional extra
(``pip install 'opencheckpoint[remote]'``) is needed only once a remote location
is used, and its absence is a :class:`~opencheckpoint.format.errors.UnsupportedLocation`
naming the extra.

>>> import fsspec
>>> where = FsPath(fsspec.filesystem("memory"), "/runs/ckpt/")
>>> where.path, where.name, str(where.parent), str(where / "manifest.json")
('/runs/ckpt', 'ckpt', 'memory:///runs', 'memory:///runs/ckpt/manifest.json')
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..format.errors import CheckpointError
from ..rules.publication import PUB

#: The extra that installs fsspec (and s3fs), named in every error about its absence.
INSTALL_HINT = "pip install 'opencheckpoint[remote]'"


def unsupported(location: str, why: str) -> CheckpointError:
    """R-PUB-20: a URL (or what ``pathlib`` left of one) this implementation cannot serve, refused."""
    return PUB.error("R-PUB-20", why, file=location)


def require_fsspec(location: str) -> ModuleType:
    """The ``fsspec`` module, or :class:`UnsupportedLocation` naming the extra that installs it."""
    try:
        return importlib.import_module("fsspec")
    except ImportError:
        raise unsupported(location, f"a URL: remote storage needs fsspec, which is not installed ({INSTALL_HINT}); "
                                    "or copy the checkpoint to a local path") from None


def is_folder_marker(name: str, info: Any) -> bool:
    """A zero-byte object whose key ends with ``/``: a "folder" made by a console or a sync tool (S3 console,
    S3A, rclone's directory markers). Spec §12.7: a pseudo-directory is not an entry, so it is never a file
    of a checkpoint, never an object that makes a prefix non-empty, and never deleted as debris."""
    return str(name).endswith("/") and not int((info or {}).get("size") or 0)


@dataclass(frozen=True, eq=True)
class FsPath:
    """``path`` (the filesystem's own form: ``bucket/key`` for S3, no protocol) on the fsspec filesystem ``fs``."""

    fs: Any  # fsspec.AbstractFileSystem (fsspec ships no types, and is imported lazily)
    path: str

    def __post_init__(self) -> None:
        fsspec = require_fsspec(str(self.path))
        if not isinstance(self.fs, fsspec.AbstractFileSystem):
            raise TypeError(f"FsPath needs an fsspec filesystem, got {type(self.fs).__name__}")
        stripped = self.fs._strip_protocol(self.path)
        object.__setattr__(self, "path", str(stripped).rstrip("/") or str(stripped))

    @classmethod
    def from_url(cls, url: str, **storage_options: Any) -> FsPath:
        """The location of ``url`` (``s3://bucket/run``), its filesystem made with ``storage_options``
        (credentials, ``endpoint_url``, ...: see the fsspec implementation of its protocol)."""
        fsspec = require_fsspec(url)
        try:
            fs, path = fsspec.core.url_to_fs(url, **storage_options)
        except (ImportError, ValueError) as exc:
            raise unsupported(url, f"no fsspec filesystem for this URL ({exc}); {INSTALL_HINT} installs S3 "
                                   "support, other protocols need their fsspec package (gcsfs, adlfs, ...)") from None
        return cls(fs, path)

    @property
    def name(self) -> str:
        """The last segment of the path."""
        return self.path.rsplit("/", 1)[-1]

    @property
    def parent(self) -> FsPath:
        """The location one segment up."""
        head = self.path.rsplit("/", 1)[0] if "/" in self.path else ""
        return FsPath(self.fs, head or self.fs.root_marker or "")

    def __truediv__(self, name: str) -> FsPath:
        return FsPath(self.fs, f"{self.path.rstrip('/')}/{name}")

    def key(self, rel: str) -> str:
        """The filesystem path of ``rel`` below this location."""
        return f"{self.path.rstrip('/')}/{rel}"

    def is_local(self) -> bool:
        """Whether the filesystem is the local one (then the local code path, with rename, is used)."""
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        return "file" in protocols or "local" in protocols

    def is_dir(self) -> bool:
        """Whether objects exist below this location (a directory, or a prefix on an object store)."""
        try:
            return bool(self.fs.isdir(self.path))
        except OSError:
            return False

    def __str__(self) -> str:
        return str(self.fs.unstrip_protocol(self.path))

    def __repr__(self) -> str:
        return f"FsPath({str(self)!r})"
