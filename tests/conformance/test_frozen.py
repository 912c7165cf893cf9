"""The committed cases are exactly what conformance/generate.py writes (frozen goldens)."""

from __future__ import annotations

import os
from pathlib import Path

from oc_conformance_helpers import CASES, load_script


def _snapshot(root: Path) -> dict[str, bytes | str]:
    """Relative path -> bytes (regular files) or 'symlink -> target' (links), without following links."""
    out: dict[str, bytes | str] = {}
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(directory) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                out[rel] = f"symlink -> {os.readlink(path)}"
            elif path.is_file():
                out[rel] = path.read_bytes()
    return out


def test_generate_reproduces_every_committed_byte(tmp_path: Path) -> None:
    generate = load_script("generate")
    assert generate.main(["--out", str(tmp_path)]) == 0
    committed, fresh = _snapshot(CASES), _snapshot(tmp_path)
    missing = sorted(set(fresh) - set(committed))
    extra = sorted(set(committed) - set(fresh))
    changed = sorted(k for k in set(committed) & set(fresh) if committed[k] != fresh[k])
    assert not missing, f"generated but not committed: {missing[:20]}"
    assert not extra, f"committed but no longer generated: {extra[:20]}"
    assert not changed, f"committed bytes differ from the generator's: {changed[:20]}"


def test_generator_fixes_ids_timestamps_and_producer() -> None:
    import json

    for expected in CASES.glob("*/expected.json"):
        doc = json.loads(expected.read_text())
        assert doc["producer"] == {"name": "opencheckpoint-conformance-generator", "version": "1"}, expected
        assert doc["created_at"] == "2026-01-01T00:00:00Z", expected
        assert doc["checkpoint_id"] == f"conformance-{expected.parent.name}", expected
