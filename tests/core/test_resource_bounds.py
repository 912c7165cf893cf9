"""Memory is bounded by a constant plus a multiple of the bytes a reader decodes (spec R-LIM-19, §18).

Each operation runs in a fresh interpreter, which reports ``VmHWM`` (its own
peak RSS) after its imports and after the operation, as in
tests/bench/test_peak_memory.py. The inputs are the cheapest bytes per node
the format allows (one byte per ``nil`` or empty list) and a manifest of
absent files: the worst cases for amplification. These are memory bounds,
not timings. The figures of the reference implementation are in
docs/guarantees-in-detail.md ("Bad input").
"""

from __future__ import annotations

import itertools
import json
import string
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from opencheckpoint import Checkpoint
from opencheckpoint.format.integrity import crc32c_hex
from opencheckpoint.read.opening import REPORTED_PER_RULE

MIB = 1 << 20
ALLOWANCE = 64 * MIB

_CHILD = textwrap.dedent("""
    import json, sys
    from opencheckpoint import read_component, validate
    from opencheckpoint.conformance import impl
    from opencheckpoint.format.errors import CheckpointError

    def peak():
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM"))

    operation, path = sys.argv[1], sys.argv[2]
    base = peak()
    result = None
    class Sink:  # stdout without a terminal or a pipe to fill: counts what is written
        written = 0

        def write(self, text):
            self.written += len(text)
            return len(text)

    if operation == "render":
        out = Sink()
        result = [impl.run("read", [path], stdout=out), out.written]
    elif operation == "read":
        result = len(read_component(path, "model"))
    elif operation == "inspect":
        from opencheckpoint.tools.inspect import describe
        summary = describe(path)
        result = [summary["ok"], max(len(a["path"]) for a in summary["components"]["model"]["arrays"])]
    else:
        report = validate(path)
        result = [(issue.error, issue.rule) for issue in report.errors]
    print(json.dumps({"base": base, "peak": peak(), "result": result}))
""")


def _measure(operation: str, path: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", _CHILD, operation, str(path)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def _with_tree(root: Path, document: bytes) -> Path:
    """A valid checkpoint whose component ``model`` is the tree ``document`` (no arrays)."""
    path = Checkpoint(model={"w": np.zeros(2)}, durable=False).save(root / "ckpt")
    model = path / "components/model"
    (model / "tree.msgpack").write_bytes(document)
    _rewrite_manifest(path, lambda body: body["components"]["model"].update(files={
        "tree.msgpack": {"size": len(document), "crc32c": crc32c_hex(document)},
        "data.bin": {"size": 0, "crc32c": crc32c_hex(b"")}}))
    (model / "data.bin").write_bytes(b"")
    return path


def _rewrite_manifest(path: Path, edit: Any) -> int:
    """Edit the manifest and write it compactly (what a hostile writer packs into the 64 MiB limit)."""
    body = json.loads((path / "manifest.json").read_bytes())
    del body["manifest_crc32c"]
    edit(body)
    head = json.dumps(body, separators=(",", ":"))[:-1].encode() + b",\n"
    data = head + f'"manifest_crc32c": "{crc32c_hex(head)}"\n}}\n'.encode()
    (path / "manifest.json").write_bytes(data)
    return len(data)


def test_rendering_a_tree_of_nils_stays_within_64_mib_plus_24_times_its_size(tmp_path: Path) -> None:
    """``conformance impl read`` writes the rendering node by node (it is 20-60 times the document)."""
    document = msgpack.packb([None] * 2_000_000)
    report = _measure("render", _with_tree(tmp_path, document))
    assert report["result"][0] == 0 and report["result"][1] > 20 * len(document)
    assert report["peak"] - report["base"] <= ALLOWANCE + 24 * len(document), report


def test_decoding_a_tree_of_empty_lists_stays_within_64_mib_plus_80_times_its_size(tmp_path: Path) -> None:
    """The costliest byte: each is a Python list (72 bytes). The decoder keeps one copy of the tree."""
    document = msgpack.packb([[]] * 2_000_000)
    report = _measure("read", _with_tree(tmp_path, document))
    assert report["result"] == 2_000_000
    assert report["peak"] - report["base"] <= ALLOWANCE + 80 * len(document), report


@pytest.mark.parametrize("count", [100_000])
def test_a_manifest_of_absent_files_stays_within_64_mib_plus_32_times_its_size(tmp_path: Path, count: int) -> None:
    """Every file is looked up; only the first REPORTED_PER_RULE are reported one by one, then a count."""
    path = Checkpoint(model={"w": np.zeros(2)}, durable=False).save(tmp_path / "ckpt")

    def absent_files(body: dict[str, Any]) -> None:
        body["components"]["model"]["kind"] = "files"
        body["components"]["model"]["files"] = {f"{i:x}": {"size": 1, "crc32c": "00000000"} for i in range(count)}

    size = _rewrite_manifest(path, absent_files)
    for stale in (path / "components/model").iterdir():
        stale.unlink()
    report = _measure("validate", path)
    assert report["result"] == [["MissingFile", "R-CON-3"]] * (REPORTED_PER_RULE + 1)
    assert report["peak"] - report["base"] <= ALLOWANCE + 32 * size, report


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "exact-parser"])
def test_a_long_key_is_shortened_in_every_path_below_it(tmp_path: Path, fast: bool) -> None:
    """Each node below a key repeats it in its path: a key of megabytes would make decoding quadratic."""
    from opencheckpoint.tree.decode import PATH_KEY_CHARS, exact_decode, fast_decode

    key = "k" * (1 << 20)
    path = Checkpoint(model={key: [np.zeros(2), np.ones(2)]}, durable=False).save(tmp_path / "ckpt")
    document = (path / "components/model/tree.msgpack").read_bytes()
    decoded = (fast_decode if fast else exact_decode)(document)
    assert len(decoded.arrays) == 2 and all(len(ref.path) < 1200 for ref in decoded.arrays)
    assert decoded.arrays[1].path.endswith(f"... (+{len(key) - PATH_KEY_CHARS} chars)][1]")


def _deep_keys_document(levels: int, key_chars: int, arrays: int) -> bytes:
    """``levels`` nested one-entry maps with ``key_chars``-character keys, then a list of empty bool arrays."""
    empty_bool = [msgpack.ExtType(6, b""), "bool", [0], 0, 0, 0]
    document: Any = [empty_bool] * arrays
    for level in reversed(range(levels)):
        document = {chr(97 + level % 26) * key_chars: document}
    packed: bytes = msgpack.packb(document)
    return packed


@pytest.mark.parametrize("operation", ["inspect", "validate"])
def test_deep_long_keys_cost_memory_linear_in_the_document(tmp_path: Path, operation: str) -> None:
    """A path is a (parent, key) node, rendered on demand and clipped: 125 levels of 1,000-character keys
    above 5,000 arrays no longer make each array keep a path of depth x key length (125 KB)."""
    from opencheckpoint.tree.treepath import PATH_DISPLAY_CHARS

    document = _deep_keys_document(125, 1000, 5000)
    report = _measure(operation, _with_tree(tmp_path, document))
    if operation == "inspect":
        ok, longest = report["result"]
        assert ok and PATH_DISPLAY_CHARS - 40 < longest < PATH_DISPLAY_CHARS + 40  # clipped, not whole
    else:
        assert report["result"] == []
    assert report["peak"] - report["base"] <= ALLOWANCE + 80 * len(document), report


def test_named_tuples_each_with_their_own_fields_stay_within_64_mib_plus_80_times_its_size(tmp_path: Path) -> None:
    """One class serves every field set: 100,000 named tuples with distinct field names create no class each."""
    names = ("".join(letters) for letters in itertools.product(string.ascii_lowercase, repeat=4))
    document = msgpack.packb([[msgpack.ExtType(2, b""), "", {next(names): None}] for _ in range(100_000)])
    report = _measure("validate", _with_tree(tmp_path, document))
    assert report["result"] == []
    assert report["peak"] - report["base"] <= ALLOWANCE + 80 * len(document), report
