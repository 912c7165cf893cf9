"""Self-test kit: a tiny writer written from the spec, the case registry and the runner call."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib

import msgpack

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ocrc import crc32c as crc32c  # noqa: E402  (re-exported for the case modules)
from ocrc import crc32c_hex as crc32c_hex  # noqa: E402

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


def case(expect, form="dir", verify=None):
    """Register a case: `fn(path)` builds it, the reader must answer `expect` ("OK" or an error class);
    for "OK" cases `verify(rendering)` may check the printed rendering too."""
    def deco(fn):
        CASES.append((fn.__name__, expect, form, fn, verify))
        return fn
    return deco


def tree_only(tree, data=b"", **kw):
    rec, files = tree_component(tree, data)
    return base_manifest({"model": rec}), files
