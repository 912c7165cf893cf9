"""``diff`` compares stored arrays chunk by chunk: the same report as comparing whole arrays (exact bytes,
counts of differing elements, largest absolute and relative differences over chunks), and a corrupt array
is still an error."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from opencheckpoint import Checkpoint, IntegrityError, diff
from opencheckpoint.read.array_streams import CHUNK_BYTES


def test_streamed_report_matches_whole_array_semantics(tmp_path: Path) -> None:
    n = 3 * CHUNK_BYTES // 4 + 5  # float32 over three chunks and a bit
    base = np.arange(n, dtype=np.float32)
    changed = base.copy()
    changed[1] += 4.0  # chunk 1: abs 4, rel 4/5
    changed[-1] = -changed[-1]  # the last chunk: abs 2x, rel 2
    ints = np.arange(CHUNK_BYTES // 2, dtype=np.int64)  # four chunks
    other_ints = ints.copy()
    other_ints[[0, 200_000, 500_000]] = -1
    a = {"f": base, "i": ints, "z": np.array([0.0, np.nan], np.float32), "same": np.ones(3, ml_dtypes.bfloat16),
         "b": np.array([True, False]), "scalar": np.float64(1.5), "gone": np.zeros(2)}
    b = {"f": changed, "i": other_ints, "z": np.array([-0.0, np.nan], np.float32),
         "same": np.ones(3, ml_dtypes.bfloat16), "b": np.array([True, True]), "scalar": np.float64(1.5),
         "new": np.zeros(2, np.float32)}
    report = diff(Checkpoint(m=a).save(tmp_path / "a"), Checkpoint(m=b).save(tmp_path / "b"))
    got = {c.path: (c.change, c.detail, c.max_abs_diff, c.max_rel_diff) for c in report.changes}
    last = float(n - 1)
    assert got == {
        "m/$.f": ("changed", f"float32[{n}]: values differ", 2 * last, 2.0),
        "m/$.i": ("changed", "3 of 524288 elements differ", None, None),
        "m/$.z": ("changed", "float32[2]: values differ", 0.0, 0.0),  # -0.0 differs by its bytes
        "m/$.b": ("changed", "1 of 2 elements differ", None, None),
        "m/$.gone": ("removed", "float64[2]", None, None),
        "m/$.new": ("added", "float32[2]", None, None),
    }


def test_a_corrupt_array_is_an_error(tmp_path: Path) -> None:
    a = Checkpoint(m={"w": np.ones(1000, np.float32)}).save(tmp_path / "a")
    b = Checkpoint(m={"w": np.ones(1000, np.float32)}).save(tmp_path / "b")
    data = b / "components" / "m" / "data.bin"
    raw = bytearray(data.read_bytes())
    raw[100] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError, match=r"crc32c mismatch"):
        diff(a, b)
