"""Self-tests: a tiny independent writer + mutations, each expecting one error class.
Run:  ../../.venv/bin/python selftest.py
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

import msgpack

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ocrc import crc32c, crc32c_hex  # noqa: E402

RUN = os.path.join(HERE, "run")


def M(t):
    return msgpack.ExtType(t, b"")


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def write_bytes(path, data):
    with open(path, "wb") as f:
        f.write(data)


def pk(o):
    return msgpack.packb(o, use_bin_type=True)


def manifest_bytes(obj):
    text = json.dumps(obj, indent=2, ensure_ascii=False)
    head = (text[:-2] + ",\n  ").encode("utf-8")
    return head + f'"manifest_crc32c": "{crc32c_hex(head)}"\n}}\n'.encode()


def base_manifest(components, extensions=None):
    return {"format": "opencheckpoint", "format_version": 1, "checkpoint_id": "t-1",
            "created_at": "2026-01-01T00:00:00Z", "producer": {"name": "selftest", "version": "1"},
            "metadata": {}, "extensions": extensions or {}, "components": components}


def tree_component(tree_obj, data=b"", path="components/model"):
    tb = pk(tree_obj) if not isinstance(tree_obj, bytes) else tree_obj
    rec = {"kind": "tree", "kind_version": 1, "path": path,
           "files": {"tree.msgpack": {"size": len(tb), "crc32c": crc32c_hex(tb)},
                     "data.bin": {"size": len(data), "crc32c": crc32c_hex(data)}}}
    return rec, {path + "/tree.msgpack": tb, path + "/data.bin": data}


def json_component(raw: bytes, path="components/cfg"):
    rec = {"kind": "json", "kind_version": 1, "path": path,
           "files": {"value.json": {"size": len(raw), "crc32c": crc32c_hex(raw)}}}
    return rec, {path + "/value.json": raw}


def arr(dtype, shape, off, nb, data):
    return [M(6), dtype, shape, off, nb, crc32c(data[off:off + nb]) if nb else 0]


def default_ckpt():
    w = struct.pack("<2f", 1.0, -2.0)
    data = w + b"\0" * 56 + struct.pack("<4?", True, False, True, True)
    tree = {"w": arr("float32", [2], 0, 8, data), "b": arr("bool", [4], 64, 4, data),
            "step": 7, "t": [M(1), 0.5, -0.0], "key": [M(7), "threefry2x32", arr("uint32", [0, 2], 0, 0, data)],
            "big": [M(3), (2**64).to_bytes(9, "little")], "neg": -5, "u": 2**64 - 1,
            "c": [M(4), 1.0, 2.0], "s": [M(5), "float32", struct.pack("<f", 1.5)], "dt": [M(8), "bfloat16"],
            "nt": [M(2), "optax.State", {"count": 1}], 3: None, "l": [b"\x01\x02", True]}
    rec, files = tree_component(tree, data)
    rec2, files2 = json_component(b'{"lr": 0.001, "n": [1, 2.5e3, "x"]}\n')
    blob = b"opaque bytes"
    rec3 = {"kind": "files", "kind_version": 1, "path": "components/blob",
            "files": {"a/b.txt": {"size": len(blob), "crc32c": crc32c_hex(blob)}}}
    comps = {"model": rec, "cfg": rec2, "blob": rec3}
    files.update(files2)
    files["components/blob/a/b.txt"] = blob
    return base_manifest(comps), files


def write_dir(root, man, files, raw_manifest=None):
    os.makedirs(root)
    for p, b in files.items():
        fp = os.path.join(root, p)
        os.makedirs(os.path.dirname(fp), exist_ok=True)
        with open(fp, "wb") as f:
            f.write(b)
    with open(os.path.join(root, "manifest.json"), "wb") as f:
        f.write(raw_manifest if raw_manifest is not None else manifest_bytes(man))


def write_zip(path, man, files, raw_manifest=None, tweak=None, zip64=False):
    manifest = raw_manifest if raw_manifest is not None else manifest_bytes(man)
    members = [*files.items(), ("manifest.json", manifest)]
    out = bytearray()
    cd = bytearray()
    for name, data in members:
        nb = name.encode()
        off = len(out)
        base = off + 30 + len(nb)
        pad = (-(base + 4)) % 64
        extra = struct.pack("<HH", 0xD935, pad) + b"\0" * pad
        crc = zlib.crc32(data)
        h = dict(ver=20, flags=0, method=0, crc=crc, csize=len(data), usize=len(data), made_by=(3 << 8) | 20,
                 eattr=(0o100644 << 16), name=nb, lname=nb, extra=extra)
        if tweak:
            tweak(name, h)
        out += struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", h["ver"], h["flags"], h["method"], 0, 0, h["crc"],
                           h["csize"], h["usize"], len(h["lname"]), len(h["extra"])) + h["lname"] + h["extra"]
        out += data
        cd += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", h["made_by"], h["ver"], h["flags"], h["method"], 0, 0,
                          h["crc"], h["csize"], h["usize"], len(h["name"]), 0, 0, 0, 0, h["eattr"], off) + h["name"]
    cdoff = len(out)
    out += cd
    if zip64:
        z = len(out)
        out += struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, len(members), len(members), len(cd), cdoff)
        out += struct.pack("<4sIQI", b"PK\x06\x07", 0, z, 1)
        out += struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    else:
        out += struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(members), len(members), len(cd), cdoff, 0)
    with open(path, "wb") as f:
        f.write(out)


def run(path):
    p = subprocess.run([RUN, "read", path], capture_output=True, text=True)
    if p.returncode == 0:
        return "OK", p.stdout
    line = p.stderr.splitlines()[0] if p.stderr else ""
    return (line.split(": ")[1] if line.startswith("error: ") else "GARBLED:" + p.stderr[-300:]), line


CASES: list = []


def case(expect, form="dir"):
    def deco(fn):
        CASES.append((fn.__name__, expect, form, fn))
        return fn
    return deco


def tree_only(tree, data=b"", **kw):
    rec, files = tree_component(tree, data)
    return base_manifest({"model": rec}), files


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


def main():
    tmp = tempfile.mkdtemp(prefix="oc-selftest-")
    fails = 0
    try:
        for name, expect, form, fn in CASES:
            sub = os.path.join(tmp, name)
            os.makedirs(sub)
            d = os.path.join(sub, "ckpt.zip" if form == "zip" else "ckpt")
            alt = fn(d)
            got, detail = run(alt or d)
            ok = got == expect
            fails += not ok
            print(("PASS" if ok else "FAIL"), name, "expected", expect, "got", got, "" if ok else detail[:300])
    finally:
        shutil.rmtree(tmp)
    print(f"{len(CASES) - fails}/{len(CASES)} passed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
