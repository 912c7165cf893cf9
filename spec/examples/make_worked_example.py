"""Generate the OpenCheckpoint v1 worked example (Appendix A of ``spec/opencheckpoint-v1-notes.md``).

Throwaway, dependency-light script: uses only the standard library plus the
`msgpack` and `crc32c` packages. It writes the example checkpoint next to this
file under ``worked-example/`` and prints the dumps that Appendix A shows.

Run:  python spec/examples/make_worked_example.py
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import crc32c
import msgpack

OUT = Path(__file__).resolve().parent / "worked-example"


def crc_hex(data: bytes) -> str:
    return format(crc32c.crc32c(data), "08x")


def marker(tag: int) -> bytes:
    # tag marker: msgpack ext 8, length 0, type T  ->  c7 00 T
    return msgpack.packb(msgpack.ExtType(tag, b""))


def pk(obj: object) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def hexs(b: bytes) -> str:
    return " ".join(f"{x:02x}" for x in b)


# ---------------------------------------------------------------- data.bin
w_bytes = struct.pack("<2f", 1.0, -2.0)  # float32, little-endian, C order
w_offset, w_nbytes = 0, len(w_bytes)
w_crc = crc32c.crc32c(w_bytes)
data_bin = w_bytes  # size = largest extent end = 8; no padding needed

# ---------------------------------------------------------------- tree.msgpack
# Each piece is (bytes, explanation); concatenation must equal msgpack.packb
# of the equivalent Python structure.
pieces: list[tuple[bytes, str]] = [
    (b"\x83", "map, 3 entries (root dict; key order w, step, betas)"),
    (pk("w"), 'key: str "w"'),
    (b"\x96", "array, 6 elements (tagged node)"),
    (marker(6), "tag marker T=6: array"),
    (pk("float32"), 'dtype: str "float32"'),
    (pk([2]), "shape: array [2]"),
    (pk(w_offset), "offset: 0"),
    (pk(w_nbytes), "nbytes: 8"),
    (pk(w_crc), f"crc32c: uint32 0x{w_crc:08x} (CRC-32C of the 8 data bytes)"),
    (pk("step"), 'key: str "step"'),
    (pk(7), "int 7 (positive fixint)"),
    (pk("betas"), 'key: str "betas"'),
    (b"\x93", "array, 3 elements (tagged node)"),
    (marker(1), "tag marker T=1: tuple"),
    (pk(0.9), "float 64: 0.9"),
    (pk(0.999), "float 64: 0.999"),
]
tree = b"".join(p for p, _ in pieces)
reference = msgpack.packb(
    {
        "w": [msgpack.ExtType(6, b""), "float32", [2], w_offset, w_nbytes, w_crc],
        "step": 7,
        "betas": [msgpack.ExtType(1, b""), 0.9, 0.999],
    },
    use_bin_type=True,
)
assert tree == reference, (tree.hex(), reference.hex())

# ---------------------------------------------------------------- value.json
value_json = (json.dumps({"lr": 0.001}, ensure_ascii=False) + "\n").encode("utf-8")

# ---------------------------------------------------------------- manifest.json
manifest_obj = {
    "format": "opencheckpoint",
    "format_version": 1,
    "checkpoint_id": "example-0001",
    "created_at": "2026-11-29T00:00:00Z",
    "producer": {"name": "hand-written example", "version": "1.0"},
    "metadata": {},
    "extensions": {},
    "components": {
        "model": {
            "kind": "tree",
            "kind_version": 1,
            "path": "components/model",
            "files": {
                "tree.msgpack": {"size": len(tree), "crc32c": crc_hex(tree)},
                "data.bin": {"size": len(data_bin), "crc32c": crc_hex(data_bin)},
            },
        },
        "config": {
            "kind": "json",
            "kind_version": 1,
            "path": "components/config",
            "files": {
                "value.json": {"size": len(value_json), "crc32c": crc_hex(value_json)},
            },
        },
    },
}
text = json.dumps(manifest_obj, indent=2, ensure_ascii=False)
assert text.endswith("\n}")
head = (text[: -len("\n}")] + ",\n  ").encode("utf-8")
suffix = f'"manifest_crc32c": "{crc_hex(head)}"\n}}\n'.encode()
assert len(suffix) == 32
manifest = head + suffix

# self-checks
assert crc32c.crc32c(b"123456789") == 0xE3069283
parsed = json.loads(manifest)
assert list(parsed)[-1] == "manifest_crc32c"
assert parsed["manifest_crc32c"] == format(crc32c.crc32c(manifest[:-32]), "08x")

# ---------------------------------------------------------------- write files
files = {
    "manifest.json": manifest,
    "components/model/tree.msgpack": tree,
    "components/model/data.bin": data_bin,
    "components/config/value.json": value_json,
}
for rel, content in files.items():
    p = OUT / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(content)

# ---------------------------------------------------------------- print
print(f"== components/model/data.bin ({len(data_bin)} bytes)")
print(f"00000000  {hexs(data_bin)}")
print("  00 00 80 3f = float32 1.0 (LE); 00 00 00 c0 = float32 -2.0 (LE)")
print(f"  crc32c = {crc_hex(data_bin)}")
print()
print(f"== components/model/tree.msgpack ({len(tree)} bytes)")
off = 0
for p, why in pieces:
    print(f"{off:04x}  {hexs(p):<27}  {why}")
    off += len(p)
print(f"  crc32c = {crc_hex(tree)}")
print()
print(f"== components/config/value.json ({len(value_json)} bytes)")
print(f"00000000  {hexs(value_json)}")
print(f"  text: {value_json.decode()!r}")
print(f"  crc32c = {crc_hex(value_json)}")
print()
print(f"== manifest.json ({len(manifest)} bytes)")
print(manifest.decode("utf-8"), end="")
print(f"  CRC-32C covers bytes 0..{len(manifest) - 33} ({len(manifest) - 32} bytes)")
print(f"  last 32 bytes: {manifest[-32:]!r}")
