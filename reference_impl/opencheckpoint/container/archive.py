"""The archive form: a ZIP file with STORED members whose data is 64-byte aligned (spec §3.3).

Writing is :mod:`.archive_writer` (one pass, members streamed in place).

Reading parses every ZIP structure itself instead of using :mod:`zipfile`,
which tolerates what the spec forbids (prefix bytes, comments, duplicate
names, local/central disagreement, gaps). The checks run in two steps of
the validation order: on open, the end records, the central directory and
the ``manifest.json`` member (step 2); then every member (step 10, in
:meth:`ArchiveSource.inventory`).
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import Final

from ..format.errors import CheckpointError
from ..format.manifest import MANIFEST_NAME
from ..format.paths import MEMBER_NAME, path_grammar_error, path_limit_error
from ..rules import raise_if, required
from ..rules.archive import ZIP
from ..rules.container import CON
from .base import FileRegion, FileStamp, Source, file_stamp, size_mismatch
from .zip_records import (
    Member,
    central_entry_error,
    check_end_record,
    check_start,
    local_header_error,
    read_central_directory,
    read_end_record,
    resolve_zip64,
)

_LOCAL = struct.Struct("<4sHHHHHIIIHH")
_LOCAL_SIGNATURE: Final = b"PK\x03\x04"


class ArchiveSource(Source):
    form = "archive"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        try:
            self._file = open(path, "rb")  # noqa: SIM115  (open for the source's lifetime; close() closes it)
        except OSError as exc:
            raise required(CON.check("R-PUB-11", None, True, exc, file=str(path))) from None
        self._map: mmap.mmap | None = None
        try:
            self._size = os.fstat(self._file.fileno()).st_size
            self._entries = self._parse_central_directory()
            self._manifest = self._manifest_member()
        except (OSError, ValueError, struct.error) as exc:
            self._file.close()
            raise required(ZIP.check("R-ZIP-2", None, b"", str(exc), file=str(path))) from None
        except BaseException:
            self._file.close()
            raise
        self._members: dict[str, Member] = {self._manifest.name: self._manifest}
        self._checked = False

    def _pread(self, offset: int, size: int) -> bytes:
        if offset < 0 or size < 0 or offset + size > self._size:
            return b""
        return os.pread(self._file.fileno(), size, offset)

    # -- step 2 ---------------------------------------------------------------------------
    def _parse_central_directory(self) -> list[Member]:
        """Step 2: the start of the file, the end records, then every central directory entry."""
        where = str(self.path)
        check_start(self._pread, where)
        end = resolve_zip64(self._pread, read_end_record(self._pread, self._size, where), where)
        check_end_record(end, where)
        self._cd_offset = end.cd_offset
        return read_central_directory(self._pread(end.cd_offset, end.cd_size), end.count_total, where)

    def _manifest_member(self) -> Member:
        found = any(m.raw_name == MANIFEST_NAME.encode("ascii") for m in self._entries)
        raise_if(CON.check("R-CON-1", None, "archive", "file" if found else "absent", file=str(self.path)))
        last = self._entries[-1]
        if last.raw_name != MANIFEST_NAME.encode("ascii"):
            raise ZIP.error("R-ZIP-21", "manifest.json must be the last central directory entry", file=MANIFEST_NAME,
                            field=last.where("file name"))
        # The manifest's bytes are read before step 10, so its own member rules are checked now.
        error = self._member_error(last)
        if error is not None:
            raise error
        return last

    # -- step 10 --------------------------------------------------------------------------
    def _member_error(self, member: Member) -> CheckpointError | None:
        """The first rule of R-ZIP-5..19 and R-ZIP-25 that ``member`` (central entry, then local header) breaks."""
        return central_entry_error(member) or local_header_error(member, self._pread, self._cd_offset)

    def inventory(self) -> tuple[dict[str, int], list[CheckpointError], list[str]]:
        files: dict[str, int] = {}
        errors: list[CheckpointError] = []
        rejected: list[str] = []
        seen: set[bytes] = set()
        expected_header = 0
        for member in self._entries:
            name = member.name
            if name.endswith("/"):
                errors.append(ZIP.error("R-ZIP-10", "directory entries are not allowed", file=name,
                                        field=member.where("file name")))
                rejected.append(name)
                continue
            bad_name = path_limit_error(name) or path_grammar_error(name, MEMBER_NAME)
            if bad_name is not None:
                bad_name.file, bad_name.field = name, member.where("file name")
                errors.append(bad_name)
                rejected.append(name)
                continue
            if member.raw_name in seen:
                errors.append(ZIP.error("R-ZIP-11", "duplicate member name", file=name,
                                        field=member.where("file name")))
                continue
            seen.add(member.raw_name)
            error = self._member_error(member)
            if error is not None:
                errors.append(error)
                rejected.append(name)
                continue
            out_of_order = ZIP.check("R-ZIP-19", member.where("local header offset"), member.header,
                                     expected=expected_header, file=name)
            if out_of_order is not None:
                errors.append(out_of_order)
            expected_header = member.data + member.size
            files[name] = member.size
            self._members[name] = member
        if not errors and expected_header != self._cd_offset:
            errors.append(ZIP.error("R-ZIP-20", f"the central directory starts at {self._cd_offset}, not right after "
                                    f"the last member's data ({expected_header})", file=str(self.path),
                                    field="end of central directory record: central directory offset"))
        self._checked = True
        return files, errors, rejected

    # -- Source ---------------------------------------------------------------------------
    def _member(self, rel: str) -> Member:
        if not self._checked and rel != MANIFEST_NAME:
            self.inventory()
        member = self._members.get(rel)
        if member is None:
            raise required(CON.check("R-CON-3", None, "not in the archive", file=rel))
        return member

    def read_manifest(self) -> bytes:
        member = self._manifest
        raise_if(CON.check("R-LIM-1", None, member.size, file=MANIFEST_NAME))
        return self._read(member)

    def _read(self, member: Member) -> bytes:
        data = self._pread(member.data, member.size)
        if len(data) != member.size:
            raise size_mismatch(member.name, len(data), member.size)
        return data

    def read_file(self, rel: str, size: int) -> bytes:
        member = self._member(rel)
        if member.size != size:
            raise size_mismatch(rel, member.size, size)
        return self._read(member)

    def map_file(self, rel: str, size: int) -> memoryview:
        member = self._member(rel)
        if member.size != size:
            raise size_mismatch(rel, member.size, size)
        if size == 0:
            return memoryview(b"")
        self._record_mapped(rel, file_stamp(os.fstat(self._file.fileno())))
        if self._map is None:
            self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        return memoryview(self._map)[member.data : member.data + size]

    def private_map(self, rel: str, size: int) -> tuple[mmap.mmap, int] | None:
        """A copy-on-write map of the member's data of its own (the shared read-only map of :meth:`map_file`
        stays open for this reader's other arrays): the pages from the one holding its first byte on."""
        member = self._member(rel)
        if member.size != size:
            raise size_mismatch(rel, member.size, size)
        if member.data + size > self._size:
            raise size_mismatch(rel, self._size - member.data, size)
        self._record_mapped(rel, file_stamp(os.fstat(self._file.fileno())))
        first = member.data - member.data % mmap.ALLOCATIONGRANULARITY  # a map starts on a page boundary
        try:
            data_map = mmap.mmap(self._file.fileno(), member.data + size - first, access=mmap.ACCESS_COPY,
                                 offset=first)
        except (OSError, ValueError):
            return None  # no address space or commit charge for it (strict overcommit): read instead
        return data_map, member.data - first

    def stamp(self, rel: str) -> FileStamp | None:
        """The archive's stamp now (every member is mapped from the one file this source holds open)."""
        return file_stamp(os.fstat(self._file.fileno()))

    def open_region(self, rel: str, size: int) -> FileRegion:
        """The member's data for positioned reads into caller buffers (no map)."""
        member = self._member(rel)
        if member.size != size:
            raise size_mismatch(rel, member.size, size)
        if member.data + size > self._size:
            raise size_mismatch(rel, self._size - member.data, size)
        return FileRegion(self._file.fileno(), member.data, size, rel, owns_fd=False)

    def zip_crc32(self, rel: str) -> int | None:
        """The ZIP CRC-32 recorded for a member (checked by ``validate``, R-ZIP-22)."""
        return self._member(rel).crc

    def close(self) -> None:
        self._file.close()
