"""Craft hostile ZIP archives: checkpoints that break one rule of the archive profile (spec §3.3).

Reader authors (and this project's tests and conformance generator) use
these builders to make archives no honest writer produces, the way
safetensors ships its attack files: a local header that disagrees with the
central directory, a compressed or misaligned member, a data descriptor,
duplicate or case-colliding names, a prefix or trailing bytes, a wrong
entry count, a multi-disk EOCD, and so on. Nothing here validates: every
field can be set to any value.

Two builders, each keeping the layout of the archives already made with it:

* :class:`Member` + :func:`build_zip` — every header field is an absolute
  override (``crc``, ``local_size``, ``csize``, ``made_by``, ``disk``, the
  central directory ``order``, ``eocd_total``, ...); :func:`members_of`
  turns a directory checkpoint into members (sorted paths, manifest last).
* :class:`CaseMember` + :func:`zip_bytes` — members described by their defect
  relative to a well-formed one (``misalign``, ``descriptor``,
  ``local_crc_xor``, ``count_delta``, ...); :func:`manifest_members` lists a
  directory checkpoint's files in manifest order. The frozen conformance
  cases are built with it, so its output must never change.

Both pad each member's data to a 64-byte boundary with the padding extra
field (id 0xD935) as a conforming writer does, unless told otherwise.

>>> import zipfile, io
>>> blob = build_zip([Member(b"manifest.json", b"{}")], comment=b"hi")
>>> zipfile.ZipFile(io.BytesIO(blob)).read("manifest.json")
b'{}'
>>> data = zip_bytes([CaseMember("a", b"xyz")])
>>> zipfile.ZipFile(io.BytesIO(data)).read("a"), data.index(b"xyz") % 64
(b'xyz', 0)
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CaseMember", "Member", "build_zip", "manifest_members", "members_of", "zip_bytes"]


# -- field-level builder ------------------------------------------------------------------------
@dataclass
class Member:
    """One archive member; every ZIP field the tests break can be overridden."""

    name: bytes
    data: bytes
    method: int = 0
    flags: int = 0
    local_flags: int | None = None
    stored: bytes | None = None  # bytes written as member data (default: data)
    crc: int | None = None
    local_crc: int | None = None
    local_name: bytes | None = None
    local_size: int | None = None
    csize: int | None = None
    made_by: int = (3 << 8) | 20
    external: int = 0o100644 << 16
    extra_local: bytes = b""
    extra_central: bytes = b""
    misalign: int = 0
    gap_before: int = 0
    disk: int = 0
    offsets: dict[str, int] = field(default_factory=dict)


def members_of(path: Path) -> list[Member]:
    """The files of a directory checkpoint as members (sorted paths), ``manifest.json`` last."""
    names: list[str] = []
    for dirpath, dirnames, files in os.walk(path):
        dirnames.sort()
        for name in sorted(files):
            rel = os.path.relpath(os.path.join(dirpath, name), path)
            if rel != "manifest.json":
                names.append(rel)
    names.append("manifest.json")
    return [Member(n.encode(), (path / n).read_bytes()) for n in names]


def build_zip(members: list[Member], *, prefix: bytes = b"", comment: bytes = b"", trailing: bytes = b"",
              order: list[int] | None = None, cd_gap: int = 0, eocd_total: int | None = None,
              eocd_disk: int = 0) -> bytes:
    """A checkpoint archive laid out as the spec requires, unless an override says otherwise.

    ``order`` gives the central directory order as indices into ``members``
    (default: file order).
    """
    out = bytearray(prefix)
    for member in members:
        out += bytes(member.gap_before)
        header = len(out)
        stored = member.data if member.stored is None else member.stored
        base = header + 30 + len(member.local_name or member.name) + len(member.extra_local)
        pad = -base % 64
        if pad and pad < 4:
            pad += 64
        extra = member.extra_local + (struct.pack("<HH", 0xD935, pad - 4) + bytes(pad - 4) if pad else b"")
        if member.misalign:
            extra += bytes(member.misalign)
        crc = zlib.crc32(member.data) if member.crc is None else member.crc
        member.offsets = {"header": header}
        out += struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20,
                           member.flags if member.local_flags is None else member.local_flags, member.method, 0,
                           33, crc if member.local_crc is None else member.local_crc,
                           len(stored) if member.csize is None else member.csize,
                           len(member.data) if member.local_size is None else member.local_size,
                           len(member.local_name or member.name), len(extra))
        out += (member.local_name or member.name) + extra
        member.offsets["data"] = len(out)
        out += stored
    out += bytes(cd_gap)
    cd_start = len(out)
    for index in order if order is not None else range(len(members)):
        member = members[index]
        stored = member.data if member.stored is None else member.stored
        crc = zlib.crc32(member.data) if member.crc is None else member.crc
        out += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", member.made_by, 20, member.flags, member.method,
                           0, 33, crc, len(stored) if member.csize is None else member.csize, len(member.data),
                           len(member.name), len(member.extra_central), 0, member.disk, 0, member.external,
                           member.offsets["header"])
        out += member.name + member.extra_central
    cd_size = len(out) - cd_start
    count = len(members) if order is None else len(order)
    total = count if eocd_total is None else eocd_total
    out += struct.pack("<4sHHHHIIH", b"PK\x05\x06", eocd_disk, 0, total, total, cd_size, cd_start, len(comment))
    return bytes(out + comment + trailing)



# -- defect-level builder (frozen conformance cases) -------------------------------------------
@dataclass
class CaseMember:
    """One member described by its defect relative to a well-formed one (the conformance cases' builder).

    ``misalign`` lengthens the padding field by 8 bytes; ``descriptor`` writes a data descriptor (flag bit 3,
    zero local CRC and sizes); ``local_crc_xor`` / ``local_size_delta`` skew the local header against the
    central one; ``extra`` goes into both headers before the padding field (id ``pad_id``).
    """

    name: str
    data: bytes
    method: int = 0
    flags: int = 0
    local_name: str | None = None
    misalign: bool = False
    descriptor: bool = False
    external: int = 0o100644 << 16
    pad_id: int = 0xD935
    extra: bytes = b""  # additional extra fields (local and central)
    local_crc_xor: int = 0
    local_size_delta: int = 0
    central_csize: int | None = None
    gap_after: bytes = b""


def zip_bytes(members: list[CaseMember], *, comment: bytes = b"", prefix: bytes = b"", disk: int = 0,
              count_delta: int = 0, cd_gap: bytes = b"") -> bytes:
    """A ZIP file laid out as spec §3.3 requires, except where a member or argument asks otherwise."""
    out = bytearray(prefix)
    central: list[bytes] = []
    for m in members:
        stored = m.data
        if m.method == 8:
            packer = zlib.compressobj(9, zlib.DEFLATED, -15)
            stored = packer.compress(m.data) + packer.flush()
        lname = (m.local_name or m.name).encode()
        cname = m.name.encode()
        offset = len(out)
        crc = zlib.crc32(m.data)
        base = offset + 30 + len(lname) + len(m.extra)
        pad = -base % 64
        if pad and pad < 4:
            pad += 64
        if m.misalign:
            pad = pad + 8 if pad >= 4 else 8
        extra = m.extra + (struct.pack("<HH", m.pad_id, pad - 4) + bytes(pad - 4) if pad else b"")
        flags = m.flags | (0x08 if m.descriptor else 0)
        lcrc, lc, lu = (0, 0, 0) if m.descriptor else (crc ^ m.local_crc_xor, len(stored) + m.local_size_delta,
                                                      len(m.data) + m.local_size_delta)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, flags, m.method, 0, 0x21, lcrc, lc, lu, len(lname),
                           len(extra)) + lname + extra + stored
        if m.descriptor:
            out += struct.pack("<IIII", 0x08074B50, crc, len(stored), len(m.data))
        out += m.gap_after
        csize = len(stored) if m.central_csize is None else m.central_csize
        central.append(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x031E, 20, flags, m.method, 0, 0x21, crc,
                                   csize, len(m.data), len(cname), len(m.extra), 0, 0, 0, m.external, offset)
                       + cname + m.extra)
    out += cd_gap
    cd_offset = len(out)
    cd = b"".join(central)
    n = len(members)
    out += cd + struct.pack("<IHHHHIIH", 0x06054B50, disk, disk, n, n + count_delta, len(cd), cd_offset,
                            len(comment)) + comment
    return bytes(out)


def manifest_members(directory: Path) -> list[CaseMember]:
    """The members of an archive holding ``directory``'s checkpoint, in manifest order, manifest last."""
    body = json.loads((directory / "manifest.json").read_bytes())
    members = [CaseMember(f"{rec['path']}/{rel}", (directory / rec["path"] / rel).read_bytes())
               for rec in body["components"].values() for rel in rec["files"]]
    return [*members, CaseMember("manifest.json", (directory / "manifest.json").read_bytes())]
