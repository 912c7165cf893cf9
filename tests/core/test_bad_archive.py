"""Bad ZIP archives (spec §3.3, R-ZIP-1 .. R-ZIP-23): one broken rule per row.

Archives are built from a valid directory checkpoint by ``build_zip``, with
one field overridden; everything else (manifest, checksums) stays valid.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ckpt_helpers import Member, build_zip, expect_rejected, make_checkpoint, members_of

from opencheckpoint import (
    ArchiveError,
    Checkpoint,
    IntegrityError,
    LimitExceeded,
    NotACheckpoint,
    UnsafePath,
    read_component,
    validate,
)

DATA = 0  # index of components/cfg/value.json (sorted first)


def first(change: Callable[[Member], Any]) -> Callable[[list[Member]], None]:
    return lambda members: change(members[DATA])


def deflate(member: Member) -> None:
    member.method = 8
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    member.stored = compressor.compress(member.data) + compressor.flush()


def setattrs(**values: Any) -> Callable[[Member], None]:
    def change(member: Member) -> None:
        for key, value in values.items():
            setattr(member, key, value)
    return change


def duplicate(members: list[Member]) -> None:
    members.insert(1, Member(members[DATA].name, members[DATA].data))


def directory_entry(members: list[Member]) -> None:
    members.insert(0, Member(b"components/", b""))


def manifest_first(members: list[Member]) -> None:
    members.insert(0, members.pop())


# (id, mutate members, build_zip options, error, section)
CASES: list[tuple[str, Callable[[list[Member]], None] | None, dict[str, Any], type, str]] = [
    ("prefix", None, {"prefix": b"#!/bin/sh\n"}, NotACheckpoint, "R-ZIP-1"),
    ("comment", None, {"comment": b"hello"}, ArchiveError, "R-ZIP-2"),
    ("trailing-bytes", None, {"trailing": b"\x00" * 7}, ArchiveError, "R-ZIP-2"),
    ("disk-number", None, {"eocd_disk": 1}, ArchiveError, "R-ZIP-3"),
    ("member-disk", first(setattrs(disk=2)), {}, ArchiveError, "R-ZIP-3"),
    ("entry-count", None, {"eocd_total": 3}, ArchiveError, "R-ZIP-4"),
    ("entry-count-zip64-marker", None, {"eocd_total": 0xFFFF}, ArchiveError, "R-ZIP-15"),
    ("compressed", first(deflate), {}, ArchiveError, "R-ZIP-5"),
    ("csize-differs", first(setattrs(csize=3)), {}, ArchiveError, "R-ZIP-6"),
    ("encrypted", first(setattrs(flags=0x1)), {}, ArchiveError, "R-ZIP-7"),
    ("data-descriptor", first(setattrs(flags=0x8)), {}, ArchiveError, "R-ZIP-8"),
    ("data-descriptor-local-only", first(setattrs(local_flags=0x8)), {}, ArchiveError, "R-ZIP-8"),
    ("strong-encryption", first(setattrs(flags=0x40)), {}, ArchiveError, "R-ZIP-9"),
    ("masked-header", first(setattrs(flags=0x2000)), {}, ArchiveError, "R-ZIP-9"),
    ("directory-entry", directory_entry, {}, ArchiveError, "R-ZIP-10"),
    ("duplicate-name", duplicate, {}, ArchiveError, "R-ZIP-11"),
    ("local-name-differs", first(setattrs(local_name=b"components/cfg/VALUE.json")), {}, ArchiveError,
     "R-ZIP-12"),
    ("local-crc-differs", first(setattrs(local_crc=1)), {}, ArchiveError, "R-ZIP-13"),
    ("local-size-differs", first(setattrs(local_size=1)), {}, ArchiveError, "R-ZIP-14"),
    ("zip64-marker-without-extra", first(setattrs(local_size=0xFFFFFFFF)), {}, ArchiveError, "R-ZIP-15"),
    ("unicode-path-extra", first(setattrs(extra_central=struct.pack("<HHB", 0x7075, 1, 1))), {}, ArchiveError,
     "R-ZIP-16"),
    ("unicode-path-extra-local", first(setattrs(extra_local=struct.pack("<HHB", 0x7075, 1, 1))), {},
     ArchiveError, "R-ZIP-16"),
    ("symlink-attributes", first(setattrs(external=0o120777 << 16)), {}, UnsafePath, "R-ZIP-17"),
    ("directory-attributes", first(setattrs(external=0o040755 << 16)), {}, UnsafePath, "R-ZIP-17"),
    ("misaligned", first(setattrs(misalign=1)), {}, ArchiveError, "R-ZIP-18"),
    ("gap-between-members", lambda m: setattr(m[1], "gap_before", 64), {}, ArchiveError, "R-ZIP-19"),
    ("central-order-differs", None, {"order": [1, 0, 2, 3]}, ArchiveError, "R-ZIP-19"),
    ("gap-before-central-directory", None, {"cd_gap": 64}, ArchiveError, "R-ZIP-20"),
    ("manifest-not-last", manifest_first, {}, ArchiveError, "R-ZIP-21"),
    ("name-backslash", first(setattrs(name=b"components\\cfg", local_name=b"components\\cfg")), {}, UnsafePath,
     "R-PATH-5"),
    ("name-absolute", first(setattrs(name=b"/etc/x", local_name=b"/etc/x")), {}, UnsafePath, "R-PATH-5"),
    ("name-dotdot", first(setattrs(name=b"../x", local_name=b"../x")), {}, UnsafePath, "R-PATH-5"),
    ("name-non-ascii", first(setattrs(name="caf\u00e9".encode(), local_name="caf\u00e9".encode())), {},
     UnsafePath, "R-PATH-5"),
    ("name-segment-129", first(setattrs(name=b"c" * 129, local_name=b"c" * 129)), {}, LimitExceeded, "R-LIM-8"),
]


def _archive(tmp_path: Path, mutate: Callable[[list[Member]], None] | None, options: dict[str, Any]) -> Path:
    path = make_checkpoint(tmp_path)
    members = members_of(path)
    assert members[DATA].name == b"components/cfg/value.json" and members[-1].name == b"manifest.json"
    if mutate is not None:
        mutate(members)
    target = tmp_path / "bad.ocz"
    target.write_bytes(build_zip(members, **options))
    return target


@pytest.mark.parametrize(("mutate", "options", "error", "section"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_archive(tmp_path: Path, mutate: Callable[[list[Member]], None] | None, options: dict[str, Any],
                     error: type, section: str) -> None:
    failure = expect_rejected(_archive(tmp_path, mutate, options), error, section)
    assert failure is not None and failure.field, failure


def test_builder_output_is_valid(tmp_path: Path) -> None:
    target = _archive(tmp_path, None, {})
    assert validate(target).ok
    assert read_component(target, "cfg") == {"lr": 0.001, "name": "run"}


def test_archive_without_manifest(tmp_path: Path) -> None:
    target = _archive(tmp_path, lambda members: members.pop(), {})
    expect_rejected(target, NotACheckpoint, "R-CON-1")


def test_wrong_zip_crc_is_found_by_validate(tmp_path: Path) -> None:
    target = _archive(tmp_path, first(setattrs(crc=12345)), {})
    assert read_component(target, "cfg") == {"lr": 0.001, "name": "run"}  # loading checks CRC-32C, not ZIP CRC
    assert [(i.error, i.rule) for i in validate(target).errors] == [("IntegrityError", "R-ZIP-22")]


def test_unknown_extra_fields_are_ignored(tmp_path: Path) -> None:
    target = _archive(tmp_path, first(setattrs(extra_central=struct.pack("<HH", 0xCAFE, 2) + b"zz",
                                               extra_local=struct.pack("<HH", 0xBEEF, 1) + b"z")), {})
    assert validate(target).ok


def test_unix_attributes_zero_type_accepted(tmp_path: Path) -> None:
    target = _archive(tmp_path, first(setattrs(external=0o644 << 16)), {})
    assert validate(target).ok


def test_writer_archives_validate(tmp_path: Path) -> None:
    target = Checkpoint(a={"x": [1, 2]}, b={"lr": 1e-3}, format="archive", durable=False).save(tmp_path / "w.ocz")
    assert validate(target).ok


def test_truncated_archive(tmp_path: Path) -> None:
    target = _archive(tmp_path, None, {})
    target.write_bytes(target.read_bytes()[:-1])
    expect_rejected(target, ArchiveError, "R-ZIP-2")


@pytest.mark.parametrize("which", ["data", "tree"])
def test_flip_member_data(tmp_path: Path, which: str) -> None:
    target = _archive(tmp_path, None, {})
    members = members_of(tmp_path / "ckpt")
    data = bytearray(target.read_bytes())
    rel = b"components/model/data.bin" if which == "data" else b"components/model/tree.msgpack"
    at = data.index(rel + b"\x35\xd9")  # name followed by the alignment extra field id
    start = at + len(rel)
    length = struct.unpack_from("<H", data, start + 2)[0]
    data[start + 4 + length] ^= 0x01
    target.write_bytes(bytes(data))
    del members
    if which == "data":
        expect_rejected(target, IntegrityError, "R-ARR-14")
    else:
        expect_rejected(target, IntegrityError, "R-CHK-7")
