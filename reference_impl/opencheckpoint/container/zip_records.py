"""The ZIP records of a checkpoint archive, read and checked one function per record (spec §3.3).

Reader side only. Each function reads one structure (the start of the file,
the end of central directory record, the ZIP64 end records, one central
directory entry, one local header) and raises, or returns, the error of the
first rule it breaks, in the order the rules are listed in step 2 and
step 10 of the validation order. :class:`~.archive.ArchiveSource` strings
them together.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from ..format.errors import ArchiveError, CheckpointError
from ..format.limits import ALIGNMENT, ARCHIVE_MAX_MEMBERS
from ..rules import raise_if
from ..rules.archive import ZIP

#: ``pread(offset, size)``: the bytes there, or ``b""`` when the range is not inside the file.
Pread = Callable[[int, int], bytes]

LOCAL = struct.Struct("<4sHHHHHIIIHH")
LOCAL_SIGNATURE: Final = b"PK\x03\x04"
_EOCD = struct.Struct("<4sHHHHIIH")  # 22 bytes
_EOCD_SIGNATURE: Final = b"PK\x05\x06"
_Z64_LOCATOR = struct.Struct("<4sIQI")  # 20 bytes
_Z64_LOCATOR_SIGNATURE: Final = b"PK\x06\x07"
_Z64_EOCD = struct.Struct("<4sQHHIIQQQQ")  # 56 bytes
_Z64_EOCD_SIGNATURE: Final = b"PK\x06\x06"
_CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")  # 46 bytes
_CENTRAL_SIGNATURE: Final = b"PK\x01\x02"
_ENTRIES: Final = "end of central directory record: entries"
_U16: Final = 0xFFFF
_U32: Final = 0xFFFFFFFF
_ZIP64_EXTRA: Final = 0x0001
_UNICODE_PATH_EXTRA: Final = 0x7075
#: General purpose bits that must be clear: encrypted, data descriptor, strong encryption, masked header.
_FORBIDDEN_FLAGS: Final = ((0x0001, "R-ZIP-7", "0 (encrypted)"), (0x0008, "R-ZIP-8", "3 (data descriptor)"),
                           (0x0040, "R-ZIP-9", "6 (strong encryption)"), (0x2000, "R-ZIP-9", "13 (masked header)"))


class Member:
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


def _extra_framing_error(extra: bytes, file: str, where: str) -> CheckpointError | None:
    """R-ZIP-25: the area is whole records (2-byte id, 2-byte size n, n bytes) that fill it exactly.

    >>> _extra_framing_error(bytes(4), "a", "x") is None
    True
    >>> _extra_framing_error(bytes.fromhex("efbe0200616200"), "a", "x").rule
    'R-ZIP-25'
    """
    position = 0
    while position < len(extra):
        if len(extra) - position < 4:
            return ZIP.error("R-ZIP-25", f"the extra field area ends with {len(extra) - position} bytes that are not a "
                             f"whole record (at byte {position} of {len(extra)})", file=file, field=where)
        header_id, length = struct.unpack_from("<HH", extra, position)
        if position + 4 + length > len(extra):
            return ZIP.error("R-ZIP-25", f"extra field record {header_id:#06x} at byte {position} declares {length} "
                             f"bytes, running past the {len(extra)}-byte area", file=file, field=where)
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
        raise_if(ZIP.check("R-ZIP-15", where, name, True, body is not None and position + width <= len(body),
                           file=file))
        assert body is not None  # for mypy: supplied above
        values[name] = int.from_bytes(body[position : position + width], "little")
        position += width
    return values



def _local_zip64_sizes(extra: bytes, usize: int, csize: int, where: str, file: str) -> dict[str, int]:
    """A local header's sizes (R-ZIP-15): where either is saturated, its ZIP64 extra field holds both,
    uncompressed first, 8 bytes each ([APPNOTE] 4.5.3), and each saturated size is taken from its own place;
    a field of 8 bytes holding one size is too short, whichever size is saturated."""
    sizes = {"uncompressed size": usize, "compressed size": csize}
    if _U32 not in (usize, csize):
        return sizes
    body = _extra_fields(extra).get(_ZIP64_EXTRA)
    raise_if(ZIP.check("R-ZIP-15", where, "uncompressed and compressed size (a local ZIP64 extra field holds both)",
                       True, body is not None and len(body) >= 16, file=file))
    assert body is not None  # for mypy: supplied above
    for position, name in enumerate(tuple(sizes)):
        if sizes[name] == _U32:
            sizes[name] = int.from_bytes(body[8 * position : 8 * position + 8], "little")
    return sizes


@dataclass
class EndRecord:
    """The end of central directory record, with ZIP64 values resolved."""

    disk: int
    cd_disk: int
    count_disk: int
    count_total: int
    cd_size: int
    cd_offset: int
    #: Where the end records begin: the central directory ends here.
    cd_end: int


def end_records_gap(why: str, field: str, where: str) -> CheckpointError:
    """R-ZIP-24: the end records follow the central directory, and each other, without gaps."""
    return ZIP.error("R-ZIP-24", why, file=where, field=field)


def check_start(pread: Pread, where: str) -> None:
    """R-ZIP-1: the file begins with a local file header signature."""
    if pread(0, 4) != LOCAL_SIGNATURE:
        raise ZIP.error("R-ZIP-1", "not a directory and does not begin with a ZIP local file header "
                        "(50 4b 03 04)", file=where, field="offset 0: signature")


def read_end_record(pread: Pread, size: int, where: str) -> EndRecord:
    """R-ZIP-2: the last 22 bytes are an end of central directory record with an empty comment."""
    eocd_at = size - _EOCD.size
    raw = pread(eocd_at, _EOCD.size) if eocd_at >= 4 else b""
    raise_if(ZIP.check("R-ZIP-2", "end of central directory record", raw, file=where))
    _, disk, cd_disk, count_disk, count_total, cd_size, cd_offset, _ = _EOCD.unpack(raw)
    return EndRecord(disk, cd_disk, count_disk, count_total, cd_size, cd_offset, eocd_at)


def resolve_zip64(pread: Pread, end: EndRecord, where: str) -> EndRecord:
    """R-ZIP-3, R-ZIP-15, R-ZIP-24: the ZIP64 locator and end record, when present, supply saturated fields."""
    eocd_at = end.cd_end
    locator = pread(eocd_at - _Z64_LOCATOR.size, _Z64_LOCATOR.size) if eocd_at >= 24 else b""
    if locator[:4] != _Z64_LOCATOR_SIGNATURE:
        saturated = _U16 in (end.disk, end.cd_disk, end.count_disk, end.count_total) or _U32 in (end.cd_size,
                                                                                                  end.cd_offset)
        record_name = "end of central directory record"
        raise_if(ZIP.check("R-ZIP-15", record_name, record_name, saturated, False, file=where))
        return end
    _, z64_disk, z64_at, _ = _Z64_LOCATOR.unpack(locator)
    record = pread(z64_at, _Z64_EOCD.size)
    locator_name = "ZIP64 end of central directory locator"
    raise_if(ZIP.check("R-ZIP-3", f"{locator_name}: disk", locator_name, z64_disk, file=where)
             or ZIP.check("R-ZIP-15", locator_name, locator_name, True,
                          len(record) == _Z64_EOCD.size and record[:4] == _Z64_EOCD_SIGNATURE, file=where))
    (_, record_size, _, _, z_disk, z_cd_disk, z_count_disk, z_count_total, z_cd_size,
     z_cd_offset) = _Z64_EOCD.unpack(record)
    if z64_at + 12 + record_size != eocd_at - _Z64_LOCATOR.size:
        raise end_records_gap("bytes between the ZIP64 end records", "ZIP64 end of central directory record",
                              where)
    raise_if(ZIP.check("R-ZIP-3", "ZIP64 end of central directory record: disk",
                       "ZIP64 end of central directory record", z_disk, z_cd_disk, file=where))

    def pick(value: int, wide: int, marker: int) -> int:
        return wide if value == marker else value

    return EndRecord(pick(end.disk, z_disk, _U16), pick(end.cd_disk, z_cd_disk, _U16),
                     pick(end.count_disk, z_count_disk, _U16), pick(end.count_total, z_count_total, _U16),
                     pick(end.cd_size, z_cd_size, _U32), pick(end.cd_offset, z_cd_offset, _U32), z64_at)


def check_end_record(end: EndRecord, where: str) -> None:
    """R-ZIP-3 (one disk), R-LIM-17 (entry count), R-ZIP-4 (counts agree), R-ZIP-24 (end records follow the
    central directory without a gap)."""
    raise_if(ZIP.check("R-ZIP-3", "end of central directory record: disk", "end of central directory record",
                       end.disk, end.cd_disk, file=where))
    if end.count_total > ARCHIVE_MAX_MEMBERS:
        raise ZIP.error("R-LIM-17", f"{end.count_total} central directory entries, limit {ARCHIVE_MAX_MEMBERS}",
                        file=where, field="end of central directory record: total entries")
    raise_if(ZIP.check("R-ZIP-4", _ENTRIES, end.count_disk, end.count_total, 0, False, file=where))
    if end.cd_offset + end.cd_size != end.cd_end:
        raise end_records_gap(f"the central directory [{end.cd_offset}, {end.cd_offset + end.cd_size}) does not "
                              f"end where the end records begin ({end.cd_end})",
                              "end of central directory record: central directory offset", where)


def read_central_directory(directory: bytes, count_total: int, where: str) -> list[Member]:
    """R-ZIP-4: exactly ``count_total`` well-formed entries fill the central directory."""
    entries: list[Member] = []
    position = 0
    while position < len(directory):
        # one more entry follows: more than counted breaks R-ZIP-4 before that entry is read
        raise_if(ZIP.check("R-ZIP-4", _ENTRIES, count_total, count_total, len(entries) + 1, False, file=where))
        member, position = read_central_entry(directory, position, len(entries), where)
        entries.append(member)
    raise_if(ZIP.check("R-ZIP-4", _ENTRIES, count_total, count_total, len(entries), True, file=where))
    return entries


def read_central_entry(directory: bytes, position: int, index: int, where: str) -> tuple[Member, int]:
    """One central directory entry (R-ZIP-4, R-ZIP-25, R-ZIP-15, R-ZIP-3); returns it and where the next begins."""
    header_fits = directory[position : position + 4] == _CENTRAL_SIGNATURE and (
        position + _CENTRAL.size <= len(directory))
    raise_if(ZIP.check("R-ZIP-4", f"central directory entry {index}", 0, 0, 0, False, entry=index,
                       header_fits=header_fits, file=where))
    fields = _CENTRAL.unpack_from(directory, position)
    name_len, extra_len, comment_len = fields[10], fields[11], fields[12]
    start = position + _CENTRAL.size
    end = start + name_len + extra_len + comment_len
    raise_if(ZIP.check("R-ZIP-4", f"central directory entry {index}", 0, 0, 0, False, entry=index,
                       entry_fits=end <= len(directory), file=where))
    member = Member(index, directory[start : start + name_len], fields,
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
    raise_if(ZIP.check("R-ZIP-3", member.where("disk number start"), "central directory entry", member.disk,
                       file=where))
    return member, end


def stored_error(method: int, name: str, field: str) -> CheckpointError | None:
    """R-ZIP-5: a member is STORED (compression method 0), in its central entry and its local header."""
    if method == 0:
        return None
    return ZIP.error("R-ZIP-5", f"compression method {method}; members are STORED (0)", file=name, field=field)


def unicode_path_error(extra: bytes, name: str, field: str) -> CheckpointError | None:
    """R-ZIP-16: no Info-ZIP Unicode Path extra field, in the central entry or the local header."""
    if _UNICODE_PATH_EXTRA not in _extra_fields(extra):
        return None
    return ZIP.error("R-ZIP-16", "Info-ZIP Unicode Path extra field (0x7075) is not allowed", file=name, field=field)


def central_entry_error(member: Member) -> CheckpointError | None:
    """The first of R-ZIP-5, 6, 7-9, 16, 17 that a central directory entry breaks."""
    name = member.name
    error = stored_error(member.method, name, member.where("compression method"))
    if error is not None:
        return error
    if member.csize != member.size:
        return ZIP.error("R-ZIP-6", f"compressed size {member.csize} differs from size {member.size}", file=name,
                         field=member.where("compressed size"))
    for bit, rule, what in _FORBIDDEN_FLAGS:
        if member.flags & bit:
            return ZIP.error(rule, f"general purpose bit {what} is set", file=name,
                             field=member.where("general purpose flags"))
    error = unicode_path_error(member.extra, name, member.where("extra field 0x7075"))
    if error is not None:
        return error
    if member.made_by >> 8 == 3 and (member.external >> 28) not in (0, 8):
        return ZIP.error("R-ZIP-17", f"UNIX file type {member.external >> 28:#x} is not a regular file", file=name,
                         field=member.where("external attributes"))
    return None


def local_header_error(member: Member, pread: Pread, cd_offset: int) -> CheckpointError | None:
    """The first rule a member's local header breaks (R-ZIP-19, 5, 7-9, 12, 13, 14, 16, 18, 25); sets ``data``."""
    name = member.name
    local = pread(member.header, LOCAL.size)
    found = ZIP.check("R-ZIP-19", member.where("local header offset"), member.header,
                      signature=local[:4] if len(local) == LOCAL.size else b"", file=name)
    if found is not None:
        return found
    (_, _, flags, method, _, _, crc, csize, usize, name_len, extra_len) = LOCAL.unpack(local)
    tail = pread(member.header + LOCAL.size, name_len + extra_len)
    where = f"local header {member.index}"
    whole = ZIP.check("R-ZIP-19", where, member.header, whole=len(tail) == name_len + extra_len, file=name)
    if whole is not None:
        return whole
    local_name, local_extra = tail[:name_len], tail[name_len:]
    error = _local_fields_error(member, where, (flags, method, crc, csize, usize), local_name, local_extra)
    if error is not None:
        return error
    data = member.header + LOCAL.size + name_len + extra_len
    if data % ALIGNMENT:
        return ZIP.error("R-ZIP-18", f"member data starts at {data}, not a multiple of {ALIGNMENT}", file=name,
                         field=f"{where}: data offset")
    # R-ZIP-25 is in the same group of step 10 as the rules above (their order is free): checked
    # after R-ZIP-18 so raw bytes appended to misalign the data still report the misalignment.
    framing = _extra_framing_error(local_extra, name, f"{where}: extra field")
    if framing is not None:
        return framing
    overrun = ZIP.check("R-ZIP-19", f"{where}: data", member.header, data_end=data + member.size,
                        cd_offset=cd_offset, file=name)
    if overrun is not None:
        return overrun
    member.data = data
    return None


def _local_fields_error(member: Member, where: str, fields: tuple[int, int, int, int, int], local_name: bytes,
                        local_extra: bytes) -> CheckpointError | None:
    """R-ZIP-5, 7-9, 12, 13, 14, 16 on the fields of a local header (against its central entry)."""
    name = member.name
    flags, method, crc, csize, usize = fields
    error = stored_error(method, name, f"{where}: compression method")
    if error is not None:
        return error
    for bit, rule, what in _FORBIDDEN_FLAGS:
        if flags & bit:
            return ZIP.error(rule, f"general purpose bit {what} is set", file=name,
                             field=f"{where}: general purpose flags")
    if local_name != member.raw_name:
        return ZIP.error("R-ZIP-12", "local header name differs from the central directory entry's", file=name,
                         field=f"{where}: file name")
    if crc != member.crc:
        return ZIP.error("R-ZIP-13", "local header CRC-32 differs from the central directory entry's", file=name,
                         field=f"{where}: crc-32")
    try:
        sizes = _local_zip64_sizes(local_extra, usize, csize, f"{where}: ZIP64 extra field", name)
    except ArchiveError as exc:
        return exc
    if (sizes["uncompressed size"], sizes["compressed size"]) != (member.size, member.csize):
        return ZIP.error("R-ZIP-14", "local header sizes differ from the central directory entry's", file=name,
                         field=f"{where}: sizes")
    return unicode_path_error(local_extra, name, f"{where}: extra field 0x7075")
