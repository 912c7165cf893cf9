"""Every int a writer stores can be printed by every reader: big ints are bounded (R-LIM-18).

Before the limit, a checkpoint holding an int of more than 4,300 decimal
digits saved fine, and ``opencheckpoint conformance impl read`` crashed with
a traceback (Python's int-to-str limit).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from opencheckpoint import Checkpoint, UnsupportedValue, read_component
from opencheckpoint.format.limits import TREE_MAX_BIG_INT_BYTES


@pytest.mark.parametrize("value", [10**4400, -(10**4400), 2**8191, -(2**8191) - 1],
                         ids=["4401-digits", "minus-4401-digits", "2**8191", "-(2**8191)-1"])
def test_the_writer_refuses_an_int_beyond_the_limit(tmp_path: Path, value: int) -> None:
    with pytest.raises(UnsupportedValue, match="at most 1024 bytes") as caught:
        Checkpoint(model={"n": [value]}, durable=False).save(tmp_path / "ckpt")
    assert caught.value.rule == "R-LIM-18" and caught.value.field == "$.n[0]"
    assert not (tmp_path / "ckpt").exists()


def test_every_int_the_writer_accepts_renders(tmp_path: Path) -> None:
    largest, smallest = 2**8191 - 1, -(2**8191)
    assert TREE_MAX_BIG_INT_BYTES == 1024
    path = Checkpoint(model={"n": [largest, smallest]}, durable=False).save(tmp_path / "ckpt")
    assert read_component(path, "model") == {"n": [largest, smallest]}
    done = subprocess.run([sys.executable, "-m", "opencheckpoint", "conformance", "impl", "read", str(path)],
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    items = json.loads(done.stdout)["components"]["model"]["content"]["root"]["items"][0][1]["items"]
    assert [int(node["value"]) for node in items] == [largest, smallest]
