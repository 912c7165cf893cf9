#!/usr/bin/env python
"""Regenerate every conformance case under ``conformance/cases/v1`` reproducibly.

Usage::

    .venv/bin/python conformance/generate.py [--out DIR] [--case GLOB ...] [--check]

Every case is built from fixed ids, timestamps and seeds with the fixed producer
``{"name": "opencheckpoint-conformance-generator", "version": "1"}``, so running
this twice gives identical bytes (``tests/conformance/test_frozen.py`` checks
that the committed cases are exactly what this script writes). Cases of a
released version never change: fix a wrong case by adding a new one (and
withdrawing the old id in conformance/README.md), never by editing it.

Valid cases are written through the reference writer and their
``expected.json`` is the rendering the reference reader produces, after a
check that it equals the content the case meant to store. Must-reject cases
start from a small valid checkpoint and introduce exactly one defect; where
the defect is in a checksummed file, the manifest is re-sealed so that only
the intended rule is broken.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import struct
import sys
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from opencheckpoint.conformance.canonical import (
    first_difference,
    render_checkpoint,
    render_node,
    writer_view,
)
from opencheckpoint.conformance.impl import dumps
from opencheckpoint.conformance.models import CaseModel, ExpectedModel
from opencheckpoint.conformance.writer import write_rendering
from opencheckpoint.format.integrity import crc32c_of, format_crc32c
from opencheckpoint.format.manifest import serialize_manifest
from opencheckpoint.testing.hostile_zip import CaseMember as Member
from opencheckpoint.testing.hostile_zip import manifest_members as members_of
from opencheckpoint.testing.hostile_zip import zip_bytes
from opencheckpoint.tree.nodes import DtypeValue, NamedTupleValue, PRNGKeyValue

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "cases" / "v1"
PRODUCER = {"name": "opencheckpoint-conformance-generator", "version": "1"}
CREATED_AT = "2026-01-01T00:00:00Z"
M = {t: msgpack.ExtType(t, b"") for t in range(1, 128)}  # tag markers c7 00 T


# -- the case registry -----------------------------------------------------------------------
@dataclass
class Case:
    id: str
    description: str
    spec_sections: list[str]
    build: Callable[[Builder], None]
    error_class: str | None = None
    form: str = "directory"
    requires: list[str] = field(default_factory=list)
    read_path: str | None = None
    message_contains: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.error_class is None


CASES: dict[str, Case] = {}


def case(case_id: str, description: str, sections: list[str], *, error: str | None = None,
         form: str = "directory", requires: list[str] | None = None,
         read_path: str | None = None, message: list[str] | None = None
         ) -> Callable[[Callable[[Builder], None]], Callable[[Builder], None]]:
    def register(build: Callable[[Builder], None]) -> Callable[[Builder], None]:
        if case_id in CASES:
            raise ValueError(f"duplicate case id {case_id}")
        if form == "archive" and "archive" not in (requires or []):
            reqs = ["archive", *(requires or [])]
        else:
            reqs = list(requires or [])
        CASES[case_id] = Case(case_id, description, sections, build, error, form, reqs, read_path, message or [])
        return build
    return register


# -- building blocks --------------------------------------------------------------------------
def tree(value: Any, **extra: Any) -> dict[str, Any]:
    return {"kind": "tree", "kind_version": 1, "content": {"type": "tree", "root": render_node(value)},
            "value": value, **extra}


def jsonc(value: Any, **extra: Any) -> dict[str, Any]:
    return {"kind": "json", "kind_version": 1, "content": {"type": "json", "value": value}, **extra}


def filesc(files: dict[str, bytes], kind: str = "files", **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "kind_version": 1,
            "content": {"type": "files" if kind == "files" else "opaque",
                        "files": {rel: {"size": len(data), "hex": data.hex()} for rel, data in files.items()}},
            **extra}


class Builder:
    """Writes one case directory."""

    def __init__(self, case: Case, directory: Path) -> None:
        self.case = case
        self.dir = directory
        self.intended: dict[str, Any] | None = None

    @property
    def root(self) -> Path:
        return self.dir / ("checkpoint.zip" if self.case.form == "archive" else "checkpoint")

    def document(self, components: dict[str, dict[str, Any]], *, metadata: dict[str, Any] | None = None,
                 extensions: dict[str, Any] | None = None) -> dict[str, Any]:
        comps = {}
        for name, record in components.items():
            record = {k: v for k, v in record.items() if k != "value"}
            record.setdefault("path", f"components/{name}")
            sha = record.pop("sha256", False)
            files: dict[str, Any] = {"x": {"size": 0, "crc32c": "00000000", "sha256": "0" * 64}} if sha else {}
            optional: dict[str, Any] = {k: record[k] for k in ("hints", "metadata") if k in record}
            comps[name] = {"kind": record["kind"], "kind_version": record["kind_version"], "path": record["path"],
                           **optional,
                           "files": files, "content": record["content"]}
        return {"rendering": 1, "form": self.case.form, "format_version": 1,
                "checkpoint_id": f"conformance-{self.case.id}", "created_at": CREATED_AT, "producer": PRODUCER,
                "metadata": metadata or {}, "extensions": extensions or {}, "components": comps}

    def write(self, components: dict[str, dict[str, Any]], *, target: Path | None = None,
              form: str | None = None, **kw: Any) -> Path:
        """Write a checkpoint through the reference writer; remember its intended content."""
        doc = self.document(components, **kw)
        out = target or self.root
        if form == "directory" and out.suffix == ".zip":
            out = out.with_suffix("")
        values = {name: record["value"] for name, record in components.items() if "value" in record}
        write_rendering(doc, out, durable=False, values=values)
        self.intended = doc
        return out

    # -- directory-form editing (must-reject cases) -------------------------------------------------
    def manifest(self, root: Path | None = None) -> dict[str, Any]:
        body: dict[str, Any] = json.loads((root or self.root).joinpath("manifest.json").read_bytes())
        body.pop("manifest_crc32c")
        return body

    def seal(self, body: dict[str, Any], root: Path | None = None) -> None:
        """Write a manifest with a correct self-checksum."""
        (root or self.root).joinpath("manifest.json").write_bytes(serialize_manifest(body))

    def edit(self, change: Callable[[dict[str, Any]], None], root: Path | None = None) -> None:
        body = self.manifest(root)
        change(body)
        self.seal(body, root)

    def put(self, component: str, rel: str, data: bytes, *, reseal: bool = True) -> None:
        """Replace one file's bytes; with ``reseal`` also its manifest entry (size, crc32c, sha256)."""
        body = self.manifest()
        record = body["components"][component]
        (self.root / record["path"] / rel).write_bytes(data)
        if reseal:
            entry = record["files"][rel]
            entry["size"] = len(data)
            entry["crc32c"] = format_crc32c(crc32c_of(data))
            if "sha256" in entry:
                import hashlib
                entry["sha256"] = hashlib.sha256(data).hexdigest()
            self.seal(body)

    def raw_tree(self, root_node: Any, data: bytes = b"", **component: Any) -> None:
        """A checkpoint with one tree component ``t`` holding exactly these msgpack and data bytes."""
        self.write({"t": tree(None, **component)})
        self.put("t", "data.bin", data)
        self.put("t", "tree.msgpack", msgpack.packb(root_node, use_bin_type=True))

    def read(self, rel: str) -> bytes:
        return (self.root / rel).read_bytes()


def array_node(dtype: str, shape: list[int], offset: int, data: bytes) -> list[Any]:
    return [M[6], dtype, shape, offset, len(data), crc32c_of(data)]


# -- archive must-reject cases: built with the public hostile-ZIP kit (opencheckpoint.testing.hostile_zip)
def archive_case(b: Builder, tweak: Callable[[list[Member]], list[Member]] | None = None,
                 **zip_kw: Any) -> None:
    """Write a small valid checkpoint, then pack it with :func:`zip_bytes` after ``tweak``."""
    with tempfile.TemporaryDirectory() as tmp:
        staged = b.write({"m": tree({"w": np.arange(4, dtype=np.float32)})}, target=Path(tmp) / "c")
        members = members_of(staged)
    b.root.write_bytes(zip_bytes(tweak(members) if tweak else members, **zip_kw))


def small(b: Builder) -> Path:
    """The base checkpoint of most must-reject cases: one tree component ``m`` with two arrays."""
    return b.write({"m": tree({"w": np.arange(4, dtype=np.float32), "b": np.array([1, 2], dtype=np.int64)})})


# ==============================================================================================
# Valid cases
# ==============================================================================================
@case("empty-checkpoint", "A checkpoint with no components, empty metadata and no extensions.",
      ["R-CON-1", "R-MAN-11", "R-MAN-23", "5.3"])
def _(b: Builder) -> None:
    b.write({})


@case("tree-none", "A tree whose root is None.", ["8.1", "R-TREE-3"])
def _(b: Builder) -> None:
    b.write({"t": tree(None)})


@case("tree-bool", "True and False nodes in a list.", ["8.1", "R-TREE-3"])
def _(b: Builder) -> None:
    b.write({"t": tree([True, False])})


@case("tree-int-widths", "Integers at every msgpack width boundary, including -2^63 and 2^64-1.",
      ["8.2", "R-TREE-5", "R-TREE-3"])
def _(b: Builder) -> None:
    b.write({"t": tree([0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1,
                        -1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63)])})


@case("tree-big-int", "Big ints (tag 3) just outside the 64-bit range and a huge one, positive and negative.",
      ["8.6", "R-TREE-21", "R-TREE-22"])
def _(b: Builder) -> None:
    b.write({"t": tree([2**64, -(2**63) - 1, 10**40, -(10**40), 2**255 - 19])})


@case("tree-float-special", "Floats: -0.0, infinities, the smallest subnormal, a quiet NaN with a payload "
      "and a negative NaN; bits must survive exactly.", ["8.2", "R-TREE-6", "R-TREE-7"])
def _(b: Builder) -> None:
    def f(bits: int) -> float:
        value: float = struct.unpack(">d", struct.pack(">Q", bits))[0]
        return value
    b.write({"t": tree([0.0, -0.0, 1.5, float("inf"), float("-inf"), 5e-324, f(0x7FF8000000000001),
                        f(0xFFF8000000000000), f(0x7FF4000000000000)])})


@case("tree-float32-encoding", "A tree whose floats are stored as msgpack float 32 (ca), including a NaN "
      "with a payload, which readers widen exactly.", ["R-TREE-8", "8.2"])
def _(b: Builder) -> None:
    b.write({"t": tree(None)})
    payload = b"\x93" + b"\xca" + struct.pack(">f", 1.5) + b"\xca\x80\x00\x00\x00" + b"\xca\x7f\x80\x00\x01"
    b.put("t", "tree.msgpack", payload)
    b.intended = None


@case("tree-long-encodings", "Lengths and ints written with wider msgpack encodings than needed (str 8 for a "
      "short string, uint 64 for 1, array 16, map 16, bin 32); readers accept every width.", ["R-TREE-4"])
def _(b: Builder) -> None:
    b.write({"t": tree(None)})
    doc = (b"\xde\x00\x02" + b"\xd9\x01k" + b"\xdc\x00\x02" + b"\xcf" + (1).to_bytes(8, "big") + b"\xd0\xff"
           + b"\xdb\x00\x00\x00\x01s" + b"\xc6\x00\x00\x00\x02\x00\x01")
    b.put("t", "tree.msgpack", doc)
    b.intended = None


@case("tree-str-unicode", "Strings with non-ASCII, astral-plane, NUL and escape-worthy characters.",
      ["8.1", "R-TREE-9"])
def _(b: Builder) -> None:
    b.write({"t": tree(["", "héllo", "日本語", "\U0001F600", "nul\x00inside", "quote\"back\\slash\nnewline"])})


@case("tree-bytes", "Bytes nodes: empty, short, and longer than 4096 bytes (rendered by digest).",
      ["8.1", "B.6"])
def _(b: Builder) -> None:
    b.write({"t": tree([b"", b"\x00\xff\x10", bytes(range(256)) * 20])})


@case("tree-list-tuple", "Lists and tuples, empty and nested, stay distinct.", ["8.3", "8.6", "R-TREE-16"])
def _(b: Builder) -> None:
    b.write({"t": tree([[], (), [1, (2, [3])], ((),)])})


@case("tree-dict-order", "Dict entries in a non-sorted order; the stored order is preserved.",
      ["R-TREE-12", "8.3"])
def _(b: Builder) -> None:
    b.write({"t": tree({"zeta": 1, "alpha": 2, "mid": {"y": 0, "x": 1}, "": None})})


@case("tree-dict-int-keys", "Int keys (negative, zero, 64-bit) and a str key \"1\" next to the int key 1.",
      ["R-TREE-10", "R-TREE-11", "8.3"])
def _(b: Builder) -> None:
    b.write({"t": tree({1: "int one", "1": "str one", 0: None, -5: 2, 2**64 - 1: "max", -(2**63): "min"})})


@case("tree-dict-unicode-keys", "Dict keys with non-ASCII characters.", ["R-TREE-9", "8.3"])
def _(b: Builder) -> None:
    b.write({"t": tree({"größe": 1, "ключ": 2, "键": 3, "\U0001F511": 4})})


@case("tree-named-tuple", "A named tuple with its informative type name and ordered fields.",
      ["8.6", "R-TREE-20"])
def _(b: Builder) -> None:
    b.write({"t": tree(NamedTupleValue("optax.ScaleByAdamState",
                                       {"count": np.int32(3), "mu": {"w": np.zeros(2, np.float32)}, "nu": None}))})


@case("tree-complex", "Complex nodes (tag 4) including -0.0 and NaN parts.", ["8.6", "R-TREE-7"])
def _(b: Builder) -> None:
    b.write({"t": tree([1 + 2j, complex(-0.0, float("inf")), complex(float("nan"), -0.0)])})


@case("tree-scalars", "Typed scalars (tag 5) of several dtypes, including bool, bfloat16 and float8.",
      ["8.6", "R-TREE-23", "R-TREE-24"])
def _(b: Builder) -> None:
    import ml_dtypes
    b.write({"t": tree([np.float32(1.5), np.int64(-7), np.uint8(255), np.bool_(True), np.float16(-0.0),
                        ml_dtypes.bfloat16(3.0), ml_dtypes.float8_e4m3fn(0.5), np.complex64(1 - 1j)])})


@case("tree-dtype-nodes", "Dtype values (tag 8), for example a dtype stored in a state dict.", ["8.6", "R-DT-1"])
def _(b: Builder) -> None:
    b.write({"t": tree({"a": DtypeValue("float32"), "b": DtypeValue("bfloat16"), "c": DtypeValue("bool")})})


DTYPE_VALUES: dict[str, Callable[[], np.ndarray]] = {}


def _dtype_cases() -> None:
    from opencheckpoint.format.dtypes import DTYPES, numpy_dtype

    rng = np.random.default_rng(20260101)
    for name in DTYPES:
        dtype = numpy_dtype(name)
        if name == "bool":
            values = np.array([[True, False, True], [False, False, True]])
        elif name.startswith(("int", "uint")):
            info = np.iinfo(dtype)
            values = np.array([[info.min, -1 if info.min else 0, 0], [1, info.max - 1, info.max]], dtype=dtype)
        elif name.startswith("complex"):
            values = np.array([[1 + 2j, -0.0 - 1j, np.nan], [np.inf, 0.5j, -3]], dtype=dtype)
        elif name.startswith("float8") or name == "bfloat16" or name == "float16":
            raw = rng.integers(0, 256, size=6 * dtype.itemsize, dtype=np.uint8)
            values = raw.view(dtype).reshape(2, 3)  # every bit pattern is a stored value (§10)
        else:
            values = np.array([[0.0, -0.0, 1.5], [np.nan, np.inf, -np.finfo(dtype).tiny]], dtype=dtype)

        def build(b: Builder, values: np.ndarray = values) -> None:
            b.write({"t": tree({"x": values})})

        case(f"dtype-{name.replace('_', '-')}", f"A 2x3 array of dtype {name} (bytes stored little-endian).",
             ["10", "R-DT-1", "R-DT-2", "R-ARR-4", "R-ARR-15"])(build)


_dtype_cases()


@case("array-0d", "A 0-d array (shape []) of one element.", ["9", "R-ARR-4"])
def _(b: Builder) -> None:
    b.write({"t": tree(np.array(2.5, dtype=np.float64))})


@case("array-empty", "Zero-element arrays (shapes [0] and [3, 0]) have offset 0, nbytes 0 and crc 0.",
      ["R-ARR-6", "R-ARR-7", "R-ARR-11"])
def _(b: Builder) -> None:
    b.write({"t": tree([np.zeros(0, np.float32), np.zeros((3, 0), np.int8), np.ones(1, np.uint8)])})


@case("array-empty-huge-dims", "Zero-element arrays whose other dimensions are huge ([2**61, 3, 0] float64, "
      "[3, 2**60, 0] complex128): valid, read as empty arrays of exactly that shape.", ["R-ARR-4", "R-ARR-6"])
def _(b: Builder) -> None:
    b.raw_tree({"a": array_node("float64", [2**61, 3, 0], 0, b""),
                "b": array_node("complex128", [3, 2**60, 0], 0, b"")})
    b.intended = None


@case("array-large", "An array of 64 KiB (rendered by digest, head and tail).", ["9", "B.6", "R-ARR-14"])
def _(b: Builder) -> None:
    b.write({"t": tree(np.arange(16384, dtype=np.float32))})


@case("array-many-aligned", "Several arrays of odd sizes, each at a 64-byte aligned offset with zero padding.",
      ["R-ARR-5", "R-ARR-12", "R-ARR-11"])
def _(b: Builder) -> None:
    b.write({"t": tree({f"a{i}": np.arange(i * 7 + 1, dtype=np.uint8) for i in range(6)})})


@case("array-aliased", "Two array nodes sharing one extent (tied weights).", ["R-ARR-9", "R-ARR-10", "9"])
def _(b: Builder) -> None:
    shared = np.arange(8, dtype=np.float32)
    b.write({"t": tree({"embed": shared, "head": shared})})


@case("array-aliased-views", "Two array nodes with identical extents but different dtype and shape "
      "(hand-written tree); each decodes by its own dtype.", ["R-ARR-9", "R-ARR-10", "9"])
def _(b: Builder) -> None:
    data = np.arange(4, dtype=np.float32).tobytes()
    b.raw_tree({"f": array_node("float32", [4], 0, data), "u": array_node("uint8", [2, 8], 0, data)}, data)
    b.intended = None


@case("array-ndim-64", "An array with exactly 64 dimensions (the limit).", ["R-LIM-13", "14"])
def _(b: Builder) -> None:
    b.write({"t": tree(np.ones((1,) * 62 + (2, 3), dtype=np.int16))})


@case("array-fortran-source", "Array bytes are C order even when the source array is Fortran-ordered.",
      ["R-ARR-15", "9"])
def _(b: Builder) -> None:
    b.write({"t": tree(np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3)))})


@case("tree-depth-128", "A tree nested to exactly the depth limit of 128.", ["R-LIM-10", "8.8"])
def _(b: Builder) -> None:
    value: Any = 1
    for _ in range(128):
        value = [value]
    b.write({"t": tree(value)})


@case("prng-keys", "Typed PRNG keys of each built-in implementation, single and batched.",
      ["8.6", "R-TREE-25", "R-TREE-26", "R-TREE-27", "R-TREE-28"])
def _(b: Builder) -> None:
    b.write({"t": tree({
        "threefry": PRNGKeyValue("threefry2x32", np.array([0, 42], dtype=np.uint32)),
        "rbg": PRNGKeyValue("rbg", np.array([1, 2, 3, 4], dtype=np.uint32)),
        "unsafe": PRNGKeyValue("unsafe_rbg", np.array([5, 6, 7, 8], dtype=np.uint32)),
        "batch": PRNGKeyValue("threefry2x32", np.arange(6, dtype=np.uint32).reshape(3, 2)),
        "custom": PRNGKeyValue("com.example/philox", np.arange(3, dtype=np.uint32)),
    })})


@case("json-object", "A json component holding a nested object with unicode, integers and floats.",
      ["6.3", "R-CMP-17", "R-CMP-18"])
def _(b: Builder) -> None:
    b.write({"config": jsonc({"lr": 0.001, "steps": 10000, "name": "ünï", "layers": [64, 64],
                              "flags": {"amp": True, "seed": None}, "big": 9007199254740991, "neg": -1.5e-300})})


@case("json-scalar", "A json component whose value is a top-level string.", ["6.3", "R-CMP-18"])
def _(b: Builder) -> None:
    b.write({"note": jsonc("just a string")})


@case("json-int-vs-float", "A json component distinguishing 1 from 1.0.", ["B.7", "B.8", "R-MAN-7"])
def _(b: Builder) -> None:
    b.write({"v": jsonc([1, 1.0, -0.0, 0, 1e100])})


@case("files-component", "A files component with nested paths and an empty file.", ["6.3", "R-CHK-12"])
def _(b: Builder) -> None:
    b.write({"buf": filesc({"index.txt": b"hello\n", "shards/part-0.bin": bytes(range(100)), "empty": b""})})


@case("files-empty", "A files component with no files.", ["6.3"])
def _(b: Builder) -> None:
    b.write({"nothing": filesc({})})


@case("third-party-kind", "A component of a third-party kind is not rejected and is rendered as opaque files.",
      ["R-CMP-20", "R-RDR-8", "6.4"])
def _(b: Builder) -> None:
    b.write({"replay": filesc({"buffer.bin": b"\x01\x02\x03", "meta.json": b"{}"}, kind="com.example/replay-buffer"),
             "w": tree(np.ones(2, np.float32))})


@case("third-party-kind-version", "A third-party kind with kind_version 7 is rendered, not decoded.",
      ["R-CMP-20", "6.4"])
def _(b: Builder) -> None:
    rec = filesc({"x.bin": b"abc"}, kind="org.example.sim/state")
    rec["kind_version"] = 7
    b.write({"sim": rec})


@case("component-hints-metadata", "Component hints and metadata, manifest metadata, a custom component path.",
      ["6.1", "R-CMP-10", "R-CMP-11", "R-MAN-21"])
def _(b: Builder) -> None:
    b.write({"model": tree({"w": np.zeros(3, np.float32)}, hints={"framework": "torch", "class": "torch.nn.Linear"},
                           metadata={"step": 12, "note": "α"}, path="weights/model-a")},
            metadata={"epoch": 3, "tags": ["a", "b"], "nested": {"x": None}})


@case("extension-not-understood", "An extension with must_understand false that the reader does not "
      "understand is ignored (and rendered).", ["R-EXT-8", "7.2"])
def _(b: Builder) -> None:
    b.write({"w": tree(np.zeros(1, np.float32))},
            extensions={"com.example.telemetry": {"version": 3, "must_understand": False,
                                                  "data": {"run": "https://example.com/runs/42"}}})


@case("file-sha256", "File entries with optional sha256 members.", ["6.2", "R-CHK-5", "R-CHK-8"])
def _(b: Builder) -> None:
    b.write({"w": tree(np.arange(5, dtype=np.int32), sha256=True), "f": {**filesc({"a": b"x"}), "sha256": True}})


@case("multi-component", "Tree, json and files components together.", ["6", "6.3"])
def _(b: Builder) -> None:
    b.write({"model": tree({"w": np.arange(4, dtype=np.float32), "step": 7, "betas": (0.9, 0.999)}),
             "config": jsonc({"lr": 0.001}), "extra": filesc({"notes.txt": b"n"})})


@case("archive-tree", "Archive form: a tree component.", ["3.3", "R-ZIP-18", "R-ZIP-21"], form="archive")
def _(b: Builder) -> None:
    b.write({"model": tree({"w": np.arange(10, dtype=np.float64), "step": 1})})


@case("archive-mixed", "Archive form: tree, json, files and a third-party kind.", ["3.3", "R-ZIP-19", "R-ZIP-20"],
      form="archive")
def _(b: Builder) -> None:
    b.write({"m": tree([np.ones(3, np.int8), None]), "c": jsonc({"a": [1]}), "f": filesc({"x/y.bin": b"\x00" * 70}),
             "o": filesc({"z": b"z"}, kind="com.example/blob")})


@case("archive-empty-files", "Archive form with empty members (a files component with an empty file and a tree "
      "without array bytes).", ["3.3", "R-ZIP-18"], form="archive")
def _(b: Builder) -> None:
    b.write({"t": tree({"n": None}), "f": filesc({"empty": b""})})


@case("old-fallback", "The target does not exist but exactly one .<name>.oc-old-<suffix> entry opens: "
      "a reader reads it as the target.", ["R-PUB-13", "12.3"], requires=["old-fallback"], read_path="ckpt")
def _(b: Builder) -> None:
    b.write({"w": tree(np.ones(2, np.float32))}, target=b.dir / ".ckpt.oc-old-Ab3dE5gH")


# ==============================================================================================
# Framework cases (real torch and JAX state)
# ==============================================================================================
def save_real(b: Builder, **components: Any) -> None:
    from opencheckpoint import Checkpoint

    Checkpoint(durable=False, format="archive" if b.case.form == "archive" else "directory", **components).save(
        b.root, checkpoint_id=f"conformance-{b.case.id}", created_at=CREATED_AT, producer=PRODUCER)
    b.intended = None


@case("torch-module-adam", "A torch module and its Adam optimizer after two steps, saved by the torch adapter.",
      ["6.3", "8", "10"])
def _(b: Builder) -> None:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randn(5, 4)).pow(2).sum().backward()
        optimizer.step()
    save_real(b, model=model, optimizer=optimizer)


@case("torch-dtypes", "A torch state dict with bfloat16, float8, complex, bool and uint16 tensors and a dtype value.",
      ["10", "8.6"])
def _(b: Builder) -> None:
    import torch

    state = {
        "bf16": torch.arange(4, dtype=torch.float32).to(torch.bfloat16),
        "f8": torch.tensor([0.5, -1.0]).to(torch.float8_e4m3fn),
        "c64": torch.tensor([1 + 2j], dtype=torch.complex64),
        "mask": torch.tensor([True, False]),
        "u16": torch.tensor([1, 65535], dtype=torch.uint16),
        "scalar": torch.tensor(3.0),
        "dtype": torch.float16,
    }
    save_real(b, state=state)


@case("jax-nnx-optax", "A Flax NNX module and an optax Adam state after one step, saved by the JAX adapter.",
      ["6.3", "8", "8.6"])
def _(b: Builder) -> None:
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    tx = optax.adam(1e-2)
    params = nnx.state(model, nnx.Param)
    opt_state = tx.init(params)
    grads = jax.tree_util.tree_map(jnp.ones_like, params)
    _updates, opt_state = tx.update(grads, opt_state, params)
    save_real(b, model=model, opt_state=opt_state)


@case("jax-prng-keys", "Typed JAX PRNG keys of threefry2x32, rbg and unsafe_rbg, single and batched.",
      ["R-TREE-25", "R-TREE-27", "R-TREE-28", "8.6"])
def _(b: Builder) -> None:
    import jax

    save_real(b, keys={"threefry": jax.random.key(0, impl="threefry2x32"), "rbg": jax.random.key(1, impl="rbg"),
                       "unsafe_rbg": jax.random.key(2, impl="unsafe_rbg"),
                       "batch": jax.random.split(jax.random.key(3), 4)})


@case("jax-arrays", "JAX arrays of bfloat16, float8_e5m2, bool and a 0-d int32.", ["10", "9"])
def _(b: Builder) -> None:
    import jax.numpy as jnp

    save_real(b, arrays={"bf16": jnp.linspace(0, 1, 5, dtype=jnp.bfloat16),
                         "f8": jnp.array([1.0, -2.0], dtype=jnp.float8_e5m2),
                         "mask": jnp.array([True, False, True]), "step": jnp.array(7, dtype=jnp.int32)})


@case("torch-archive", "A torch module saved in archive form.", ["3.3", "6.3"], form="archive")
def _(b: Builder) -> None:
    import torch

    torch.manual_seed(1)
    save_real(b, model=torch.nn.Linear(2, 2))


# ==============================================================================================
# Must-reject cases
# ==============================================================================================
@case("reject-not-a-checkpoint", "A directory without manifest.json.", ["R-CON-1"], error="NotACheckpoint")
def _(b: Builder) -> None:
    small(b)
    (b.root / "manifest.json").unlink()


@case("reject-staging-name", "A complete checkpoint whose name marks it as a staging directory.",
      ["R-PUB-12"], error="NotACheckpoint", read_path=".ckpt.oc-staging-123-abcdefgh")
def _(b: Builder) -> None:
    b.write({"w": tree(np.ones(1, np.float32))}, target=b.dir / ".ckpt.oc-staging-123-abcdefgh")


@case("reject-manifest-checksum", "manifest_crc32c does not match the manifest bytes.", ["R-CHK-3"],
      error="IntegrityError")
def _(b: Builder) -> None:
    small(b)
    data = bytearray(b.read("manifest.json"))
    digit = data[-5:-4]
    data[-5:-4] = b"0" if digit != b"0" else b"1"
    (b.root / "manifest.json").write_bytes(bytes(data))


@case("reject-manifest-suffix", "The manifest does not end with the 32-byte checksum suffix "
      "(manifest_crc32c is not the last member).", ["R-CHK-1"], error="ManifestError")
def _(b: Builder) -> None:
    small(b)
    body = b.manifest()
    # manifest_crc32c right after "format": the file does not end with the checksum suffix
    obj = {"format": body["format"], "manifest_crc32c": "00000000"}
    obj.update({k: v for k, v in body.items() if k != "format"})
    text = json.dumps(obj, indent=2) + "\n"
    (b.root / "manifest.json").write_text(text)


@case("reject-data-corrupt", "One byte of data.bin flipped; the manifest still lists the old checksum.",
      ["R-CHK-7", "R-ERR-1", "R-RDR-7", "R-RDR-12"], error="IntegrityError")
def _(b: Builder) -> None:
    small(b)
    data = bytearray(b.read("components/m/data.bin"))
    data[1] ^= 0x40
    b.put("m", "data.bin", bytes(data), reseal=False)


@case("reject-array-checksum", "An array's bytes changed and the file entry re-sealed: only the array crc32c "
      "in the tree catches it.", ["R-ARR-14", "R-CHK-11", "R-CHK-13", "R-RDR-4"], error="IntegrityError")
def _(b: Builder) -> None:
    small(b)
    data = bytearray(b.read("components/m/data.bin"))
    data[2] ^= 0x01
    b.put("m", "data.bin", bytes(data))


@case("reject-truncated", "data.bin is shorter than its manifest size.", ["R-CHK-6"], error="IntegrityError")
def _(b: Builder) -> None:
    small(b)
    b.put("m", "data.bin", b.read("components/m/data.bin")[:-3], reseal=False)


@case("reject-extended", "data.bin has one byte more than its manifest size.", ["R-CHK-6"], error="IntegrityError")
def _(b: Builder) -> None:
    small(b)
    b.put("m", "data.bin", b.read("components/m/data.bin") + b"\x00", reseal=False)


@case("reject-tree-corrupt", "tree.msgpack altered without updating its checksum.", ["R-CHK-7", "R-CHK-10"],
      error="IntegrityError")
def _(b: Builder) -> None:
    small(b)
    data = bytearray(b.read("components/m/tree.msgpack"))
    data[-1] ^= 0x01
    b.put("m", "tree.msgpack", bytes(data), reseal=False)


@case("reject-sha256", "A file entry's sha256 does not match the file (size and crc32c do).", ["R-CHK-8"],
      error="IntegrityError")
def _(b: Builder) -> None:
    b.write({"f": {**filesc({"a.bin": b"abc"}), "sha256": True}})
    b.edit(lambda m: m["components"]["f"]["files"]["a.bin"].update(sha256="0" * 64))


@case("reject-files-corrupt", "A file of a files component altered.", ["R-CHK-7", "R-CHK-12"],
      error="IntegrityError")
def _(b: Builder) -> None:
    b.write({"f": filesc({"a.bin": b"abcdef"})})
    b.put("f", "a.bin", b"abcdeF", reseal=False)


@case("reject-missing-file", "A listed file is absent.", ["R-CON-3"], error="MissingFile")
def _(b: Builder) -> None:
    b.write({"f": filesc({"a.bin": b"abc", "b.bin": b"def"})})
    (b.root / "components/f/b.bin").unlink()


@case("reject-extra-file", "A file that no component lists.", ["R-CON-2"], error="ExtraFile")
def _(b: Builder) -> None:
    small(b)
    (b.root / "components/m/stray.bin").write_bytes(b"?")


@case("reject-path-dotdot", "A component path with a '..' segment.", ["R-PATH-1"], error="UnsafePath")
def _(b: Builder) -> None:
    small(b)
    b.edit(lambda m: m["components"]["m"].update(path="components/../m"))


@case("reject-path-absolute", "An absolute component path.", ["R-PATH-1"], error="UnsafePath")
def _(b: Builder) -> None:
    small(b)
    b.edit(lambda m: m["components"]["m"].update(path="/tmp/m"))


@case("reject-path-backslash", "A files key with a backslash.", ["R-PATH-2"], error="UnsafePath")
def _(b: Builder) -> None:
    b.write({"f": filesc({"a.bin": b"x"})})

    def change(m: dict[str, Any]) -> None:
        files = m["components"]["f"]["files"]
        files["sub\\a.bin"] = files.pop("a.bin")
    b.edit(change)


@case("reject-path-hidden", "A files key whose segment starts with '.'.", ["R-PATH-2"], error="UnsafePath")
def _(b: Builder) -> None:
    b.write({"f": filesc({"a.bin": b"x"})})
    os.rename(b.root / "components/f/a.bin", b.root / "components/f/.a.bin")

    def change(m: dict[str, Any]) -> None:
        files = m["components"]["f"]["files"]
        files[".a.bin"] = files.pop("a.bin")
    b.edit(change)


@case("reject-path-case-collision", "Two files whose paths differ only in ASCII case (archive form, so that "
      "the case checks out on case-insensitive file systems).", ["R-PATH-3"],
      error="UnsafePath", form="archive")
def _(b: Builder) -> None:
    b.write({"f": filesc({"data.bin": b"x", "DATA.bin": b"y"})})


@case("reject-path-prefix", "A file path equal to a directory prefix of another file path (case-folded).",
      ["R-PATH-4"], error="UnsafePath", form="archive")
def _(b: Builder) -> None:
    b.write({"f": filesc({"a": b"x", "A/b": b"y"})})


@case("reject-component-path-duplicate", "Two components with the same path.", ["R-CMP-6"], error="UnsafePath")
def _(b: Builder) -> None:
    b.write({"f": filesc({"a.bin": b"x"})})

    def change(m: dict[str, Any]) -> None:
        m["components"]["g"] = json.loads(json.dumps(m["components"]["f"]))
    b.edit(change)


@case("reject-symlink", "A listed file is a symbolic link.", ["R-CON-4", "R-CON-6", "R-CON-7"], error="UnsafePath",
      requires=["symlinks"])
def _(b: Builder) -> None:
    b.write({"f": filesc({"a.bin": b"abc", "b.bin": b"abc"})})
    (b.root / "components/f/b.bin").unlink()
    os.symlink("a.bin", b.root / "components/f/b.bin")


@case("reject-array-overlap", "Two arrays whose extents overlap without being identical.", ["R-ARR-9"],
      error="ArrayLayoutError")
def _(b: Builder) -> None:
    data = bytes(range(1, 129))
    b.raw_tree([array_node("uint8", [128], 0, data), array_node("uint8", [32], 64, data[64:96])], data)


@case("reject-array-misaligned", "An array offset that is not a multiple of 64.", ["R-ARR-5"],
      error="ArrayLayoutError")
def _(b: Builder) -> None:
    data = bytes(8) + bytes(range(1, 9))
    b.raw_tree([array_node("uint8", [8], 8, data[8:])], data)


@case("reject-padding-nonzero", "A nonzero byte in the padding between two extents.",
      ["R-ARR-12", "R-CHK-14", "R-RDR-5"],
      error="ArrayLayoutError")
def _(b: Builder) -> None:
    first, second = bytes([1, 2, 3, 4]), bytes([5, 6])
    data = first + b"\x00" * 30 + b"\x07" + b"\x00" * 29 + second
    b.raw_tree([array_node("uint8", [4], 0, first), array_node("uint8", [2], 64, second)], data)


@case("reject-out-of-bounds", "An array extent that ends past the end of data.bin.", ["R-ARR-8"],
      error="ArrayLayoutError")
def _(b: Builder) -> None:
    data = bytes(range(16))
    b.raw_tree([[M[6], "uint8", [32], 0, 32, crc32c_of(data)]], data)


@case("reject-nbytes-shape", "nbytes differs from shape product times itemsize.", ["R-ARR-4"],
      error="ArrayLayoutError")
def _(b: Builder) -> None:
    data = np.arange(4, dtype=np.float32).tobytes()
    b.raw_tree([[M[6], "float32", [3], 0, 16, crc32c_of(data)]], data)


@case("reject-data-size", "data.bin is longer than the largest extent (trailing zero bytes).", ["R-ARR-11"],
      error="ArrayLayoutError")
def _(b: Builder) -> None:
    data = bytes(range(1, 9))
    b.raw_tree([array_node("uint8", [8], 0, data)], data + bytes(8))


@case("reject-empty-array-offset", "A zero-byte array with a nonzero offset.", ["R-ARR-6"],
      error="ArrayLayoutError")
def _(b: Builder) -> None:
    data = bytes(range(1, 65)) + bytes(range(1, 9))
    b.raw_tree([array_node("uint8", [64], 0, data[:64]), [M[6], "uint8", [0], 64, 0, 0],
                array_node("uint8", [8], 64, data[64:])], data)


@case("reject-bool-byte", "A bool array holding the byte 02.", ["R-ARR-13", "R-CHK-14"], error="ArrayLayoutError")
def _(b: Builder) -> None:
    data = bytes([0, 1, 2])
    b.raw_tree([array_node("bool", [3], 0, data)], data)


@case("reject-unknown-dtype", "An array of dtype float128 (not in the dtype table).", ["R-DT-1"],
      error="UnknownDtype")
def _(b: Builder) -> None:
    data = bytes(16)
    b.raw_tree([array_node("float128", [1], 0, data)], data)


@case("reject-dtype-case", "A dtype spelled Float32 (dtype names are case-sensitive).", ["R-DT-1"],
      error="UnknownDtype")
def _(b: Builder) -> None:
    b.raw_tree([M[8], "Float32"])


@case("reject-tag-reserved", "A tagged node with the reserved tag 9.", ["R-TREE-18"], error="TreeError")
def _(b: Builder) -> None:
    b.raw_tree([M[9], 1])


@case("reject-tag-extension-undeclared", "A tag in the extension range (64) without a declared extension.",
      ["R-TREE-19"], error="TreeError")
def _(b: Builder) -> None:
    b.raw_tree([M[64], 1])


@case("reject-tag-zero", "An ext object of type 0.", ["R-TREE-14"], error="TreeError")
def _(b: Builder) -> None:
    b.raw_tree([msgpack.ExtType(0, b""), 1])


@case("reject-ext-payload", "An ext object with a non-empty payload (fixext 1).", ["R-TREE-13"], error="TreeError")
def _(b: Builder) -> None:
    b.raw_tree([msgpack.ExtType(1, b"x"), 1])


@case("reject-marker-misplaced", "A tag marker used as a dict value.", ["R-TREE-15"], error="TreeError")
def _(b: Builder) -> None:
    b.raw_tree({"a": M[1]})


@case("reject-trailing-bytes", "tree.msgpack has bytes after its root object.", ["R-TREE-2"], error="TreeError")
def _(b: Builder) -> None:
    b.write({"t": tree(None)})
    b.put("t", "tree.msgpack", b"\xc0\xc0")


@case("reject-tree-truncated", "tree.msgpack ends inside its root object (checksums consistent).",
      ["R-TREE-1"], error="TreeError")
def _(b: Builder) -> None:
    b.write({"t": tree(None)})
    b.put("t", "tree.msgpack", b"\x92\x01")


@case("reject-tree-bad-byte", "tree.msgpack uses the never-used byte c1.", ["R-TREE-3"], error="TreeError")
def _(b: Builder) -> None:
    b.write({"t": tree(None)})
    b.put("t", "tree.msgpack", b"\x91\xc1")


@case("reject-duplicate-key", "A dict with two equal int keys of different encoding widths.", ["R-TREE-11"],
      error="TreeError")
def _(b: Builder) -> None:
    b.write({"t": tree(None)})
    b.put("t", "tree.msgpack", b"\x82\x01\xc0\xcd\x00\x01\xc2")


@case("reject-key-type", "A dict with a float key.", ["R-TREE-10"], error="TreeError")
def _(b: Builder) -> None:
    b.write({"t": tree(None)})
    b.put("t", "tree.msgpack", b"\x81\xcb" + struct.pack(">d", 1.0) + b"\xc0")


@case("reject-invalid-utf8", "A str with invalid UTF-8.", ["R-TREE-9"], error="TreeError")
def _(b: Builder) -> None:
    b.write({"t": tree(None)})
    b.put("t", "tree.msgpack", b"\xa2\xc3\x28")


@case("reject-big-int-not-minimal", "A big int whose magnitude has a redundant high byte.", ["R-TREE-21"],
      error="TreeError")
def _(b: Builder) -> None:
    b.raw_tree([M[3], (2**64).to_bytes(9, "little") + b"\x00"])


@case("reject-big-int-in-range", "A big int whose value fits in 64 bits.", ["R-TREE-22"], error="TreeError")
def _(b: Builder) -> None:
    b.raw_tree([M[3], b"\x05"])


@case("tree-big-int-at-limit", "Big ints whose magnitude takes exactly 1,024 bytes (R-LIM-18), positive and "
      "negative: 2,466 and 2,467 decimal digits, printable by every reader.", ["8.6", "R-LIM-18"])
def _(b: Builder) -> None:
    b.write({"t": tree([2**8191 - 1, -(2**8191)])})


@case("reject-big-int-over-limit", "A big int whose magnitude takes 1,025 bytes (over R-LIM-18).", ["R-LIM-18"],
      error="LimitExceeded")
def _(b: Builder) -> None:
    b.raw_tree([M[3], (2**8191).to_bytes(1025, "little", signed=True)])


@case("reject-tag-field-count", "A complex node with one field.", ["R-TREE-16"], error="TreeError")
def _(b: Builder) -> None:
    b.raw_tree([M[4], 1.0])


@case("reject-tag-field-type", "A dtype node whose field is an int.", ["R-TREE-17"], error="TreeError")
def _(b: Builder) -> None:
    b.raw_tree([M[8], 5])


@case("reject-scalar-raw-length", "A float32 typed scalar with 3 raw bytes.", ["R-TREE-23"], error="TreeError")
def _(b: Builder) -> None:
    b.raw_tree([M[5], "float32", b"\x00\x00\x80"])


@case("reject-scalar-bool-byte", "A bool typed scalar with raw byte 02.", ["R-TREE-24"], error="TreeError")
def _(b: Builder) -> None:
    b.raw_tree([M[5], "bool", b"\x02"])


@case("reject-prng-shape", "A threefry2x32 key whose data's last dimension is 4.", ["R-TREE-27"],
      error="TreeError")
def _(b: Builder) -> None:
    data = np.arange(4, dtype=np.uint32).tobytes()
    b.raw_tree([M[7], "threefry2x32", array_node("uint32", [4], 0, data)], data)


@case("reject-prng-dtype", "A PRNG key whose data is int32.", ["R-TREE-26"], error="TreeError")
def _(b: Builder) -> None:
    data = np.arange(2, dtype=np.int32).tobytes()
    b.raw_tree([M[7], "threefry2x32", array_node("int32", [2], 0, data)], data)


@case("reject-named-tuple-key", "A named tuple whose fields map has an int key.", ["R-TREE-20"], error="TreeError")
def _(b: Builder) -> None:
    b.raw_tree([M[2], "T", {1: None}])


@case("reject-shape-negative", "An array node whose shape holds a negative int.", ["R-ARR-1"], error="TreeError")
def _(b: Builder) -> None:
    b.raw_tree([[M[6], "uint8", [-1], 0, 0, 0]])


@case("reject-depth-129", "A tree nested one level deeper than the limit of 128.", ["R-LIM-10"],
      error="LimitExceeded")
def _(b: Builder) -> None:
    b.write({"t": tree(None)})
    b.put("t", "tree.msgpack", b"\x91" * 129 + b"\xc0")


@case("reject-ndim-65", "An array with 65 dimensions.", ["R-LIM-13"], error="LimitExceeded")
def _(b: Builder) -> None:
    data = bytes([7])
    b.raw_tree([array_node("uint8", [1] * 65, 0, data)], data)


@case("reject-shape-overflow", "An array whose running shape product reaches 2^63 although one dimension is 0.",
      ["R-LIM-15"], error="LimitExceeded")
def _(b: Builder) -> None:
    b.raw_tree([[M[6], "float32", [2**62, 4, 0], 0, 0, 0]])


@case("reject-extension-required", "An extension with must_understand true that no reader understands.",
      ["R-EXT-7"], error="UnsupportedExtension")
def _(b: Builder) -> None:
    b.write({"w": tree(np.ones(1, np.float32))},
            extensions={"com.example.required": {"version": 1, "must_understand": True, "data": None}})


@case("reject-extension-reserved", "The reserved extension org.opencheckpoint.sharding with must_understand true.",
      ["R-EXT-9", "7.3"], error="UnsupportedExtension")
def _(b: Builder) -> None:
    b.write({"w": tree(np.ones(1, np.float32))},
            extensions={"org.opencheckpoint.sharding": {"version": 1, "must_understand": True, "data": {}}})


@case("reject-format-version-2", "format_version 2 (newer than this specification).", ["R-VER-3", "R-VER-1"],
      error="UnsupportedVersion")
def _(b: Builder) -> None:
    small(b)
    b.edit(lambda m: m.update(format_version=2))


@case("format-version-1-any-reader", "A checkpoint of format version 1 with a tree and a json component: every "
      "reader reads it, whatever the newest format version it supports; a reader of a newer version checks it "
      "against version 1's rules and migrates it (1 -> 2 changes no payload), so its rendering is this one.",
      ["R-VER-4", "R-VER-5"])
def _(b: Builder) -> None:
    b.write({"model": tree({"w": np.arange(6, dtype=np.float32).reshape(2, 3), "step": 3}),
             "config": jsonc({"lr": 0.5})})


@case("reject-format-version-future", "format_version 7: the error message states the version found (7) and the "
      "highest version the reader supports (1).", ["R-VER-3", "R-VER-15"], error="UnsupportedVersion",
      message=["7", "1"])
def _(b: Builder) -> None:
    small(b)
    b.edit(lambda m: m.update(format_version=7))


@case("reject-kind-version", "A json component with kind_version 2.", ["R-CMP-19"], error="UnsupportedVersion")
def _(b: Builder) -> None:
    b.write({"c": jsonc({"a": 1})})
    b.edit(lambda m: m["components"]["c"].update(kind_version=2))


@case("reject-manifest-duplicate-key", "A manifest object with a duplicate member name.", ["R-MAN-4"],
      error="ManifestError")
def _(b: Builder) -> None:
    small(b)
    data = b.read("manifest.json")
    head = data[: -32]
    head = head.replace(b'"metadata": {}', b'"metadata": {"a": 1, "a": 2}', 1)
    (b.root / "manifest.json").write_bytes(head + f'"manifest_crc32c": "{format_crc32c(crc32c_of(head))}"\n}}\n'
                                           .encode())


@case("reject-manifest-nan", "A manifest containing the token NaN.", ["R-MAN-3"], error="ManifestError")
def _(b: Builder) -> None:
    small(b)
    head = b.read("manifest.json")[:-32].replace(b'"metadata": {}', b'"metadata": {"x": NaN}', 1)
    (b.root / "manifest.json").write_bytes(head + f'"manifest_crc32c": "{format_crc32c(crc32c_of(head))}"\n}}\n'
                                           .encode())


@case("reject-manifest-bom", "A manifest starting with a UTF-8 byte order mark.", ["R-MAN-2"],
      error="ManifestError")
def _(b: Builder) -> None:
    small(b)
    head = b"\xef\xbb\xbf" + b.read("manifest.json")[:-32]
    (b.root / "manifest.json").write_bytes(head + f'"manifest_crc32c": "{format_crc32c(crc32c_of(head))}"\n}}\n'
                                           .encode())


@case("reject-manifest-unknown-member", "A top-level manifest member not in Table 5-1.", ["R-MAN-12"],
      error="ManifestError")
def _(b: Builder) -> None:
    small(b)
    b.edit(lambda m: m.update(comment="not allowed"))


@case("reject-manifest-bad-date", "created_at names February 30.", ["R-MAN-15"], error="ManifestError")
def _(b: Builder) -> None:
    small(b)
    b.edit(lambda m: m.update(created_at="2026-02-30T00:00:00Z"))


@case("reject-manifest-float-size", "A file size written as 3.0.", ["R-MAN-7"], error="ManifestError")
def _(b: Builder) -> None:
    b.write({"f": filesc({"a.bin": b"abc"})})
    head = b.read("manifest.json")[:-32].replace(b'"size": 3', b'"size": 3.0', 1)
    (b.root / "manifest.json").write_bytes(head + f'"manifest_crc32c": "{format_crc32c(crc32c_of(head))}"\n}}\n'
                                           .encode())


@case("reject-crc-uppercase", "A file crc32c written in uppercase hex.", ["R-CHK-4"], error="ManifestError")
def _(b: Builder) -> None:
    b.write({"f": filesc({"a.bin": b"abc"})})
    b.edit(lambda m: m["components"]["f"]["files"]["a.bin"].update(
        crc32c=m["components"]["f"]["files"]["a.bin"]["crc32c"].upper()))


@case("reject-tree-files", "A tree component whose inventory lacks data.bin.", ["R-CMP-16"], error="ManifestError")
def _(b: Builder) -> None:
    small(b)
    (b.root / "components/m/data.bin").unlink()
    b.edit(lambda m: m["components"]["m"]["files"].pop("data.bin"))


@case("reject-kind-pattern", "A kind that is neither built-in nor namespaced.", ["R-CMP-4"],
      error="ManifestError")
def _(b: Builder) -> None:
    b.write({"f": filesc({"a.bin": b"abc"})})
    b.edit(lambda m: m["components"]["f"].update(kind="custom"))


@case("reject-json-value-nan", "A json component whose value.json contains NaN.", ["R-CMP-18"],
      error="ManifestError")
def _(b: Builder) -> None:
    b.write({"c": jsonc({"a": 1})})
    b.put("c", "value.json", b'{"a": NaN}\n')


@case("reject-json-depth", "A value.json nested 65 levels deep.", ["R-LIM-3"], error="LimitExceeded")
def _(b: Builder) -> None:
    b.write({"c": jsonc(1)})
    b.put("c", "value.json", b"[" * 65 + b"]" * 65)


@case("reject-json-big-int", "A value.json integer above 2^53-1.", ["R-LIM-4"], error="LimitExceeded")
def _(b: Builder) -> None:
    b.write({"c": jsonc(1)})
    b.put("c", "value.json", b"9007199254740992\n")


@case("reject-segment-length", "A files key segment of 129 bytes.", ["R-LIM-8"], error="LimitExceeded")
def _(b: Builder) -> None:
    b.write({"f": filesc({"a" * 129: b"x"})})


# -- archive must-reject cases ---------------------------------------------------------------------
@case("reject-zip-compressed", "An archive member stored with deflate (method 8).", ["R-ZIP-5"],
      error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [Member(m.name, m.data, method=8 if m.name.endswith("data.bin") else 0)
                                for m in ms])


@case("reject-zip-misaligned", "An archive member whose data does not start at a multiple of 64.", ["R-ZIP-18"],
      error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [Member(m.name, m.data, misalign=m.name.endswith("data.bin")) for m in ms])


@case("reject-zip-duplicate-name", "Two central directory entries with the same name.", ["R-ZIP-11"],
      error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [ms[0], Member(ms[0].name, ms[0].data), *ms[1:]])


@case("reject-zip-name-mismatch", "A local header name differs from its central directory name.", ["R-ZIP-12"],
      error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [Member(m.name, m.data, local_name=m.name.replace("data.bin", "data.bIn"))
                                for m in ms])


@case("reject-zip-data-descriptor", "A member written with a data descriptor (flag bit 3).", ["R-ZIP-8"],
      error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [Member(m.name, m.data, descriptor=m.name.endswith("data.bin")) for m in ms])


@case("reject-zip-encrypted", "A member with the encryption flag (bit 0) set.", ["R-ZIP-7"], error="ArchiveError",
      form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [Member(m.name, m.data, flags=1 if m.name.endswith("data.bin") else 0) for m in ms])


@case("reject-zip-comment", "An archive with a ZIP comment (the EOCD is not the last 22 bytes).", ["R-ZIP-2"],
      error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, comment=b"hello")


@case("reject-zip-prefix", "An archive with bytes before the first local header.", ["R-ZIP-1"],
      error="NotACheckpoint", form="archive")
def _(b: Builder) -> None:
    archive_case(b, prefix=bytes(64))


@case("reject-zip-manifest-not-last", "manifest.json is not the last central directory entry.", ["R-ZIP-21"],
      error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [ms[-1], *ms[:-1]])


@case("reject-zip-unsafe-member", "An archive member named with '..' that no component lists.", ["R-PATH-5"],
      error="UnsafePath", form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [Member("../evil", b"x"), *ms])


@case("reject-zip-symlink-member", "A member whose UNIX external attributes mark it as a symlink.",
      ["R-ZIP-17"], error="UnsafePath", form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [Member(m.name, m.data, external=(0o120777 << 16) if m.name.endswith("data.bin")
                                       else m.external) for m in ms])


@case("reject-zip-bad-crc32", "A member's ZIP CRC-32 does not match its data (CRC-32C in the manifest does).",
      ["R-ZIP-22"], error="IntegrityError", form="archive")
def _(b: Builder) -> None:
    archive_case(b)
    data = bytearray(b.root.read_bytes())
    # the first member's local CRC-32 (offset 14) and its central entry's (found by signature) both changed
    data[14] ^= 0xFF
    central = data.find(b"PK\x01\x02")
    data[central + 16] ^= 0xFF
    b.root.write_bytes(bytes(data))


# -- more coverage: archive structure ----------------------------------------------------------------
def _is_data(m: Member) -> bool:
    return m.name.endswith("data.bin")


@case("archive-foreign-padding-id", "An archive built member by member whose alignment padding uses an extra "
      "field id other than 0xd935, plus an unknown extra field; readers ignore both.", ["R-ZIP-23", "3.3"],
      form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [Member(m.name, m.data, pad_id=0xCAFE, extra=struct.pack("<HH", 0xBEEF, 4) + b"abcd")
                                for m in ms])
    b.intended = None


@case("reject-zip-disk-number", "An end of central directory record naming disk 1.", ["R-ZIP-3"],
      error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, disk=1)


@case("reject-zip-entry-count", "The EOCD total entry count differs from the number of central entries.",
      ["R-ZIP-4"], error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, count_delta=1)


@case("reject-zip-size-mismatch", "A stored member whose central compressed size differs from its size.",
      ["R-ZIP-6"], error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [Member(m.name, m.data, central_csize=len(m.data) - 1 if _is_data(m) else None)
                                for m in ms])


@case("reject-zip-strong-encryption", "A member with general purpose bit 6 (strong encryption) set.",
      ["R-ZIP-9"], error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [Member(m.name, m.data, flags=0x40 if _is_data(m) else 0) for m in ms])


@case("reject-zip-directory-entry", "An archive with a directory entry (name ending in '/').", ["R-ZIP-10"],
      error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [Member("components/", b""), *ms])


@case("reject-zip-local-crc", "A local header CRC-32 differing from the central directory CRC-32.", ["R-ZIP-13"],
      error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [Member(m.name, m.data, local_crc_xor=1 if _is_data(m) else 0) for m in ms])


@case("reject-zip-local-size", "Local header sizes differing from the central directory sizes.", ["R-ZIP-14"],
      error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [Member(m.name, m.data, local_size_delta=-1 if _is_data(m) else 0) for m in ms])


@case("reject-zip-zip64-missing", "A central size of 0xffffffff without a ZIP64 extra field.", ["R-ZIP-15"],
      error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [Member(m.name, m.data, central_csize=0xFFFFFFFF if _is_data(m) else None)
                                for m in ms])


@case("reject-zip-unicode-path", "A member carrying an Info-ZIP Unicode Path extra field (0x7075).", ["R-ZIP-16"],
      error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    def tweak(ms: list[Member]) -> list[Member]:
        out = []
        for m in ms:
            name = m.name.encode()
            field_data = b"\x01" + struct.pack("<I", zlib.crc32(name)) + name
            extra = struct.pack("<HH", 0x7075, len(field_data)) + field_data if _is_data(m) else b""
            out.append(Member(m.name, m.data, extra=extra))
        return out
    archive_case(b, tweak)


@case("reject-zip-gap", "Bytes between one member's data and the next local header.", ["R-ZIP-19"],
      error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [Member(m.name, m.data, gap_after=bytes(64) if m is ms[0] else b"") for m in ms])


@case("reject-zip-cd-gap", "Bytes between the last member's data and the central directory.", ["R-ZIP-20"],
      error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, cd_gap=bytes(16))


@case("reject-zip-not-zip", "A regular file that is not a ZIP archive.", ["R-ZIP-1"],
      error="NotACheckpoint", form="archive")
def _(b: Builder) -> None:
    b.root.write_bytes(b"this is not an archive\n")


# -- more coverage: manifest -------------------------------------------------------------------------
def _raw_manifest(b: Builder, head: bytes) -> None:
    """Write manifest bytes ``head`` followed by a correct checksum suffix."""
    (b.root / "manifest.json").write_bytes(head + f'"manifest_crc32c": "{format_crc32c(crc32c_of(head))}"\n}}\n'
                                           .encode())


def _replace_in_manifest(b: Builder, old: bytes, new: bytes) -> None:
    head = b.read("manifest.json")[:-32]
    if old not in head:
        raise AssertionError(f"{old!r} not in manifest")
    _raw_manifest(b, head.replace(old, new, 1))


def _manifest_case(case_id: str, description: str, sections: list[str], error: str,
                   change: Callable[[dict[str, Any]], None]) -> None:
    def build(b: Builder) -> None:
        b.write({"f": filesc({"a.bin": b"abc"})}, extensions={"com.example.x": {"version": 1,
                                                                               "must_understand": False,
                                                                               "data": None}})
        b.edit(change)
    case(case_id, description, sections, error=error)(build)


def _set(path: list[str], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(m: dict[str, Any]) -> None:
        target = m
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


def _drop(path: list[str]) -> Callable[[dict[str, Any]], None]:
    def change(m: dict[str, Any]) -> None:
        target = m
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return change


_manifest_case("reject-not-opencheckpoint", "A manifest whose format is not \"opencheckpoint\".", ["R-MAN-9"],
               "NotACheckpoint", _set(["format"], "othercheckpoint"))
_manifest_case("reject-format-version-string", "format_version written as the string \"1\".", ["R-MAN-10"],
               "ManifestError", _set(["format_version"], "1"))
_manifest_case("reject-format-version-zero", "format_version 0.", ["R-MAN-10"], "ManifestError",
               _set(["format_version"], 0))
_manifest_case("reject-manifest-missing-member", "A manifest without created_at.", ["R-MAN-11"], "ManifestError",
               _drop(["created_at"]))
_manifest_case("reject-checkpoint-id", "A checkpoint_id with a space.", ["R-MAN-13"], "ManifestError",
               _set(["checkpoint_id"], "has space"))
_manifest_case("reject-created-at-format", "created_at without the Z suffix.", ["R-MAN-14"], "ManifestError",
               _set(["created_at"], "2026-01-01T00:00:00+00:00"))
_manifest_case("reject-producer-type", "producer is a string.", ["R-MAN-16"], "ManifestError",
               _set(["producer"], "me"))
_manifest_case("reject-producer-name-empty", "producer.name is empty.", ["R-MAN-17"], "ManifestError",
               _set(["producer", "name"], ""))
_manifest_case("reject-producer-version-long", "producer.version has 129 code points.", ["R-MAN-18"],
               "ManifestError", _set(["producer", "version"], "é" * 129))
_manifest_case("reject-producer-environment", "producer.environment holds a number.", ["R-MAN-19"],
               "ManifestError", _set(["producer", "environment"], {"python": 3}))
_manifest_case("reject-producer-member", "producer has a member other than name, version, environment.",
               ["R-MAN-20"], "ManifestError", _set(["producer", "url"], "https://example.com"))
_manifest_case("reject-metadata-type", "metadata is an array.", ["R-MAN-21"], "ManifestError",
               _set(["metadata"], []))
_manifest_case("reject-extensions-type", "extensions is an array.", ["R-MAN-22"], "ManifestError",
               _set(["extensions"], []))
_manifest_case("reject-components-type", "components is an array.", ["R-MAN-23"], "ManifestError",
               _set(["components"], []))
_manifest_case("reject-component-name", "A component name starting with '-'.", ["R-CMP-1"], "ManifestError",
               lambda m: m["components"].update({"-bad": m["components"].pop("f")}))
_manifest_case("reject-component-no-files", "A component record without files.", ["R-CMP-2"], "ManifestError",
               _drop(["components", "f", "files"]))
_manifest_case("reject-component-member", "A component record with an unknown member.", ["R-CMP-3"],
               "ManifestError", _set(["components", "f", "owner"], "me"))
_manifest_case("reject-kind-version-zero", "kind_version 0.", ["R-CMP-5"], "ManifestError",
               _set(["components", "f", "kind_version"], 0))
_manifest_case("reject-component-path-manifest", "A component whose path is MANIFEST.JSON.", ["R-CMP-8"],
               "UnsafePath", lambda m: m["components"].update(g={"kind": "files", "kind_version": 1,
                                                                 "path": "MANIFEST.JSON", "files": {}}))
_manifest_case("reject-files-type", "files is an array.", ["R-CMP-9"], "ManifestError",
               _set(["components", "f", "files"], []))
_manifest_case("reject-hints-type", "A hint value that is a number.", ["R-CMP-10"], "ManifestError",
               _set(["components", "f", "hints"], {"framework": 1}))
_manifest_case("reject-component-metadata-type", "Component metadata that is a string.", ["R-CMP-11"],
               "ManifestError", _set(["components", "f", "metadata"], "x"))
_manifest_case("reject-file-entry-no-crc", "A file entry without crc32c.", ["R-CMP-13"], "ManifestError",
               _drop(["components", "f", "files", "a.bin", "crc32c"]))
_manifest_case("reject-file-entry-member", "A file entry with an unknown member.", ["R-CMP-14"], "ManifestError",
               _set(["components", "f", "files", "a.bin", "md5"], "x"))
_manifest_case("reject-file-size-negative", "A file size of -1.", ["R-CMP-15"], "ManifestError",
               _set(["components", "f", "files", "a.bin", "size"], -1))
_manifest_case("reject-sha256-format", "A sha256 member with uppercase hex digits.", ["R-CHK-5"], "ManifestError",
               _set(["components", "f", "files", "a.bin", "sha256"], "A" * 64))
_manifest_case("reject-extension-name", "An extension name that is not reverse DNS.", ["R-EXT-1"],
               "ManifestError", lambda m: m["extensions"].update({"Telemetry": m["extensions"].pop("com.example.x")}))
_manifest_case("reject-extension-no-data", "An extension record without data.", ["R-EXT-2"], "ManifestError",
               _drop(["extensions", "com.example.x", "data"]))
_manifest_case("reject-extension-member", "An extension record with an unknown member.", ["R-EXT-3"],
               "ManifestError", _set(["extensions", "com.example.x", "required"], True))
_manifest_case("reject-extension-version", "An extension version of 0.", ["R-EXT-4"], "ManifestError",
               _set(["extensions", "com.example.x", "version"], 0))
_manifest_case("reject-extension-must-understand-type", "must_understand written as 0.", ["R-EXT-5"],
               "ManifestError", _set(["extensions", "com.example.x", "must_understand"], 0))
_manifest_case("reject-path-length", "A component path of more than 1024 bytes.", ["R-LIM-7"], "LimitExceeded",
               _set(["components", "f", "path"], "/".join(["p" * 100] * 11)))
_manifest_case("reject-manifest-big-int", "A manifest integer above 2^53-1.", ["R-LIM-4"], "LimitExceeded",
               _set(["metadata"], {"n": 2**53}))


@case("reject-json-component-files", "A json component whose inventory has a second file.", ["R-CMP-17"],
      error="ManifestError")
def _(b: Builder) -> None:
    b.write({"c": jsonc({"a": 1})})
    (b.root / "components/c/extra.txt").write_bytes(b"x")
    b.edit(_set(["components", "c", "files", "extra.txt"], {"size": 1, "crc32c": format_crc32c(crc32c_of(b"x"))}))


@case("reject-component-path-prefix", "A component path that is a directory prefix of another's.", ["R-CMP-7"],
      error="UnsafePath")
def _(b: Builder) -> None:
    b.write({"f": filesc({"a.bin": b"x"}, path="comp"), "g": filesc({"b.bin": b"y"}, path="comp/inner")})


@case("reject-manifest-utf8", "A manifest with an invalid UTF-8 byte in a string.", ["R-MAN-1"],
      error="ManifestError")
def _(b: Builder) -> None:
    small(b)
    _replace_in_manifest(b, b'"metadata": {}', b'"metadata": {"x": "\xff"}')


@case("reject-manifest-surrogate", "A manifest string with a lone escaped surrogate.", ["R-MAN-5"],
      error="ManifestError")
def _(b: Builder) -> None:
    small(b)
    _replace_in_manifest(b, b'"metadata": {}', b'"metadata": {"x": "\\ud800"}')


@case("reject-manifest-huge-number", "A manifest number that overflows binary64 (1e400).", ["R-MAN-6"],
      error="ManifestError")
def _(b: Builder) -> None:
    small(b)
    _replace_in_manifest(b, b'"metadata": {}', b'"metadata": {"x": 1e400}')


@case("reject-manifest-array", "A manifest whose top-level value is an array.", ["R-MAN-8"],
      error="NotACheckpoint")
def _(b: Builder) -> None:
    small(b)
    (b.root / "manifest.json").write_bytes(b"[]\n")


@case("manifest-suffix-whitespace", "A manifest with tabs and CR LF between the last comma and the checksum "
      "member; the checksum is located by position.", ["R-CHK-1", "R-CHK-2", "5.5"])
def _(b: Builder) -> None:
    b.write({"w": tree(np.ones(1, np.float32))})
    head = b.read("manifest.json")[:-32].rstrip(b" \n") + b"\r\n\t \t"
    _raw_manifest(b, head)


@case("reject-version-first", "format_version 2 together with an unknown top-level member: the version is "
      "examined first.", ["R-VER-2", "R-RDR-1", "R-RDR-11"], error="UnsupportedVersion")
def _(b: Builder) -> None:
    small(b)
    b.edit(lambda m: m.update(format_version=2, unknown_member=True))


@case("reject-path-missing", "A path that does not exist (and has no .oc-old candidate).", ["R-PUB-10"],
      error="NotACheckpoint", read_path="does-not-exist")
def _(b: Builder) -> None:
    (b.dir / "placeholder.txt").write_text("the case reads does-not-exist, which is absent on purpose\n")


@case("reject-old-fallback-ambiguous", "The target is absent and two .oc-old candidates open: neither is read.",
      ["R-PUB-14"], error="NotACheckpoint", requires=["old-fallback"], read_path="ckpt")
def _(b: Builder) -> None:
    b.write({"w": tree(np.ones(2, np.float32))}, target=b.dir / ".ckpt.oc-old-first111")
    b.write({"w": tree(np.zeros(2, np.float32))}, target=b.dir / ".ckpt.oc-old-second22")


@case("reject-symlink-dir", "A component directory that is a symbolic link to a directory.", ["R-CON-4",
      "R-CON-6", "R-CON-7"], error="UnsafePath", requires=["symlinks"])
def _(b: Builder) -> None:
    b.write({"f": filesc({"a.bin": b"abc"})})
    os.rename(b.root / "components/f", b.dir / "outside")
    os.symlink("../../outside", b.root / "components/f")


@case("reject-str-length-prefix", "A str whose length prefix declares 4 GiB in a 10-byte file: the limit is "
      "checked before allocating.", ["R-LIM-12", "R-LIM-0", "R-RDR-2"], error="LimitExceeded")
def _(b: Builder) -> None:
    b.write({"t": tree(None)})
    b.put("t", "tree.msgpack", b"\xdb\xff\xff\xff\xffabcde")


@case("reject-dimension-too-big", "An array dimension of 2^63.", ["R-LIM-14"], error="LimitExceeded")
def _(b: Builder) -> None:
    b.raw_tree([[M[6], "uint8", [2**63, 0], 0, 0, 0]])


@case("reject-nbytes-too-big", "An array nbytes of 2^63.", ["R-LIM-16"], error="LimitExceeded")
def _(b: Builder) -> None:
    b.raw_tree([[M[6], "uint8", [1], 0, 2**63, 0]])


@case("reject-offset-negative", "An array offset of -64.", ["R-ARR-2"], error="TreeError")
def _(b: Builder) -> None:
    b.raw_tree([[M[6], "uint8", [0], -64, 0, 0]])


@case("reject-crc-too-big", "An array crc32c of 2^32.", ["R-ARR-3"], error="TreeError")
def _(b: Builder) -> None:
    b.raw_tree([[M[6], "uint8", [0], 0, 0, 2**32]])


@case("reject-empty-array-crc", "A zero-byte array with a nonzero crc32c.", ["R-ARR-7"], error="ArrayLayoutError")
def _(b: Builder) -> None:
    b.raw_tree([[M[6], "uint8", [0], 0, 0, 5]])


@case("reject-alias-crc", "Two array nodes with identical extents but different crc32c values.", ["R-ARR-10"],
      error="ArrayLayoutError")
def _(b: Builder) -> None:
    data = bytes(range(1, 9))
    node = array_node("uint8", [8], 0, data)
    b.raw_tree([node, [*node[:5], node[5] ^ 1]], data)


@case("reject-prng-impl", "A PRNG key whose impl is neither built-in nor namespaced.", ["R-TREE-25"],
      error="TreeError")
def _(b: Builder) -> None:
    data = np.arange(2, dtype=np.uint32).tobytes()
    b.raw_tree([M[7], "Philox", array_node("uint32", [2], 0, data)], data)


@case("reject-prng-rbg-shape", "An rbg key whose data's last dimension is 2.", ["R-TREE-28"], error="TreeError")
def _(b: Builder) -> None:
    data = np.arange(2, dtype=np.uint32).tobytes()
    b.raw_tree([M[7], "rbg", array_node("uint32", [2], 0, data)], data)


@case("tree-type-name-not-imported", "Hints and a named tuple type_name naming modules that do not exist: "
      "a reader never imports them.", ["R-CMP-12", "R-RDR-3"])
def _(b: Builder) -> None:
    b.write({"t": tree(NamedTupleValue("oc_conformance_no_such_module.Evil", {"x": 1}),
                       hints={"class": "oc_conformance_no_such_module.Evil", "framework": "os.system"})})


@case("tree-all-node-types", "One tree holding every node type of Table 8-1 and 8-2 once.", ["8", "R-RDR-6",
      "R-RDR-5"])
def _(b: Builder) -> None:
    b.write({"t": tree({"none": None, "bool": True, "int": -3, "big": 2**70, "float": 0.25, "str": "s",
                        "bytes": b"\x01", "list": [1], "tuple": (1,), "dict": {2: "x"},
                        "nt": NamedTupleValue("pkg.NT", {"a": 1}), "complex": 1j, "scalar": np.int16(-2),
                        "array": np.arange(3, dtype=np.uint16),
                        "key": PRNGKeyValue("threefry2x32", np.array([1, 2], np.uint32)),
                        "dtype": DtypeValue("complex64")})})


# -- pre-release clarifications (spec/CHANGELOG.md, 1.0.0) ----------------------------------------------
def _zip64_end_records(raw: bytes, *, declared: int | None = None, saturate: bool = False) -> bytes:
    """``raw`` with a ZIP64 end of central directory record and locator inserted before its end record."""
    sig, disk, cd_disk, n_disk, n_total, cd_size, cd_off, comment_len = struct.unpack("<IHHHHIIH", raw[-22:])
    body = raw[:-22]
    count = n_total if declared is None else declared
    record = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x031E, 45, 0, 0, count, count, cd_size, cd_off)
    locator = struct.pack("<IIQI", 0x07064B50, 0, len(body), 1)
    if saturate:
        n_disk = n_total = 0xFFFF
    return body + record + locator + struct.pack("<IHHHHIIH", sig, disk, cd_disk, n_disk, n_total, cd_size, cd_off,
                                                 comment_len)


@case("old-fallback-skips-incomplete", "The target is absent; of two .oc-old candidates one lacks a listed file "
      "(it fails step 10, so it does not open) and the other opens: a reader reads the one that opens.",
      ["R-PUB-13", "R-PUB-14", "2.3", "15"], requires=["old-fallback"], read_path="ckpt")
def _(b: Builder) -> None:
    broken = b.write({"f": filesc({"a.bin": b"abc", "b.bin": b"d"})}, target=b.dir / ".ckpt.oc-old-first111")
    (broken / "components/f/b.bin").unlink()
    b.write({"f": filesc({"a.bin": b"xyz"})}, target=b.dir / ".ckpt.oc-old-second22")


@case("reject-old-fallback-content", "The target is absent and its only .oc-old candidate passes steps 1-11 (so it "
      "opens) but a file's content fails its crc32c: reading it reports that error.", ["R-PUB-13", "R-CHK-7", "2.3"],
      error="IntegrityError", requires=["old-fallback"], read_path="ckpt")
def _(b: Builder) -> None:
    old = b.write({"f": filesc({"a.bin": b"abc"})}, target=b.dir / ".ckpt.oc-old-Ab3dE5gH")
    (old / "components/f/a.bin").write_bytes(b"abX")


@case("old-fallback-archive", "The only .oc-old candidate is a regular file without a .zip suffix: its form "
      "follows its type, so it is read as an archive.", ["R-PUB-13", "3.3"], form="archive",
      requires=["old-fallback"], read_path="ckpt")
def _(b: Builder) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        staged = b.write({"w": tree(np.ones(2, np.float32))}, target=Path(tmp) / "c")
        members = members_of(staged)
    (b.dir / ".ckpt.oc-old-Qw3rTy7u").write_bytes(zip_bytes(members))


@case("reject-listed-directory", "A listed file's path holds a directory (with a file in it): the listed file is "
      "not a regular file.", ["R-CON-3", "15"], error="MissingFile")
def _(b: Builder) -> None:
    b.write({"f": filesc({"a.bin": b"abc", "b.bin": b"d"})})
    (b.root / "components/f/b.bin").unlink()
    (b.root / "components/f/b.bin").mkdir()
    (b.root / "components/f/b.bin/inner").write_bytes(b"d")


@case("reject-zip-manifest-compressed", "The manifest.json member is stored with deflate: its member rules are "
      "checked in step 2, before its bytes are parsed.", ["R-ZIP-5", "15"], error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [Member(m.name, m.data, method=8 if m.name == "manifest.json" else 0) for m in ms])


@case("reject-zip-manifest-crc32", "The ZIP CRC-32 of the manifest.json member (local and central) does not match "
      "its data; the manifest's own checksum is right.", ["R-ZIP-22"], error="IntegrityError", form="archive")
def _(b: Builder) -> None:
    archive_case(b)
    data = bytearray(b.root.read_bytes())
    central = data.rfind(b"PK\x01\x02")  # the last central entry is manifest.json (R-ZIP-21)
    local = struct.unpack_from("<I", data, central + 42)[0]
    data[local + 14] ^= 0xFF
    data[central + 16] ^= 0xFF
    b.root.write_bytes(bytes(data))


@case("reject-zip-eocd-gap", "Bytes between the central directory and the end of central directory record.",
      ["R-ZIP-24"], error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b)
    raw = b.root.read_bytes()
    b.root.write_bytes(raw[:-22] + bytes(8) + raw[-22:])


@case("reject-zip-entry-disk", "A central directory entry whose disk number start is 1.", ["R-ZIP-3"],
      error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b)
    data = bytearray(b.root.read_bytes())
    central = data.find(b"PK\x01\x02")
    struct.pack_into("<H", data, central + 34, 1)
    b.root.write_bytes(bytes(data))


@case("archive-zip64-end-records", "An archive with a ZIP64 end of central directory record and locator although "
      "no field is saturated (allowed; its unsaturated values are not used).", ["R-ZIP-15", "3.3"], form="archive")
def _(b: Builder) -> None:
    archive_case(b)
    b.root.write_bytes(_zip64_end_records(b.root.read_bytes()))


@case("reject-zip-extra-malformed", "A member whose extra field area ends with a partial record (one stray byte).",
      ["R-ZIP-25", "R-ZIP-23"], error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    stray = struct.pack("<HH", 0xBEEF, 2) + b"ab" + b"\x00"
    archive_case(b, lambda ms: [Member(m.name, m.data, extra=stray if _is_data(m) else b"") for m in ms])


@case("reject-zip-entry-count-limit", "A ZIP64 end record declaring 2,000,000 entries (3 present): the declared "
      "count is checked against the limit before R-ZIP-4.", ["R-LIM-17", "R-LIM-0", "15"], error="LimitExceeded",
      form="archive")
def _(b: Builder) -> None:
    archive_case(b)
    b.root.write_bytes(_zip64_end_records(b.root.read_bytes(), declared=2_000_000, saturate=True))


@case("reject-node-count-declared", "An array 32 header declaring 20,000,000 elements in a 7-byte tree.msgpack: "
      "the node count limit applies to declared objects, before truncation.", ["R-LIM-11", "R-LIM-0", "8.8"],
      error="LimitExceeded")
def _(b: Builder) -> None:
    b.write({"t": tree(None)})
    b.put("t", "tree.msgpack", b"\xdd" + struct.pack(">I", 20_000_000) + b"\xc0\xc0")


@case("reject-format-version-float", "format_version written as 2.0: not an integer token, so ManifestError in "
      "step 5, not UnsupportedVersion.", ["R-MAN-10", "R-MAN-7"], error="ManifestError")
def _(b: Builder) -> None:
    small(b)
    _replace_in_manifest(b, b'"format_version": 1', b'"format_version": 2.0')


@case("reject-year-zero-then-data", "created_at 0000-02-29 is valid (year 0000 is a proleptic Gregorian leap "
      "year), so the only defect is a changed byte of a files component found in step 16: IntegrityError, not "
      "ManifestError. (Valid cases keep the fixed created_at, so this rule is pinned through a later defect.)",
      ["R-MAN-15", "R-MAN-14"], error="IntegrityError")
def _(b: Builder) -> None:
    b.write({"f": filesc({"a.bin": b"abc"})})
    b.edit(lambda m: m.update(created_at="0000-02-29T00:00:00Z"))
    (b.root / "components/f/a.bin").write_bytes(b"abX")


@case("reject-path-under-manifest", "A file MANIFEST.JSON/x/k: manifest.json is a directory prefix of it after "
      "case folding (archive form, so the file tree can hold both).", ["R-PATH-4"], error="UnsafePath",
      form="archive")
def _(b: Builder) -> None:
    b.write({"f": filesc({"k": b"x"}, path="MANIFEST.JSON/x")})


@case("reject-segment-length-utf8", "A component path segment of 100 characters 'é' (200 UTF-8 bytes): limits "
      "count bytes and come before the grammar.", ["R-LIM-8", "R-LIM-7", "4"], error="LimitExceeded")
def _(b: Builder) -> None:
    small(b)
    b.edit(lambda m: m["components"]["m"].update(path="é" * 100))


@case("reject-padding-unsealed", "A padding byte of data.bin changed without updating the file entry: the array "
      "checks of step 16 (R-ARR-12) come before the file's crc32c.", ["R-ARR-12", "R-RDR-11", "15"],
      error="ArrayLayoutError")
def _(b: Builder) -> None:
    first, second = bytes([1, 2, 3, 4]), bytes([5, 6])
    data = first + bytes(60) + second
    b.raw_tree([array_node("uint8", [4], 0, first), array_node("uint8", [2], 64, second)], data)
    changed = bytearray(data)
    changed[30] = 7
    b.put("t", "data.bin", bytes(changed), reseal=False)


@case("reject-tree-sha256", "tree.msgpack's sha256 does not match (size and crc32c do).", ["R-CHK-8", "R-CHK-14"],
      error="IntegrityError")
def _(b: Builder) -> None:
    b.write({"t": tree(np.arange(3, dtype=np.int16), sha256=True)})
    b.edit(lambda m: m["components"]["t"]["files"]["tree.msgpack"].update(sha256="0" * 64))


@case("reject-files-kind-version", "A files component with kind_version 2.", ["R-CMP-19", "R-RDR-5"],
      error="UnsupportedVersion")
def _(b: Builder) -> None:
    b.write({"f": filesc({"a.bin": b"abc"})})
    b.edit(lambda m: m["components"]["f"].update(kind_version=2))


@case("reject-tag-extension-not-understood", "A tag 64 whose extension is declared with must_understand false: "
      "a reader that does not understand the extension rejects the tag.", ["R-TREE-19", "R-EXT-8"],
      error="TreeError")
def _(b: Builder) -> None:
    b.write({"t": tree(None)}, extensions={"com.example.tags": {"version": 1, "must_understand": False,
                                                                "data": {"tag": 64}}})
    b.put("t", "tree.msgpack", msgpack.packb([M[64], 1], use_bin_type=True))


@case("json-minus-zero", "value.json holding the integer token -0 (the integer 0), 0 and the float -0.0.",
      ["B.7", "B.8"])
def _(b: Builder) -> None:
    b.write({"v": jsonc(0)})
    b.put("v", "value.json", b"[-0, 0, -0.0]\n")
    b.intended = None


@case("reject-zip-unlisted-compressed", "An unlisted member that is also compressed: the member rules come before "
      "the inventory in step 10.", ["R-ZIP-5", "R-RDR-11", "15"], error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [Member("stray.bin", b"xxxx", method=8), *ms])


# -- ambiguities resolved in text revision 1.0.1 (spec/CHANGELOG.md, issue 9) -----------------------------
@case("reject-order-per-component", "Component a's tree.msgpack has a trailing byte (TreeError, R-TREE-2); "
      "component b's declares 20,000,000 elements (LimitExceeded, R-LIM-11). The groups of a per-component "
      "step run per component, so a's TreeError is reported first.", ["R-RDR-11", "R-RDR-1", "15"],
      error="TreeError")
def _(b: Builder) -> None:
    b.write({"a": tree(None), "b": tree(None)})
    b.put("a", "tree.msgpack", b"\xc0\xc0")
    b.put("b", "tree.msgpack", b"\xdd" + struct.pack(">I", 20_000_000) + b"\xc0\xc0")


@case("reject-tree-trailing-huge-header", "After a complete root object, trailing bytes that look like an array "
      "header declaring 20,000,000 elements: the limits apply to the root object only, so this is R-TREE-2.",
      ["R-TREE-2", "8.8"], error="TreeError")
def _(b: Builder) -> None:
    b.write({"t": tree(None)})
    b.put("t", "tree.msgpack", b"\xc0\xdd" + struct.pack(">I", 20_000_000) + b"\xc0")


@case("reject-tree-limit-after-fixext", "A root array whose first element is a fixext 1 object (outside the node "
      "vocabulary) and whose second declares 20,000,000 elements: nothing after the fixext is examined, so this "
      "is TreeError (R-TREE-13), not LimitExceeded.", ["R-TREE-13", "8.8"], error="TreeError")
def _(b: Builder) -> None:
    b.write({"t": tree(None)})
    b.put("t", "tree.msgpack", b"\x92\xd4\x01\x00\xdd" + struct.pack(">I", 20_000_000) + b"\xc0")


_manifest_case("reject-manifest-int-not-binary64", "A manifest integer token of 400 digits (also beyond binary64): "
               "an integer token is judged by R-LIM-4, so LimitExceeded, not ManifestError (R-MAN-6).",
               ["R-LIM-4", "R-MAN-6", "5.1"], "LimitExceeded", _set(["metadata"], {"n": 10**400}))
_manifest_case("reject-component-path-type", "A component path that is a number: a type error of the record "
               "(R-CMP-2, ManifestError in step 7), not a path error.", ["R-CMP-2", "6.1"], "ManifestError",
               _set(["components", "f", "path"], 1))


@case("reject-symlink-manifest", "manifest.json is a symbolic link to a valid manifest outside the root: R-CON-4 "
      "(UnsafePath), not R-CON-1.", ["R-CON-4", "R-CON-1", "15"], error="UnsafePath", requires=["symlinks"])
def _(b: Builder) -> None:
    b.write({"f": filesc({"a.bin": b"abc"})})
    (b.root / "manifest.json").rename(b.dir / "manifest-target.json")
    os.symlink("../manifest-target.json", b.root / "manifest.json")


@case("old-fallback-symlink", "The target is absent and the only .oc-old candidate is a symbolic link to a "
      "checkpoint directory: a candidate is followed like the caller's path, so a reader reads it.",
      ["R-PUB-13", "12.3"], requires=["old-fallback", "symlinks"], read_path="ckpt")
def _(b: Builder) -> None:
    b.write({"w": tree(np.ones(2, np.float32))}, target=b.dir / "stored")
    os.symlink("stored", b.dir / ".ckpt.oc-old-Ln4kS9mP")


def _central_entries(raw: bytes) -> list[int]:
    """Offsets of the central directory entries of an archive without ZIP64 end records."""
    count, _, cd_offset = struct.unpack_from("<HII", raw, len(raw) - 12)
    offsets, position = [], cd_offset
    for _ in range(count):
        offsets.append(position)
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", raw, position + 28)
        position += 46 + name_len + extra_len + comment_len
    return offsets


@case("archive-zip64-disk-saturated", "The end of central directory record's two disk numbers hold 0xffff and "
      "ZIP64 end records supply 0: a saturated disk number is resolved from ZIP64 (R-ZIP-15) before R-ZIP-3.",
      ["R-ZIP-15", "R-ZIP-3", "3.3"], form="archive")
def _(b: Builder) -> None:
    archive_case(b)
    raw = bytearray(_zip64_end_records(b.root.read_bytes()))
    struct.pack_into("<HH", raw, len(raw) - 18, 0xFFFF, 0xFFFF)
    b.root.write_bytes(bytes(raw))


@case("reject-zip-locator-lookalike", "The last central directory entry's file comment ends with bytes that look "
      "like a ZIP64 locator pointing at offset 0: ZIP64 end records are detected by the locator signature, so "
      "the archive is read as having one, whose record is missing (R-ZIP-15).", ["R-ZIP-15", "3.3"],
      error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b)
    raw = bytearray(b.root.read_bytes())
    last = _central_entries(bytes(raw))[-1]
    comment = struct.pack("<IIQI", 0x07064B50, 0, 0, 1)
    struct.pack_into("<H", raw, last + 32, len(comment))
    eocd = len(raw) - 22
    cd_size = struct.unpack_from("<I", raw, eocd + 12)[0]
    struct.pack_into("<I", raw, eocd + 12, cd_size + len(comment))
    b.root.write_bytes(bytes(raw[:eocd]) + comment + bytes(raw[eocd:]))


@case("reject-zip-local-zip64-one-size", "A member's local header holds 0xffffffff in both size fields but its ZIP64 "
      "extra field supplies only the uncompressed size: a local ZIP64 extra field holds both sizes (R-ZIP-15).",
      ["R-ZIP-15", "3.3"], error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [Member(m.name, m.data, extra=struct.pack("<HHQ", 1, 8, len(m.data))
                                       if _is_data(m) else b"") for m in ms])
    raw = bytearray(b.root.read_bytes())
    for entry in _central_entries(bytes(raw)):
        name_len = struct.unpack_from("<H", raw, entry + 28)[0]
        if raw[entry + 46: entry + 46 + name_len].endswith(b"data.bin"):
            local = struct.unpack_from("<I", raw, entry + 42)[0]
            struct.pack_into("<II", raw, local + 18, 0xFFFFFFFF, 0xFFFFFFFF)
    b.root.write_bytes(bytes(raw))


@case("reject-zip-local-zip64-usize-only", "A member's local header holds 0xffffffff in the uncompressed size "
      "field only (the compressed size field holds the size) and its ZIP64 extra field holds 8 bytes, the "
      "uncompressed size: a local ZIP64 extra field holds both sizes whichever is saturated (R-ZIP-15).",
      ["R-ZIP-15", "3.3"], error="ArchiveError", form="archive")
def _(b: Builder) -> None:
    archive_case(b, lambda ms: [Member(m.name, m.data, extra=struct.pack("<HHQ", 1, 8, len(m.data))
                                       if _is_data(m) else b"") for m in ms])
    raw = bytearray(b.root.read_bytes())
    for entry in _central_entries(bytes(raw)):
        name_len = struct.unpack_from("<H", raw, entry + 28)[0]
        if raw[entry + 46: entry + 46 + name_len].endswith(b"data.bin"):
            local = struct.unpack_from("<I", raw, entry + 42)[0]
            struct.pack_into("<I", raw, local + 22, 0xFFFFFFFF)  # uncompressed size; compressed size kept
    b.root.write_bytes(bytes(raw))


# ==============================================================================================
# Format version 2 (sharded arrays): registered from generate_sharded.py
# ==============================================================================================
def _register_sharded_cases() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("oc_conformance_generate_sharded", HERE / "generate_sharded.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.register(case, Builder, tree, CREATED_AT, PRODUCER)


_register_sharded_cases()


# ==============================================================================================
# Driver
# ==============================================================================================
def build_case(c: Case, out: Path) -> None:
    directory = out / c.id
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    builder = Builder(c, directory)
    c.build(builder)
    document = {"id": c.id, "description": c.description, "spec_sections": c.spec_sections, "valid": c.valid}
    if c.error_class:
        document["error_class"] = c.error_class
    document["form"] = c.form
    if c.requires:
        document["requires"] = c.requires
    if c.read_path:
        document["read_path"] = c.read_path
    if c.message_contains:
        document["message_contains"] = c.message_contains
    CaseModel.model_validate(document)
    (directory / "case.json").write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if c.valid:
        target = directory / (c.read_path or builder.root.name)
        expected = render_checkpoint(target)
        ExpectedModel.model_validate(expected, strict=False)
        if builder.intended is not None:
            diff = first_difference(_content(expected), _content(builder.intended))
            if diff:
                raise AssertionError(f"{c.id}: the reference reader does not read back what was written: {diff}")
        (directory / "expected.json").write_text(dumps(expected), encoding="utf-8")


def _content(rendering: dict[str, Any]) -> dict[str, Any]:
    """What a case means to store: the writer view without any file inventory (its sizes follow from content)."""
    view = writer_view(rendering)
    view["components"] = {n: {k: v for k, v in r.items() if k != "files"} for n, r in view["components"].items()}
    return view


def selected(patterns: list[str]) -> list[Case]:
    return [c for c in CASES.values() if not patterns or any(fnmatch.fnmatch(c.id, p) for p in patterns)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="cases directory (default: %(default)s)")
    parser.add_argument("--case", action="append", default=[], metavar="GLOB", help="only these case ids")
    parser.add_argument("--list", action="store_true", help="list case ids and exit")
    args = parser.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if args.list:
        for c in CASES.values():
            print(c.id)
        return 0
    cases = selected(args.case)
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.case:
        known = {c.id for c in CASES.values()}
        for stale in args.out.iterdir():
            if stale.is_dir() and stale.name not in known:
                shutil.rmtree(stale)
    for c in cases:
        build_case(c, args.out)
    print(f"generated {len(cases)} cases into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
