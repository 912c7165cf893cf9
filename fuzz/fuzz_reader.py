"""A bounded-time fuzzing campaign against the OpenCheckpoint reader, validator and conformance reader.

Seeds are the valid conformance cases (conformance/cases/v1), each in
directory form and archive form (directory cases are also packed into
archives). Each input is a seed with one to three structured mutations:

* bytes: flips, interesting values, truncation, extension, swapped,
  duplicated and deleted regions, in any file (or the whole archive);
* tree.msgpack: decode with msgpack, edit one node (ints, strings, dtype
  names, shapes, offsets, tags, containers, keys), re-encode;
* manifest.json / value.json: JSON-aware edits; the manifest is written
  back with a valid checksum (serialize_manifest) so deeper code runs;
* fix-ups: after a file changes, its manifest entry (size, crc32c, sha256)
  is often updated too, so the tree decoder and the array checks are reached;
* files: deleted, added, emptied; ZIP header fields (local, central, end
  records) set to edge values.

Oracles, for every input, each call under a per-input timeout:

1. ``validate`` never raises; ``read_component``, ``open_checkpoint().read``
   and ``.tree()``, and the conformance reader (``render_checkpoint``) raise
   nothing but ``CheckpointError`` subclasses;
2. reader and validator agree: if ``validate`` is ok every component reads
   and the conformance reader renders; if the reader accepts every component,
   ``validate`` reports only checks that need every byte (R-ARR-12 padding,
   whole-file CRC-32C of data.bin, SHA-256, ZIP CRC-32);
3. the fast (Python and compiled) and the exact tree decoders agree on every tree.msgpack.

Failing inputs are saved under fuzz/crashes/ with the traceback.

    python fuzz/fuzz_reader.py --seconds 300 --jobs 2 --seed 1
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import multiprocessing
import os
import random
import shutil
import signal
import struct
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

from opencheckpoint.container.archive_writer import ArchiveWriter
from opencheckpoint.format.errors import CheckpointError
from opencheckpoint.format.integrity import crc32c_of, format_crc32c, new_sha256
from opencheckpoint.format.manifest import serialize_manifest

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "conformance" / "cases" / "v1"
CRASHES = Path(__file__).resolve().parent / "crashes"
#: Seeds bigger than this (all files together) are left out: they slow the campaign without adding paths.
MAX_SEED_BYTES = 1 << 20

Files = dict[str, bytes]  # relative path -> bytes (a directory checkpoint)


class Hang(BaseException):
    """Raised by the per-input alarm; a BaseException so library ``except Exception`` cannot swallow it."""


# -- seeds --------------------------------------------------------------------------------------------
def load_seeds() -> list[tuple[str, str, Any]]:
    """(case id, form, content): content is Files for a directory, bytes for an archive."""
    seeds: list[tuple[str, str, Any]] = []
    for case in sorted(CASES.iterdir()):
        meta_file = case / "case.json"
        if not meta_file.is_file() or not json.loads(meta_file.read_text()).get("valid"):
            continue
        directory, archive = case / "checkpoint", case / "checkpoint.zip"
        if directory.is_dir():
            files = {p.relative_to(directory).as_posix(): p.read_bytes()
                     for p in sorted(directory.rglob("*")) if p.is_file() and not p.is_symlink()}
            if sum(map(len, files.values())) <= MAX_SEED_BYTES:
                seeds.append((case.name, "directory", files))
                seeds.append((case.name, "archive", pack(files)))
        elif archive.is_file() and archive.stat().st_size <= MAX_SEED_BYTES:
            seeds.append((case.name, "archive", archive.read_bytes()))
    return seeds


def pack(files: Files) -> bytes:
    """A directory checkpoint as an archive (component files first, manifest last, as writers do)."""
    stream = io.BytesIO()
    writer = ArchiveWriter(stream)
    for rel in sorted(files, key=lambda r: (r == "manifest.json", r)):
        writer.add(rel, io.BytesIO(files[rel]), len(files[rel]))
    writer.close()
    return stream.getvalue()


# -- byte mutations -----------------------------------------------------------------------------------
INTERESTING = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0xC0, 0xC1, 0xC7, 0xD4, 0xCF, 0x22, 0x5C, 0x2E, 0x2F)


def mutate_bytes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    buf = bytearray(data)
    choice = rng.randrange(8) if buf else 3
    if choice == 0:
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
        return bytes(buf), "bit flips"
    if choice == 1:
        buf[rng.randrange(len(buf))] = rng.choice(INTERESTING)
        return bytes(buf), "interesting byte"
    if choice == 2:
        return bytes(buf[: rng.randrange(len(buf))]), "truncate"
    if choice == 3:
        extra = bytes(rng.randrange(256) for _ in range(rng.choice([1, 2, 7, 64, 100])))
        return bytes(buf) + (extra if rng.random() < 0.5 else bytes(len(extra))), "extend"
    a, b = sorted(rng.randrange(len(buf) + 1) for _ in range(2))
    c = rng.randrange(len(buf) + 1)
    if choice == 4:  # swap two regions of equal length
        n = min(b - a, len(buf) - c)
        region, other = buf[a:a + n], buf[c:c + n]
        buf[a:a + n], buf[c:c + n] = other, region
        return bytes(buf), "swap regions"
    if choice == 5:
        return bytes(buf[:c] + buf[a:b] + buf[c:]), "duplicate region"
    if choice == 6:
        return bytes(buf[:a] + buf[b:]), "delete region"
    position = rng.randrange(len(buf))
    width = rng.choice([2, 4, 8])
    value = rng.choice([0, 1, 2**(8 * width - 1), 2**(8 * width) - 1, rng.randrange(2**(8 * width))])
    raw = value.to_bytes(width, rng.choice(["little", "big"]))
    return bytes(buf[:position] + raw + buf[position + width:])[: max(len(buf), position + width)], "int overwrite"


# -- structured mutations ---------------------------------------------------------------------------
def _edge_int(rng: random.Random) -> int:
    return rng.choice([0, 1, -1, 63, 64, 65, 127, 128, 255, 2**31, 2**32, 2**53, 2**63 - 1, 2**63, 2**64 - 1,
                       -(2**63), -(2**31), rng.randrange(-(2**63), 2**64)])


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 2 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return _edge_int(rng)
    if kind == 3:
        return rng.choice([0.0, -0.0, math.inf, -math.inf, math.nan, 1e308, rng.random()])
    if kind == 4:
        return rng.choice(["", "a", "../x", "/abs", "C:", "é", "\u0000", "x" * 200, "float32", "bool", "bfloat16",
                           "tree", "json", "files", "threefry2x32", "rbg", "data.bin", "tree.msgpack"])
    if kind == 5:
        return bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 2, 4, 8, 9])))
    if kind == 6:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 7:
        return {rng.choice(["a", "b", "size", "crc32c", 1, 2]): _random_value(rng, depth + 1)
                for _ in range(rng.randrange(3))}
    return msgpack.ExtType(rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 63, 64, 127]), b"" if rng.random() < 0.8 else b"x")


def _containers(node: Any, out: list[Any]) -> None:
    if isinstance(node, (list, dict)):
        out.append(node)
        for child in (node.values() if isinstance(node, dict) else node):
            _containers(child, out)


def _edit_structure(rng: random.Random, root: Any, value_maker: Callable[[random.Random], Any]) -> tuple[Any, str]:
    """Edit one place of a parsed msgpack/JSON document (lists and dicts edited in place)."""
    places: list[Any] = []
    _containers(root, places)
    if not places:
        return value_maker(rng), "replace root"
    node = rng.choice(places)
    if isinstance(node, list):
        if not node or rng.random() < 0.2:
            node.append(value_maker(rng))
            return root, "append element"
        i = rng.randrange(len(node))
        op = rng.randrange(5)
        if op == 0:
            del node[i]
            return root, "delete element"
        if op == 1:
            node.insert(i, node[i])
            return root, "duplicate element"
        if op == 2 and isinstance(node[i], int) and not isinstance(node[i], bool):
            node[i] = rng.choice([node[i] + rng.choice([-1, 1, 64]), -node[i], _edge_int(rng)])
            return root, "nudge int"
        if op == 3 and len(node) > 1:
            j = rng.randrange(len(node))
            node[i], node[j] = node[j], node[i]
            return root, "swap elements"
        node[i] = value_maker(rng)
        return root, "replace element"
    if not node or rng.random() < 0.15:
        node[rng.choice(["x", "size", "kind", 7, "components", "extensions"])] = value_maker(rng)
        return root, "add member"
    key = rng.choice(list(node))
    op = rng.randrange(4)
    if op == 0:
        del node[key]
        return root, "delete member"
    if op == 1:
        value = node.pop(key)
        new_key = rng.choice([str(key) + "x", str(key).upper(), 0, "", "../" + str(key)])
        node[new_key] = value
        return root, "rename member"
    if op == 2 and isinstance(node[key], int) and not isinstance(node[key], bool):
        node[key] = rng.choice([node[key] + rng.choice([-1, 1, 64]), -node[key], _edge_int(rng)])
        return root, "nudge int"
    node[key] = value_maker(rng)
    return root, "replace member"


def mutate_msgpack(rng: random.Random, data: bytes) -> tuple[bytes, str] | None:
    try:
        root = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception:
        return None
    root, what = _edit_structure(rng, root, _random_value)
    try:
        return msgpack.packb(root, use_bin_type=True), f"msgpack: {what}"
    except Exception:
        return None


def _json_value(rng: random.Random) -> Any:
    value = _random_value(rng)
    if isinstance(value, (bytes, msgpack.ExtType)) or (isinstance(value, float) and not math.isfinite(value)):
        return rng.choice(["00000000", "ffffffff", "not-hex", 0, -1])
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items() if not isinstance(v, (bytes, msgpack.ExtType, float))}
    if isinstance(value, list):
        return [v for v in value if not isinstance(v, (bytes, msgpack.ExtType, float))]
    return value


def mutate_json(rng: random.Random, data: bytes, *, manifest: bool) -> tuple[bytes, str] | None:
    try:
        root = json.loads(data)
    except Exception:
        return None
    if manifest and isinstance(root, dict):
        root.pop("manifest_crc32c", None)
    root, what = _edit_structure(rng, root, _json_value)
    try:
        if manifest and isinstance(root, dict) and root:
            return serialize_manifest(root), f"manifest json: {what}"
        return json.dumps(root).encode(), f"json: {what}"
    except Exception:
        return None


def fix_entry(files: Files, rel: str) -> bool:
    """Update the manifest's entry for ``rel`` (size, crc32c, sha256) so the change passes file checks."""
    try:
        raw = json.loads(files["manifest.json"])
        raw.pop("manifest_crc32c")
        for record in raw["components"].values():
            prefix = record["path"] + "/"
            if rel.startswith(prefix) and rel[len(prefix):] in record["files"]:
                entry = record["files"][rel[len(prefix):]]
                data = files[rel]
                entry["size"], entry["crc32c"] = len(data), format_crc32c(crc32c_of(data))
                if "sha256" in entry:
                    digest = new_sha256()
                    digest.update(data)
                    entry["sha256"] = digest.hexdigest()
                files["manifest.json"] = serialize_manifest(raw)
                return True
    except Exception:
        return False
    return False


def mutate_directory(rng: random.Random, files: Files) -> str:
    """One mutation of a directory checkpoint, in place; returns its description."""
    names = sorted(files)
    if not names:
        files["manifest.json"] = b"{}"
        return "add manifest.json"
    weights = [4 if n == "manifest.json" else 4 if n.endswith("tree.msgpack") else 2 for n in names]
    op = rng.random()
    if op < 0.05 and names:
        victim = rng.choice(names)
        del files[victim]
        return f"delete {victim}"
    if op < 0.08:
        extra = rng.choice(["extra.bin", "components/x/data.bin", f"{rng.choice(names)}.tmp"])
        files[extra] = b"\0" * rng.randrange(3)
        return f"add {extra}"
    rel = rng.choices(names, weights)[0]
    data = files[rel]
    result: tuple[bytes, str] | None = None
    structured = rng.random() < 0.6
    if structured and rel.endswith("tree.msgpack"):
        result = mutate_msgpack(rng, data)
    elif structured and rel == "manifest.json":
        result = mutate_json(rng, data, manifest=True)
    elif structured and rel.endswith(".json"):
        result = mutate_json(rng, data, manifest=False)
    if result is None:
        result = mutate_bytes(rng, data)
    files[rel] = result[0]
    what = f"{rel}: {result[1]}"
    if rel != "manifest.json" and rng.random() < 0.75 and fix_entry(files, rel):
        what += " (+manifest entry fixed)"
    return what


# -- ZIP header edits ---------------------------------------------------------------------------------
_EOCD = struct.Struct("<4sHHHHIIH")
_CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")
_LOCAL = struct.Struct("<4sHHHHHIIIHH")


def _structures(data: bytes) -> list[tuple[int, struct.Struct]]:
    out = []
    for signature, layout in ((b"PK\x05\x06", _EOCD), (b"PK\x01\x02", _CENTRAL), (b"PK\x03\x04", _LOCAL),
                              (b"PK\x06\x06", struct.Struct("<4sQHHIIQQQQ")), (b"PK\x06\x07", struct.Struct("<4sIQI"))):
        start = 0
        while (found := data.find(signature, start)) >= 0:
            if found + layout.size <= len(data):
                out.append((found, layout))
            start = found + 1
    return out


def mutate_zip_header(rng: random.Random, data: bytes) -> tuple[bytes, str] | None:
    places = _structures(data)
    if not places:
        return None
    offset, layout = rng.choice(places)
    fields = list(layout.unpack_from(data, offset))
    index = rng.randrange(1, len(fields))
    codes = layout.format.lstrip("<")[2:]  # the field codes after the 4-byte signature ("4s")
    code = codes[index - 1]
    bits = {"H": 16, "I": 32, "Q": 64}[code]
    fields[index] = rng.choice([0, 1, 8, 20, 63, 64, 2**bits - 1, 2**(bits - 1), fields[index] + 1,
                                max(fields[index] - 1, 0), rng.randrange(2**bits)])
    buf = bytearray(data)
    layout.pack_into(buf, offset, *fields)
    return bytes(buf), f"zip header at {offset}: field {index} = {fields[index]}"


def mutate_archive(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    if rng.random() < 0.5:
        result = mutate_zip_header(rng, data)
        if result is not None:
            return result
    return mutate_bytes(rng, data)


# -- running one input ---------------------------------------------------------------------------------
def write_input(work: Path, form: str, content: Any) -> Path:
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    if form == "archive":
        path = work / "ckpt.ocp"
        path.write_bytes(content)
        return path
    path = work / "ckpt"
    path.mkdir()
    for rel, data in content.items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return path


#: validate() errors that need every byte, which reading components does not look at (by design), and the
#: kind/version errors of components the reader leaves undecoded (which "accepted" excludes by construction).
VALIDATE_ONLY = {"R-ARR-12", "R-CHK-8", "R-ZIP-22", "R-CMP-19", "R-CMP-21"}


class Finding(Exception):
    """An oracle failure (not a CheckpointError)."""


def _canonical(node: Any) -> Any:
    """A comparable form of a decoded tree (floats by bits, named tuples with their type name)."""
    from opencheckpoint.tree.nodes import NamedTupleValue

    if isinstance(node, float):
        return ("f", struct.pack(">d", node))
    if isinstance(node, complex):
        return ("c", struct.pack(">dd", node.real, node.imag))
    if isinstance(node, NamedTupleValue):
        return ("nt", node.type_name, [(k, _canonical(v)) for k, v in zip(node._fields, node, strict=True)])
    if isinstance(node, dict):
        return ("d", [(type(k).__name__, k, _canonical(v)) for k, v in node.items()])
    if isinstance(node, (list, tuple)):
        return (type(node).__name__, [_canonical(v) for v in node])
    if hasattr(node, "tobytes"):
        return ("np", str(node.dtype), node.tobytes())
    return (type(node).__name__, repr(node))


def check_decoders(data: bytes) -> None:
    from opencheckpoint.tree import ctree, decode

    try:
        exact = decode.exact_decode(data)
        exact_error = None
    except CheckpointError as exc:
        exact, exact_error = None, exc
    # The Python fast path and the compiled one (tree/_ctree.c, when built): each a doubt or the exact tree.
    for name, fast_path in (("fast", decode.fast_decode), ("compiled", ctree.compiled_decode)):
        try:
            fast = fast_path(data)
        except decode._Doubt:
            continue
        except CheckpointError as exc:
            raise Finding(f"{name} decoder raised {exc!r}; exact decoder: {exact_error or 'accepted'}") from None
        if exact_error is not None:
            raise Finding(f"{name} decoder accepted what the exact decoder rejects: {exact_error}")
        assert exact is not None
        if (_canonical(fast.root), fast.arrays, fast.has_placeholders) != (
                _canonical(exact.root), exact.arrays, exact.has_placeholders):
            raise Finding(f"{name} and exact decoders disagree on the decoded tree")


def run_input(path: Path, tree_documents: list[bytes]) -> str:
    """Run every oracle on one input; return the outcome class; raise on a finding."""
    from opencheckpoint import open_checkpoint, read_component, validate
    from opencheckpoint.conformance.canonical import render_checkpoint
    from opencheckpoint.format.manifest import KIND_VERSIONS

    for document in tree_documents:
        check_decoders(document)
    report = validate(path)  # must never raise
    names: list[str] = []
    readable: list[str] = []
    opaque_paths: list[str] = []  # components this reader cannot decode: reading never checks their files
    replicas: set[str] = set()  # shard records with a replica: a reader may read either one (R-SHD-10)
    open_error: CheckpointError | None = None
    try:
        with open_checkpoint(path) as reader:
            for name, record in reader.components.items():
                names.append(name)
                if record.kind in KIND_VERSIONS and record.kind_version <= KIND_VERSIONS[record.kind]:
                    readable.append(name)
                else:
                    opaque_paths.append(record.path + "/")
            replicas = _replica_paths(reader, readable)
    except CheckpointError as exc:
        open_error = exc
    read_errors: list[CheckpointError] = []
    for name in readable:
        try:
            read_component(path, name)
        except CheckpointError as exc:
            read_errors.append(exc)
        for copy in (True, False):
            try:
                with open_checkpoint(path) as reader:
                    reader.read(name, copy=copy)
            except CheckpointError:
                pass
        try:
            with open_checkpoint(path) as reader:
                if reader.record(name).kind == "tree":
                    _touch_lazy(reader.tree(name))
        except CheckpointError:
            pass
    render_error: CheckpointError | None = None
    try:
        render_checkpoint(path)
    except CheckpointError as exc:
        render_error = exc
    # R-CMP-19 / R-CMP-21: CMD read decodes every component, so a valid checkpoint holding a component of a
    # built-in kind with a newer kind_version fails there (UnsupportedVersion) while validate() is ok.
    rendered = render_error is None or (report.ok and render_error.rule in ("R-CMP-19", "R-CMP-21"))
    accepted = open_error is None and not read_errors
    if report.ok and not accepted:
        first = open_error or read_errors[0]
        raise Finding(f"validate() is ok but the reader rejects the input: {first}")
    if report.ok != rendered:
        raise Finding(f"validate().ok is {report.ok} but the conformance reader {'rendered' if rendered else 'failed'}")
    if accepted and not report.ok:
        unexplained = [i for i in report.errors if not _validate_only(i, opaque_paths, replicas)]
        if unexplained:
            raise Finding("the reader accepts every component but validate() reports: "
                          + "; ".join(map(str, unexplained)))
    if report.ok:
        return "valid"
    return report.errors[0].error


def _replica_paths(reader: Any, names: list[str]) -> set[str]:
    """The paths of the shard records that have a replica (another record of the same region, R-SHD-10)."""
    paths: set[str] = set()
    for name in names:
        if reader.record(name).kind != "tree":
            continue
        try:
            decoded = reader.decoded_tree(name)[0]
        except CheckpointError:
            continue
        for array in decoded.sharded:
            regions: dict[tuple[tuple[int, ...], tuple[int, ...]], list[str]] = {}
            for shard in array.shards:
                regions.setdefault((shard.start, shard.size), []).append(shard.path)
            paths.update(p for group in regions.values() if len(group) > 1 for p in group)
    return paths


def _validate_only(issue: Any, opaque_paths: list[str], replicas: set[str] = frozenset()) -> bool:  # type: ignore[assignment]
    if issue.rule in VALIDATE_ONLY:
        return True
    if issue.rule in ("R-ARR-13", "R-ARR-14") and issue.field in replicas:
        # A replica's bytes: a reader reads one replica of a region (R-SHD-10), validate checks them all.
        return True
    if issue.rule != "R-CHK-7":
        return False
    # Whole-file CRC-32C: reading checks each array's CRC, not data.bin's, and never reads the files of a
    # component it cannot decode (unknown kind, newer kind_version).
    file = str(issue.file)
    return not file.endswith(("tree.msgpack", "value.json")) or file.startswith(tuple(opaque_paths))


def _touch_lazy(node: Any) -> None:
    from opencheckpoint import LazyArray

    if isinstance(node, LazyArray):
        node.read()
    elif isinstance(node, dict):
        for child in node.values():
            _touch_lazy(child)
    elif isinstance(node, (list, tuple)):
        for child in node:
            _touch_lazy(child)


def _alarm(signum: int, frame: Any) -> None:
    raise Hang("input took longer than the per-input timeout")


def save_crash(form: str, content: Any, info: dict[str, Any], trace: str, crashes: Path = CRASHES) -> Path:
    digest = hashlib.sha256(trace.encode() + json.dumps(info).encode()).hexdigest()[:12]
    target = crashes / f"{info['outcome']}-{digest}"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    if form == "archive":
        (target / "ckpt.ocp").write_bytes(content)
    else:
        for rel, data in content.items():
            file = target / "ckpt" / rel
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_bytes(data)
    (target / "traceback.txt").write_text(trace)
    (target / "info.json").write_text(json.dumps(info, indent=2))
    return target


def worker(index: int, seed: int, deadline: float, timeout: float, queue: Any, max_inputs: int,
           crash_dir: Path = CRASHES) -> None:
    rng = random.Random(seed * 1000 + index)
    seeds = load_seeds()
    signal.signal(signal.SIGALRM, _alarm)
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK) else None
    scratch = Path(tempfile.mkdtemp(prefix=f"oc-fuzz-{index}-", dir=base))
    count = 0
    outcomes: dict[str, int] = {}
    crashes = 0
    last_report = time.monotonic()
    try:
        while time.monotonic() < deadline and (not max_inputs or count < max_inputs):
            case, form, original = rng.choice(seeds)
            mutations: list[str] = []
            content: Any = dict(original) if form == "directory" else original
            pack_after = form == "directory" and rng.random() < 0.25
            out_form = form
            try:
                for _ in range(rng.choice([1, 1, 1, 2, 3])):
                    if isinstance(content, dict):
                        mutations.append(mutate_directory(rng, content))
                    else:
                        content, what = mutate_archive(rng, content)
                        mutations.append(what)
                if pack_after:
                    content, out_form = pack(content), "archive"
                    mutations.append("packed into an archive")
            except Exception:  # a fuzzer bug, not a finding: report it and go on
                queue.put(("error", index, traceback.format_exc()))
                continue
            trees = [data for rel, data in content.items() if rel.endswith("tree.msgpack")] if isinstance(
                content, dict) else []
            path = write_input(scratch / "in", out_form, content)
            signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                outcome = run_input(path, trees)
            except BaseException as exc:  # everything but a CheckpointError from the API under test is a finding
                signal.setitimer(signal.ITIMER_REAL, 0)
                if isinstance(exc, KeyboardInterrupt):
                    raise
                outcome = "crash-" + type(exc).__name__
                crashes += 1
                info = {"case": case, "form": form, "mutations": mutations, "outcome": outcome,
                        "seed": seed, "worker": index, "input": count}
                saved = save_crash(out_form, content, info, traceback.format_exc(), crash_dir)
                queue.put(("crash", index, str(saved), f"{outcome}: {exc}"[:300]))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            count += 1
            if time.monotonic() - last_report > 2:
                queue.put(("progress", index, count, dict(outcomes), crashes))
                last_report = time.monotonic()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        queue.put(("done", index, count, dict(outcomes), crashes))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="campaign length (default 600)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (worker i uses seed*1000+i)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--timeout", type=float, default=10.0, help="per-input timeout in seconds (default 10)")
    parser.add_argument("--max-inputs", type=int, default=0, help="stop each worker after this many inputs")
    parser.add_argument("--crashes", type=Path, default=CRASHES, help="where failing inputs go (fuzz/crashes)")
    args = parser.parse_args(argv)
    seeds = load_seeds()
    print(f"fuzz: {len(seeds)} seed inputs from {CASES.relative_to(ROOT)}, {args.jobs} jobs, "
          f"{args.seconds:.0f} s, seed {args.seed}, crashes -> {args.crashes}", flush=True)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    start = time.monotonic()
    deadline = start + args.seconds
    procs = [context.Process(target=worker, args=(i, args.seed, deadline, args.timeout, queue, args.max_inputs,
                                                       args.crashes))
             for i in range(args.jobs)]
    for proc in procs:
        proc.start()
    state: dict[int, tuple[int, dict[str, int], int]] = {}
    done: set[int] = set()
    crash_lines: list[str] = []
    last_print = 0.0
    while len(done) < len(procs):
        try:
            message = queue.get(timeout=1.0)
        except Exception:
            if all(not p.is_alive() for p in procs) and queue.empty():
                break
            continue
        if message[0] == "error":
            print(f"fuzz: mutator error in worker {message[1]}:\n{message[2]}", flush=True)
            continue
        if message[0] == "crash":
            crash_lines.append(f"{message[3]}  [{message[2]}]")
            print(f"fuzz: FINDING {message[3]}  -> {message[2]}", flush=True)
            continue
        _, index, count, outcomes, crashes = message
        state[index] = (count, outcomes, crashes)
        if message[0] == "done":
            done.add(index)
        now = time.monotonic()
        if now - last_print > 5 or len(done) == len(procs):
            last_print = now
            total = sum(s[0] for s in state.values())
            merged: dict[str, int] = {}
            for _, outcomes_, _ in state.values():
                for key, value in outcomes_.items():
                    merged[key] = merged.get(key, 0) + value
            print(f"fuzz: {now - start:6.0f} s  {total} inputs  {total / max(now - start, 1e-9):.0f}/s  "
                  f"{len(merged)} outcome classes: {dict(sorted(merged.items(), key=lambda kv: -kv[1]))}  "
                  f"findings: {sum(s[2] for s in state.values())}", flush=True)
    for proc in procs:
        proc.join(timeout=30)
    total_crashes = sum(s[2] for s in state.values())
    print(f"fuzz: finished, {sum(s[0] for s in state.values())} inputs, {total_crashes} findings", flush=True)
    for line in crash_lines:
        print(f"  {line}")
    return 1 if total_crashes else 0


if __name__ == "__main__":
    sys.exit(main())
