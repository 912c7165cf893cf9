"""``validate``: check every rule of the spec against every byte of a checkpoint.

Unlike loading, which verifies what it reads and stops at the first
problem, validation runs every step of the spec's validation order (§15)
on every component and every byte, and lists every error it can find,
each with file, field and requirement ID: every manifest member and path
error, every inventory and size error, then steps 12-15 step by step over
all components (each component's first error; a component that fails is
left out of the later steps), then every content error (array CRC-32C, bool
bytes, zero padding), then the CRC-32C, SHA-256 and ZIP CRC-32 of every
remaining file and the ZIP CRC-32 of ``manifest.json``. The first error
listed is therefore the one of the first step that fails (R-RDR-11).

Examples:
    >>> import numpy as np, tempfile, os
    >>> from opencheckpoint import Checkpoint
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt")
    >>> _ = Checkpoint(w=np.arange(3)).save(path)
    >>> validate(path).ok
    True
    >>> with open(os.path.join(path, "components/w/data.bin"), "r+b") as f:
    ...     _ = f.write(b"\\xff")
    >>> [(e.error, e.rule) for e in validate(path).errors]
    [('IntegrityError', 'R-ARR-14'), ('IntegrityError', 'R-CHK-7')]
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..format.errors import (
    CheckpointError,
    ConcurrentModification,
    ExtraFile,
    IntegrityError,
    MissingFile,
    format_error,
)
from ..format.manifest import KIND_VERSIONS, MANIFEST_NAME, field_of
from ..format.records import FileEntry
from ..location import PathArg
from ..progress import ProgressArg, advance, files_bytes, reporting
from ..rules.archive import ZIP
from ..rules.container import CON, file_size
from ..sharding.layout import data_file_sizes, extents_by_file
from ..tree.decode import DecodedTree
from ..tree.nodes import ArrayRef
from .file_scan import FileHashes, FileScan
from .opening import REPORTED_PER_RULE
from .sharded import ComponentFiles, ShardedReads
from .steps import PAYLOADS, CheckpointSteps, check_file_crc32c


@dataclass(frozen=True)
class ValidationIssue:
    """One rule a checkpoint breaks."""

    error: str
    file: str | None
    field: str | None
    rule: str | None
    message: str

    @classmethod
    def of(cls, exc: CheckpointError) -> ValidationIssue:
        return cls(type(exc).error_class, exc.file, exc.field, exc.rule, exc.message)

    def __str__(self) -> str:
        return format_error(self.error, self.file, self.field, self.message, self.rule)


@dataclass
class ValidationReport:
    """The outcome of :func:`validate`: ``ok`` and every error found."""

    path: str
    errors: list[ValidationIssue] = field(default_factory=list)
    checked_files: int = 0
    #: array nodes whose bytes were verified; a tied array (two nodes sharing one extent, R-ARR-10) counts
    #: once per node, as ``inspect`` lists it, and in :attr:`shared_arrays` for each node after the first
    checked_arrays: int = 0
    shared_arrays: int = 0
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
            "shared_arrays": self.shared_arrays,
            "checked_bytes": self.checked_bytes,
        }


def validate(path: PathArg, *, progress: ProgressArg = None) -> ValidationReport:
    """Validate a checkpoint completely; never raises a :class:`CheckpointError`.

    ``progress``: ``True`` (a bar on a terminal) or ``f(done_bytes, total_bytes)``, the total
    being every file the manifest lists (:mod:`opencheckpoint.progress`). A checkpoint
    replaced by another process while it is validated is validated once more from the start
    (R-RDR-13); a second race is reported as :class:`ConcurrentModification`.
    """
    report = _validate_once(path, progress)
    if any(issue.error == ConcurrentModification.error_class for issue in report.errors):
        report = _validate_once(path, progress)
    return report


def _validate_once(path: PathArg, progress: Any) -> ValidationReport:
    report = ValidationReport(str(path))
    issues: list[CheckpointError] = []
    skipped: set[str] = set()
    try:
        reader = CheckpointSteps(path, issues=issues)
    except CheckpointError as exc:
        # The traceback's frames hold the failed attempt's parsed manifest: drop them before reopening.
        exc.__traceback__ = None
        report.add(exc.at(file=str(path)))
        for issue in issues:
            report.add(issue)
        errors = [exc, *issues]
        if not all(_is_inventory_error(e) for e in errors) or _inventory_truncated(errors):
            return report
        # Only files are missing, extra or of the wrong size: the manifest is sound, so every other rule
        # can still be checked (an extra file must not hide a CRC error). Files already reported are
        # left out of the later steps, and so is every component that lists one.
        try:
            reader = CheckpointSteps(path, check_files=False)
        except CheckpointError:
            return report
        # Absent files beyond the ones reported one by one were counted in one summary error: they are
        # left out too, so a manifest of a million absent files is not reported a million times.
        present = reader.source.inventory()[0]
        skipped = {e.file for e in errors if e.file} | {f for f in reader.parsed.file_paths() if f not in present}
    with reader, reporting(progress, files_bytes(reader.components.values()), f"validating {path}"):
        report.manifest = reader.manifest
        _check_components(reader, report, skipped)
    return report


def _inventory_truncated(errors: list[CheckpointError]) -> bool:
    """More files were missing or extra than are reported one by one: the later steps would report them all."""
    return any(sum(isinstance(e, kind) for e in errors) > REPORTED_PER_RULE for kind in (MissingFile, ExtraFile))


def _is_inventory_error(exc: CheckpointError) -> bool:
    """Step 10-11 errors about one file (R-CON-2 extra, R-CON-3 missing, R-CHK-6 size)."""
    return isinstance(exc, (ExtraFile, MissingFile)) or (isinstance(exc, IntegrityError)
                                                          and exc.rule == CON.id_of(file_size))


def _attempt(report: ValidationReport, failed: set[str], name: str, check: Callable[..., Any], *args: Any) -> Any:
    """Run one step for component ``name``; record its error and drop the component from later steps."""
    try:
        return check(name, *args)
    except CheckpointError as exc:
        report.add(exc)
        failed.add(name)
        return None


def _check_components(reader: CheckpointSteps, report: ValidationReport,
                      skipped: set[str] | frozenset[str] = frozenset()) -> None:
    """Steps 12-16, step by step over all components (spec §15: all of step 12, then all of step 13, ...).

    Each step runs for every component still standing, in manifest order, so
    the first error in the report is that of the first step that fails
    (R-RDR-11); a component that fails a step is left out of the later steps
    12-15 and of the array checks of step 16. Steps 12, 14 and 15 apply only
    to kinds this reader implements; the files of every component are
    checked in step 16.
    """
    layouts, crc_checked = check_structure(reader, report, skipped)
    # Step 16: the arrays of each tree component, then every file. Each data file is read once: the pass
    # that checks its arrays also computes its file checksums, which the file checks then compare.
    hashed: dict[str, FileHashes | None] = {}
    for name, (decoded, data_file, size) in layouts.items():
        record = reader.record(name)
        if decoded.sharded or record.kind_version >= 2:
            files = reader.component_files(name)
            extents = extents_by_file(decoded)
            for rel, file_size in data_file_sizes({rel: entry.size for rel, entry in record.files.items()}).items():
                hashed[files.path(rel)] = _check_arrays(reader, extents.get(rel, []), files.path(rel), file_size,
                                                        record.files[rel], report)
            _check_empty_sharded(decoded, files, report)
        else:
            hashed[data_file] = _check_arrays(reader, decoded.arrays, data_file, size, record.files["data.bin"],
                                              report)
        report.checked_arrays += len(decoded.arrays) + len(decoded.sharded)
        report.shared_arrays += len(shared_extents(decoded.arrays))
    _check_files(reader, report, crc_checked | set(skipped), skipped, hashed)


def check_structure(
    reader: CheckpointSteps, report: ValidationReport, skipped: set[str] | frozenset[str] = frozenset()
) -> tuple[dict[str, tuple[DecodedTree, str, int]], set[str]]:
    """Steps 12-15 for every component, recording each error in ``report`` (no array byte is read).

    Components listing a file of ``skipped`` (already reported missing or of the wrong size) are left out.

    Returns the components that passed, name -> (decoded tree, data file, its size), and the
    payload files whose CRC-32C step 13 checked. ``inspect`` runs exactly this after the inventory.
    """
    components = reader.components
    # Components with a file already reported missing or of the wrong size are not decoded.
    failed: set[str] = {name for name, record in components.items()
                        if any(f"{record.path}/{rel}" in skipped for rel in record.files)}
    # Step 12: kind. A kind this reader does not implement is opaque (R-CMP-20), not an error.
    decodable = [name for name, record in components.items() if record.kind in KIND_VERSIONS]
    for name in decodable:
        _attempt(report, failed, name, reader.check_kind)
    # Step 13: the payload file's size limit, then its CRC-32C.
    payloads: dict[str, bytes] = {}
    crc_checked: set[str] = set()
    for name in decodable:
        record = components[name]
        payload = PAYLOADS.get(record.kind)
        if name in failed or payload is None:
            continue
        crc_checked.add(f"{record.path}/{payload}")
        data = _attempt(report, failed, name, reader.read_small, payload)
        if data is not None:
            payloads[name] = data
    # Step 14: parse.
    trees: dict[str, DecodedTree] = {}
    for name, data in payloads.items():
        if components[name].kind == "tree":
            decoded = _attempt(report, failed, name, reader.parse_tree, data)
            if decoded is not None:
                trees[name] = decoded
        else:
            _attempt(report, failed, name, reader.parse_json, data)
    # Step 15: array layout.
    layouts: dict[str, tuple[DecodedTree, str, int]] = {}
    for name, decoded in trees.items():
        where = _attempt(report, failed, name, reader.check_tree_layout, decoded)
        if where is not None:
            layouts[name] = (decoded, *where)
    return layouts, crc_checked


def shared_extents(arrays: Sequence[ArrayRef]) -> dict[int, str]:
    """Index of every array node that shares the extent of an earlier node (a tied array: same offset and
    length, R-ARR-10) -> that earlier node's path. ``inspect`` and ``validate`` count them alike."""
    first: dict[tuple[int, int], str] = {}
    shared: dict[int, str] = {}
    for index, ref in enumerate(arrays):
        if not ref.nbytes:
            continue
        key = (ref.offset, ref.nbytes)
        if key in first:
            shared[index] = first[key]
        else:
            first[key] = str(ref.path)
    return shared


def _check_arrays(reader: CheckpointSteps, arrays: list[ArrayRef], data_file: str, size: int, entry: FileEntry,
                  report: ValidationReport) -> FileHashes | None:
    """Step 16 for one data file, read once: for every array (or shard) in it R-ARR-14 then R-ARR-13, then
    R-ARR-12. Returns the file's checksums for :func:`_check_file` (None when it could not be read)."""
    scan = FileScan(arrays, size, _hashes(reader, data_file, entry))
    position = 0
    try:
        for chunk in reader.source.read_chunks(data_file, size):
            scan.feed(chunk, position)
            position += len(chunk)
            advance(len(chunk))
    except CheckpointError as exc:
        report.add(exc)
        return None
    for error in scan.array_errors(arrays, data_file):
        if error is not None:
            report.add(error)
    padding = scan.padding_error(data_file)
    if padding is not None:
        report.add(padding)
    return scan.hashes


def _hashes(reader: CheckpointSteps, full: str, entry: FileEntry) -> FileHashes:
    """The checksums step 16 computes for a listed file: CRC-32C, SHA-256 if listed, ZIP CRC-32 if recorded."""
    return FileHashes(sha256=bool(entry.sha256), zip_crc32=reader.source.zip_crc32(full) is not None)


def _check_empty_sharded(decoded: DecodedTree, files: ComponentFiles, report: ValidationReport) -> None:
    """What reading a zero-element sharded array checks: that NumPy can hold its shape (as for a tag 6 array)."""
    for ref in decoded.sharded:
        if not ref.nbytes:
            try:
                ShardedReads(ref, files).read(verify=False)  # no shard: reads no byte
            except CheckpointError as exc:
                report.add(exc)


def _check_files(reader: CheckpointSteps, report: ValidationReport, crc_checked: set[str],
                 skipped: set[str] | frozenset[str] = frozenset(),
                 hashed: dict[str, FileHashes | None] | None = None) -> None:
    """Step 16 for files: R-CHK-7 (unless step 13 did it), R-CHK-8, R-ZIP-22 (``manifest.json`` too).

    ``hashed``: the checksums of files already read by the array checks (None: that read failed).
    """
    hashed = hashed or {}
    for name, record in reader.components.items():
        for rel, entry in record.files.items():
            full = f"{record.path}/{rel}"
            if full not in skipped:  # else already reported missing or of the wrong size
                _check_file(reader, report, field_of("components", name, "files", rel), full, entry,
                            full not in crc_checked, hashed.get(full))
    stored = reader.source.zip_crc32(MANIFEST_NAME)
    if stored is not None and zlib.crc32(reader.source.read_manifest()) != stored:
        report.add(_zip_crc_error(MANIFEST_NAME))


def _check_file(reader: CheckpointSteps, report: ValidationReport, where: str, full: str,
                entry: FileEntry, check_crc32c: bool, hashes: FileHashes | None) -> None:
    """Every checksum of one listed file: computed by the pass that checked its arrays, else read once now."""
    if hashes is None:
        hashes = _hashes(reader, full, entry)
        if not check_crc32c and hashes.sha256 is None and hashes.zip_crc32 is None:
            # Step 13 checked this payload's CRC-32C on the bytes it parsed: nothing is left to compute.
            hashes.nbytes = entry.size
            advance(entry.size)
        else:
            try:
                for chunk in reader.source.read_chunks(full, entry.size):
                    hashes.update(chunk)
                    advance(len(chunk))
            except CheckpointError as exc:
                report.add(exc.at(field=where))
                return
    report.checked_bytes += hashes.nbytes
    report.checked_files += 1
    if check_crc32c:
        try:
            check_file_crc32c(hashes.crc32c, entry, full, where)
        except CheckpointError as exc:
            report.add(exc)
    if hashes.sha256 is not None and hashes.sha256.hexdigest() != entry.sha256:
        report.add(CON.error("R-CHK-8", "file sha256 mismatch", file=full, field=where + ".sha256"))
    stored_zip = reader.source.zip_crc32(full)
    if stored_zip is not None and hashes.zip_crc32 != stored_zip:
        report.add(_zip_crc_error(full))


def _zip_crc_error(member: str) -> CheckpointError:
    return ZIP.error("R-ZIP-22", "the ZIP CRC-32 of the member does not match its data", file=member,
                     field="central directory: crc-32")
