"""Write the checkpoints the browser test opens, with the Python reference implementation.

Usage: python make_checkpoints.py OUT_DIR
Writes OUT_DIR/good.zip (archive form: float32, bfloat16 and float16 arrays, a json
component, metadata, and a flat state dict whose output layer is tied to its
embedding), OUT_DIR/corrupt.zip (the same with one array byte flipped in place, so
only the array's CRC-32C and the file checksums disagree) and OUT_DIR/big.zip and
OUT_DIR/small.zip (one float32 array of 256 MiB and of 16 MiB: verification long
enough to cancel, and the renderer's memory for two file sizes).
"""

from __future__ import annotations

import shutil
import sys
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np

from opencheckpoint import Checkpoint


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
    main(Path(sys.argv[1]))
