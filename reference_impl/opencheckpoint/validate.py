"""``validate``: check every rule of the spec against every byte of a checkpoint.

Unlike loading, which verifies what it reads and stops at the first
problem, validation runs every step of the spec's validation order (§15)
on every component and every byte, and lists every error it can find,
each with file, field and requirement ID: every manifest member and path
error, every inventory and size error, then per component the first error
of steps 12-15 and every content error (array CRC-32C, bool bytes, zero
padding), then the CRC-32C, SHA-256 and ZIP CRC-32 of every remaining file.

>>> import numpy as np, tempfile, os
>>> from opencheckpoint import Checkpoint
>>> path = os.path.join(tempfile.mkdtemp(), "ckpt")
>>> _ = Checkpoint(w=np.arange(3)).save(path)
>>> validate(path).ok
True
>>> with open(os.path.join(path, "components/w/data.bin"), "r+b") as f:
...     _ = f.write(b"\\xff")
>>> [(e.error, e.section) for e in validate(path).errors]
[('IntegrityError', 'R-ARR-14'), ('IntegrityError', 'R-CHK-7')]
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .container.archive import ArchiveSource
from .errors import CheckpointError, IntegrityError
from .integrity import CHUNK_BYTES, crc32c_of, format_crc32c, new_sha256
from .manifest import KIND_VERSIONS, field_of
from .reader import CheckpointReader, array_view, verify_view
from .tree.layout import check_padding


@dataclass(frozen=True)
class ValidationIssue:
    """One rule a checkpoint breaks."""

    error: str
    file: str | None
    field: str | None
    section: str | None
    message: str

    @classmethod
    def of(cls, exc: CheckpointError) -> ValidationIssue:
        return cls(type(exc).error_class, exc.file, exc.field, exc.section, exc.message)

    def __str__(self) -> str:
        location = ": ".join(x for x in (self.file, self.field) if x)
        section = f" [{self.section}]" if self.section else ""
        return f"{self.error}: {location}: {self.message}{section}" if location else f"{self.error}: {self.message}"


@dataclass
class ValidationReport:
    """The outcome of :func:`validate`: ``ok`` and every error found."""

    path: str
    errors: list[ValidationIssue] = field(default_factory=list)
    checked_files: int = 0
    checked_arrays: int = 0
    checked_bytes: int = 0
    manifest: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return not self.errors

    def add(self, exc: CheckpointError) -> None:
        self.errors.append(ValidationIssue.of(exc))

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "ok": self.ok,
            "errors": [issue.__dict__ for issue in self.errors],
            "checked_files": self.checked_files,
            "checked_arrays": self.checked_arrays,
            "checked_bytes": self.checked_bytes,
        }


def _chunks(view: memoryview) -> Iterator[memoryview]:
    for start in range(0, len(view), CHUNK_BYTES):
        yield view[start : start + CHUNK_BYTES]


def validate(path: str | os.PathLike[str], *, progress: Any = None) -> ValidationReport:
    """Validate a checkpoint completely; never raises a :class:`CheckpointError`.

    ``progress``, if given, is called with the number of bytes checked so far.
    """
    report = ValidationReport(str(path))
    issues: list[CheckpointError] = []
    try:
        reader = CheckpointReader(path, issues=issues)
    except CheckpointError as exc:
        report.add(exc.at(file=str(path)))
        for issue in issues:
            report.add(issue)
        return report
    with reader:
        report.manifest = reader.manifest
        crc_checked: set[str] = set()
        for name, record in reader.components.items():
            if record.kind not in KIND_VERSIONS or record.kind_version > KIND_VERSIONS[record.kind]:
                continue  # opaque to this reader (R-CMP-20): its files are checked below
            try:
                if record.kind == "tree":
                    crc_checked.add(f"{record.path}/tree.msgpack")
                    _check_tree(reader, name, report)
                elif record.kind == "json":
                    crc_checked.add(f"{record.path}/value.json")
                    reader.json(name)
            except CheckpointError as exc:
                report.add(exc)
        _check_files(reader, report, progress, crc_checked)
    return report


def _check_tree(reader: CheckpointReader, name: str, report: ValidationReport) -> None:
    """Steps 12-15 (raising), then step 16 for every array: R-ARR-14, R-ARR-13, then R-ARR-12."""
    decoded, data_map, data_file = reader.decoded_tree(name)
    seen: set[tuple[int, int]] = set()
    for ref in decoded.arrays:
        if (ref.offset, ref.nbytes) in seen and ref.dtype != "bool":
            continue  # an alias: same bytes, same checksum (R-ARR-10)
        seen.add((ref.offset, ref.nbytes))
        try:
            verify_view(array_view(data_map, ref), ref, data_file)
        except CheckpointError as exc:
            report.add(exc)
        report.checked_arrays += 1
    try:
        check_padding(decoded.arrays, data_map)
    except CheckpointError as exc:
        report.add(exc.at(file=data_file))


def _check_files(reader: CheckpointReader, report: ValidationReport, progress: Any, crc_checked: set[str]) -> None:
    """Step 16 for files: R-CHK-7 (unless step 13 did it), R-CHK-8, R-ZIP-22."""
    is_archive = isinstance(reader.source, ArchiveSource)
    for name, record in reader.components.items():
        for rel, entry in record.files.items():
            full = f"{record.path}/{rel}"
            where = field_of("components", name, "files", rel)
            try:
                view = reader.source.map_file(full, entry.size)
            except CheckpointError as exc:
                report.add(exc.at(field=where))
                continue
            crc = 0
            zip_crc = 0
            digest = new_sha256() if entry.sha256 else None
            for chunk in _chunks(view):
                crc = crc32c_of(chunk, crc)
                if digest is not None:
                    digest.update(chunk)
                if is_archive:
                    zip_crc = zlib.crc32(chunk, zip_crc)
                report.checked_bytes += len(chunk)
                if progress is not None:
                    progress(report.checked_bytes)
            report.checked_files += 1
            if full not in crc_checked and format_crc32c(crc) != entry.crc32c:
                report.add(IntegrityError(f"file crc32c mismatch: stored {entry.crc32c}, computed "
                                          f"{format_crc32c(crc)}", file=full, field=where + ".crc32c",
                                          section="R-CHK-7"))
            if digest is not None and digest.hexdigest() != entry.sha256:
                report.add(IntegrityError("file sha256 mismatch", file=full, field=where + ".sha256",
                                          section="R-CHK-8"))
            if is_archive and zip_crc != reader.source.zip_crc32(full):  # type: ignore[attr-defined]
                report.add(IntegrityError("the ZIP CRC-32 of the member does not match its data", file=full,
                                          field="central directory: crc-32", section="R-ZIP-22"))
