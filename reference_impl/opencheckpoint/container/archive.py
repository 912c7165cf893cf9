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

from ..errors import ArchiveError, CheckpointError, LimitExceeded, MissingFile, NotACheckpoint, UnsafePath
from ..limits import ALIGNMENT, ARCHIVE_MAX_MEMBERS, MANIFEST_MAX_BYTES
from ..manifest import MANIFEST_NAME
from ..paths import path_grammar_error, path_limit_error
from .base import FileRegion, Source, size_mismatch

_LOCAL = struct.Struct("<4sHHHHHIIIHH")
_LOCAL_SIGNATURE: Final = b"PK\x03\x04"


_EOCD = struct.Struct("<4sHHHHIIH")  # 22 bytes
_EOCD_SIGNATURE: Final = b"PK\x05\x06"
_Z64_LOCATOR = struct.Struct("<4sIQI")  # 20 bytes
_Z64_LOCATOR_SIGNATURE: Final = b"PK\x06\x07"
_Z64_EOCD = struct.Struct("<4sQHHIIQQQQ")  # 56 bytes
_Z64_EOCD_SIGNATURE: Final = b"PK\x06\x06"
_CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")  # 46 bytes
_CENTRAL_SIGNATURE: Final = b"PK\x01\x02"
_U16: Final = 0xFFFF
_U32: Final = 0xFFFFFFFF
_ZIP64_EXTRA: Final = 0x0001
_UNICODE_PATH_EXTRA: Final = 0x7075
#: General purpose bits that must be clear: encrypted, data descriptor, strong encryption, masked header.
_FORBIDDEN_FLAGS: Final = ((0x0001, "R-ZIP-7", "0 (encrypted)"), (0x0008, "R-ZIP-8", "3 (data descriptor)"),
                           (0x0040, "R-ZIP-9", "6 (strong encryption)"), (0x2000, "R-ZIP-9", "13 (masked header)"))


class _Member:
    """One central directory entry, with its ZIP64 values resolved."""

    __slots__ = ("index", "raw_name", "name", "made_by", "flags", "method", "crc", "csize", "size", "disk",
                 "external", "header", "extra", "data")

    def __init__(self, index: int, raw_name: bytes, fields: tuple[int, ...], extra: bytes) -> None:
        (self.made_by, _, self.flags, self.method, _, _, self.crc, self.csize, self.size, _, _, _,
         self.disk, _, self.external, self.header) = fields[1:]
        self.index = index
        self.raw_name = raw_name
        # latin-1 keeps every byte; non-ASCII names then fail the path grammar (R-PATH-5).
        self.name = raw_name.decode("latin-1")
        self.extra = extra
        self.data = -1

    def where(self, what: str) -> str:
        return f"central directory entry {self.index}: {what}"


def _extra_fields(extra: bytes) -> dict[int, bytes]:
    """Header id -> body of each extra field record (R-ZIP-23: contents are otherwise ignored).

    The area must already have passed :func:`_extra_framing_error` (R-ZIP-25).
    """
    fields: dict[int, bytes] = {}
    position = 0
    while position + 4 <= len(extra):
        header_id, length = struct.unpack_from("<HH", extra, position)
        fields.setdefault(header_id, extra[position + 4 : position + 4 + length])
        position += 4 + length
    return fields


def _extra_framing_error(extra: bytes, file: str, where: str) -> ArchiveError | None:
    """R-ZIP-25: the area is whole records (2-byte id, 2-byte size n, n bytes) that fill it exactly.

    >>> _extra_framing_error(bytes(4), "a", "x") is None
    True
    >>> _extra_framing_error(bytes.fromhex("efbe0200616200"), "a", "x").rule
    'R-ZIP-25'
    """
    position = 0
    while position < len(extra):
        if len(extra) - position < 4:
            return ArchiveError(f"the extra field area ends with {len(extra) - position} bytes that are not a "
                                f"whole record (at byte {position} of {len(extra)})", file=file, field=where,
                                rule="R-ZIP-25")
        header_id, length = struct.unpack_from("<HH", extra, position)
        if position + 4 + length > len(extra):
            return ArchiveError(f"extra field record {header_id:#06x} at byte {position} declares {length} bytes, "
                                f"running past the {len(extra)}-byte area", file=file, field=where,
                                rule="R-ZIP-25")
        position += 4 + length
    return None


def _zip64_values(extra: bytes, wanted: list[tuple[str, int, int]], where: str, file: str) -> dict[str, int]:
    """Resolve saturated fields from the ZIP64 extra field, in APPNOTE order (R-ZIP-15)."""
    values = {name: value for name, value, _ in wanted}
    needed = [(name, width) for name, value, width in wanted if value == (_U32 if width == 8 else _U16)]
    if not needed:
        return values
    body = _extra_fields(extra).get(_ZIP64_EXTRA)
    position = 0
    for name, width in needed:
        if body is None or position + width > len(body):
            raise ArchiveError(f"{name} holds the ZIP64 marker but no ZIP64 extra field supplies it", file=file,
                               field=where, rule="R-ZIP-15")
        values[name] = int.from_bytes(body[position : position + width], "little")
        position += width
    return values


class ArchiveSource(Source):
    form = "archive"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        try:
            self._file = open(path, "rb")  # noqa: SIM115  (open for the source's lifetime; close() closes it)
        except OSError as exc:
            raise NotACheckpoint(f"cannot open: {exc.strerror}", file=str(path), rule="R-PUB-11") from None
        self._map: mmap.mmap | None = None
        try:
            self._size = os.fstat(self._file.fileno()).st_size
            self._entries = self._parse_central_directory()
            self._manifest = self._manifest_member()
        except (OSError, ValueError, struct.error) as exc:
            self._file.close()
            raise ArchiveError(f"unreadable archive: {exc}", file=str(path), rule="R-ZIP-2") from None
        except BaseException:
            self._file.close()
            raise
        self._members: dict[str, _Member] = {self._manifest.name: self._manifest}
        self._checked = False

    def _pread(self, offset: int, size: int) -> bytes:
        if offset < 0 or size < 0 or offset + size > self._size:
            return b""
        return os.pread(self._file.fileno(), size, offset)

    # -- step 2 ---------------------------------------------------------------------------
    def _parse_central_directory(self) -> list[_Member]:
        where = str(self.path)
        if self._pread(0, 4) != _LOCAL_SIGNATURE:
            raise NotACheckpoint("not a directory and does not begin with a ZIP local file header "
                                 "(50 4b 03 04)", file=where, field="offset 0: signature",
                                 rule="R-ZIP-1")
        eocd_at = self._size - _EOCD.size
        raw = self._pread(eocd_at, _EOCD.size) if eocd_at >= 4 else b""
        if len(raw) != _EOCD.size or raw[:4] != _EOCD_SIGNATURE or _EOCD.unpack(raw)[7] != 0:
            raise ArchiveError("the last 22 bytes are not an end of central directory record with an empty "
                               "comment (comment or trailing bytes?)", file=where,
                               field="end of central directory record", rule="R-ZIP-2")
        _, disk, cd_disk, count_disk, count_total, cd_size, cd_offset, _ = _EOCD.unpack(raw)
        cd_end = eocd_at
        locator = self._pread(eocd_at - _Z64_LOCATOR.size, _Z64_LOCATOR.size) if eocd_at >= 24 else b""
        saturated = _U16 in (disk, cd_disk, count_disk, count_total) or _U32 in (cd_size, cd_offset)
        if locator[:4] == _Z64_LOCATOR_SIGNATURE:
            _, z64_disk, z64_at, _ = _Z64_LOCATOR.unpack(locator)
            record = self._pread(z64_at, _Z64_EOCD.size)
            if z64_disk != 0:
                raise ArchiveError(f"ZIP64 locator names disk {z64_disk}", file=where,
                                   field="ZIP64 end of central directory locator: disk", rule="R-ZIP-3")
            if len(record) != _Z64_EOCD.size or record[:4] != _Z64_EOCD_SIGNATURE:
                raise ArchiveError("the ZIP64 locator does not point to a ZIP64 end of central directory record",
                                   file=where, field="ZIP64 end of central directory locator", rule="R-ZIP-15")
            (_, record_size, _, _, z_disk, z_cd_disk, z_count_disk, z_count_total, z_cd_size,
             z_cd_offset) = _Z64_EOCD.unpack(record)
            if z64_at + 12 + record_size != eocd_at - _Z64_LOCATOR.size:
                raise ArchiveError("bytes between the ZIP64 end records", file=where,
                                   field="ZIP64 end of central directory record", rule="R-ZIP-2")
            if z_disk != 0 or z_cd_disk != 0:
                raise ArchiveError("ZIP64 end of central directory names a disk other than 0", file=where,
                                   field="ZIP64 end of central directory record: disk", rule="R-ZIP-3")
            disk, cd_disk = (z_disk if disk == _U16 else disk), (z_cd_disk if cd_disk == _U16 else cd_disk)
            count_disk = z_count_disk if count_disk == _U16 else count_disk
            count_total = z_count_total if count_total == _U16 else count_total
            cd_size = z_cd_size if cd_size == _U32 else cd_size
            cd_offset = z_cd_offset if cd_offset == _U32 else cd_offset
            cd_end = z64_at
        elif saturated:
            raise ArchiveError("the end of central directory record holds ZIP64 markers but there is no ZIP64 "
                               "end of central directory record and locator", file=where,
                               field="end of central directory record", rule="R-ZIP-15")
        if disk != 0 or cd_disk != 0:
            raise ArchiveError(f"disk numbers {disk}/{cd_disk}; a checkpoint archive is one disk (0)", file=where,
                               field="end of central directory record: disk", rule="R-ZIP-3")
        if count_total > ARCHIVE_MAX_MEMBERS:
            raise LimitExceeded(f"{count_total} central directory entries, limit {ARCHIVE_MAX_MEMBERS}",
                                file=where, field="end of central directory record: total entries",
                                rule="R-LIM-17")
        if count_disk != count_total:
            raise ArchiveError(f"entries on this disk ({count_disk}) differ from total entries ({count_total})",
                               file=where, field="end of central directory record: entries", rule="R-ZIP-4")
        if cd_offset + cd_size != cd_end:
            raise ArchiveError(f"the central directory [{cd_offset}, {cd_offset + cd_size}) does not end where "
                               f"the end records begin ({cd_end})", file=where,
                               field="end of central directory record: central directory offset",
                               rule="R-ZIP-20")
        self._cd_offset = cd_offset
        directory = self._pread(cd_offset, cd_size)
        entries: list[_Member] = []
        position = 0
        while position < len(directory):
            if len(entries) >= count_total:
                raise ArchiveError(f"the central directory holds more than the {count_total} entries the end "
                                   "record counts", file=where, field="end of central directory record: entries",
                                   rule="R-ZIP-4")
            if directory[position : position + 4] != _CENTRAL_SIGNATURE or position + _CENTRAL.size > len(directory):
                raise ArchiveError(f"unreadable central directory entry {len(entries)}", file=where,
                                   field=f"central directory entry {len(entries)}", rule="R-ZIP-4")
            fields = _CENTRAL.unpack_from(directory, position)
            name_len, extra_len, comment_len = fields[10], fields[11], fields[12]
            start = position + _CENTRAL.size
            end = start + name_len + extra_len + comment_len
            if end > len(directory):
                raise ArchiveError(f"central directory entry {len(entries)} runs past the central directory",
                                   file=where, field=f"central directory entry {len(entries)}", rule="R-ZIP-4")
            member = _Member(len(entries), directory[start : start + name_len], fields,
                             directory[start + name_len : start + name_len + extra_len])
            framing = _extra_framing_error(member.extra, where, member.where("extra field"))
            if framing is not None:
                raise framing
            resolved = _zip64_values(member.extra, [("uncompressed size", member.size, 8),
                                                    ("compressed size", member.csize, 8),
                                                    ("local header offset", member.header, 8),
                                                    ("disk number start", member.disk, 4)],
                                     member.where("ZIP64 extra field"), where)
            member.size, member.csize = resolved["uncompressed size"], resolved["compressed size"]
            member.header, member.disk = resolved["local header offset"], resolved["disk number start"]
            if member.disk != 0:
                raise ArchiveError(f"member starts on disk {member.disk}", file=where,
                                   field=member.where("disk number start"), rule="R-ZIP-3")
            entries.append(member)
            position = end
        if len(entries) != count_total:
            raise ArchiveError(f"the end record counts {count_total} entries, the central directory has "
                               f"{len(entries)}", file=where, field="end of central directory record: entries",
                               rule="R-ZIP-4")
        return entries

    def _manifest_member(self) -> _Member:
        names = [m for m in self._entries if m.raw_name == MANIFEST_NAME.encode("ascii")]
        if not names:
            raise NotACheckpoint("the archive has no member manifest.json", file=str(self.path), rule="R-CON-1")
        last = self._entries[-1]
        if last.raw_name != MANIFEST_NAME.encode("ascii"):
            raise ArchiveError("manifest.json must be the last central directory entry", file=MANIFEST_NAME,
                               field=last.where("file name"), rule="R-ZIP-21")
        # The manifest's bytes are read before step 10, so its own member rules are checked now.
        error = self._member_error(last)
        if error is not None:
            raise error
        return last

    # -- step 10 --------------------------------------------------------------------------
    def _member_error(self, member: _Member) -> CheckpointError | None:
        """The first rule of R-ZIP-5..18 (and R-ZIP-10, R-ZIP-16, R-ZIP-17) that ``member`` breaks."""
        name = member.name
        if member.method != 0:
            return ArchiveError(f"compression method {member.method}; members are STORED (0)", file=name,
                                field=member.where("compression method"), rule="R-ZIP-5")
        if member.csize != member.size:
            return ArchiveError(f"compressed size {member.csize} differs from size {member.size}", file=name,
                                field=member.where("compressed size"), rule="R-ZIP-6")
        for bit, rule, what in _FORBIDDEN_FLAGS:
            if member.flags & bit:
                return ArchiveError(f"general purpose bit {what} is set", file=name,
                                    field=member.where("general purpose flags"), rule=rule)
        if _UNICODE_PATH_EXTRA in _extra_fields(member.extra):
            return ArchiveError("Info-ZIP Unicode Path extra field (0x7075) is not allowed", file=name,
                                field=member.where("extra field 0x7075"), rule="R-ZIP-16")
        if member.made_by >> 8 == 3 and (member.external >> 28) not in (0, 8):
            return UnsafePath(f"UNIX file type {member.external >> 28:#x} is not a regular file", file=name,
                              field=member.where("external attributes"), rule="R-ZIP-17")
        local = self._pread(member.header, _LOCAL.size)
        if len(local) != _LOCAL.size or local[:4] != _LOCAL_SIGNATURE:
            return ArchiveError(f"no local file header at offset {member.header}", file=name,
                                field=member.where("local header offset"), rule="R-ZIP-19")
        (_, _, flags, method, _, _, crc, csize, usize, name_len, extra_len) = _LOCAL.unpack(local)
        tail = self._pread(member.header + _LOCAL.size, name_len + extra_len)
        if len(tail) != name_len + extra_len:
            return ArchiveError("local header runs past the end of the file", file=name,
                                field=f"local header {member.index}", rule="R-ZIP-19")
        local_name, local_extra = tail[:name_len], tail[name_len:]
        where = f"local header {member.index}"
        if method != 0:
            return ArchiveError(f"compression method {method}; members are STORED (0)", file=name,
                                field=f"{where}: compression method", rule="R-ZIP-5")
        for bit, rule, what in _FORBIDDEN_FLAGS:
            if flags & bit:
                return ArchiveError(f"general purpose bit {what} is set", file=name,
                                    field=f"{where}: general purpose flags", rule=rule)
        if local_name != member.raw_name:
            return ArchiveError("local header name differs from the central directory entry's", file=name,
                                field=f"{where}: file name", rule="R-ZIP-12")
        if crc != member.crc:
            return ArchiveError("local header CRC-32 differs from the central directory entry's", file=name,
                                field=f"{where}: crc-32", rule="R-ZIP-13")
        try:
            sizes = _zip64_values(local_extra, [("uncompressed size", usize, 8), ("compressed size", csize, 8)],
                                  f"{where}: ZIP64 extra field", name)
        except ArchiveError as exc:
            return exc
        if (sizes["uncompressed size"], sizes["compressed size"]) != (member.size, member.csize):
            return ArchiveError("local header sizes differ from the central directory entry's", file=name,
                                field=f"{where}: sizes", rule="R-ZIP-14")
        if _UNICODE_PATH_EXTRA in _extra_fields(local_extra):
            return ArchiveError("Info-ZIP Unicode Path extra field (0x7075) is not allowed", file=name,
                                field=f"{where}: extra field 0x7075", rule="R-ZIP-16")
        data = member.header + _LOCAL.size + name_len + extra_len
        if data % ALIGNMENT:
            return ArchiveError(f"member data starts at {data}, not a multiple of {ALIGNMENT}", file=name,
                                field=f"{where}: data offset", rule="R-ZIP-18")
        # R-ZIP-25 is in the same group of step 10 as the rules above (their order is free): checked
        # after R-ZIP-18 so raw bytes appended to misalign the data still report the misalignment.
        framing = _extra_framing_error(local_extra, name, f"{where}: extra field")
        if framing is not None:
            return framing
        if data + member.size > self._cd_offset:
            return ArchiveError("member data runs into the central directory", file=name,
                                field=f"{where}: data", rule="R-ZIP-19")
        member.data = data
        return None

    def inventory(self) -> tuple[dict[str, int], list[CheckpointError], list[str]]:
        files: dict[str, int] = {}
        errors: list[CheckpointError] = []
        rejected: list[str] = []
        seen: set[bytes] = set()
        expected_header = 0
        for member in self._entries:
            name = member.name
            if name.endswith("/"):
                errors.append(ArchiveError("directory entries are not allowed", file=name,
                                           field=member.where("file name"), rule="R-ZIP-10"))
                rejected.append(name)
                continue
            bad_name = path_limit_error(name) or path_grammar_error(name, "R-PATH-5")
            if bad_name is not None:
                bad_name.file, bad_name.field = name, member.where("file name")
                errors.append(bad_name)
                rejected.append(name)
                continue
            if member.raw_name in seen:
                errors.append(ArchiveError("duplicate member name", file=name, field=member.where("file name"),
                                           rule="R-ZIP-11"))
                continue
            seen.add(member.raw_name)
            error = self._member_error(member)
            if error is not None:
                errors.append(error)
                rejected.append(name)
                continue
            if member.header != expected_header:
                errors.append(ArchiveError(
                    f"local header at {member.header}, expected {expected_header} (local headers follow the "
                    "central directory order without gaps)", file=name, field=member.where("local header offset"),
                    rule="R-ZIP-19"))
            expected_header = member.data + member.size
            files[name] = member.size
            self._members[name] = member
        if not errors and expected_header != self._cd_offset:
            errors.append(ArchiveError(f"the central directory starts at {self._cd_offset}, not right after the "
                                       f"last member's data ({expected_header})", file=str(self.path),
                                       field="end of central directory record: central directory offset",
                                       rule="R-ZIP-20"))
        self._checked = True
        return files, errors, rejected

    # -- Source ---------------------------------------------------------------------------
    def _member(self, rel: str) -> _Member:
        if not self._checked and rel != MANIFEST_NAME:
            self.inventory()
        member = self._members.get(rel)
        if member is None:
            raise MissingFile("listed in the manifest but not in the archive", file=rel, rule="R-CON-3")
        return member

    def read_manifest(self) -> bytes:
        member = self._manifest
        if member.size > MANIFEST_MAX_BYTES:
            raise LimitExceeded(f"manifest is {member.size} bytes, limit {MANIFEST_MAX_BYTES}",
                                file=MANIFEST_NAME, rule="R-LIM-1")
        return self._read(member)

    def _read(self, member: _Member) -> bytes:
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
        if self._map is None:
            self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        return memoryview(self._map)[member.data : member.data + size]

    def open_region(self, rel: str, size: int) -> FileRegion:
        """The member's data for positioned reads into caller buffers (no map)."""
        member = self._member(rel)
        if member.size != size:
            raise size_mismatch(rel, member.size, size)
        if member.data + size > self._size:
            raise size_mismatch(rel, self._size - member.data, size)
        return FileRegion(self._file.fileno(), member.data, size, rel, owns_fd=False)

    def zip_crc32(self, rel: str) -> int:
        """The ZIP CRC-32 recorded for a member (checked by ``validate``, R-ZIP-22)."""
        return self._member(rel).crc

    def close(self) -> None:
        self._file.close()
