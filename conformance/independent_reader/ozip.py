"""ZIP archive form per spec section 3.3, parsed by hand (no zipfile module)."""
from __future__ import annotations

import struct

from errors import CheckpointError

SIG_LOCAL = b"PK\x03\x04"
SIG_CENTRAL = b"PK\x01\x02"
SIG_EOCD = b"PK\x05\x06"
SIG_Z64_EOCD = b"PK\x06\x06"
SIG_Z64_LOC = b"PK\x06\x07"
MAX_ENTRIES = 1_000_001
U32 = 0xFFFFFFFF
U16 = 0xFFFF


class Member:
    __slots__ = ("index", "name", "made_by", "flags", "method", "crc", "csize", "usize",
                 "disk", "ext_attr", "local_off", "extras", "data_start", "local")
    # The slots' types, for mypy (annotations without values create no class attributes).
    index: int
    name: bytes
    made_by: int
    flags: int
    method: int
    crc: int
    csize: int
    usize: int
    disk: int
    ext_attr: int
    local_off: int
    extras: list
    data_start: int
    local: tuple

    def __init__(self):
        self.local = None
        self.data_start = None


def _arch(file, field, msg, req):
    return CheckpointError("ArchiveError", file, field, msg, req)


def parse_extras(raw: bytes, file: str, where: str):
    """Split an extra-field area into (id, data) records."""
    out = []
    p = 0
    while p < len(raw):
        if p + 4 > len(raw):
            raise _arch(file, f"{where}: extra field", "truncated extra field record", "R-ZIP-25")
        hid, ln = struct.unpack_from("<HH", raw, p)
        if p + 4 + ln > len(raw):
            raise _arch(file, f"{where}: extra field 0x{hid:04x}", "extra field record overruns the extra field area",
                        "R-ZIP-25")
        out.append((hid, raw[p + 4:p + 4 + ln]))
        p += 4 + ln
    return out


class Archive:
    """Holds the archive bytes and the parsed central directory (step 2)."""

    def __init__(self, buf, display: str):
        self.buf = buf
        self.size = len(buf)
        self.display = display
        self.members: list[Member] = []
        self.cd_off = 0
        self.cd_end = 0

    # ---------------------------------------------------------------- step 2
    def open_structure(self):
        buf, size, f = self.buf, self.size, self.display
        if size < 4 or bytes(buf[0:4]) != SIG_LOCAL:
            raise CheckpointError("NotACheckpoint", f, "offset 0",
                                  "file does not begin with a ZIP local file header signature", "R-ZIP-1")
        if size < 22 or bytes(buf[size - 22:size - 18]) != SIG_EOCD:
            raise _arch(f, "end of central directory record", "not found in the last 22 bytes", "R-ZIP-2")
        (disk, cd_disk, n_disk, n_total, cd_size, cd_off, clen) = struct.unpack_from("<HHHHIIH", buf, size - 18)
        if clen != 0:
            raise _arch(f, "end of central directory record: comment length", f"comment length {clen} (must be 0)",
                        "R-ZIP-2")
        eocd_start = size - 22
        cd_end_limit = eocd_start
        z64 = None
        if eocd_start >= 20 and bytes(buf[eocd_start - 20:eocd_start - 16]) == SIG_Z64_LOC:
            loc = eocd_start - 20
            z_disk, z_off, _z_ndisks = struct.unpack_from("<IQI", buf, loc + 4)
            if z_disk != 0:
                raise _arch(f, "ZIP64 end of central directory locator: disk number", f"{z_disk} (must be 0)",
                            "R-ZIP-3")
            if z_off + 56 > loc or bytes(buf[z_off:z_off + 4]) != SIG_Z64_EOCD:
                raise _arch(f, "ZIP64 end of central directory record", "not found at the offset given by the locator",
                            "R-ZIP-15")
            (rec_size, _vm, _vn, zdisk, zcd_disk, zn_disk, zn_total, zcd_size, zcd_off) = struct.unpack_from(
                "<QHHIIQQQQ", buf, z_off + 4)
            if z_off + 12 + rec_size != loc:
                raise _arch(f, "ZIP64 end of central directory record: size",
                            "record does not end at the ZIP64 locator", "R-ZIP-24")
            if zdisk != 0 or zcd_disk != 0:
                raise _arch(f, "ZIP64 end of central directory record: disk numbers", "must be 0", "R-ZIP-3")
            z64 = (zn_disk, zn_total, zcd_size, zcd_off)
            cd_end_limit = z_off
        sentinel = disk == U16 or cd_disk == U16 or n_disk == U16 or n_total == U16 or cd_size == U32 or cd_off == U32
        if sentinel and z64 is None:
            raise _arch(f, "end of central directory record",
                        "a field holds 0xffff/0xffffffff but no ZIP64 end of central directory record is present",
                        "R-ZIP-15")
        if disk not in (0, U16) or cd_disk not in (0, U16) or (z64 is None and (disk != 0 or cd_disk != 0)):
            raise _arch(f, "end of central directory record: disk numbers",
                        f"number of this disk {disk}, disk of central directory {cd_disk} (must be 0)", "R-ZIP-3")
        if z64 is not None:
            if n_disk == U16:
                n_disk = z64[0]
            if n_total == U16:
                n_total = z64[1]
            if cd_size == U32:
                cd_size = z64[2]
            if cd_off == U32:
                cd_off = z64[3]
        if n_total > MAX_ENTRIES or n_disk > MAX_ENTRIES:
            raise CheckpointError("LimitExceeded", f, "end of central directory record: total entries",
                                  f"{max(n_total, n_disk)} central directory entries exceed {MAX_ENTRIES}", "R-LIM-17")
        if cd_off + cd_size != cd_end_limit:
            raise _arch(f, "end of central directory record: central directory offset/size",
                        f"central directory [{cd_off}, {cd_off + cd_size}) does not end where the end records begin "
                        f"({cd_end_limit})", "R-ZIP-24")
        self.cd_off, self.cd_end = cd_off, cd_off + cd_size
        p = cd_off
        members = []
        while p < self.cd_end:
            i = len(members)
            where = f"central directory entry {i}"
            if len(members) >= MAX_ENTRIES:
                raise CheckpointError("LimitExceeded", f, where, f"more than {MAX_ENTRIES} central directory entries",
                                      "R-LIM-17")
            if p + 46 > self.cd_end or bytes(buf[p:p + 4]) != SIG_CENTRAL:
                raise _arch(f, where, "central directory entry signature/header not readable", "R-ZIP-2")
            (made_by, _need, flags, method, _t, _d, crc, csize, usize, nlen, elen, clen2,
             dstart, _iattr, eattr, loff) = struct.unpack_from("<HHHHHHIIIHHHHHII", buf, p + 4)
            if p + 46 + nlen + elen + clen2 > self.cd_end:
                raise _arch(f, where, "central directory entry overruns the central directory", "R-ZIP-2")
            m = Member()
            m.index = i
            m.name = bytes(buf[p + 46:p + 46 + nlen])
            m.made_by, m.flags, m.method, m.crc = made_by, flags, method, crc
            m.ext_attr = eattr
            m.extras = parse_extras(bytes(buf[p + 46 + nlen:p + 46 + nlen + elen]), f, where)
            # ZIP64 extra resolution (R-ZIP-15)
            z = [d for (h, d) in m.extras if h == 0x0001]
            zd = z[0] if z else b""
            zp = 0

            def z64val(width, field, zd=zd, where=where):  # this member's extra, bound now
                nonlocal zp
                if zp + width > len(zd):
                    raise _arch(f, f"{where}: {field}",
                                "field holds the ZIP64 sentinel but the ZIP64 extra field does not supply it",
                                "R-ZIP-15")
                v = int.from_bytes(zd[zp:zp + width], "little")
                zp += width
                return v
            if usize == U32:
                usize = z64val(8, "uncompressed size")
            if csize == U32:
                csize = z64val(8, "compressed size")
            if loff == U32:
                loff = z64val(8, "local header offset")
            if dstart == U16:
                dstart = z64val(4, "disk number start")
            if dstart != 0:
                raise _arch(f, f"{where}: disk number start", f"{dstart} (must be 0)", "R-ZIP-3")
            m.usize, m.csize, m.local_off, m.disk = usize, csize, loff, dstart
            members.append(m)
            p += 46 + nlen + elen + clen2
        if n_total != len(members) or n_disk != len(members):
            raise _arch(f, "end of central directory record: entry counts",
                        f"total {n_total} / this disk {n_disk}, but the central directory has {len(members)} entries",
                        "R-ZIP-4")
        self.members = members
        names = [m.name for m in members]
        if b"manifest.json" not in names:
            raise CheckpointError("NotACheckpoint", f, "central directory", "archive has no member manifest.json",
                                  "R-CON-1")
        if names[-1] != b"manifest.json":
            raise _arch(f, f"central directory entry {len(members) - 1}",
                        "manifest.json is not the last central directory entry", "R-ZIP-21")
        return self

    # ---------------------------------------------------- member-level checks
    def check_member(self, m: Member, expected_off=None):
        """R-ZIP-5..9, 12..16, 18 (and 19 if expected_off given) for one member; sets data_start."""
        f, buf = self.display, self.buf
        where = f"central directory entry {m.index}"
        lwhere = f"local file header {m.index}"
        if m.method != 0:
            raise _arch(f, f"{where}: compression method", f"{m.method} (must be 0, STORED)", "R-ZIP-5")
        if m.csize != m.usize:
            raise _arch(f, f"{where}: compressed size", f"compressed size {m.csize} != uncompressed size {m.usize}",
                        "R-ZIP-6")
        self._flags(m.flags, where)
        if any(h == 0x7075 for h, _ in m.extras):
            raise _arch(f, f"{where}: extra field 0x7075", "Info-ZIP Unicode Path extra field present", "R-ZIP-16")
        if (m.made_by >> 8) == 3 and (m.ext_attr >> 28) not in (0, 8):
            try:
                label = m.name.decode("ascii")
            except UnicodeDecodeError:
                label = f
            raise CheckpointError("UnsafePath", label, f"{where}: external attributes",
                                  f"UNIX file type {m.ext_attr >> 28:#x} is not a regular file", "R-ZIP-17")
        if expected_off is not None and m.local_off != expected_off:
            raise _arch(f, f"{where}: local header offset",
                        f"local header at {m.local_off}, expected {expected_off} "
                        "(headers must be contiguous, in central directory order)", "R-ZIP-19")
        lo = m.local_off
        if lo + 30 > self.cd_off or bytes(buf[lo:lo + 4]) != SIG_LOCAL:
            raise _arch(f, lwhere, f"no local file header at offset {lo}", "R-ZIP-19")
        (_need, lflags, lmethod, _t, _d, lcrc, lcsize, lusize, lnlen, lelen) = struct.unpack_from(
            "<HHHHHIIIHH", buf, lo + 4)
        if lo + 30 + lnlen + lelen > self.cd_off:
            raise _arch(f, lwhere, "local header overruns the member area", "R-ZIP-19")
        lname = bytes(buf[lo + 30:lo + 30 + lnlen])
        lextras = parse_extras(bytes(buf[lo + 30 + lnlen:lo + 30 + lnlen + lelen]), f, lwhere)
        if lmethod != 0:
            raise _arch(f, f"{lwhere}: compression method", f"{lmethod} (must be 0, STORED)", "R-ZIP-5")
        self._flags(lflags, lwhere)
        if any(h == 0x7075 for h, _ in lextras):
            raise _arch(f, f"{lwhere}: extra field 0x7075", "Info-ZIP Unicode Path extra field present", "R-ZIP-16")
        if lname != m.name:
            raise _arch(f, f"{lwhere}: file name", "local header name differs from central directory name", "R-ZIP-12")
        if lcrc != m.crc:
            raise _arch(f, f"{lwhere}: crc-32", f"local {lcrc:08x} != central {m.crc:08x}", "R-ZIP-13")
        if lusize == U32 or lcsize == U32:
            # §3.3: a local header's ZIP64 extra field holds both sizes (uncompressed first, 8 bytes
            # each) whenever either size field is saturated; 8 bytes holding one size is too short.
            z = [d for (h, d) in lextras if h == 0x0001]
            zd = z[0] if z else b""
            if len(zd) < 16:
                raise _arch(f, f"{lwhere}: ZIP64 extra field",
                            "a size field holds 0xffffffff but the local ZIP64 extra field does not hold both "
                            "sizes", "R-ZIP-15")
            if lusize == U32:
                lusize = int.from_bytes(zd[0:8], "little")
            if lcsize == U32:
                lcsize = int.from_bytes(zd[8:16], "little")
        if lcsize != m.csize or lusize != m.usize:
            raise _arch(f, f"{lwhere}: sizes", f"local sizes {lcsize}/{lusize} != central {m.csize}/{m.usize}",
                        "R-ZIP-14")
        if lcsize != lusize:
            raise _arch(f, f"{lwhere}: compressed size", "compressed size != uncompressed size", "R-ZIP-6")
        ds = lo + 30 + lnlen + lelen
        if ds % 64 != 0:
            raise _arch(f, f"{lwhere}: data offset", f"member data starts at {ds}, not a multiple of 64", "R-ZIP-18")
        if ds + m.csize > self.cd_off:
            raise _arch(f, f"{where}: compressed size", "member data overruns the central directory", "R-ZIP-20")
        m.data_start = ds
        return ds + m.csize

    def _flags(self, flags, where):
        f = self.display
        if flags & 0x0001:
            raise _arch(f, f"{where}: general purpose flags", "bit 0 (encrypted) set", "R-ZIP-7")
        if flags & 0x0008:
            raise _arch(f, f"{where}: general purpose flags", "bit 3 (data descriptor) set", "R-ZIP-8")
        if flags & 0x0040 or flags & 0x2000:
            raise _arch(f, f"{where}: general purpose flags", "bit 6 or 13 (strong encryption / masked header) set",
                        "R-ZIP-9")

    def data(self, m: Member):
        return self.buf[m.data_start:m.data_start + m.usize]
