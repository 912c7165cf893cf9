"""Write the checkpoints the browser test opens, with the Python reference implementation.

Usage: python make_checkpoints.py OUT_DIR [--layered NAME:MIB ...]
Writes OUT_DIR/good.zip (archive form: float32, bfloat16 and float16 arrays, a json
component, metadata, and a flat state dict whose output layer is tied to its
embedding), OUT_DIR/corrupt.zip (the same with one array byte flipped in place, so
only the array's CRC-32C and the file checksums disagree) and OUT_DIR/big.zip and
OUT_DIR/small.zip (one float32 array of 256 MiB and of 16 MiB: verification long
enough to cancel, and the renderer's memory for two file sizes).

``--layered NAME:MIB`` writes only OUT_DIR/NAME.zip instead: a state dict of about MIB MiB
grouped by layer (``encoder.0.weight`` float32, ``encoder.0.bias``, ``encoder.1.weight``
float16, ``head.weight`` bfloat16, each row the same pattern from -1 to 1), and
OUT_DIR/NAME.json with what the viewer must show for it (arrays, parameter count, bytes by
dtype): the archives of the big browser test (``make ts-browser-test-big``).
"""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np

from opencheckpoint import Checkpoint


def layered(out: Path, name: str, mib: int) -> None:
    """NAME.zip: a layered state dict of about ``mib`` MiB, written array by array; NAME.json: its totals."""
    rows = mib * 128  # 1024 columns: float32 rows of mib/2 MiB, float16 and bfloat16 rows of mib/4 MiB each
    def pattern(dtype: object, shape: tuple[int, ...]) -> np.ndarray:
        return np.resize(np.linspace(-1, 1, 1024).astype(dtype), shape)  # tiled, never a float64 copy
    policy = {"encoder.0.weight": pattern(np.float32, (rows, 1024)), "encoder.0.bias": np.zeros(1024, np.float32),
              "encoder.1.weight": pattern(np.float16, (rows, 1024)),
              "head.weight": pattern(ml_dtypes.bfloat16, (rows, 1024))}
    Checkpoint(policy=policy, format="archive", durable=False).save(str(out / f"{name}.zip"))
    by_dtype: dict[str, int] = {}
    for array in policy.values():
        by_dtype[str(array.dtype)] = by_dtype.get(str(array.dtype), 0) + array.nbytes
    (out / f"{name}.json").write_text(json.dumps({
        "arrays": sorted(policy), "parameters": sum(a.size for a in policy.values()), "bytes": by_dtype}))


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    weights = {
        "w": np.arange(6, dtype=np.float32).reshape(2, 3),
        "emb": np.linspace(-1, 1, 64).astype(ml_dtypes.bfloat16).reshape(8, 8),
        "h": np.array([1.5, np.nan, np.inf, -2.0], np.float16),
    }
    embedding = np.arange(12, dtype=np.float32).reshape(4, 3)
    policy = {"encoder.0.weight": embedding, "encoder.0.bias": np.zeros(4, np.float32),
              "encoder.1.weight": np.ones((4, 4), np.float32), "head.weight": embedding}  # tied: one extent
    good = out / "good.zip"
    Checkpoint(weights=weights, policy=policy, config={"lr": 3e-4, "gamma": 0.99}, format="archive").save(
        str(good), metadata={"step": 100})
    for name, mib in (("big", 256), ("small", 16)):
        Checkpoint(model={"w": np.ones(mib << 18, np.float32)}, format="archive", durable=False).save(
            str(out / f"{name}.zip"))
    corrupt = out / "corrupt.zip"
    shutil.copyfile(good, corrupt)
    with zipfile.ZipFile(good) as z:
        info = z.getinfo("components/weights/data.bin")
    with open(corrupt, "r+b") as f:
        f.seek(info.header_offset + 26)
        n, m = (int.from_bytes(f.read(2), "little") for _ in range(2))
        at = info.header_offset + 30 + n + m  # first byte of data.bin: first byte of an array
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x40]))


if __name__ == "__main__":
    if "--layered" in sys.argv:
        Path(sys.argv[1]).mkdir(parents=True, exist_ok=True)
        for spec in sys.argv[sys.argv.index("--layered") + 1:]:
            name, mib = spec.split(":")
            layered(Path(sys.argv[1]), name, int(mib))
    else:
        main(Path(sys.argv[1]))
