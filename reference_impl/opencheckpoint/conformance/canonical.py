"""The canonical content rendering (spec Appendix B) and its inverse.

:func:`render_checkpoint` reads a checkpoint with the reference reader and
returns its rendering (:mod:`.json_text` prints it, streamed); :func:`render_node` renders one decoded tree value;
:func:`node_value` turns a rendered node back into a value the tree encoder
writes (writer mode); :func:`renderings_equal` and :func:`writer_view`
implement the equality of Appendix B.8.

>>> import numpy as np
>>> render_node({"w": np.array([1.0], dtype=np.float32), 2: -0.0})["items"][1]
[{'int': '2'}, {'type': 'float', 'bits': '8000000000000000', 'value': '-0.0'}]
>>> render_node(2**70)
{'type': 'int', 'value': '1180591620717411303424'}
>>> value = node_value(render_node((1, "a", b"\\x00")))
>>> value
(1, 'a', b'\\x00')
>>> renderings_equal({"a": [1, 2.5]}, {"a": [1, 2.50]}), renderings_equal({"a": 1}, {"a": 1.0})
(True, False)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from ..format.dtypes import dtype_name, numpy_dtype
from ..tree.decode import empty_array
from ..tree.nodes import DtypeValue, NamedTupleValue, PRNGKeyValue

#: Appendix B.6: byte strings up to this length are rendered in full.
FULL_HEX_LIMIT: Final = 4096
#: Appendix B.6: bytes shown at each end of a digest-rendered byte string.
EDGE_BYTES: Final = 64
RENDERING_VERSION: Final = 1


class RenderingError(ValueError):
    """A value or rendering is outside Appendix B (a bug in a caller, not a file defect)."""


# -- byte strings --------------------------------------------------------------------------
def blob(data: bytes | memoryview) -> dict[str, str]:
    """Appendix B.6 members for ``data``.

    >>> blob(b"\\x01\\xff")
    {'hex': '01ff'}
    >>> sorted(blob(bytes(5000)))
    ['head', 'sha256', 'tail']
    """
    raw = bytes(data)
    if len(raw) <= FULL_HEX_LIMIT:
        return {"hex": raw.hex()}
    return {"sha256": hashlib.sha256(raw).hexdigest(), "head": raw[:EDGE_BYTES].hex(),
            "tail": raw[-EDGE_BYTES:].hex()}


def blob_bytes(node: dict[str, Any]) -> bytes:
    """The bytes of a complete blob; :class:`RenderingError` for a digest-only one."""
    if "hex" not in node:
        raise RenderingError("the rendering holds only a digest of these bytes (Appendix B.6): not writable")
    return bytes.fromhex(node["hex"])


# -- floats -----------------------------------------------------------------------------------
def float_bits(value: float) -> str:
    """Binary64 bit pattern, 16 lowercase hex digits.

    >>> float_bits(1.0), float_bits(-0.0)
    ('3ff0000000000000', '8000000000000000')
    """
    return struct.pack(">d", value).hex()


def bits_float(bits: str) -> float:
    """Inverse of :func:`float_bits` (NaN payloads preserved)."""
    return float(struct.unpack(">d", bytes.fromhex(bits))[0])


def _float_text(value: float) -> str:
    return "nan" if math.isnan(value) else repr(value)


# -- tree nodes ------------------------------------------------------------------------------
def render_array(array: np.ndarray) -> dict[str, Any]:
    """Appendix B.4 array node: dtype, shape, nbytes and the little-endian C-order bytes."""
    name = dtype_name(array.dtype)
    raw = np.ascontiguousarray(array).astype(numpy_dtype(name), copy=False).reshape(-1).view(np.uint8)
    return {"type": "array", "dtype": name, "shape": [int(d) for d in array.shape], "nbytes": int(raw.nbytes),
            **blob(raw.data if raw.nbytes else b"")}


def render_node(value: Any) -> dict[str, Any]:
    """Render a value decoded by the reference reader (NumPy framework) as Appendix B.4 node."""
    kind = type(value)
    if value is None:
        return {"type": "none"}
    if kind is bool:
        return {"type": "bool", "value": value}
    if kind is int:
        return {"type": "int", "value": str(value)}
    if kind is float:
        return {"type": "float", "bits": float_bits(value), "value": _float_text(value)}
    if kind is complex:
        return {"type": "complex", "real_bits": float_bits(value.real), "imag_bits": float_bits(value.imag),
                "value": f"({_float_text(value.real)}{'+' if value.imag >= 0 or math.isnan(value.imag) else ''}"
                         f"{_float_text(value.imag)}j)"}
    if kind is str:
        return {"type": "str", "value": value}
    if kind is bytes:
        return {"type": "bytes", "nbytes": len(value), **blob(value)}
    if kind is list:
        return {"type": "list", "items": [render_node(item) for item in value]}
    if isinstance(value, NamedTupleValue):
        return {"type": "named_tuple", "type_name": value.type_name,
                "fields": [[name, render_node(item)] for name, item in zip(value._fields, value, strict=True)]}
    if kind is tuple:
        return {"type": "tuple", "items": [render_node(item) for item in value]}
    if isinstance(value, dict):
        return {"type": "dict", "items": [[render_key(key), render_node(item)] for key, item in value.items()]}
    if isinstance(value, np.ndarray):
        return render_array(value)
    if isinstance(value, np.generic):
        name = dtype_name(value.dtype)
        return {"type": "scalar", "dtype": name, "hex": np.asarray(value).astype(numpy_dtype(name)).tobytes().hex()}
    if isinstance(value, PRNGKeyValue):
        return {"type": "prng_key", "impl": value.impl, "data": render_array(np.asarray(value.data))}
    if isinstance(value, DtypeValue):
        return {"type": "dtype", "dtype": value.name}
    if isinstance(value, np.dtype):
        return {"type": "dtype", "dtype": dtype_name(value)}
    raise RenderingError(f"no Appendix B rendering for a decoded {kind.__module__}.{kind.__qualname__}")


def render_key(key: Any) -> dict[str, str]:
    """Appendix B.4 rendering of a dict key: ``{"str": key}`` or ``{"int": "<decimal>"}``."""
    if type(key) is str:
        return {"str": key}
    if type(key) is int:
        return {"int": str(key)}
    raise RenderingError(f"dict key {key!r} is neither str nor int")


def node_value(node: dict[str, Any]) -> Any:
    """The tree value (for :func:`opencheckpoint.tree.encode.write_tree`) that a rendered node describes."""
    kind = node["type"]
    if kind == "none":
        return None
    if kind in ("bool", "str"):
        return node["value"]
    if kind == "int":
        return int(node["value"])
    if kind == "float":
        return bits_float(node["bits"])
    if kind == "complex":
        return complex(bits_float(node["real_bits"]), bits_float(node["imag_bits"]))
    if kind == "bytes":
        return blob_bytes(node)
    if kind == "list":
        return [node_value(item) for item in node["items"]]
    if kind == "tuple":
        return tuple(node_value(item) for item in node["items"])
    if kind == "dict":
        return {(key["str"] if "str" in key else int(key["int"])): node_value(item) for key, item in node["items"]}
    if kind == "named_tuple":
        return NamedTupleValue(node["type_name"], {name: node_value(item) for name, item in node["fields"]})
    if kind == "scalar":
        return np.frombuffer(bytes.fromhex(node["hex"]), dtype=numpy_dtype(node["dtype"]))[0]
    if kind == "array":
        return array_value(node)
    if kind == "prng_key":
        return PRNGKeyValue(node["impl"], array_value(node["data"]))
    if kind == "dtype":
        return DtypeValue(node["dtype"])
    raise RenderingError(f"unknown node type {kind!r}")


def array_value(node: dict[str, Any]) -> np.ndarray:
    """A writable NumPy array with the rendered dtype, shape and bytes."""
    dtype = numpy_dtype(node["dtype"])
    shape = tuple(node["shape"])
    if node["nbytes"] == 0:
        return empty_array(shape, dtype)
    return np.frombuffer(bytearray(blob_bytes(node)), dtype=dtype).reshape(shape)


# -- whole checkpoints -----------------------------------------------------------------------
def render_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Open, fully validate and decode a checkpoint; return its Appendix B rendering.

    Raises the first :class:`~opencheckpoint.format.errors.CheckpointError` that
    validation reports (spec R-RDR-5: every check happens before anything is printed).
    """
    return rendering_document(path, render_content)


def rendering_document(
    path: str | os.PathLike[str], content: Callable[[Any, str, dict[str, Any]], Any]
) -> dict[str, Any]:
    """The Appendix B document of a fully validated checkpoint, each component's content made by ``content``.

    ``content(reader, name, record)`` is :func:`render_content`, or, for the streamed rendering
    (:func:`opencheckpoint.conformance.json_text.write_checkpoint_rendering`), one that leaves trees to be
    rendered while they are written.
    """
    from ..read.reader import CheckpointReader
    from ..read.validate import validate

    report = validate(path)
    if not report.ok:
        raise first_error(report)
    with CheckpointReader(path) as reader:
        manifest = reader.manifest
        components: dict[str, Any] = {}
        for name, raw in manifest["components"].items():
            record: dict[str, Any] = {"kind": raw["kind"], "kind_version": raw["kind_version"], "path": raw["path"]}
            for optional in ("hints", "metadata"):
                if optional in raw:
                    record[optional] = raw[optional]
            record["files"] = raw["files"]
            record["content"] = content(reader, name, raw)
            components[name] = record
        return {
            "rendering": RENDERING_VERSION,
            # the source, not the path: an .oc-old fallback (R-PUB-13) is read in place of a missing path
            "form": reader.source.form,
            # as written: the rendering shows the file, not the migrated view (R-VER-5) of a v2 reader
            "format_version": reader.parsed.written_version,
            "checkpoint_id": manifest["checkpoint_id"],
            "created_at": manifest["created_at"],
            "producer": manifest["producer"],
            "metadata": manifest["metadata"],
            "extensions": manifest["extensions"],
            "components": components,
        }


def render_content(reader: Any, name: str, raw: dict[str, Any]) -> dict[str, Any]:
    """Appendix B.5 content of component ``name`` (manifest record ``raw``), read with ``reader``."""
    kind = raw["kind"]
    if kind == "tree":
        return {"type": "tree", "root": render_node(reader.read(name))}
    if kind == "json":
        return {"type": "json", "value": reader.json(name)}
    if kind == "files":
        return {"type": "files", "files": {rel: {"size": len(data), **blob(data)} for rel, data in
                                           reader.iter_files(name)}}
    files = {rel: {"size": entry["size"], **blob(reader.read_small(name, rel))}
             for rel, entry in raw["files"].items()}
    return {"type": "opaque", "files": files}


# -- equality (Appendix B.8) -----------------------------------------------------------------
def _strip_informative(value: Any) -> Any:
    if isinstance(value, dict):
        drop = value.get("type") in ("float", "complex")
        return {k: _strip_informative(v) for k, v in value.items() if not (drop and k == "value")}
    if isinstance(value, list):
        return [_strip_informative(v) for v in value]
    return value


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """A JSON pointer and description of the first difference under B.8, or None if equal.

    >>> first_difference({"x": [1, True]}, {"x": [1, 1]})
    '/x/1: true != 1'
    """
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return f"{path or '/'}: members {sorted(set(a) ^ set(b))} present on one side only"
        for key in a:
            if a.get("type") in ("float", "complex") and key == "value":
                continue
            diff = first_difference(a[key], b[key], f"{path}/{key}")
            if diff:
                return diff
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path or '/'}: {len(a)} != {len(b)} elements"
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            diff = first_difference(x, y, f"{path}/{index}")
            if diff:
                return diff
        return None
    if (type(a) is not type(b) or a != b) and not (type(a) is float and type(b) is float and a == b):
        return f"{path or '/'}: {_short(a)} != {_short(b)}"
    return None


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 120 else text[:117] + "..."


def renderings_equal(a: Any, b: Any) -> bool:
    """Appendix B.8 equality of two parsed renderings."""
    return first_difference(a, b) is None


def writer_view(rendering: dict[str, Any]) -> dict[str, Any]:
    """The parts of a rendering that writer equality (B.8) compares."""
    out = {k: v for k, v in rendering.items() if k not in ("form", "producer")}
    components = {}
    for name, record in rendering.get("components", {}).items():
        record = dict(record)
        if record.get("kind") in ("tree", "json"):
            record.pop("files", None)
        else:
            record["files"] = {rel: {k: v for k, v in entry.items() if k != "sha256"}
                               for rel, entry in record.get("files", {}).items()}
        components[name] = record
    out["components"] = components
    return out


def is_complete(rendering: dict[str, Any]) -> bool:
    """True when no byte string of any component is rendered by digest only (B.6): the rendering is writable.

    >>> is_complete({"components": {"c": {"content": {"type": "files", "files": {"a": {"size": 0, "hex": ""}}}}}})
    True
    """
    def node_complete(node: dict[str, Any]) -> bool:
        kind = node["type"]
        if kind in ("bytes", "array"):
            return "hex" in node
        if kind in ("list", "tuple"):
            return all(node_complete(item) for item in node["items"])
        if kind in ("dict", "named_tuple"):
            return all(node_complete(item) for _, item in node["items" if kind == "dict" else "fields"])
        if kind == "prng_key":
            return node_complete(node["data"])
        return True

    for record in rendering.get("components", {}).values():
        content = record["content"]
        if content["type"] == "tree" and not node_complete(content["root"]):
            return False
        if content["type"] in ("files", "opaque") and not all("hex" in f for f in content["files"].values()):
            return False
    return True


def first_error(report: Any) -> Any:
    """The error a protocol command reports for a failed validation: the first one found."""
    from ..format.errors import ERROR_CLASSES

    issue = report.errors[0]
    return ERROR_CLASSES[issue.error](issue.message, file=issue.file, field=issue.field, rule=issue.rule)
