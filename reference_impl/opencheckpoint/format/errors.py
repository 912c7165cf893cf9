"""The error classes of the format (spec section "Error classes").

Every failure a reader or writer reports is a :class:`CheckpointError`
subclass. Each class corresponds to one failure class of the spec, and each
instance carries *where* the failure is: the checkpoint file (a path inside
the checkpoint), the field (a JSON pointer into the manifest or a path into
the tree) and the spec requirement (rule ID) it violates.

The location is attached by the code that knows it (the dispatcher), not by
every rule: rules raise with a message, callers add ``file=``/``field=`` via
:meth:`CheckpointError.at`.

>>> err = IntegrityError("crc32c mismatch: stored 00000000, computed 1a2b3c4d",
...                      file="components/model/data.bin", field="$.w", rule="R-ARR-14")
>>> str(err)
'IntegrityError: components/model/data.bin: $.w: crc32c mismatch: stored 00000000, computed 1a2b3c4d [R-ARR-14]'
>>> isinstance(err, CheckpointError)
True
"""

from __future__ import annotations

import errno
from typing import Any


def format_error(error_class: str, file: str | None, field: str | None, message: str, rule: str | None) -> str:
    """The one text form of an error, everywhere: ``Class: file: field: message [rule]``.

    Used by :class:`CheckpointError`, ``validate``'s issues and the conformance protocol's
    ``error:`` line, so the three never drift apart.

    >>> format_error("TreeError", "a/tree.msgpack", None, "trailing bytes", "R-TREE-3")
    'TreeError: a/tree.msgpack: trailing bytes [R-TREE-3]'
    """
    text = ": ".join(part for part in (error_class, file, field, message) if part)
    return f"{text} [{rule}]" if rule else text


def _without_class_prefix(message: str) -> str:
    """A message never repeats a class name ("IncompatibleComponent: IncompatibleComponent: ...").

    A message made from another error's text (``str(exc)``) starts with that error's class name;
    :func:`format_error` adds the class of the new error, so the old one is dropped here.

    >>> _without_class_prefix("IncompatibleComponent: model: shape differs")
    'model: shape differs'
    """
    head, sep, rest = message.partition(": ")
    while sep and head in ERROR_CLASSES:
        head, sep, rest = rest.partition(": ")
        message = f"{head}{sep}{rest}"
    return message


class CheckpointError(Exception):
    """Root of every error raised by OpenCheckpoint.

    Attributes:
        message: what went wrong, in words.
        file: the file inside the checkpoint (or the checkpoint path itself).
        field: ``$``-rooted location of the offending field, e.g.
            ``$.components.model.files['data.bin'].size``, a tree path such as
            ``$.w[3]``, or a ZIP structure field such as
            ``central directory entry 2: compression method``.
        rule: the spec requirement ID (``R-...``) the input violates.
    """

    #: Class name reported by the conformance protocol (stable across versions).
    error_class = "CheckpointError"

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        field: str | None = None,
        rule: str | None = None,
        result: Any = None,
    ) -> None:
        message = _without_class_prefix(message)
        super().__init__(message)
        self.message = message
        self.file = file
        self.field = field
        self.rule = rule
        #: Partial :class:`~opencheckpoint.LoadResult` when a load failed midway.
        self.result = result

    def at(self, *, file: str | None = None, field: str | None = None) -> CheckpointError:
        """Fill in the location where it is still unknown and return ``self``."""
        if self.file is None and file is not None:
            self.file = file
        if field is not None:
            if self.field is None:
                self.field = field
            elif not self.field.startswith("$"):
                self.field = field + self.field
        return self

    def __str__(self) -> str:
        return format_error(type(self).error_class, self.file, self.field, self.message, self.rule)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description (used by ``validate --json``)."""
        return {
            "error": type(self).error_class,
            "file": self.file,
            "field": self.field,
            "rule": self.rule,
            "message": self.message,
        }




class NotACheckpoint(CheckpointError):
    """The path holds no readable ``manifest.json``: it is not a checkpoint."""

    error_class = "NotACheckpoint"


class UnsupportedVersion(CheckpointError):
    """The format version (or a component's kind version) is newer than this reader knows."""

    error_class = "UnsupportedVersion"


class UnsupportedExtension(CheckpointError):
    """An extension marked ``must_understand: true`` is not understood by this reader."""

    error_class = "UnsupportedExtension"


class ManifestError(CheckpointError):
    """``manifest.json`` (or a ``value.json``) is not valid I-JSON or violates the schema."""

    error_class = "ManifestError"


class IntegrityError(CheckpointError):
    """A checksum or size does not match: flipped, truncated or extended bytes."""

    error_class = "IntegrityError"


class UnsafePath(CheckpointError):
    """A path is absolute, contains ``..``, passes through a symlink, or is otherwise not allowed."""

    error_class = "UnsafePath"


class MissingFile(CheckpointError):
    """A file listed in the manifest is absent."""

    error_class = "MissingFile"


class ExtraFile(CheckpointError):
    """A file exists in the checkpoint that no component lists."""

    error_class = "ExtraFile"


class LimitExceeded(CheckpointError):
    """A size, count, depth or length exceeds the limits of the spec."""

    error_class = "LimitExceeded"


class TreeError(CheckpointError):
    """A ``tree.msgpack`` document is malformed (bad node, unknown tag, bad key, trailing bytes)."""

    error_class = "TreeError"


class ArrayLayoutError(CheckpointError):
    """An array's placement in ``data.bin`` breaks a layout rule (alignment, bounds, overlap, size)."""

    error_class = "ArrayLayoutError"


class UnknownDtype(CheckpointError):
    """A dtype name is not in the dtype table."""

    error_class = "UnknownDtype"


class ArchiveError(CheckpointError):
    """The ZIP archive breaks a structural rule (compression, alignment, headers, duplicates)."""

    error_class = "ArchiveError"


class UnknownComponentKind(CheckpointError):
    """A component's kind is not one this reader can decode."""

    error_class = "UnknownComponentKind"


class IncompatibleComponent(CheckpointError):
    """Stored state does not fit the live object it is loaded into (names, shapes, dtypes)."""

    error_class = "IncompatibleComponent"


class UnsupportedValue(CheckpointError):
    """A writer was asked to store a value the format cannot represent."""

    error_class = "UnsupportedValue"


class TargetExists(CheckpointError):
    """A save's target holds something it may not replace: not a checkpoint, or ``overwrite=False``.

    Raised before anything on disk changes (spec R-PUB-16); also when the
    library refuses to delete a path that is not a checkpoint.
    """

    error_class = "TargetExists"


class UnsupportedLocation(CheckpointError):
    """A path is a URL (``s3://bucket/ckpt``, any ``scheme://``): remote storage is not supported (R-PUB-20)."""

    error_class = "UnsupportedLocation"


class ConcurrentModification(CheckpointError):
    """Another process replaced, removed or is writing the checkpoint while this one read or wrote it.

    Not a defect of any file: reading again (or saving again) normally succeeds. Readers retry
    once by themselves where a retry can give a whole answer (spec R-RDR-13, R-RDR-14).
    """

    error_class = "ConcurrentModification"


class OutOfDescriptors(CheckpointError):
    """This process has no file descriptor to spare (``EMFILE``, ``ENFILE``): not a defect of the checkpoint.

    The protocol has no class for it, so it is reported as the base class: close files or checkpoints the
    process holds open, or raise its limit (``ulimit -n``), and read again.
    """


#: What ``open`` answers when the process (``EMFILE``) or the system (``ENFILE``) has no descriptor left.
OUT_OF_DESCRIPTORS_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})


def out_of_descriptors(failure: object, file: str | None = None) -> OutOfDescriptors | None:
    """The error for ``failure`` if it is an OS error saying no descriptor is left, else None.

    >>> error = out_of_descriptors(OSError(errno.EMFILE, "Too many open files"), "manifest.json")
    >>> type(error).__name__, error.error_class, error.file
    ('OutOfDescriptors', 'CheckpointError', 'manifest.json')
    """
    if not isinstance(failure, OSError) or failure.errno not in OUT_OF_DESCRIPTORS_ERRNOS:
        return None
    return OutOfDescriptors(f"this process has no file descriptor to spare ({failure.strerror}): close files or "
                            "checkpoints it holds open, or raise its limit (ulimit -n)", file=file)


#: Every error class by its protocol name (conformance: ``error: <Class>: ...``).
ERROR_CLASSES: dict[str, type[CheckpointError]] = {
    cls.error_class: cls
    for cls in (
        CheckpointError,
        NotACheckpoint,
        UnsupportedVersion,
        UnsupportedExtension,
        ManifestError,
        IntegrityError,
        UnsafePath,
        MissingFile,
        ExtraFile,
        LimitExceeded,
        TreeError,
        ArrayLayoutError,
        UnknownDtype,
        ArchiveError,
        UnknownComponentKind,
        IncompatibleComponent,
        UnsupportedValue,
        TargetExists,
        UnsupportedLocation,
        ConcurrentModification,
    )
}
