"""What a path that is not a checkpoint holds instead: another tool's checkpoint, named for the error.

A reader that refuses a ``torch.save`` file only with "not a ZIP archive" or
"no member manifest.json" leaves the user guessing; :func:`describe_foreign`
recognises the formats ``opencheckpoint convert`` reads (and a few it does
not) from their first bytes, the ZIP member names, or the marker files of a
directory, so the error can say what the path is and point to ``convert``.
Nothing is unpickled or imported: the bytes are only compared with magic
numbers, and a ZIP's central directory is listed by :mod:`zipfile`.

>>> import os, tempfile, zipfile
>>> folder = tempfile.mkdtemp()
>>> with zipfile.ZipFile(os.path.join(folder, "model.pt"), "w") as archive:
...     archive.writestr("model/data.pkl", b"\\x80\\x02.")
>>> describe_foreign(os.path.join(folder, "model.pt"))
'a torch.save file: `opencheckpoint convert SRC DST` (or opencheckpoint.convert(SRC, DST)) converts it'
>>> describe_foreign(folder) is None
True
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Final

#: The hint every convertible format ends with.
CONVERT: Final = "`opencheckpoint convert SRC DST` (or opencheckpoint.convert(SRC, DST)) converts it"
#: Bytes a format starts with -> what it is (formats ``convert`` does not read: said, without the hint).
_MAGIC: Final = (
    (b"\x93NUMPY", "a NumPy .npy file (np.load reads it; it is not a checkpoint)"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file (Keras / h5py), which opencheckpoint does not convert"),
    (b"GGUF", "a GGUF file, which opencheckpoint does not convert"),
)
#: Files that mark an orbax item or ``CheckpointManager`` step directory.
_ORBAX_MARKERS: Final = ("_METADATA", "_CHECKPOINT_METADATA", "manifest.ocdbt")
#: Bytes read from the start of a file: every magic number above fits.
_HEAD: Final = 16


def describe_foreign(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when it is another tool's checkpoint (with the way to convert it), else None."""
    target = Path(path)
    try:
        if target.is_dir():
            return _directory(target)
        if target.is_file():
            return _file(target)
    except Exception:  # recognising is best effort: a file that cannot be read as another format is not one
        return None  # (a truncated ZIP member raises EOFError, a corrupt one zlib.error, an encrypted one RuntimeError)
    return None


def _directory(target: Path) -> str | None:
    if any((target / marker).is_file() for marker in _ORBAX_MARKERS):
        return f"an orbax checkpoint directory: {CONVERT}"
    steps = [p for p in target.iterdir() if p.name.isdigit() and (p / "_CHECKPOINT_METADATA").is_file()]
    if steps:
        return f"an orbax CheckpointManager directory ({len(steps)} steps): {CONVERT}"
    return None


def _file(target: Path) -> str | None:
    with open(target, "rb") as handle:
        head = handle.read(_HEAD)
    if head.startswith(b"PK\x03\x04"):
        return _zip(target)
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return what
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return f"a pickle stream (a legacy torch.save file, or plain pickle): {CONVERT} if it is a torch file"
    if len(head) >= 9 and head[8:9] == b"{" and 2 <= int.from_bytes(head[:8], "little") <= \
            target.stat().st_size - 8:
        return f"a safetensors file: {CONVERT}"
    return None


def _zip(target: Path) -> str | None:
    with zipfile.ZipFile(target) as archive:
        names = archive.namelist()
        if any(name == "data.pkl" or name.endswith("/data.pkl") for name in names):
            return f"a torch.save file: {CONVERT}"
        if "manifest.json" in names:
            try:
                with archive.open("manifest.json") as member:  # bounded: a member may be a compression bomb
                    manifest = json.loads(member.read(1 << 20))
            except ValueError:
                return None
            if isinstance(manifest, dict) and manifest.get("format") == "torchrl.checkpoint":
                return f"a torchrl Checkpoint archive: {CONVERT}"
        if names and all(name.endswith(".npy") for name in names):
            return "a NumPy .npz file (np.load reads it; it is not a checkpoint)"
    return None
