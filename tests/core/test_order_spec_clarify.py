"""Rules pinned by the spec 1.0.0 clarifications (§8.8 declared limits, R-ZIP-25, R-ZIP-22 for the manifest).

Each also fixes where in the validation order (§15) the rule is checked:
R-LIM-11 on declared counts before R-TREE-1 (step 14), R-ZIP-25 of central
directory entries in step 2 (before the manifest is parsed) and of local
headers in step 10, R-ZIP-22 of ``manifest.json`` in step 16.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import pytest
from ckpt_helpers import build_zip, expect_rejected, make_checkpoint, members_of, set_tree

from opencheckpoint import ArchiveError, LimitExceeded, TreeError, read_component, validate
from opencheckpoint.conformance.impl import run as protocol
from opencheckpoint.format.limits import TREE_MAX_NODES
from opencheckpoint.tree.decode import decode_tree, exact_decode

DATA = 0  # index of components/cfg/value.json (sorted first)


def protocol_error(path: Path) -> str:
    out, err = io.StringIO(), io.StringIO()
    assert protocol("read", [str(path)], stdout=out, stderr=err) == 1
    return err.getvalue().splitlines()[0]


# -- §8.8: R-LIM-11 counts the objects that headers declare, before truncation (R-TREE-1) ----------------
def array32(length: int) -> bytes:
    return b"\xdd" + struct.pack(">I", length)


def map32(length: int) -> bytes:
    return b"\xdf" + struct.pack(">I", length)


DECLARED = [
    # (id, document, error, requirement)
    ("request-example", bytes.fromhex("dd01312d00c0c0"), LimitExceeded, "R-LIM-11"),
    ("array-at-limit", array32(TREE_MAX_NODES - 1) + b"\xc0", TreeError, "R-TREE-1"),
    ("array-over-limit", array32(TREE_MAX_NODES) + b"\xc0", LimitExceeded, "R-LIM-11"),
    # a map entry is two objects: 1 + 2 * 4,999,999 fits, 1 + 2 * 5,000,000 does not
    ("map-at-limit", map32((TREE_MAX_NODES - 1) // 2) + b"\xa1a", TreeError, "R-TREE-1"),
    ("map-over-limit", map32(TREE_MAX_NODES // 2) + b"\xa1a", LimitExceeded, "R-LIM-11"),
    # objects begun (2) + still declared by the outer array (1) + declared by the inner one
    ("nested-at-limit", b"\x92" + array32(TREE_MAX_NODES - 3) + b"\xc0", TreeError, "R-TREE-1"),
    ("nested-over-limit", b"\x92" + array32(TREE_MAX_NODES - 2) + b"\xc0", LimitExceeded, "R-LIM-11"),
    # a shape array counts like any other
    ("shape-over-limit", b"\x96\xc7\x00\x06\xa7float32" + array32(TREE_MAX_NODES) + b"\x00", LimitExceeded,
     "R-LIM-11"),
]


@pytest.mark.parametrize(("document", "error", "section"), [c[1:] for c in DECLARED], ids=[c[0] for c in DECLARED])
def test_declared_node_count_is_limited_before_truncation(document: bytes, error: type, section: str) -> None:
    for decode in (decode_tree, exact_decode):  # the fast path must defer to the exact parser
        with pytest.raises(error) as info:
            decode(document)
        assert info.value.rule == section, str(info.value)


@pytest.mark.parametrize("form", ["directory", "archive"])
def test_declared_node_count_in_a_sealed_checkpoint(tmp_path: Path, form: str) -> None:
    path = make_checkpoint(tmp_path)
    set_tree(path, bytes.fromhex("dd01312d00c0c0"))
    target = path if form == "directory" else tmp_path / "ckpt.ocz"
    if form == "archive":
        target.write_bytes(build_zip(members_of(path)))
    expect_rejected(target, LimitExceeded, "R-LIM-11")
    assert protocol_error(target).startswith("error: LimitExceeded: ")


def test_complete_documents_count_each_object_once() -> None:
    # a complete document is counted exactly as before: nothing declared is left over
    assert decode_tree(b"\x92\x81\xa1a\x90\x01").root == [{"a": []}, 1]


# -- R-ZIP-25: extra field areas are whole records -------------------------------------------------------
PARTIAL = bytes.fromhex("efbe0200616200")  # a record with 2 bytes of data, then one stray byte
OVERRUN = struct.pack("<HH", 0xBEEF, 10) + b"ab"  # a record whose size runs past the area


@pytest.mark.parametrize("extra", [PARTIAL, OVERRUN], ids=["partial-record", "overrunning-record"])
def test_malformed_local_extra_field_area(tmp_path: Path, extra: bytes) -> None:
    members = members_of(make_checkpoint(tmp_path))
    members[DATA].extra_local = extra
    target = tmp_path / "local.ocz"
    target.write_bytes(build_zip(members))
    error = expect_rejected(target, ArchiveError, "R-ZIP-25", component="cfg")
    assert error is not None and error.file == "components/cfg/value.json" and "local header" in str(error.field)


@pytest.mark.parametrize("extra", [PARTIAL, OVERRUN, b"\x00"], ids=["partial-record", "overrunning-record",
                                                                     "one-byte"])
def test_malformed_central_extra_field_area_fails_in_step_2(tmp_path: Path, extra: bytes) -> None:
    path = make_checkpoint(tmp_path)
    members = members_of(path)
    members[DATA].extra_central = extra
    members[-1].data = members[-1].data.replace(b'"format_version"', b'"format_versio"')  # a step-4/7 defect too
    target = tmp_path / "central.ocz"
    target.write_bytes(build_zip(members))
    with pytest.raises(ArchiveError) as info:
        read_component(target, "cfg")
    assert info.value.rule == "R-ZIP-25"
    assert [(e.error, e.rule) for e in validate(target).errors] == [("ArchiveError", "R-ZIP-25")]


def test_whole_records_of_any_id_are_accepted(tmp_path: Path) -> None:
    members = members_of(make_checkpoint(tmp_path))
    members[DATA].extra_central = bytes(4) + struct.pack("<HH", 0xBEEF, 2) + b"ab"
    members[DATA].extra_local = struct.pack("<HH", 0xCAFE, 0)
    target = tmp_path / "ok.ocz"
    target.write_bytes(build_zip(members))
    assert validate(target).ok
    assert read_component(target, "cfg") == {"lr": 0.001, "name": "run"}


# -- R-ZIP-22 covers manifest.json ----------------------------------------------------------------------
def test_zip_crc32_of_manifest_member_is_checked(tmp_path: Path) -> None:
    members = members_of(make_checkpoint(tmp_path))
    members[-1].crc = zlib.crc32(members[-1].data) ^ 0x1  # local and central agree (R-ZIP-13 holds)
    target = tmp_path / "crc.ocz"
    target.write_bytes(build_zip(members))
    errors = validate(target).errors
    assert [(e.error, e.rule, e.file) for e in errors] == [("IntegrityError", "R-ZIP-22", "manifest.json")]
    assert protocol_error(target).startswith("error: IntegrityError: manifest.json")
    assert validate(tmp_path / "ckpt").ok  # the directory form has no ZIP CRC-32


def test_zip_crc32_of_a_valid_archive_passes(tmp_path: Path) -> None:
    target = tmp_path / "ok.ocz"
    target.write_bytes(build_zip(members_of(make_checkpoint(tmp_path))))
    assert validate(target).ok
