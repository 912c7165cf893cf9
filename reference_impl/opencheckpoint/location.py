"""Where a checkpoint lives: a local path, or a location on an fsspec filesystem (spec R-PUB-20, §12.7).

:func:`resolve_location` is the entry points' first step: a local path stays a
:class:`~pathlib.Path` (the rename-based publication of §12.1), a URL
(``s3://bucket/ckpt``, ``memory://x``) or an :class:`~opencheckpoint.remote.fspath.FsPath`
becomes an ``FsPath`` (the object-store publication of §12.7; ``file://`` URLs and
local fsspec filesystems come back as local paths). Without fsspec, or for a
protocol no installed fsspec implementation serves, a URL is refused with
:class:`UnsupportedLocation` naming the extra to install.

``pathlib`` turns ``s3://bucket/ckpt`` into the local ``s3:/bucket/ckpt``; a save
would quietly write a directory named ``s3:`` and a read would look there.
:func:`local_path` (also the local half of :func:`resolve_location`) refuses both
the URL (``scheme://...``) and what ``pathlib`` leaves of one: a relative path
whose first segment is a scheme of two or more characters and a colon
(``s3:``, ``gs:``, ``https:``, ``hf:``, ``file:``...). A local folder really named
like that is reached as ``./s3:/...`` (a string: ``pathlib`` drops the ``./``).

>>> local_path("runs/ckpt").as_posix()
'runs/ckpt'
>>> local_path("s3://bucket/ckpt")
Traceback (most recent call last):
...
opencheckpoint.format.errors.UnsupportedLocation: UnsupportedLocation: s3://bucket/ckpt: a URL, not a local path: \
remote storage ('s3://') is not supported here; copy the checkpoint to a local path [R-PUB-20]
>>> local_path(Path("s3://bucket/ckpt"))
Traceback (most recent call last):
...
opencheckpoint.format.errors.UnsupportedLocation: UnsupportedLocation: s3:/bucket/ckpt: a URL collapsed by pathlib \
(Path('s3://...') keeps 's3:/'), not a local path: remote storage is not supported that way; pass the URL as a \
string (a local folder of that name: './s3:/...') [R-PUB-20]
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .remote.fspath import FsPath, unsupported

#: What a caller may name a checkpoint (or a rotation directory) with.
PathArg = str | os.PathLike[str] | FsPath
#: Where a checkpoint is: a local path, or a location on an fsspec filesystem.
Location = Path | FsPath

# RFC 3986 scheme, then "://". A Windows drive ("C:\\x", "C:/x") has no "//" after the colon.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# What pathlib leaves of a URL: the scheme and its colon as the first segment of a relative path.
# Two characters at least, so a Windows drive letter ("C:") is never taken for a scheme.
_COLLAPSED_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]+):(?:/|$)")


def local_path(path: str | os.PathLike[str]) -> Path:
    """``path`` as a :class:`~pathlib.Path`; :class:`UnsupportedLocation` if it is a URL."""
    text = os.fspath(path)
    if isinstance(text, bytes):  # os.PathLike[bytes] slips through at run time
        text = os.fsdecode(text)
    match = _URL.match(text)
    if match is not None:
        raise unsupported(text, f"a URL, not a local path: remote storage ({match.group(0)!r}) is not supported "
                                "here; copy the checkpoint to a local path")
    collapsed = _COLLAPSED_URL.match(text)
    if collapsed is not None:
        scheme = collapsed["scheme"]
        raise unsupported(text, f"a URL collapsed by pathlib (Path('{scheme}://...') keeps '{scheme}:/'), not a "
                                "local path: remote storage is not supported that way; pass the URL as a string "
                                f"(a local folder of that name: './{scheme}:/...')")
    path = Path(text)
    if _COLLAPSED_URL.match(str(path)):
        # "./s3:/x" was asked for, but Path drops the "./": made absolute, the result is accepted again when a
        # caller passes it on (Rotation -> Checkpoint.save), and never mistaken for a URL.
        path = path.absolute()
    return path


def resolve_location(path: PathArg) -> Location:
    """``path`` as a local :class:`~pathlib.Path` or, for a URL or an :class:`FsPath`, an ``FsPath``.

    Local filesystems (``file://``, also ``file://localhost/ABS`` = ``/ABS`` as RFC 8089 says, fsspec's
    ``LocalFileSystem``) come back as local paths, so
    they keep the atomic rename of §12.1. :class:`UnsupportedLocation` for a URL that fsspec
    (missing, or without an implementation of the protocol) cannot serve, and for what
    ``pathlib`` leaves of a URL.
    """
    if isinstance(path, FsPath):
        return Path(path.path) if path.is_local() else path
    text = os.fspath(path)
    if isinstance(text, bytes):  # os.PathLike[bytes] slips through at run time
        text = os.fsdecode(text)
    if _URL.match(text) is None:
        return local_path(text)
    if text.lower().startswith("file://localhost/"):  # RFC 8089: the host "localhost" is this machine
        text = "file://" + text[len("file://localhost"):]
    return resolve_location(FsPath.from_url(text))
