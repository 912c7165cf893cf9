"""Bad tree documents (spec §8, step 14) and bad array layouts (§9, step 15), directory and archive form.

Each row replaces the ``model`` component's ``tree.msgpack`` (and ``data.bin``)
and updates the manifest entries, so sizes and checksums are right and only
the intended rule breaks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from ckpt_helpers import MARK, array_node, crc_int, expect_rejected, forms, make_checkpoint, set_tree

import opencheckpoint.rules.tree as tree_rules
import opencheckpoint.tree.ctree as ctree_module
import opencheckpoint.tree.exact as exact_module
import opencheckpoint.tree.fast as fast_module
from opencheckpoint import (
    ArrayLayoutError,
    LimitExceeded,
    TreeError,
    UnknownDtype,
    read_component,
    validate,
)

FORMS = ["directory", "archive"]
D8 = bytes(range(8))
F32 = np.array([1.0, 2.0], "<f4").tobytes()


def packed(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def arr(dtype: str = "float32", shape: list[int] | None = None, offset: int = 0, nbytes: int = 8,
        data: bytes = F32) -> list[Any]:
    return array_node(dtype, [2] if shape is None else shape, offset, nbytes, crc_int(data[offset:offset + nbytes]))


def nest(depth: int, leaf: Any = 0) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


# (id, root or raw bytes, data.bin or None, error, section)
TREE_CASES: list[tuple[str, Any, bytes | None, type, str]] = [
    ("empty-document", b"", None, TreeError, "R-TREE-1"),
    ("truncated-array", b"\x93\x01\x02", None, TreeError, "R-TREE-1"),
    ("truncated-str", b"\xa5ab", None, TreeError, "R-TREE-1"),
    # Limits apply to declared counts before truncation (§8.8, R-LIM-11 before R-TREE-1).
    ("absurd-array-count", b"\xdd\xff\xff\xff\xff\x00", None, LimitExceeded, "R-LIM-11"),
    ("absurd-map-count", b"\xdf\xff\xff\xff\xff\x00\x00", None, LimitExceeded, "R-LIM-11"),
    ("declared-count-past-end", b"\xdc\x00\x05\x01", None, TreeError, "R-TREE-1"),
    ("trailing-bytes", packed({"a": 1}) + b"\xc0", None, TreeError, "R-TREE-2"),
    ("two-roots", packed(1) + packed(2), None, TreeError, "R-TREE-2"),
    ("byte-c1", b"\x91\xc1", None, TreeError, "R-TREE-3"),
    ("fixext", packed([msgpack.ExtType(1, b"x")]), None, TreeError, "R-TREE-13"),
    ("ext8-payload", b"\x92\xc7\x01\x01x\x01", None, TreeError, "R-TREE-13"),
    ("ext16-marker", b"\x92\xc8\x00\x00\x01\x01", None, TreeError, "R-TREE-13"),
    ("ext32-marker", b"\x92\xc9\x00\x00\x00\x00\x01\x01", None, TreeError, "R-TREE-13"),
    ("tag-zero", b"\x92\xc7\x00\x00\x01", None, TreeError, "R-TREE-14"),
    ("tag-negative", b"\x92\xc7\x00\xff\x01", None, TreeError, "R-TREE-14"),
    ("marker-not-first", [1, MARK[1]], None, TreeError, "R-TREE-15"),
    ("marker-root", MARK[1], None, TreeError, "R-TREE-15"),
    ("marker-map-value", {"a": MARK[1]}, None, TreeError, "R-TREE-15"),
    ("marker-map-key", b"\x81\xc7\x00\x01\x01", None, TreeError, "R-TREE-15"),
    ("invalid-utf8", b"\xa2\xff\xfe", None, TreeError, "R-TREE-9"),
    ("invalid-utf8-key", b"\x81\xa1\xff\x01", None, TreeError, "R-TREE-9"),
    ("float-key", {1.5: 1}, None, TreeError, "R-TREE-10"),
    ("bin-key", {b"k": 1}, None, TreeError, "R-TREE-10"),
    ("nil-key", b"\x81\xc0\x01", None, TreeError, "R-TREE-10"),
    ("duplicate-str-key", b"\x82\xa1a\x01\xa1a\x02", None, TreeError, "R-TREE-11"),
    ("duplicate-int-key-widths", b"\x82\x01\x01\xcd\x00\x01\x02", None, TreeError, "R-TREE-11"),
    ("wrong-field-count", [MARK[4], 1.0], None, TreeError, "R-TREE-16"),
    ("array-too-few-fields", [MARK[6], "float32", [2], 0, 8], F32, TreeError, "R-TREE-16"),
    ("complex-int-field", [MARK[4], 1, 2.0], None, TreeError, "R-TREE-17"),
    ("named-tuple-name-int", [MARK[2], 1, {"a": 1}], None, TreeError, "R-TREE-17"),
    ("named-tuple-fields-list", [MARK[2], "P", [1]], None, TreeError, "R-TREE-17"),
    ("big-int-str", [MARK[3], "12"], None, TreeError, "R-TREE-17"),
    ("dtype-node-int", [MARK[8], 5], None, TreeError, "R-TREE-17"),
    ("scalar-raw-str", [MARK[5], "int8", "x"], None, TreeError, "R-TREE-17"),
    ("array-dtype-int", [MARK[6], 1, [2], 0, 8, 0], F32, TreeError, "R-TREE-17"),
    ("prng-data-list", [MARK[7], "threefry2x32", [1, 2]], None, TreeError, "R-TREE-17"),
    ("tag-reserved-9", [MARK[9], 1], None, TreeError, "R-TREE-18"),
    ("tag-reserved-63", [MARK[63]], None, TreeError, "R-TREE-18"),
    ("tag-extension-64", [MARK[64], 1], None, TreeError, "R-TREE-19"),
    ("named-tuple-int-key", [MARK[2], "P", {1: 2}], None, TreeError, "R-TREE-20"),
    ("big-int-non-minimal", [MARK[3], bytes(8) + b"\x01\x00"], None, TreeError, "R-TREE-21"),
    ("big-int-non-minimal-negative", [MARK[3], b"\xff" * 8 + b"\x7f\xff\xff"], None, TreeError, "R-TREE-21"),
    ("big-int-empty", [MARK[3], b""], None, TreeError, "R-TREE-21"),
    ("big-int-in-range", [MARK[3], b"\x05"], None, TreeError, "R-TREE-22"),
    ("big-int-uint64-max", [MARK[3], b"\xff" * 8 + b"\x00"], None, TreeError, "R-TREE-22"),
    ("scalar-length", [MARK[5], "float32", b"\x00\x00"], None, TreeError, "R-TREE-23"),
    ("scalar-bool-byte", [MARK[5], "bool", b"\x02"], None, TreeError, "R-TREE-24"),
    ("prng-impl-bad", [MARK[7], "Threefry", arr("uint32", [2], 0, 8, D8)], D8, TreeError, "R-TREE-25"),
    ("prng-impl-unnamespaced", [MARK[7], "philox", arr("uint32", [2], 0, 8, D8)], D8, TreeError, "R-TREE-25"),
    ("prng-dtype", [MARK[7], "threefry2x32", arr("int32", [2], 0, 8, D8)], D8, TreeError, "R-TREE-26"),
    ("prng-threefry-shape", [MARK[7], "threefry2x32", arr("uint32", [2, 1], 0, 8, D8)], D8, TreeError,
     "R-TREE-27"),
    ("prng-threefry-scalar", [MARK[7], "threefry2x32", arr("uint32", [], 0, 4, D8)], D8[:4], TreeError,
     "R-TREE-27"),
    ("prng-rbg-shape", [MARK[7], "rbg", arr("uint32", [2], 0, 8, D8)], D8, TreeError, "R-TREE-28"),
    ("shape-not-array", [MARK[6], "float32", 2, 0, 8, 0], F32, TreeError, "R-ARR-1"),
    ("shape-tuple", [MARK[6], "float32", [MARK[1], 2], 0, 8, 0], F32, TreeError, "R-ARR-1"),
    ("shape-negative", [MARK[6], "float32", [-2], 0, 8, 0], F32, TreeError, "R-ARR-1"),
    ("shape-float", [MARK[6], "float32", [2.0], 0, 8, 0], F32, TreeError, "R-ARR-1"),
    ("offset-negative", [MARK[6], "float32", [2], -64, 8, 0], F32, TreeError, "R-ARR-2"),
    ("nbytes-string", [MARK[6], "float32", [2], 0, "8", 0], F32, TreeError, "R-ARR-2"),
    ("crc-too-big", [MARK[6], "float32", [2], 0, 8, 2**32], F32, TreeError, "R-ARR-3"),
    ("unknown-dtype-array", arr("float128"), F32, UnknownDtype, "R-DT-1"),
    ("unknown-dtype-case", arr("Float32"), F32, UnknownDtype, "R-DT-1"),
    ("unknown-dtype-scalar", [MARK[5], "int4", b"\x00"], None, UnknownDtype, "R-DT-1"),
    ("unknown-dtype-node", [MARK[8], "object"], None, UnknownDtype, "R-DT-1"),
    ("unknown-dtype-prng", [MARK[7], "threefry2x32", arr("u32", [2], 0, 8, D8)], D8, UnknownDtype, "R-DT-1"),
    ("too-deep-lists", nest(129), None, LimitExceeded, "R-LIM-10"),
    ("too-deep-shape", nest(127, arr()), F32, LimitExceeded, "R-LIM-10"),
    ("too-deep-named-tuple-map", nest(126, [MARK[2], "P", {"a": [1]}]), None, LimitExceeded, "R-LIM-10"),
    ("str-too-long", b"\xdb\x10\x00\x00\x01", None, LimitExceeded, "R-LIM-12"),
    ("bin-too-long", b"\xc6\x10\x00\x00\x01", None, LimitExceeded, "R-LIM-12"),
    # step 15: array layout
    ("ndim-65", arr(shape=[1] * 65, nbytes=4), F32[:4], LimitExceeded, "R-LIM-13"),
    ("dim-2-63", arr(shape=[2**63, 0], nbytes=0, data=b""), b"", LimitExceeded, "R-LIM-14"),
    ("shape-product-overflow", arr(shape=[2**62, 4, 0], nbytes=0, data=b""), b"", LimitExceeded, "R-LIM-15"),
    ("shape-times-itemsize-overflow", arr(shape=[2**61], nbytes=0, data=b""), b"", LimitExceeded, "R-LIM-15"),
    ("nbytes-2-63", [MARK[6], "uint8", [0], 0, 2**63, 0], b"", LimitExceeded, "R-LIM-16"),
    ("nbytes-disagrees", arr(shape=[3], nbytes=8), F32, ArrayLayoutError, "R-ARR-4"),
    ("nbytes-disagrees-itemsize", arr("float64", shape=[2], nbytes=8), F32, ArrayLayoutError, "R-ARR-4"),
    ("misaligned", arr(offset=8, data=bytes(8) + F32), bytes(8) + F32, ArrayLayoutError, "R-ARR-5"),
    ("empty-offset", [MARK[6], "float32", [0], 64, 0, 0], b"", ArrayLayoutError, "R-ARR-6"),
    ("empty-crc", [MARK[6], "float32", [0], 0, 0, 5], b"", ArrayLayoutError, "R-ARR-7"),
    ("out-of-bounds", arr(shape=[4], nbytes=16, data=F32 * 2), F32, ArrayLayoutError, "R-ARR-8"),
    ("out-of-bounds-offset", arr(offset=2**62, data=F32), F32, ArrayLayoutError, "R-ARR-8"),
    ("partial-overlap", [arr("float32", [32], 0, 128, bytes(192)), arr("float32", [32], 64, 128, bytes(192))],
     bytes(192), ArrayLayoutError, "R-ARR-9"),
    ("overlap-inside", [arr("uint8", [192], 0, 192, bytes(192)), arr("uint8", [64], 64, 64, bytes(192))],
     bytes(192), ArrayLayoutError, "R-ARR-9"),
    ("alias-crc-differs", [arr(), array_node("float32", [2], 0, 8, 1)], F32, ArrayLayoutError, "R-ARR-10"),
    ("data-longer-than-extents", arr(), F32 + bytes(64), ArrayLayoutError, "R-ARR-11"),
    ("data-without-arrays", {"a": 1}, bytes(64), ArrayLayoutError, "R-ARR-11"),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("root", "data", "error", "section"), [c[1:] for c in TREE_CASES],
                         ids=[c[0] for c in TREE_CASES])
def test_bad_tree(tmp_path: Path, form: str, root: Any, data: bytes | None, error: type, section: str) -> None:
    path = make_checkpoint(tmp_path)
    set_tree(path, root, b"" if data is None else data)
    failure = expect_rejected(forms(path, form), error, section)
    assert failure is not None and failure.file == "components/model/tree.msgpack" and failure.field


ACCEPTED: list[tuple[str, Any, bytes]] = [
    ("depth-128-lists", nest(128), b""),
    ("depth-128-shape", nest(126, arr()), F32),
    ("str8-short-string", b"\xd9\x03abc", b""),
    ("wide-int", b"\xcf\x00\x00\x00\x00\x00\x00\x00\x07", b""),
    ("map16", b"\xde\x00\x01\xa1a\x01", b""),
    ("int-and-str-keys", {1: "int", "1": "str"}, b""),
    ("float32", b"\xca\x3f\xc0\x00\x00", b""),
    ("alias", [arr(), arr("int32")], F32),
    ("empty-arrays-do-not-alias", [[MARK[6], "float32", [0], 0, 0, 0], [MARK[6], "int8", [0, 5], 0, 0, 0]], b""),
    ("big-int", [MARK[3], bytes(8) + b"\x01"], b""),
    ("prng-namespaced", [MARK[7], "com.example/philox", arr("uint32", [3], 0, 12, D8 + D8[:4])], D8 + D8[:4]),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("root", "data"), [c[1:] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_accepted_tree(tmp_path: Path, form: str, root: Any, data: bytes) -> None:
    path = make_checkpoint(tmp_path)
    set_tree(path, root, data)
    target = forms(path, form)
    assert validate(target).ok, validate(target).errors
    read_component(target, "model")


def test_alias_restores_one_object(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path)
    set_tree(path, {"a": arr(), "b": arr()}, F32)
    value = read_component(path, "model")
    assert value["a"] is value["b"]
    assert value["a"].tolist() == [1.0, 2.0]


def test_float32_nan_payload_is_not_quieted(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path)
    set_tree(path, b"\xca\xff\x80\x00\x01", b"")  # negative signalling NaN, payload 1
    value = read_component(path, "model")
    bits = np.array([value], dtype=np.float64).view(np.uint64)[0]
    assert int(bits) == (1 << 63) | (0x7FF << 52) | (1 << 29)


def test_bool_array_bytes(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path)
    set_tree(path, arr("bool", [2], 0, 2, b"\x01\x02"), b"\x01\x02")
    expect_rejected(path, ArrayLayoutError, "R-ARR-13")


def test_node_count_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 10,000,001 nodes take seconds to build; the limit is a constant, so the check is exercised at 100.
    monkeypatch.setattr(exact_module, "TREE_MAX_NODES", 100)
    monkeypatch.setattr(fast_module, "TREE_MAX_NODES", 100)
    monkeypatch.setattr(ctree_module, "TREE_MAX_NODES", 100)  # the compiled fast path's bound, also inline
    monkeypatch.setattr(tree_rules, "TREE_MAX_NODES", 100)  # the rule's check (the parsers test the bound inline)
    path = make_checkpoint(tmp_path)
    set_tree(path, [0] * 99, b"")  # 100 objects: accepted
    assert validate(path).ok
    set_tree(path, [0] * 100, b"")
    expect_rejected(path, LimitExceeded, "R-LIM-11")


def test_layout_errors_name_the_array(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path)
    set_tree(path, {"ok": arr(), "bad": arr(offset=8, data=bytes(8) + F32)}, F32)
    error = expect_rejected(path, ArrayLayoutError, "R-ARR-5")
    assert error is not None and error.field == "$.bad"
