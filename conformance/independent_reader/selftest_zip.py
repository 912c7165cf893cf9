"""Self-made archive-form (§3.3) cases; registered by importing this module (see selftest.py)."""
from __future__ import annotations

from stkit import case, default_ckpt, manifest_bytes, read_bytes, write_bytes, write_zip


@case("ArchiveError", "zip")
def zip_deflate(d):
    man, files = default_ckpt()
    def tw(name, h):
        if name == "components/blob/a/b.txt":
            h["method"] = 8
    write_zip(d, man, files, tweak=tw)


@case("ArchiveError", "zip")
def zip_manifest_not_last(d):
    man, files = default_ckpt()
    write_zip(d, man, files)
    # reorder: easier to build manually -> put manifest first
    members = {"manifest.json": manifest_bytes(man)}
    members.update(files)
    with open(d, "wb"):
        pass
    # reuse writer with raw dict order: hack by writing files incl. manifest with different name then patch
    write_zip(d, man, {}, raw_manifest=None)
    b = bytearray(read_bytes(d))
    manifest_first = dict(list({"manifest.json": manifest_bytes(man)}.items()) + list(files.items()))
    write_zip(d, man, manifest_first, raw_manifest=b"{}")
    b = bytearray(read_bytes(d))
    # rename last member 'manifest.json' (the dummy) to 'zzzzzzzzzzzzz' (same length)
    i = b.rfind(b"manifest.json")
    b[i:i + 13] = b"zzzzzzzzzzzzz"
    # last local header of dummy manifest
    k = b.rfind(b"manifest.json", 0, b.find(b"PK\x01\x02"))
    b[k:k + 13] = b"zzzzzzzzzzzzz"
    write_bytes(d, bytes(b))


@case("UnsafePath", "zip")
def zip_symlink(d):
    man, files = default_ckpt()
    def tw(name, h):
        if name == "components/blob/a/b.txt":
            h["eattr"] = 0o120777 << 16
    write_zip(d, man, files, tweak=tw)


@case("ArchiveError", "zip")
def zip_unaligned(d):
    man, files = default_ckpt()
    def tw(name, h):
        if name == "components/blob/a/b.txt":
            h["extra"] = b""
    write_zip(d, man, files, tweak=tw)


@case("ArchiveError", "zip")
def zip_comment(d):
    man, files = default_ckpt()
    write_zip(d, man, files)
    b = bytearray(read_bytes(d))
    b[-2:] = b"\x03\x00"
    b += b"abc"
    write_bytes(d, bytes(b))


@case("IntegrityError", "zip")
def zip_crc(d):
    man, files = default_ckpt()
    def tw(name, h):
        if name == "components/blob/a/b.txt":
            h["crc"] ^= 1
    write_zip(d, man, files, tweak=tw)


@case("NotACheckpoint", "zip")
def zip_prefix(d):
    man, files = default_ckpt()
    write_zip(d, man, files)
    b = read_bytes(d)
    write_bytes(d, b"X" + b)


@case("ArchiveError", "zip")
def zip_names_differ(d):
    man, files = default_ckpt()
    def tw(name, h):
        if name == "components/blob/a/b.txt":
            h["lname"] = b"components/blob/a/c.txt"
    write_zip(d, man, files, tweak=tw)


@case("UnsafePath", "zip")
def zip_bad_name(d):
    man, files = default_ckpt()
    files["../evil"] = b"x"
    write_zip(d, man, files)


@case("ExtraFile", "zip")
def zip_extra(d):
    man, files = default_ckpt()
    files["evil"] = b"x"
    write_zip(d, man, files)
