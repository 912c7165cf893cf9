"""The fuzz campaign (fuzz/fuzz_reader.py) runs bounded, its manifest edits reach past the checksum,
and its oracles do flag a reader that misbehaves."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from opencheckpoint.format.errors import TreeError
from opencheckpoint.format.manifest import verify_manifest_checksum

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "fuzz" / "fuzz_reader.py"


@pytest.fixture(scope="module")
def fuzz() -> ModuleType:
    spec = importlib.util.spec_from_file_location("oc_fuzz_reader", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_campaign_runs_bounded_and_finds_nothing(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--seconds", "60", "--jobs", "1", "--max-inputs", "150",
                           "--seed", "7", "--crashes", str(tmp_path / "crashes")],
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "finished, 150 inputs, 0 findings" in done.stdout
    assert not (tmp_path / "crashes").exists()


def test_every_valid_case_is_a_seed_in_both_forms(fuzz: ModuleType) -> None:
    seeds = fuzz.load_seeds()
    forms = {(case, form) for case, form, _ in seeds}
    assert ("array-0d", "directory") in forms and ("array-0d", "archive") in forms
    assert ("archive-tree", "archive") in forms


def test_manifest_edits_keep_a_valid_checksum(fuzz: ModuleType) -> None:
    files = next(content for case, form, content in fuzz.load_seeds() if form == "directory")
    rng = random.Random(0)
    edited = 0
    for _ in range(100):
        result = fuzz.mutate_json(rng, files["manifest.json"], manifest=True)
        if result is not None:
            verify_manifest_checksum(result[0])  # raises IntegrityError if the suffix were wrong
            edited += result[0] != files["manifest.json"]
    assert edited > 50


def test_fixed_entries_pass_the_file_checks(fuzz: ModuleType) -> None:
    files = dict(next(c for case, form, c in fuzz.load_seeds() if case == "array-0d" and form == "directory"))
    rel = next(r for r in files if r.endswith("tree.msgpack"))
    files[rel] = files[rel] + b"\xc0"
    assert fuzz.fix_entry(files, rel)
    entry = next(iter(json.loads(files["manifest.json"])["components"].values()))["files"]["tree.msgpack"]
    assert entry["size"] == len(files[rel])


def test_oracle_flags_a_reader_disagreeing_with_validate(fuzz: ModuleType, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _case, form, files = next(s for s in fuzz.load_seeds() if s[0] == "array-0d" and s[1] == "directory")
    path = fuzz.write_input(tmp_path / "in", form, files)
    assert fuzz.run_input(path, []) == "valid"

    def broken(path: object) -> None:
        raise TreeError("injected")

    monkeypatch.setattr("opencheckpoint.conformance.canonical.render_checkpoint", broken)
    with pytest.raises(fuzz.Finding, match="conformance reader"):
        fuzz.run_input(path, [])


def test_oracle_flags_decoders_that_disagree(fuzz: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    import msgpack

    from opencheckpoint.tree import decode

    document = msgpack.packb({"a": 1})
    fuzz.check_decoders(document)
    monkeypatch.setattr(decode, "fast_decode", lambda data: decode.exact_decode(msgpack.packb({"a": 2})))
    with pytest.raises(fuzz.Finding, match="disagree"):
        fuzz.check_decoders(document)


def test_opaque_component_corruption_is_not_a_finding(fuzz: ModuleType, tmp_path: Path) -> None:
    """A component with a newer kind_version is never read, so only validate() sees its bad CRC:
    the oracle must accept that disagreement (a false positive of the first campaign)."""
    files = dict(next(c for case, form, c in fuzz.load_seeds() if case == "array-0d" and form == "directory"))
    raw = json.loads(files["manifest.json"])
    raw.pop("manifest_crc32c")
    record = next(iter(raw["components"].values()))
    record["kind_version"] = 2
    from opencheckpoint.format.manifest import serialize_manifest

    files["manifest.json"] = serialize_manifest(raw)
    rel = f"{record['path']}/tree.msgpack"
    files[rel] = bytes([files[rel][0] ^ 0xFF]) + files[rel][1:]
    path = fuzz.write_input(tmp_path / "in", "directory", files)
    # validate() may list the R-CMP-19 version error first; either way it is an error class, not a finding
    assert fuzz.run_input(path, []) in ("IntegrityError", "UnsupportedVersion")


def test_an_unread_replica_corrupt_is_not_a_finding(fuzz: ModuleType, tmp_path: Path) -> None:
    """A reader reads one replica of a region (R-SHD-10) and need not open the other; only validate()
    checks the other's bytes: the oracle must accept that (a false positive of a campaign on v2 seeds)."""
    from opencheckpoint import open_checkpoint

    files = dict(next(c for case, form, c in fuzz.load_seeds()
                      if case == "sharded-replicated-region" and form == "directory"))
    seed = fuzz.write_input(tmp_path / "seed", "directory", files)
    with open_checkpoint(seed) as reader:
        name = next(iter(reader.components))
        shards = [s for a in reader.decoded_tree(name)[0].sharded for s in a.shards]
    regions = [(s.start, s.size) for s in shards]
    replicas = [s for s in shards if regions.count((s.start, s.size)) > 1]
    assert len(replicas) >= 2
    for shard in replicas:  # corrupt each replica in turn: whichever one the reader reads, no finding
        mutated = dict(files)
        rel = next(r for r in files if r.endswith(shard.file))
        data = bytearray(mutated[rel])
        data[shard.offset] ^= 0xFF
        mutated[rel] = bytes(data)
        assert fuzz.fix_entry(mutated, rel)
        path = fuzz.write_input(tmp_path / f"in-{shard.offset}-{shard.file.replace('/', '-')}", "directory", mutated)
        assert fuzz.run_input(path, []) in ("IntegrityError", "ArrayLayoutError")
