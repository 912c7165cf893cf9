"""Canonical content rendering, spec Appendix B."""
from __future__ import annotations

import hashlib
import math
import struct

from ojson import JFloat
from onodes import NArray, NBytes, NComplex, NDict, NDtype, NFloat, NList, NNamedTuple, NPrngKey, NScalar, NTuple
from oshard import NSharded


def blob(b) -> dict:
    b = bytes(b)
    n = len(b)
    if n <= 4096:
        return {"hex": b.hex()}
    return {"sha256": hashlib.sha256(b).hexdigest(), "head": b[:64].hex(), "tail": b[n - 64:].hex()}


def float_text(bits: int) -> str:
    v = struct.unpack(">d", bits.to_bytes(8, "big"))[0]
    if math.isnan(v):
        return "nan"
    return repr(v)  # shortest round-trip; 'inf' / '-inf' for infinities


def json_value(v):
    """B.7: a parsed JSON value rendered as itself (integer tokens stay integers,
    other number tokens stay non-integer numbers)."""
    if isinstance(v, dict):
        return {k: json_value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [json_value(x) for x in v]
    if isinstance(v, JFloat):
        return float(v)  # json.dumps writes a float with '.' or 'e'
    return v


class Renderer:
    def __init__(self, data: bytes):
        self.data = data

    def node(self, n):
        if n is None:
            return {"type": "none"}
        if n is True or n is False:
            return {"type": "bool", "value": n}
        if type(n) is int:
            return {"type": "int", "value": str(n)}
        if isinstance(n, str):
            return {"type": "str", "value": n}
        if isinstance(n, NFloat):
            return {"type": "float", "bits": format(n.bits, "016x"), "value": float_text(n.bits)}
        if isinstance(n, NBytes):
            d = {"type": "bytes", "nbytes": len(n.data)}
            d.update(blob(n.data))
            return d
        if isinstance(n, NList):
            return {"type": "list", "items": [self.node(x) for x in n.items]}
        if isinstance(n, NTuple):
            return {"type": "tuple", "items": [self.node(x) for x in n.items]}
        if isinstance(n, NDict):
            return {"type": "dict", "items": [[self.key(k), self.node(v)] for k, v in n.items]}
        if isinstance(n, NNamedTuple):
            return {"type": "named_tuple", "type_name": n.type_name,
                    "fields": [[k, self.node(v)] for k, v in n.fields]}
        if isinstance(n, NComplex):
            re_ = float_text(n.re_bits)
            im = float_text(n.im_bits)
            sign = "" if im.startswith("-") else "+"
            return {"type": "complex", "real_bits": format(n.re_bits, "016x"),
                    "imag_bits": format(n.im_bits, "016x"), "value": f"({re_}{sign}{im}j)"}
        if isinstance(n, NScalar):
            return {"type": "scalar", "dtype": n.dtype, "hex": bytes(n.raw).hex()}
        if isinstance(n, NArray):
            d = {"type": "array", "dtype": n.dtype, "shape": list(n.shape), "nbytes": n.nbytes}
            d.update(blob(memoryview(self.data)[n.offset:n.offset + n.nbytes]))
            return d
        if isinstance(n, NSharded):  # S.8: rendered as the assembled array, exactly as a tag 6 array
            d = {"type": "array", "dtype": n.dtype, "shape": list(n.shape), "nbytes": len(n.data)}
            d.update(blob(n.data))
            return d
        if isinstance(n, NPrngKey):
            return {"type": "prng_key", "impl": n.impl, "data": self.node(n.data)}
        if isinstance(n, NDtype):
            return {"type": "dtype", "dtype": n.dtype}
        raise TypeError(type(n))

    @staticmethod
    def key(k):
        if isinstance(k, str):
            return {"str": k}
        return {"int": str(k)}


def file_blobs(files: dict, contents: dict) -> dict:
    out = {}
    for key in files:
        b = contents[key]
        d = {"size": len(b)}
        d.update(blob(b))
        out[key] = d
    return out


def document(form, man, decoded, blobs, contents) -> dict:
    comps = {}
    for name, rec in man["components"].items():
        c = {"kind": rec["kind"], "kind_version": rec["kind_version"], "path": rec["path"]}
        if "hints" in rec:
            c["hints"] = json_value(rec["hints"])
        if "metadata" in rec:
            c["metadata"] = json_value(rec["metadata"])
        c["files"] = {k: json_value(v) for k, v in rec["files"].items()}
        kind = rec["kind"]
        if kind == "tree":
            c["content"] = {"type": "tree", "root": Renderer(blobs[name]).node(decoded[name][1])}
        elif kind == "json":
            c["content"] = {"type": "json", "value": json_value(decoded[name][1])}
        else:
            c["content"] = {"type": "files" if kind == "files" else "opaque",
                            "files": file_blobs(rec["files"], contents.get(name, {}))}
        comps[name] = c
    exts = {}
    for name, rec in man["extensions"].items():
        exts[name] = {"version": rec["version"], "must_understand": rec["must_understand"],
                      "data": json_value(rec["data"])}
    return {
        "rendering": 1,
        "form": form,
        "format_version": man["format_version"],
        "checkpoint_id": man["checkpoint_id"],
        "created_at": man["created_at"],
        "producer": json_value(man["producer"]),
        "metadata": json_value(man["metadata"]),
        "extensions": exts,
        "components": comps,
    }
