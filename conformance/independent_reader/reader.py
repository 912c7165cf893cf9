#!/usr/bin/env python3
"""Independent OpenCheckpoint v1 reader, written from spec/opencheckpoint-v1.md only.

Usage:  reader.py read CHECKPOINT | reader.py capabilities
"""
from __future__ import annotations

import hashlib
import json
import mmap
import os
import re
import stat
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ocrc
import ojson
import otree
import ozip
import render
from errors import CheckpointError
from ojson import JFloat
from otree import DTYPES

MANIFEST = "manifest.json"
MAX_MANIFEST = 64 * 1024 * 1024
MAX_VALUE_JSON = 64 * 1024 * 1024
MAX_TREE = 1024 * 1024 * 1024
MAX_COMPONENTS = 100_000
MAX_FILE_ENTRIES = 1_000_000
MAX_PATH = 1024
MAX_SEGMENT = 128
MAX_INT53 = 2**53 - 1

SEGMENT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
NAME_RE = SEGMENT_RE  # R-CMP-1 uses the same grammar
CHECKPOINT_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
CREATED_AT_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,9})?Z")
KIND_RE = re.compile(r"[a-z][a-z0-9-]*(\.[a-z0-9-]+)+/[a-z0-9_.-]+")
EXT_NAME_RE = re.compile(r"[a-z][a-z0-9-]*(\.[a-z0-9-]+)+")
HEX8_RE = re.compile(r"[0-9a-f]{8}")
HEX64_RE = re.compile(r"[0-9a-f]{64}")
SUFFIX_RE = re.compile(rb'"manifest_crc32c": "([0-9a-f]{8})"\n}\n\Z')

TOP_MEMBERS = ("format", "format_version", "checkpoint_id", "created_at", "producer",
               "metadata", "extensions", "components", "manifest_crc32c")
COMPONENT_MEMBERS = ("kind", "kind_version", "path", "files", "hints", "metadata")
BUILTIN_KINDS = {"tree": 1, "json": 1, "files": 1}  # highest kind_version implemented


def E(cls, file, field, msg, req=""):
    return CheckpointError(cls, file, field, msg, req)


def is_int(v):
    return type(v) is int


def esc(k: str) -> str:
    return k.replace("~", "~0").replace("/", "~1")


# ======================================================================= storage
class DirStore:
    form = "directory"

    def __init__(self, root: str):
        self.root = root

    def step2(self):
        p = os.path.join(self.root, MANIFEST)
        try:
            st = os.lstat(p)
        except (FileNotFoundError, NotADirectoryError):
            raise E("NotACheckpoint", MANIFEST, "-", "directory has no file manifest.json", "R-CON-1") from None
        if stat.S_ISDIR(st.st_mode):
            raise E("NotACheckpoint", MANIFEST, "-", "manifest.json is a directory, not a file", "R-CON-1")
        if not stat.S_ISREG(st.st_mode):
            raise E("UnsafePath", MANIFEST, "-", "manifest.json is not a regular file (symbolic link or special file)",
                    "R-CON-4")
        self.manifest_size = st.st_size

    def read_manifest(self):
        return self.read(MANIFEST)

    def read(self, rel: str) -> bytes:
        fd = os.open(os.path.join(self.root, rel), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            chunks = []
            while True:
                b = os.read(fd, 1 << 24)
                if not b:
                    break
                chunks.append(b)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def inventory(self, listed: dict):
        """Step 10 for the directory form. listed: full path -> (component, key)."""
        files = {}   # relpath(str) -> size
        special = []  # (relpath, description)
        stack = [("", os.fsencode(self.root))]
        while stack:
            rel, absb = stack.pop()
            with os.scandir(absb) as it:
                entries = sorted(it, key=lambda e: e.name)
            for e in entries:
                name = os.fsdecode(e.name)
                r = name if not rel else rel + "/" + name
                st = os.lstat(e.path)  # R-CON-6: never follow links
                if stat.S_ISLNK(st.st_mode):
                    special.append((r, "symbolic link"))
                elif stat.S_ISDIR(st.st_mode):
                    stack.append((r, e.path))
                elif stat.S_ISREG(st.st_mode):
                    files[r] = st.st_size
                else:
                    special.append((r, "special file (device, FIFO or socket)"))
        # R-CON-4 (entry types)
        if special:
            special.sort()
            r, what = special[0]
            raise E("UnsafePath", r, "-", f"checkpoint contains a {what}", "R-CON-4")
        # R-CON-3 (listed files present as regular files)
        for fp in listed:
            if fp not in files:
                raise E("MissingFile", fp, "-", "listed file is absent or not a regular file", "R-CON-3")
        # R-CON-2 (no unlisted files)
        for r in sorted(files):
            if r != MANIFEST and r not in listed:
                raise E("ExtraFile", r, "-", "file is not listed by any component", "R-CON-2")
        self.sizes = files

    def size(self, rel):
        return self.sizes[rel]


class ZipStore:
    form = "archive"

    def __init__(self, path: str):
        self.path = path
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            self.buf: bytes | mmap.mmap
            if size == 0:
                self.buf = b""
            else:
                self.buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        self.arch = ozip.Archive(self.buf, os.path.basename(path) or path)
        self.by_name: dict = {}

    def step2(self):
        a = self.arch.open_structure()
        self.man = a.members[-1]
        # The manifest member must be readable as a STORED member before its bytes are used.
        a.check_member(self.man)
        self.manifest_size = self.man.usize

    def read_manifest(self):
        return bytes(self.arch.data(self.man))

    def inventory(self, listed: dict):
        a = self.arch
        f = a.display
        # entry by entry in central directory order: R-ZIP-10, R-LIM-7/8, R-PATH-5, R-ZIP-11, then the
        # member rules (R-ZIP-5..9, 16, 17, then the local header); then R-ZIP-20; then R-CON-3, R-CON-2.
        seen = {}
        off = 0
        for m in a.members:
            where = f"central directory entry {m.index}: file name"
            if m.name.endswith(b"/"):
                raise E("ArchiveError", f, where, "member name ends with '/' (directory entry)", "R-ZIP-10")
            if len(m.name) > MAX_PATH:
                raise E("LimitExceeded", f, where, f"member name is {len(m.name)} bytes (max {MAX_PATH})", "R-LIM-7")
            for seg in m.name.split(b"/"):
                if len(seg) > MAX_SEGMENT:
                    raise E("LimitExceeded", f, where, f"member name segment is {len(seg)} bytes (max {MAX_SEGMENT})",
                            "R-LIM-8")
            try:
                name = m.name.decode("ascii")
            except UnicodeDecodeError:
                name = None
            if name is None or not all(SEGMENT_RE.fullmatch(s) for s in name.split("/")):
                raise E("UnsafePath", f, where, f"member name {m.name!r} is not a valid path", "R-PATH-5")
            if m.name in seen:
                raise E("ArchiveError", f, where, f"duplicate member name {name}", "R-ZIP-11")
            seen[m.name] = m
            off = a.check_member(m, off)
        if a.cd_off != off:
            raise E("ArchiveError", f, "central directory offset",
                    f"central directory starts at {a.cd_off}, last member data ends at {off}", "R-ZIP-20")
        names = {m.name.decode("ascii"): m for m in a.members}
        for fp in listed:
            if fp not in names:
                raise E("MissingFile", fp, "-", "listed file is not a member of the archive", "R-CON-3")
        for m in a.members:
            n = m.name.decode("ascii")
            if n != MANIFEST and n not in listed:
                raise E("ExtraFile", n, "-", "archive member is not listed by any component", "R-CON-2")
        self.by_name = names

    def size(self, rel):
        return self.by_name[rel].usize

    def read(self, rel):
        return bytes(self.arch.data(self.by_name[rel]))


# ======================================================================= locate
def is_staging(name: str) -> bool:
    return name.startswith(".") and ".oc-staging-" in name


def make_store(path: str):
    """Step 1 part: decide the form of an existing path (R-PUB-11)."""
    try:
        st = os.stat(path)  # follows links in the caller's path
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISDIR(st.st_mode):
        return DirStore(path)
    if stat.S_ISREG(st.st_mode):
        return ZipStore(path)
    raise E("NotACheckpoint", path, "-", "path is neither a directory nor a regular file", "R-PUB-11")


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
        self.structure(man)                                                # step 7
        self.man = man
        self.paths(man)                                                    # step 8
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
        if fv > 1:
            raise E("UnsupportedVersion", MANIFEST, "/format_version",
                    f"format_version {fv} found; this reader supports up to format version 1", "R-VER-3")

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

    # ------------------------------------------------------------ step 7
    def structure(self, man):
        M = lambda ptr, msg, req: E("ManifestError", MANIFEST, ptr, msg, req)  # noqa: E731
        for k in TOP_MEMBERS:
            if k not in man:
                raise M("/" + k, f"required member {k} is missing", "R-MAN-11")
        for k in man:
            if k not in TOP_MEMBERS:
                raise M("/" + esc(k), f"unknown top-level member {k!r}", "R-MAN-12")
        cid = man["checkpoint_id"]
        if not isinstance(cid, str) or not CHECKPOINT_ID_RE.fullmatch(cid):
            raise M("/checkpoint_id", "checkpoint_id must be 1..128 characters of [A-Za-z0-9._:-]", "R-MAN-13")
        ca = man["created_at"]
        if not isinstance(ca, str):
            raise M("/created_at", "created_at is not a string", "R-MAN-14")
        mt = CREATED_AT_RE.fullmatch(ca)
        if not mt:
            raise M("/created_at", f"created_at {ca!r} is not an RFC 3339 UTC timestamp of the required form",
                    "R-MAN-14")
        y, mo, d, h, mi, s = (int(mt.group(i)) for i in range(1, 7))
        leap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
        mdays = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        if not (1 <= mo <= 12 and 1 <= d <= mdays[mo - 1] and h <= 23 and mi <= 59 and s <= 59):
            raise M("/created_at", f"created_at {ca!r} is not a valid date and time", "R-MAN-15")
        pr = man["producer"]
        if not isinstance(pr, dict):
            raise M("/producer", "producer is not an object", "R-MAN-16")
        for k in ("name", "version"):
            req = "R-MAN-17" if k == "name" else "R-MAN-18"
            if k not in pr:
                raise M(f"/producer/{k}", f"producer.{k} is missing", req)
            v = pr[k]
            if not isinstance(v, str) or not (1 <= len(v) <= 128):
                raise M(f"/producer/{k}", f"producer.{k} must be a string of 1..128 code points", req)
        if "environment" in pr:
            env = pr["environment"]
            if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
                raise M("/producer/environment", "producer.environment must be an object of strings", "R-MAN-19")
        for k in pr:
            if k not in ("name", "version", "environment"):
                raise M("/producer/" + esc(k), f"unknown producer member {k!r}", "R-MAN-20")
        if not isinstance(man["metadata"], dict):
            raise M("/metadata", "metadata is not an object", "R-MAN-21")
        exts = man["extensions"]
        if not isinstance(exts, dict):
            raise M("/extensions", "extensions is not an object", "R-MAN-22")
        comps = man["components"]
        if not isinstance(comps, dict):
            raise M("/components", "components is not an object", "R-MAN-23")
        if len(comps) > MAX_COMPONENTS:
            raise E("LimitExceeded", MANIFEST, "/components", f"{len(comps)} components (max {MAX_COMPONENTS})",
                    "R-LIM-5")
        total = sum(len(c["files"]) for c in comps.values() if isinstance(c, dict) and isinstance(c.get("files"), dict))
        if total > MAX_FILE_ENTRIES:
            raise E("LimitExceeded", MANIFEST, "/components", f"{total} file entries (max {MAX_FILE_ENTRIES})",
                    "R-LIM-6")
        for name, rec in comps.items():
            self.component_structure(name, rec, M)
        for name, rec in exts.items():
            p = "/extensions/" + esc(name)
            if not EXT_NAME_RE.fullmatch(name):
                raise M(p, f"extension name {name!r} is not a reverse-DNS name", "R-EXT-1")
            if not isinstance(rec, dict):
                raise M(p, "extension record is not an object", "R-EXT-2")
            for k in ("version", "must_understand", "data"):
                if k not in rec:
                    raise M(f"{p}/{k}", f"extension record lacks {k}", "R-EXT-2")
            for k in rec:
                if k not in ("version", "must_understand", "data"):
                    raise M(f"{p}/{esc(k)}", f"unknown extension record member {k!r}", "R-EXT-3")
            v = rec["version"]
            if isinstance(v, JFloat):
                raise M(f"{p}/version", "integer written with fraction or exponent", "R-MAN-7")
            if not is_int(v) or v < 1:
                raise M(f"{p}/version", "extension version must be an integer >= 1", "R-EXT-4")
            if not isinstance(rec["must_understand"], bool):
                raise M(f"{p}/must_understand", "must_understand must be a boolean", "R-EXT-5")

    def component_structure(self, name, rec, M):
        p = "/components/" + esc(name)
        if not NAME_RE.fullmatch(name):
            raise M(p, f"component name {name!r} does not match the name grammar", "R-CMP-1")
        if not isinstance(rec, dict):
            raise M(p, "component record is not an object", "R-CMP-2")
        for k in ("kind", "kind_version", "path", "files"):
            if k not in rec:
                raise M(f"{p}/{k}", f"component record lacks {k}", "R-CMP-2")
        for k in rec:
            if k not in COMPONENT_MEMBERS:
                raise M(f"{p}/{esc(k)}", f"unknown component record member {k!r}", "R-CMP-3")
        kind = rec["kind"]
        if not isinstance(kind, str) or not (kind in BUILTIN_KINDS or KIND_RE.fullmatch(kind)):
            raise M(f"{p}/kind", f"invalid kind {kind!r}", "R-CMP-4")
        kv = rec["kind_version"]
        if isinstance(kv, JFloat):
            raise M(f"{p}/kind_version", "integer written with fraction or exponent", "R-MAN-7")
        if not is_int(kv) or kv < 1:
            raise M(f"{p}/kind_version", "kind_version must be an integer >= 1", "R-CMP-5")
        if not isinstance(rec["path"], str):
            raise M(f"{p}/path", "path is not a string", "R-CMP-2")
        files = rec["files"]
        if not isinstance(files, dict):
            raise M(f"{p}/files", "files is not an object", "R-CMP-9")
        if "hints" in rec:
            h = rec["hints"]
            if not isinstance(h, dict) or not all(isinstance(v, str) for v in h.values()):
                raise M(f"{p}/hints", "hints must be an object of strings", "R-CMP-10")
        if "metadata" in rec and not isinstance(rec["metadata"], dict):
            raise M(f"{p}/metadata", "metadata is not an object", "R-CMP-11")
        for key, ent in files.items():
            fp = f"{p}/files/{esc(key)}"
            if not isinstance(ent, dict):
                raise M(fp, "file entry is not an object", "R-CMP-13")
            for k in ("size", "crc32c"):
                if k not in ent:
                    raise M(f"{fp}/{k}", f"file entry lacks {k}", "R-CMP-13")
            for k in ent:
                if k not in ("size", "crc32c", "sha256"):
                    raise M(f"{fp}/{esc(k)}", f"unknown file entry member {k!r}", "R-CMP-14")
            sz = ent["size"]
            if isinstance(sz, JFloat):
                raise M(f"{fp}/size", "integer written with fraction or exponent", "R-MAN-7")
            if not is_int(sz) or not (0 <= sz <= MAX_INT53):
                raise M(f"{fp}/size", "size must be an integer in 0..2^53-1", "R-CMP-15")
            if not isinstance(ent["crc32c"], str) or not HEX8_RE.fullmatch(ent["crc32c"]):
                raise M(f"{fp}/crc32c", "crc32c must be 8 lowercase hex digits", "R-CHK-4")
            if "sha256" in ent and (not isinstance(ent["sha256"], str) or not HEX64_RE.fullmatch(ent["sha256"])):
                raise M(f"{fp}/sha256", "sha256 must be 64 lowercase hex digits", "R-CHK-5")
        if kind == "tree" and kv == 1 and set(files) != {"tree.msgpack", "data.bin"}:
            raise M(f"{p}/files", "a tree component must list exactly tree.msgpack and data.bin", "R-CMP-16")
        if kind == "json" and kv == 1 and set(files) != {"value.json"}:
            raise M(f"{p}/files", "a json component must list exactly value.json", "R-CMP-17")

    # ------------------------------------------------------------ step 8
    def paths(self, man):
        comps = man["components"]
        U = lambda file, ptr, msg, req: E("UnsafePath", file, ptr, msg, req)  # noqa: E731
        L = lambda file, ptr, msg, req: E("LimitExceeded", file, ptr, msg, req)  # noqa: E731

        def lim(s, file, ptr):
            b = len(s.encode("utf-8", "surrogatepass"))
            if b > MAX_PATH:
                raise L(file, ptr, f"path is {b} bytes (max {MAX_PATH})", "R-LIM-7")
            for seg in s.split("/"):
                sb = len(seg.encode("utf-8", "surrogatepass"))
                if sb > MAX_SEGMENT:
                    raise L(file, ptr, f"path segment is {sb} bytes (max {MAX_SEGMENT})", "R-LIM-8")

        def grammar(s):
            return all(SEGMENT_RE.fullmatch(seg) for seg in s.split("/"))

        # limits first (R-LIM-7, R-LIM-8)
        for name, rec in comps.items():
            p = "/components/" + esc(name)
            lim(rec["path"], MANIFEST, p + "/path")
            for key in rec["files"]:
                lim(key, MANIFEST, f"{p}/files/{esc(key)}")
                lim(rec["path"] + "/" + key, MANIFEST, f"{p}/files/{esc(key)}")
        # grammar (R-PATH-1, R-PATH-2)
        for name, rec in comps.items():
            p = "/components/" + esc(name)
            if not grammar(rec["path"]):
                raise U(MANIFEST, p + "/path", f"component path {rec['path']!r} is not a valid path", "R-PATH-1")
            for key in rec["files"]:
                if not grammar(key):
                    raise U(MANIFEST, f"{p}/files/{esc(key)}", f"files key {key!r} is not a valid path", "R-PATH-2")
        # component path conflicts (R-CMP-6 .. R-CMP-8)
        cpaths = {}
        for name, rec in comps.items():
            p = "/components/" + esc(name) + "/path"
            f = rec["path"].lower()
            if f == MANIFEST:
                raise U(MANIFEST, p, "component path equals manifest.json", "R-CMP-8")
            if f in cpaths:
                raise U(MANIFEST, p, f"component path {rec['path']!r} conflicts with component {cpaths[f]!r}",
                        "R-CMP-6")
            cpaths[f] = name
        for f, name in cpaths.items():
            parts = f.split("/")
            for i in range(1, len(parts)):
                pre = "/".join(parts[:i])
                if pre in cpaths:
                    raise U(MANIFEST, "/components/" + esc(cpaths[pre]) + "/path",
                            f"component path is a directory prefix of component {name!r}'s path", "R-CMP-7")
        # full file paths (R-PATH-3, R-PATH-4)
        listed = {}
        folded = {MANIFEST: MANIFEST}
        for name, rec in comps.items():
            for key, ent in rec["files"].items():
                fp = rec["path"] + "/" + key
                f = fp.lower()
                if f in folded:
                    raise U(fp, f"/components/{esc(name)}/files/{esc(key)}",
                            f"full path conflicts with {folded[f]!r} after ASCII case folding", "R-PATH-3")
                folded[f] = fp
                listed[fp] = (name, key, ent)
        for f, fp in folded.items():
            parts = f.split("/")
            for i in range(1, len(parts)):
                pre = "/".join(parts[:i])
                if pre in folded:
                    raise U(fp, "-", f"file {folded[pre]!r} is a directory prefix of this file", "R-PATH-4")
        self.listed = listed

    # ------------------------------------------------------------ step 9
    def extensions(self, man):
        for name, rec in man["extensions"].items():
            if rec["must_understand"] is True:
                raise E("UnsupportedExtension", MANIFEST, "/extensions/" + esc(name),
                        f"extension {name!r} version {rec['version']} is must_understand and not understood "
                        "by this reader", "R-EXT-7")

    # ------------------------------------------------------------ steps 12-16
    def decode_all(self):
        st = self.store
        comps = self.man["components"]
        # step 12: kind
        for name, rec in comps.items():
            kind, kv = rec["kind"], rec["kind_version"]
            if kind in BUILTIN_KINDS and kv > BUILTIN_KINDS[kind]:
                raise E("UnsupportedVersion", MANIFEST, f"/components/{esc(name)}/kind_version",
                        f"kind {kind} version {kv} found; this reader supports up to version {BUILTIN_KINDS[kind]}",
                        "R-CMP-19")
        verified = set()
        payload = {}
        # step 13: payload file size limit, then crc32c
        for name, rec in comps.items():
            kind = rec["kind"]
            if kind not in ("tree", "json"):
                continue
            key = "tree.msgpack" if kind == "tree" else "value.json"
            limit, req = (MAX_TREE, "R-LIM-9") if kind == "tree" else (MAX_VALUE_JSON, "R-LIM-2")
            fp = rec["path"] + "/" + key
            sz = st.size(fp)
            if sz > limit:
                raise E("LimitExceeded", fp, f"/components/{esc(name)}/files/{key}/size",
                        f"{key} is {sz} bytes (max {limit})", req)
            data = st.read(fp)
            self.check_crc(fp, name, key, rec["files"][key], data)
            verified.add(fp)
            payload[name] = data
        # step 14: parse
        decoded = {}
        for name, rec in comps.items():
            kind = rec["kind"]
            fp = None
            if kind == "json":
                fp = rec["path"] + "/value.json"
                decoded[name] = ("json", ojson.parse(payload[name], fp))
            elif kind == "tree":
                fp = rec["path"] + "/tree.msgpack"
                root, arrays = otree.decode_tree(payload[name], fp)
                decoded[name] = ("tree", root, arrays)
        # step 15: array layout
        for name, rec in comps.items():
            if rec["kind"] == "tree":
                self.array_layout(rec, decoded[name][2])
        # step 16: content
        blobs = {}
        for name, rec in comps.items():
            if rec["kind"] != "tree":
                continue
            dfp = rec["path"] + "/data.bin"
            data = st.read(dfp)
            blobs[name] = data
            self.array_content(dfp, data, decoded[name][2])
        # then R-CHK-7/R-CHK-8 of every remaining file, data.bin included (§15 step 16)
        for name, data in blobs.items():
            rec = comps[name]
            dfp = rec["path"] + "/data.bin"
            self.check_crc(dfp, name, "data.bin", rec["files"]["data.bin"], data)
            verified.add(dfp)
            self.check_sha(dfp, name, "data.bin", rec["files"]["data.bin"], data)
        contents = {}
        for name, rec in comps.items():
            kind = rec["kind"]
            for key, ent in rec["files"].items():
                fp = rec["path"] + "/" + key
                if kind == "tree" and key == "data.bin":
                    continue
                if fp in verified:
                    if "sha256" in ent:
                        data = payload[name]
                        self.check_sha(fp, name, key, ent, data)
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
        return decoded, blobs, contents

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

    def array_layout(self, rec, arrays):
        tfp = rec["path"] + "/tree.msgpack"
        dsize = self.store.size(rec["path"] + "/data.bin")
        L = lambda a, msg, req, f="": E("LimitExceeded", tfp, a.ptr + f, msg, req)  # noqa: E731
        A = lambda a, msg, req, f="": E("ArrayLayoutError", tfp, a.ptr + f, msg, req)  # noqa: E731
        for a in arrays:
            if len(a.shape) > 64:
                raise L(a, f"array has {len(a.shape)} dimensions (max 64)", "R-LIM-13", "/2")
            for i, d in enumerate(a.shape):
                if d > 2**63 - 1:
                    raise L(a, f"dimension {d} exceeds 2^63-1", "R-LIM-14", f"/2/{i}")
            prod = 1
            for d in a.shape:
                prod *= d
                if prod >= 2**63:
                    raise L(a, "running product of the shape reaches 2^63", "R-LIM-15", "/2")
            if prod * DTYPES[a.dtype] >= 2**63:
                raise L(a, "shape product times itemsize reaches 2^63", "R-LIM-15", "/2")
            if a.nbytes >= 2**63:
                raise L(a, f"nbytes {a.nbytes} reaches 2^63", "R-LIM-16", "/4")
        for a in arrays:
            prod = 1
            for d in a.shape:
                prod *= d
            if a.nbytes != prod * DTYPES[a.dtype]:
                raise A(a, f"nbytes {a.nbytes} != shape product {prod} x itemsize {DTYPES[a.dtype]}", "R-ARR-4", "/4")
        for a in arrays:
            if a.offset % 64 != 0:
                raise A(a, f"offset {a.offset} is not a multiple of 64", "R-ARR-5", "/3")
            if a.nbytes == 0 and a.offset != 0:
                raise A(a, "zero-length array must have offset 0", "R-ARR-6", "/3")
            if a.nbytes == 0 and a.crc32c != 0:
                raise A(a, "zero-length array must have crc32c 0", "R-ARR-7", "/5")
            if a.offset + a.nbytes > dsize:
                raise A(a, f"extent [{a.offset}, {a.offset + a.nbytes}) exceeds data.bin size {dsize}", "R-ARR-8", "/3")
        ext = sorted((a for a in arrays if a.nbytes > 0), key=lambda a: (a.offset, a.nbytes))
        prev = None
        max_end, max_a = 0, None
        for a in ext:
            if prev is not None and (a.offset, a.nbytes) == (prev.offset, prev.nbytes):
                if a.crc32c != prev.crc32c:
                    raise A(a, f"arrays with identical extents have different crc32c (also {prev.ptr or '/'})",
                            "R-ARR-10", "/5")
            elif a.offset < max_end:
                raise A(a,
                        f"extent [{a.offset}, {a.offset + a.nbytes}) overlaps "
                        f"[{max_a.offset}, {max_a.offset + max_a.nbytes}) of {max_a.ptr or '/'}",
                        "R-ARR-9", "/3")
            prev = a
            if a.offset + a.nbytes > max_end:
                max_end, max_a = a.offset + a.nbytes, a
        end = max((a.offset + a.nbytes for a in ext), default=0)
        if dsize != end:
            raise E("ArrayLayoutError", rec["path"] + "/data.bin", "-",
                    f"data.bin is {dsize} bytes, the largest extent end is {end}", "R-ARR-11")

    def array_content(self, dfp, data, arrays):
        tfp = dfp[:-len("data.bin")] + "tree.msgpack"
        # array by array in document order: R-ARR-14, then R-ARR-13 (§15 step 16)
        import numpy as np
        done = {}
        for a in arrays:
            if a.nbytes == 0:
                continue
            k = (a.offset, a.nbytes)
            if k not in done:
                done[k] = ocrc.crc32c(memoryview(data)[a.offset:a.offset + a.nbytes])
            if done[k] != a.crc32c:
                raise E("IntegrityError", tfp, a.ptr + "/5",
                        f"array crc32c mismatch: stored {a.crc32c:08x}, computed {done[k]:08x}", "R-ARR-14")
            if a.dtype == "bool":
                seg = np.frombuffer(data, dtype=np.uint8, count=a.nbytes, offset=a.offset)
                if seg.size and int(seg.max()) > 1:
                    raise E("ArrayLayoutError", tfp, a.ptr, "bool array contains a byte other than 00/01", "R-ARR-13")
        # R-ARR-12
        covered = sorted(done)
        pos = 0
        arr = np.frombuffer(data, dtype=np.uint8)
        gaps = []
        for off, nb in covered:
            if off > pos:
                gaps.append((pos, off))
            pos = max(pos, off + nb)
        if pos < len(data):
            gaps.append((pos, len(data)))
        for s, e in gaps:
            if arr[s:e].any():
                raise E("ArrayLayoutError", dfp, f"bytes [{s}, {e})", "byte outside every extent is not 00", "R-ARR-12")


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
        sys.stdout.write(json.dumps({"implementation": "opencheckpoint-independent-reader",
                                     "version": "0.1.0", "modes": ["read"],
                                     "skip": {"sharding": "format version 2 (sharded arrays) is not "
                                                          "implemented yet"}}) + "\n")
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
