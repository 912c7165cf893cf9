"""Manifest structure (step 7 of §15) and paths (step 8), spec §4-§7 and S.3."""
from __future__ import annotations

from ocommon import (
    BUILTIN_KINDS,
    CHECKPOINT_ID_RE,
    COMPONENT_MEMBERS,
    CREATED_AT_RE,
    EXT_NAME_RE,
    HEX8_RE,
    HEX64_RE,
    KIND_RE,
    MANIFEST,
    MAX_COMPONENTS,
    MAX_FILE_ENTRIES,
    MAX_INT53,
    MAX_PATH,
    MAX_SEGMENT,
    NAME_RE,
    SEGMENT_RE,
    SHARD_FILE_RE,
    TOP_MEMBERS,
    E,
    esc,
    is_int,
)
from ojson import JFloat


def structure(man):
    """Step 7 (R-MAN-*, R-CMP-*, R-EXT-1..5, R-LIM-5/6; v2: R-SHD-3)."""
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
        component_structure(name, rec, M, man["format_version"])
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


def component_structure(name, rec, M, fv):
    """Step 7 for one component record (R-CMP-*, R-CHK-4/5, R-CMP-16/17, v2: R-SHD-3)."""
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
    if kind == "tree" and kv == 2 and fv == 2:
        shard_inventory(p, files, M)


def shard_inventory(p, files, M):
    """R-SHD-3: tree.msgpack, data.bin and shard data files shards/rank-NNNNN.bin, nothing else."""
    for key in ("tree.msgpack", "data.bin"):
        if key not in files:
            raise M(f"{p}/files", f"a tree component of kind_version 2 must list {key}", "R-SHD-3")
    for key in files:
        if key not in ("tree.msgpack", "data.bin") and not SHARD_FILE_RE.fullmatch(key):
            raise M(f"{p}/files/{esc(key)}", f"files key {key!r} is neither tree.msgpack, data.bin nor a shard "
                    "data file shards/rank-NNNNN.bin", "R-SHD-3")


# ------------------------------------------------------------ step 8
def paths(man):
    """Step 8; returns the listed files: full path -> (component, key, entry)."""
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
    return listed

