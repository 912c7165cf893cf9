#!/usr/bin/env python3
"""Independent OpenCheckpoint reader (format versions 1 and 2), written from the spec text only:
spec/opencheckpoint-v1*.md and the format version 2 delta spec/opencheckpoint-v2.md.

Usage:  reader.py read CHECKPOINT | reader.py capabilities
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ocrc
import ojson
import omanifest
import render
import steps
from errors import CheckpointError
from ocommon import MANIFEST, MAX_FORMAT_VERSION, MAX_MANIFEST, SUFFIX_RE, E, esc, is_int
from ostore import ZipStore, is_staging, make_store


# ======================================================================= locate
def locate(path: str):
    p = path.rstrip("/") or path
    name = os.path.basename(p)
    if is_staging(name):
        raise E("NotACheckpoint", path, "-", "path names a staging entry (.*.oc-staging-*)", "R-PUB-12")
    store = make_store(p)
    if store is not None:
        return store
    # R-PUB-13 / R-PUB-14: fallback to exactly one openable .<name>.oc-old-<suffix>
    parent = os.path.dirname(p) or "."
    prefix = "." + name + ".oc-old-"
    try:
        cands = sorted(n for n in os.listdir(parent) if n.startswith(prefix) and len(n) > len(prefix))
    except OSError:
        cands = []
    good = []
    for c in cands:
        cp = os.path.join(parent, c)
        try:
            s = make_store(cp)
            if s is None:
                continue
            Reader(s, cp).open_steps()
            good.append(cp)
        except CheckpointError:
            continue
        except OSError:
            continue
    if len(good) == 1:
        return make_store(good[0])
    # SHOULD check the target once more (the replacement may have completed meanwhile)
    store = make_store(p)
    if store is not None:
        return store
    if not good:
        raise E("NotACheckpoint", path, "-", "path does not exist and no old checkpoint can be opened", "R-PUB-10")
    raise E("NotACheckpoint", path, "-", f"path does not exist and {len(good)} old checkpoints open without error",
            "R-PUB-14")


# ======================================================================= reader
class Reader:
    def __init__(self, store, display):
        self.store = store
        self.display = display

    # ------------------------------------------------------------- steps 2-11
    def open_steps(self):
        st = self.store
        st.step2()                                                        # step 2
        if st.manifest_size > MAX_MANIFEST:                                # step 3
            raise E("LimitExceeded", MANIFEST, "-", f"manifest is {st.manifest_size} bytes (max {MAX_MANIFEST})",
                    "R-LIM-1")
        raw = st.read_manifest()
        if len(raw) > MAX_MANIFEST:
            raise E("LimitExceeded", MANIFEST, "-", f"manifest is {len(raw)} bytes (max {MAX_MANIFEST})", "R-LIM-1")
        self.manifest_raw = raw
        man = ojson.parse(raw, MANIFEST)                                   # step 4
        self.identify(man)                                                 # step 5
        self.manifest_checksum(raw)                                        # step 6
        omanifest.structure(man)                                           # step 7
        self.man = man
        self.listed = omanifest.paths(man)                                 # step 8
        self.extensions(man)                                               # step 9
        st.inventory(self.listed)                                          # step 10
        for fp, (cname, key, entry) in self.listed.items():                # step 11
            actual = st.size(fp)
            if actual != entry["size"]:
                raise E("IntegrityError", fp, f"/components/{esc(cname)}/files/{esc(key)}/size",
                        f"file is {actual} bytes, manifest says {entry['size']}", "R-CHK-6")

    def identify(self, man):
        if not isinstance(man, dict):
            raise E("NotACheckpoint", MANIFEST, "/", "top-level JSON value is not an object", "R-MAN-8")
        if man.get("format") != "opencheckpoint" or not isinstance(man.get("format"), str):
            raise E("NotACheckpoint", MANIFEST, "/format", 'member format is not "opencheckpoint"', "R-MAN-9")
        if "format_version" not in man:
            raise E("ManifestError", MANIFEST, "/format_version", "member format_version is missing", "R-MAN-10")
        fv = man["format_version"]
        if not is_int(fv) or fv < 1:
            raise E("ManifestError", MANIFEST, "/format_version",
                    f"format_version {json.dumps(fv)} is not an integer >= 1", "R-MAN-10")
        if fv > MAX_FORMAT_VERSION:
            raise E("UnsupportedVersion", MANIFEST, "/format_version",
                    f"format_version {fv} found; this reader supports format versions 1 to {MAX_FORMAT_VERSION}",
                    "R-VER-3")
        if fv == 2:
            self.version_content(man)

    def version_content(self, man):
        """R-SHD-12 (step 5, right after R-VER-3, on the raw JSON of `components`): a format version 2
        checkpoint holds a tree component of kind_version 2 (an integer token)."""
        comps = man.get("components")
        if not isinstance(comps, dict) or not any(
                isinstance(c, dict) and c.get("kind") == "tree" and is_int(c.get("kind_version"))
                and c.get("kind_version") == 2 for c in comps.values()):
            raise E("UnsupportedVersion", MANIFEST, "/format_version",
                    "format_version 2 found, but no tree component has kind_version 2 (a checkpoint without "
                    f"sharded arrays is format version 1); this reader supports format versions 1 to "
                    f"{MAX_FORMAT_VERSION}", "R-SHD-12")

    def manifest_checksum(self, raw: bytes):
        m = SUFFIX_RE.search(raw[-32:]) if len(raw) >= 32 else None
        if m is None or len(raw) < 32:
            raise E("ManifestError", MANIFEST, "/manifest_crc32c",
                    'manifest does not end with the 32-byte suffix "manifest_crc32c": "hhhhhhhh"\\n}\\n', "R-CHK-1")
        head = raw[:-32]
        stripped = head.rstrip(b" \t\n\r")
        if not stripped.endswith(b","):
            raise E("ManifestError", MANIFEST, "/manifest_crc32c",
                    "bytes before the checksum suffix do not end with a comma and optional whitespace", "R-CHK-2")
        stored = m.group(1).decode()
        computed = ocrc.crc32c_hex(head)
        if stored != computed:
            raise E("IntegrityError", MANIFEST, "/manifest_crc32c",
                    f"manifest crc32c mismatch: stored {stored}, computed {computed}", "R-CHK-3")

    # ------------------------------------------------------------ step 9
    def extensions(self, man):
        for name, rec in man["extensions"].items():
            if rec["must_understand"] is True:
                raise E("UnsupportedExtension", MANIFEST, "/extensions/" + esc(name),
                        f"extension {name!r} version {rec['version']} is must_understand and not understood "
                        "by this reader", "R-EXT-7")

    # ------------------------------------------------------------ steps 12-16
    def decode_all(self):
        """Steps 12-16 for every component, step by step (§15); returns what the rendering needs."""
        comps = self.man["components"]
        fv = self.man["format_version"]
        steps.kinds(comps, fv)                                             # step 12
        payload = steps.payloads(self, comps)                              # step 13
        decoded = steps.parse(comps, payload, fv)                          # step 14
        steps.layouts(self.store, comps, decoded)                          # step 15
        blobs = steps.contents(self.store, comps, decoded)                 # step 16 (arrays)
        contents = self.remaining_files(comps, payload, blobs)             # step 16 (files)
        steps.assemble(comps, decoded, blobs)
        return decoded, {n: b.get("data.bin", b"") for n, b in blobs.items()}, contents

    def remaining_files(self, comps, payload, blobs):
        """Step 16: R-CHK-7/R-CHK-8 of every file not verified in step 13, then R-ZIP-22."""
        st = self.store
        contents = {}
        for name, files in blobs.items():  # the data files read by the array checks
            rec = comps[name]
            for key, data in files.items():
                self.check_crc(rec["path"] + "/" + key, name, key, rec["files"][key], data)
                self.check_sha(rec["path"] + "/" + key, name, key, rec["files"][key], data)
        for name, rec in comps.items():
            for key, ent in rec["files"].items():
                fp = rec["path"] + "/" + key
                if key in blobs.get(name, {}):
                    continue
                if name in payload and key == steps.payload_key(rec["kind"]):
                    self.check_sha(fp, name, key, ent, payload[name])  # its crc32c was step 13
                    continue
                data = st.read(fp)
                self.check_crc(fp, name, key, ent, data)
                self.check_sha(fp, name, key, ent, data)
                contents.setdefault(name, {})[key] = data
        if isinstance(st, ZipStore):
            for m in st.arch.members:
                c = zlib.crc32(st.arch.data(m)) & 0xFFFFFFFF
                if c != m.crc:
                    raise E("IntegrityError", m.name.decode("ascii"), f"central directory entry {m.index}: crc-32",
                            f"ZIP CRC-32 mismatch: stored {m.crc:08x}, computed {c:08x}", "R-ZIP-22")
        return contents

    def check_crc(self, fp, name, key, ent, data):
        c = ocrc.crc32c_hex(data)
        if c != ent["crc32c"]:
            raise E("IntegrityError", fp, f"/components/{esc(name)}/files/{esc(key)}/crc32c",
                    f"crc32c mismatch: stored {ent['crc32c']}, computed {c}", "R-CHK-7")

    def check_sha(self, fp, name, key, ent, data):
        if "sha256" in ent:
            h = hashlib.sha256(data).hexdigest()
            if h != ent["sha256"]:
                raise E("IntegrityError", fp, f"/components/{esc(name)}/files/{esc(key)}/sha256",
                        f"sha256 mismatch: stored {ent['sha256']}, computed {h}", "R-CHK-8")


# ======================================================================= CLI
def cmd_read(path):
    store = locate(path)
    r = Reader(store, path)
    r.open_steps()
    decoded, blobs, contents = r.decode_all()
    doc = render.document(store.form, r.man, decoded, blobs, contents)
    return doc


def main(argv):
    if len(argv) >= 1 and argv[0] == "capabilities":
        # §S.8: capabilities added after the 1.0 text are opt-in; a version 1 reader names none.
        implements = ["sharding"] if MAX_FORMAT_VERSION >= 2 else []
        sys.stdout.write(json.dumps({"implementation": "opencheckpoint-independent-reader",
                                     "version": "0.2.0", "modes": ["read"], "skip": {},
                                     "implements": implements}) + "\n")
        return 0
    if len(argv) == 2 and argv[0] == "read":
        try:
            doc = cmd_read(argv[1])
        except CheckpointError as e:
            sys.stderr.write(f"error: {e.cls}: {e.line()}\n")
            return 1
        except Exception as e:  # I/O errors or a reader bug: still one well-formed line, exit 1
            sys.stderr.write(f"error: CheckpointError: {argv[1]}: -: internal {type(e).__name__}: "
                             f"{' '.join(str(e).split())}\n")
            return 1
        out = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
        sys.stdout.buffer.write(out.encode("utf-8"))
        return 0
    sys.stderr.write("error: CheckpointError: usage: run read CHECKPOINT | run capabilities\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
