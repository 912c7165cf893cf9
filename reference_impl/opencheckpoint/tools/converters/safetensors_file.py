"""safetensors files: every tensor into one ``tree`` component, ``__metadata__`` into the manifest metadata.

The file is parsed by the ``safetensors`` package (its strict Rust validator);
dtypes are mapped here because its NumPy binding has no bfloat16 or float8.
A bool byte other than 00/01 is true, as torch and NumPy read it: the tree
encoder stores it as 01 (spec §9), so the same file converts to the same
checkpoint whether torch or safetensors reads it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from ...format.dtypes import numpy_dtype
from ...tree.decode import empty_array
from ...tree.file_array import FileArray
from ._common import ConversionError, Foreign, converted_from, require

#: safetensors dtype code -> OpenCheckpoint dtype name.
SAFETENSORS_DTYPES: Final = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "U16": "uint16", "I16": "int16", "U32": "uint32",
    "I32": "int32", "U64": "uint64", "I64": "int64", "F16": "float16", "BF16": "bfloat16", "F32": "float32",
    "F64": "float64", "C64": "complex64", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
}
#: The reverse: OpenCheckpoint dtype name -> safetensors dtype code (complex128 has none).
SAFETENSORS_CODES: Final = {name: code for code, name in SAFETENSORS_DTYPES.items()}

#: Key of the manifest metadata that keeps a safetensors file's ``__metadata__`` (str -> str).
METADATA_KEY: Final = "safetensors_metadata"


def is_safetensors(path: Path) -> bool:
    """An 8-byte little-endian header length followed by a JSON object."""
    if not path.is_file():
        return False
    with open(path, "rb") as handle:
        head = handle.read(9)
    if len(head) < 9 or head[8:9] != b"{":
        return False
    return 2 <= int.from_bytes(head[:8], "little") <= path.stat().st_size - 8


def read_safetensors(path: Path, component: str = "model") -> Foreign:
    """Every tensor of the file, by its name, in one tree component; the file's metadata kept.

    The header is checked by the ``safetensors`` package (``safe_open``); the tensors become
    :class:`~opencheckpoint.tree.file_array.FileArray` leaves, so the save streams each tensor's bytes from
    the file: memory does not grow with the file.
    """
    safetensors = require("safetensors", "peers", "reading safetensors files")
    try:
        with safetensors.safe_open(str(path), framework="np") as handle:  # validates the header and offsets
            file_metadata = handle.metadata() or {}
            names = list(handle.keys())
    except Exception as exc:  # SafetensorError and friends: the binding's own classes vary by version
        raise ConversionError(f"not a valid safetensors file: {exc}", file=str(path)) from None
    header, data_start = _header(path)
    tensors: dict[str, Any] = {}
    for name in sorted(names, key=lambda n: header[n]["data_offsets"][0]):  # file order: one sequential read
        tensors[name] = _tensor(path, name, header[name], data_start)
    metadata: dict[str, Any] = {"converted_from": converted_from("safetensors", path)}
    if file_metadata:
        metadata[METADATA_KEY] = dict(file_metadata)
    return Foreign(components={component: tensors}, metadata=metadata)


def _header(path: Path) -> tuple[dict[str, Any], int]:
    """The JSON header (already validated by ``safe_open``) and where the data starts."""
    with open(path, "rb") as handle:
        size = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(size))
    return header, 8 + size


def _tensor(path: Path, name: str, info: dict[str, Any], data_start: int) -> Any:
    code = info["dtype"]
    if code not in SAFETENSORS_DTYPES:
        raise ConversionError(f"tensor {name!r} has dtype {code}, which OpenCheckpoint has no name for",
                              file=str(path), field=name)
    dtype_name = SAFETENSORS_DTYPES[code]
    shape = tuple(info["shape"])
    if 0 in shape:  # NumPy refuses some empty shapes (``[2**62, 0]``: "array is too big")
        return empty_array(shape, numpy_dtype(dtype_name))
    begin, end = info["data_offsets"]
    array = FileArray(path, data_start + begin, dtype_name, shape)
    if array.nbytes != end - begin:
        raise ConversionError(f"tensor {name!r} of shape {list(shape)} {dtype_name} needs {array.nbytes} bytes, "
                              f"its data_offsets give {end - begin}", file=str(path), field=name)
    return array
