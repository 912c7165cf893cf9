"""Where a checkpoint lives: local paths only, until remote storage exists (spec R-PUB-20).

``pathlib`` turns ``s3://bucket/ckpt`` into the local ``s3:/bucket/ckpt``; a save
would quietly write a directory named ``s3:`` and a read would look there. Every
entry point takes its path through :func:`local_path` first, which refuses both
the URL (``scheme://...``) and what ``pathlib`` leaves of one: a relative path
whose first segment is a scheme of two or more characters and a colon
(``s3:``, ``gs:``, ``https:``, ``hf:``, ``file:``...). A local folder really named
like that is reached as ``./s3:/...`` (a string: ``pathlib`` drops the ``./``).

>>> local_path("runs/ckpt").as_posix()
'runs/ckpt'
>>> local_path("s3://bucket/ckpt")
Traceback (most recent call last):
...
opencheckpoint.errors.UnsupportedLocation: UnsupportedLocation: s3://bucket/ckpt: a URL, not a local path: \
remote storage ('s3://') is not supported yet; copy the checkpoint to a local path [R-PUB-20]
>>> local_path(Path("s3://bucket/ckpt"))
Traceback (most recent call last):
...
opencheckpoint.errors.UnsupportedLocation: UnsupportedLocation: s3:/bucket/ckpt: a URL collapsed by pathlib \
(Path('s3://...') keeps 's3:/'), not a local path: remote storage is not supported yet; copy the checkpoint to a \
local path (a local folder of that name: './s3:/...') [R-PUB-20]
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import UnsupportedLocation

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
        raise UnsupportedLocation(f"a URL, not a local path: remote storage ({match.group(0)!r}) is not supported "
                                  "yet; copy the checkpoint to a local path", file=text, rule="R-PUB-20")
    collapsed = _COLLAPSED_URL.match(text)
    if collapsed is not None:
        scheme = collapsed["scheme"]
        raise UnsupportedLocation(f"a URL collapsed by pathlib (Path('{scheme}://...') keeps '{scheme}:/'), not a "
                                  "local path: remote storage is not supported yet; copy the checkpoint to a local "
                                  f"path (a local folder of that name: './{scheme}:/...')", file=text,
                                  rule="R-PUB-20")
    path = Path(text)
    if _COLLAPSED_URL.match(str(path)):
        # "./s3:/x" was asked for, but Path drops the "./": made absolute, the result is accepted again when a
        # caller passes it on (Rotation -> Checkpoint.save), and never mistaken for a URL.
        path = path.absolute()
    return path
