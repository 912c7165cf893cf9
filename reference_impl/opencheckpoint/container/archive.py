"""The archive form: a ZIP file with STORED members whose data is 64-byte aligned.

Writing uses the standard library's :mod:`zipfile`; alignment comes from a
padding extra field (header id 0xD935, the one Android's zipalign uses)
sized so that each member's data starts at a multiple of 64. Reading parses
the central directory with :mod:`zipfile`, then checks every local header
itself, because :mod:`zipfile` tolerates what the spec forbids (prefix
bytes, duplicate names, local/central disagreement).
"""

from __future__ import annotations

import mmap
import os
import struct
import zipfile
from pathlib import Path
from typing import BinaryIO, Final

from ..errors import ArchiveError, CheckpointError, LimitExceeded, NotACheckpoint
from ..limits import ALIGNMENT, ARCHIVE_MAX_MEMBERS, MANIFEST_MAX_BYTES
from ..manifest import MANIFEST_NAME
from ..paths import check_relative_path
from .base import Source, size_mismatch

PADDING_HEADER_ID: Final = 0xD935
_LOCAL = struct.Struct("<4sHHHHHIIIHH")
_LOCAL_SIGNATURE: Final = b"PK\x03\x04"
#: zipfile's own rule for when a member needs ZIP64 records.
_ZIP64_LIMIT: Final = (1 << 31) - 1
_FIXED_TIME: Final = (1980, 1, 1, 0, 0, 0)


class ArchiveWriter:
    """Write members one after another, each one's data aligned to 64 bytes."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._zip = zipfile.ZipFile(stream, "w", compression=zipfile.ZIP_STORED, allowZip64=True)

    def add(self, name: str, source: BinaryIO, size: int) -> int:
        """Copy ``size`` bytes from ``source`` as member ``name``; return the data offset."""
        info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
        info.compress_type = zipfile.ZIP_STORED
        info.file_size = size
        info.external_attr = 0o644 << 16
        zip64 = size * 1.05 > _ZIP64_LIMIT
        header = self._stream.tell()
        base = header + 30 + len(name.encode("utf-8")) + (20 if zip64 else 0)
        pad = -base % ALIGNMENT
        if pad and pad < 4:
            pad += ALIGNMENT
        info.extra = struct.pack("<HH", PADDING_HEADER_ID, pad - 4) + bytes(pad - 4) if pad else b""
        with self._zip.open(info, "w", force_zip64=zip64) as member:
            remaining = size
            while remaining:
                chunk = source.read(min(remaining, 16 << 20))
                if not chunk:
                    raise OSError(f"{name}: source ended {remaining} bytes early")
                member.write(chunk)
                remaining -= len(chunk)
        return base + pad

    def close(self) -> None:
        self._zip.close()


class _Member:
    __slots__ = ("name", "header", "data", "size", "crc")

    def __init__(self, name: str, header: int, data: int, size: int, crc: int) -> None:
        self.name, self.header, self.data, self.size, self.crc = name, header, data, size, crc


class ArchiveSource(Source):
    form = "archive"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        try:
            self._file = open(path, "rb")
        except OSError as exc:
            raise NotACheckpoint(f"cannot open: {exc.strerror}", file=str(path)) from None
        try:
            self._members = self._parse()
        except BaseException:
            self._file.close()
            raise
        self._map: mmap.mmap | None = None

    # -- structure ----------------------------------------------------------------
    def _parse(self) -> dict[str, _Member]:
        where = str(self.path)
        try:
            archive = zipfile.ZipFile(self._file)
        except (zipfile.BadZipFile, OSError, ValueError, struct.error) as exc:
            raise NotACheckpoint(f"not a directory and not a ZIP archive ({exc})", file=where,
                                 section="R-ZIP-1") from None
        file_size = os.fstat(self._file.fileno()).st_size
        infos = archive.infolist()
        if len(infos) > ARCHIVE_MAX_MEMBERS:
            raise LimitExceeded(f"{len(infos)} archive members, limit {ARCHIVE_MAX_MEMBERS}", file=where,
                                section="R-LIM-12")
        if archive.comment:
            raise ArchiveError("the ZIP comment must be empty", file=where, section="R-ZIP-9")
        members: dict[str, _Member] = {}
        regions: list[tuple[int, int, str]] = []
        for info in infos:
            name = info.filename
            if name.endswith("/"):
                raise ArchiveError("directory entries are not allowed", file=name, section="R-ZIP-3")
            try:
                check_relative_path(name)
            except CheckpointError as exc:
                raise exc.at(file=name, field="name") from None
            if name in members:
                raise ArchiveError("duplicate member name", file=name, section="R-ZIP-4")
            if info.compress_type != zipfile.ZIP_STORED:
                raise ArchiveError(f"compression method {info.compress_type}; members must be STORED (0)",
                                   file=name, section="R-ZIP-2")
            if info.flag_bits & 0x1:
                raise ArchiveError("encrypted member", file=name, section="R-ZIP-2")
            if info.flag_bits & 0x8:
                raise ArchiveError("data descriptors are not allowed", file=name, section="R-ZIP-5")
            if info.compress_size != info.file_size:
                raise ArchiveError("stored member with compressed size != size", file=name, section="R-ZIP-2")
            data = self._check_local_header(info, name, file_size)
            members[name] = _Member(name, info.header_offset, data, info.file_size, info.CRC)
            regions.append((info.header_offset, data + info.file_size, name))
        if not infos or infos[0].header_offset != 0:
            raise ArchiveError("the archive must start with a local file header", file=where, section="R-ZIP-8")
        regions.sort()
        for (_, end, name), (start, _, following) in zip(regions, regions[1:]):
            if start < end:
                raise ArchiveError(f"member data overlaps member {following!r}", file=name, section="R-ZIP-7")
        if MANIFEST_NAME in members:
            if infos[-1].filename != MANIFEST_NAME or regions[-1][2] != MANIFEST_NAME:
                raise ArchiveError("manifest.json must be the last member", file=MANIFEST_NAME,
                                   section="R-ZIP-10")
        return members

    def _check_local_header(self, info: zipfile.ZipInfo, name: str, file_size: int) -> int:
        self._file.seek(info.header_offset)
        raw = self._file.read(_LOCAL.size)
        if len(raw) != _LOCAL.size:
            raise ArchiveError("local header runs past the end of the file", file=name, section="R-ZIP-6")
        (signature, _, flags, method, _, _, crc, csize, usize, name_len, extra_len) = _LOCAL.unpack(raw)
        local_name = self._file.read(name_len)
        extra = self._file.read(extra_len)
        if signature != _LOCAL_SIGNATURE:
            raise ArchiveError("bad local header signature", file=name, section="R-ZIP-6")
        encoding = "utf-8" if flags & 0x800 else "cp437"
        if local_name.decode(encoding, "replace") != info.orig_filename:
            raise ArchiveError("local header name differs from the central directory", file=name,
                               section="R-ZIP-6")
        if method != info.compress_type or (flags & 0x9) != (info.flag_bits & 0x9):
            raise ArchiveError("local header method/flags differ from the central directory", file=name,
                               section="R-ZIP-6")
        if csize == 0xFFFFFFFF or usize == 0xFFFFFFFF:
            usize, csize = _zip64_sizes(extra, usize, csize, name)
        if crc != info.CRC or usize != info.file_size or csize != info.compress_size:
            raise ArchiveError("local header CRC-32 or sizes differ from the central directory", file=name,
                               section="R-ZIP-6")
        data = info.header_offset + _LOCAL.size + name_len + extra_len
        if data % ALIGNMENT:
            raise ArchiveError(f"member data starts at {data}, not a multiple of {ALIGNMENT}", file=name,
                               section="R-ZIP-11")
        if data + info.file_size > file_size:
            raise ArchiveError("member data runs past the end of the archive", file=name, section="R-ZIP-6")
        return data

    # -- Source -------------------------------------------------------------------
    def _member(self, rel: str) -> _Member:
        member = self._members.get(rel)
        if member is None:
            from ..errors import MissingFile

            raise MissingFile("listed in the manifest but not in the archive", file=rel, section="R-CON-3")
        return member

    def read_manifest(self) -> bytes:
        member = self._members.get(MANIFEST_NAME)
        if member is None:
            raise NotACheckpoint("the archive has no manifest.json", file=str(self.path), section="R-PUB-5")
        if member.size > MANIFEST_MAX_BYTES:
            raise LimitExceeded(f"manifest is {member.size} bytes, limit {MANIFEST_MAX_BYTES}",
                                file=MANIFEST_NAME, section="R-LIM-1")
        return self._read(member)

    def list_files(self) -> dict[str, int]:
        return {name: m.size for name, m in self._members.items()}

    def _read(self, member: _Member) -> bytes:
        self._file.seek(member.data)
        data = self._file.read(member.size)
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

    def zip_crc32(self, rel: str) -> int:
        """The ZIP CRC-32 recorded for a member (checked by ``validate``)."""
        return self._member(rel).crc

    def close(self) -> None:
        self._file.close()


def _zip64_sizes(extra: bytes, usize: int, csize: int, name: str) -> tuple[int, int]:
    position = 0
    while position + 4 <= len(extra):
        header_id, length = struct.unpack_from("<HH", extra, position)
        body = extra[position + 4 : position + 4 + length]
        if header_id == 0x0001:
            values = list(struct.unpack_from(f"<{len(body) // 8}Q", body))
            if usize == 0xFFFFFFFF and values:
                usize = values.pop(0)
            if csize == 0xFFFFFFFF and values:
                csize = values.pop(0)
            return usize, csize
        position += 4 + length
    raise ArchiveError("ZIP64 sizes announced but no ZIP64 extra field", file=name, section="R-ZIP-6")
