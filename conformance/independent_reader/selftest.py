"""Self-tests: a tiny independent writer + mutations, each expecting one error class.
Run:  ../../.venv/bin/python selftest.py   (format version 1 here and in selftest_zip.py, version 2 in selftest_v2.py)
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import selftest_v2  # noqa: F401  (registers the format version 2 cases)
import selftest_zip  # noqa: F401  (registers the archive cases)
from stkit import (
    CASES,
    M,
    base_manifest,
    case,
    crc32c,
    crc32c_hex,
    default_ckpt,
    json_component,
    manifest_bytes,
    pk,
    run,
    tree_only,
    write_dir,
    write_zip,
)


# ---------------------------------------------------------------- cases
@case("OK")
def valid_default(d):
    man, files = default_ckpt()
    write_dir(d, man, files)


@case("OK", "zip")
def valid_zip(d):
    man, files = default_ckpt()
    write_zip(d, man, files)


@case("OK")
def unknown_kind(d):
    man, files = default_ckpt()
    b = b"xyz"
    man["components"]["ext"] = {"kind": "com.example/thing", "kind_version": 9, "path": "x",
                                "files": {"y": {"size": 3, "crc32c": crc32c_hex(b)}}}
    files["x/y"] = b
    write_dir(d, man, files)


@case("OK")
def ext_not_must(d):
    man, files = default_ckpt()
    man["extensions"] = {"org.opencheckpoint.sharding": {"version": 1, "must_understand": False, "data": None}}
    write_dir(d, man, files)


@case("UnsupportedExtension")
def ext_must(d):
    man, files = default_ckpt()
    man["extensions"] = {"com.example.x": {"version": 1, "must_understand": True, "data": None}}
    write_dir(d, man, files)


@case("NotACheckpoint")
def no_manifest(d):
    man, files = default_ckpt()
    write_dir(d, man, files)
    os.remove(os.path.join(d, "manifest.json"))


@case("UnsafePath")
def manifest_symlink(d):
    man, files = default_ckpt()
    write_dir(d, man, files)
    os.rename(os.path.join(d, "manifest.json"), os.path.join(d, "m2"))
    os.symlink("m2", os.path.join(d, "manifest.json"))


@case("ExtraFile")
def extra_file(d):
    man, files = default_ckpt()
    files["junk"] = b"x"
    write_dir(d, man, files)


@case("UnsafePath")
def symlink_file(d):
    man, files = default_ckpt()
    write_dir(d, man, files)
    os.symlink("manifest.json", os.path.join(d, "lnk"))


@case("MissingFile")
def missing(d):
    man, files = default_ckpt()
    del files["components/blob/a/b.txt"]
    write_dir(d, man, files)


@case("OK")
def empty_dir_ignored(d):
    man, files = default_ckpt()
    write_dir(d, man, files)
    os.makedirs(os.path.join(d, "e/f"))


@case("IntegrityError")
def bad_manifest_crc(d):
    man, files = default_ckpt()
    raw = bytearray(manifest_bytes(man))
    raw[-12] = ord("0") if raw[-12] != ord("0") else ord("1")
    write_dir(d, man, files, bytes(raw))


@case("ManifestError")
def no_suffix(d):
    man, files = default_ckpt()
    write_dir(d, man, files, json.dumps({**man, "manifest_crc32c": "00000000"}).encode())


@case("NotACheckpoint")
def wrong_format(d):
    man, files = default_ckpt()
    man["format"] = "other"
    write_dir(d, man, files)


@case("UnsupportedVersion")
def fv2(d):
    man, files = default_ckpt()
    man["format_version"] = 2
    write_dir(d, man, files)


@case("ManifestError")
def fv0(d):
    man, files = default_ckpt()
    man["format_version"] = 0
    write_dir(d, man, files)


@case("ManifestError")
def kind_version_float(d):
    man, files = default_ckpt()
    raw = manifest_bytes(man).replace(b'"kind_version": 1', b'"kind_version": 1.0', 1)
    head = raw[:-32]
    raw = head + f'"manifest_crc32c": "{crc32c_hex(head)}"\n}}\n'.encode()
    write_dir(d, man, files, raw)


@case("ManifestError")
def dup_key(d):
    man, files = default_ckpt()
    raw = manifest_bytes(man).replace(b'"metadata": {}', b'"metadata": {"a":1,"a":2}', 1)
    head = raw[:-32]
    raw = head + f'"manifest_crc32c": "{crc32c_hex(head)}"\n}}\n'.encode()
    write_dir(d, man, files, raw)


@case("LimitExceeded")
def big_int_json(d):
    man, files = default_ckpt()
    man["metadata"] = {"x": 2**53}
    write_dir(d, man, files)


@case("ManifestError")
def bad_date(d):
    man, files = default_ckpt()
    man["created_at"] = "2025-02-29T00:00:00Z"
    write_dir(d, man, files)


@case("ManifestError")
def extra_top(d):
    man, files = default_ckpt()
    man["zzz"] = 1
    write_dir(d, man, files)


@case("UnsafePath")
def dotdot(d):
    man, files = default_ckpt()
    man["components"]["blob"]["path"] = "components/../blob"
    write_dir(d, man, files)


@case("LimitExceeded")
def long_segment(d):
    man, files = default_ckpt()
    man["components"]["blob"]["path"] = "a" * 129
    write_dir(d, man, files)


@case("UnsafePath")
def case_conflict(d):
    man, files = default_ckpt()
    man["components"]["blob"]["files"]["A/B.txt"] = man["components"]["blob"]["files"]["a/b.txt"]
    write_dir(d, man, files)


@case("IntegrityError")
def size_mismatch(d):
    man, files = default_ckpt()
    files["components/blob/a/b.txt"] += b"!"
    write_dir(d, man, files)


@case("IntegrityError")
def crc_mismatch(d):
    man, files = default_ckpt()
    files["components/blob/a/b.txt"] = b"opaque bytez"
    write_dir(d, man, files)


@case("UnsupportedVersion")
def tree_kv2(d):
    man, files = default_ckpt()
    man["components"]["model"]["kind_version"] = 2
    write_dir(d, man, files)


@case("TreeError")
def trailing(d):
    man, files = tree_only(pk(1) + b"\x00")
    write_dir(d, man, files)


@case("TreeError")
def ext_bad(d):
    man, files = tree_only(b"\x92\xc7\x01\x01\x00\x01")
    write_dir(d, man, files)


@case("TreeError")
def reserved_tag(d):
    man, files = tree_only(pk([M(9)]))
    write_dir(d, man, files)


@case("TreeError")
def dup_int_key(d):
    man, files = tree_only(b"\x82\x01\xc0\xcc\x01\xc0")
    write_dir(d, man, files)


@case("OK")
def str_int_keys(d):
    man, files = tree_only(b"\x82\x01\xc0\xa1\x31\xc0")
    write_dir(d, man, files)


@case("TreeError")
def bigint_small(d):
    man, files = tree_only(pk([M(3), b"\x05"]))
    write_dir(d, man, files)


@case("TreeError")
def bigint_nonminimal(d):
    man, files = tree_only(pk([M(3), (2**64).to_bytes(10, "little")]))
    write_dir(d, man, files)


@case("UnknownDtype")
def bad_dtype(d):
    man, files = tree_only(pk([M(8), "float33"]))
    write_dir(d, man, files)


@case("TreeError")
def prng_bad_dtype(d):
    man, files = tree_only(pk([M(7), "threefry2x32", [M(6), "int32", [2], 0, 0, 0]]))
    write_dir(d, man, files)


@case("LimitExceeded")
def deep_tree(d):
    man, files = tree_only(b"\x91" * 129 + b"\xc0")
    write_dir(d, man, files)


@case("OK")
def deep_tree_ok(d):
    man, files = tree_only(b"\x91" * 128 + b"\xc0")
    write_dir(d, man, files)


@case("LimitExceeded")
def huge_str(d):
    man, files = tree_only(b"\xdb\x10\x00\x00\x01")
    write_dir(d, man, files)


@case("TreeError")
def truncated_str(d):
    man, files = tree_only(b"\xdb\x00\x00\x00\x10ab")
    write_dir(d, man, files)


@case("ArrayLayoutError")
def nbytes_wrong(d):
    data = b"\0" * 8
    man, files = tree_only([M(6), "float32", [3], 0, 8, crc32c(data)], data)
    write_dir(d, man, files)


@case("ArrayLayoutError")
def unaligned(d):
    data = b"\0" * 72
    man, files = tree_only([M(6), "uint8", [8], 8, 8, crc32c(data[8:16])], data[:16])
    write_dir(d, man, files)


@case("ArrayLayoutError")
def padding_nonzero(d):
    data = b"\1" * 4 + b"\0" * 60 + b"\2" * 4
    data2 = b"\1" * 4 + b"\0" * 59 + b"\x07" + b"\2" * 4
    t = {"a": [M(6), "uint8", [4], 0, 4, crc32c(data[:4])], "b": [M(6), "uint8", [4], 64, 4, crc32c(data[64:])]}
    man, files = tree_only(t, data2)
    write_dir(d, man, files)


@case("ArrayLayoutError")
def bool_bad(d):
    data = b"\x02"
    man, files = tree_only([M(6), "bool", [1], 0, 1, crc32c(data)], data)
    write_dir(d, man, files)


@case("IntegrityError")
def array_crc(d):
    data = b"\x02"
    man, files = tree_only([M(6), "uint8", [1], 0, 1, 5], data)
    write_dir(d, man, files)


@case("ArrayLayoutError")
def overlap(d):
    data = bytes(range(128))
    t = [[M(6), "uint8", [100], 0, 100, crc32c(data[:100])], [M(6), "uint8", [64], 64, 64, crc32c(data[64:])]]
    man, files = tree_only(t, data)
    write_dir(d, man, files)


@case("OK")
def alias(d):
    data = bytes(range(8))
    t = [[M(6), "uint8", [8], 0, 8, crc32c(data)], [M(6), "int16", [2, 2], 0, 8, crc32c(data)]]
    man, files = tree_only(t, data)
    write_dir(d, man, files)


@case("LimitExceeded")
def lim15(d):
    man, files = tree_only([M(6), "uint8", [2**62, 4, 0], 0, 0, 0])
    write_dir(d, man, files)


@case("ArrayLayoutError")
def datasize_too_big(d):
    data = b"\1" * 4 + b"\0" * 4
    man, files = tree_only([M(6), "uint8", [4], 0, 4, crc32c(data[:4])], data)
    write_dir(d, man, files)


@case("ManifestError")
def value_json_bad(d):
    rec, files = json_component(b'{"a": NaN}')
    write_dir(d, base_manifest({"c": rec}), files)


@case("OK")
def value_json_scalar(d):
    rec, files = json_component(b'  -0  ')
    write_dir(d, base_manifest({"c": rec}), files)


@case("NotACheckpoint")
def staging_name(d):
    man, files = default_ckpt()
    write_dir(d, man, files)
    staged = os.path.join(os.path.dirname(d), ".x.oc-staging-1-abcdefgh")
    return staged if os.rename(d, staged) is None else None


@case("OK")
def old_fallback(d):
    man, files = default_ckpt()
    old = os.path.join(os.path.dirname(d), "." + os.path.basename(d) + ".oc-old-abc")
    write_dir(old, man, files)


@case("NotACheckpoint")
def old_fallback_two(d):
    man, files = default_ckpt()
    for s in ("abc", "def"):
        write_dir(os.path.join(os.path.dirname(d), "." + os.path.basename(d) + ".oc-old-" + s), man, files)


@case("OK", "zip")
def zip64_ok(d):
    man, files = default_ckpt()
    write_zip(d, man, files, zip64=True)


@case("OK")
def f32_nan(d):
    man, files = tree_only(b"\x92\xca\xff\x80\x00\x01\xca\x3f\xc0\x00\x00")
    write_dir(d, man, files)
    return None


# zip defects


def main():
    tmp = tempfile.mkdtemp(prefix="oc-selftest-")
    fails = 0
    try:
        for name, expect, form, fn, verify in CASES:
            sub = os.path.join(tmp, name)
            os.makedirs(sub)
            d = os.path.join(sub, "ckpt.zip" if form == "zip" else "ckpt")
            alt = fn(d)
            got, detail = run(alt or d)
            ok = got == expect and (verify is None or got != "OK" or verify(json.loads(detail)))
            fails += not ok
            print(("PASS" if ok else "FAIL"), name, "expected", expect, "got", got, "" if ok else detail[:300])
    finally:
        shutil.rmtree(tmp)
    print(f"{len(CASES) - fails}/{len(CASES)} passed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
