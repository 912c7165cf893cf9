"""Storage failures of a remote filesystem, reported as the library's errors naming the location.

fsspec backends raise ``OSError`` subclasses (``PermissionError`` for
AccessDenied, ``FileNotFoundError`` for a missing bucket, ``FileExistsError``
below a file) and, for what they do not translate, their own exceptions
(botocore's ``EndpointConnectionError``, ``NoCredentialsError``,
``ParamValidationError``, aiohttp's connection errors). Only
:class:`~opencheckpoint.format.errors.CheckpointError` escapes the library for a bad
input or an unusable location, so the public remote entry points (saving,
opening, rotation) translate them here, in one place.

>>> error = storage_error(PermissionError("AccessDenied"), "s3://b/ckpt", "save")
>>> type(error).__name__, error.file
('CheckpointError', 's3://b/ckpt')
>>> type(storage_error(FileExistsError("x"), "memory://f/ckpt", "save")).__name__
'TargetExists'
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..format.errors import CheckpointError, TargetExists, UnsupportedLocation

#: Top-level packages of fsspec backends whose own exceptions mean "the storage failed".
_BACKENDS = frozenset({"botocore", "aiobotocore", "boto3", "s3fs", "fsspec", "aiohttp", "gcsfs", "adlfs",
                       "google", "azure", "requests", "urllib3"})
#: botocore's name for a request its client refuses before sending it (a bad bucket name, an empty key).
_INVALID_REQUEST = frozenset({"ParamValidationError", "InvalidBucketName"})


def is_storage_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure of the storage (not a bug, not an interruption): OSError or a backend's own."""
    if isinstance(exc, CheckpointError) or not isinstance(exc, Exception):
        return False
    return isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in _BACKENDS


def storage_error(exc: BaseException, location: str, doing: str, *,
                  missing: type[CheckpointError] = CheckpointError) -> CheckpointError:
    """The :class:`CheckpointError` subclass for the storage failure ``exc`` while ``doing`` at ``location``.

    ``missing``: the class for "nothing there" (``FileNotFoundError``): :class:`NotACheckpoint` when reading.
    """
    detail = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        return TargetExists(f"cannot {doing}: an object (a file) is in the way ({detail})", file=location)
    if isinstance(exc, FileNotFoundError):
        return missing(f"cannot {doing}: not found (a missing bucket or prefix?) ({detail})", file=location)
    if type(exc).__name__ in _INVALID_REQUEST:
        return UnsupportedLocation(f"cannot {doing}: the storage refused the location ({detail})", file=location)
    return CheckpointError(f"cannot {doing}: the storage failed ({detail})", file=location)


@contextlib.contextmanager
def storage_errors(location: object, doing: str, *,
                   missing: type[CheckpointError] = CheckpointError) -> Iterator[None]:
    """Translate storage failures raised inside the block (:func:`storage_error`); the rest pass unchanged."""
    try:
        yield
    except Exception as exc:
        if not is_storage_error(exc):
            raise
        raise storage_error(exc, str(location), doing, missing=missing) from exc


__all__ = ["is_storage_error", "storage_error", "storage_errors"]
