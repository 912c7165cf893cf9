"""Steps 12-16 of §15 (per component, each step over every component before the next), with the
format version 2 amendments of S.9 for `tree` components of kind_version 2."""
from __future__ import annotations

import ojson
import olayout
import oshard
import otree
from ocommon import BUILTIN_KINDS, MAX_TREE, MAX_VALUE_JSON, E, esc, max_kind_version


def payload_key(kind):
    return {"tree": "tree.msgpack", "json": "value.json"}.get(kind)


def kinds(comps, fv):
    """Step 12: R-CMP-19, then R-SHD-2 (a kind_version 2 tree in a format version 1 checkpoint)."""
    for name, rec in comps.items():
        kind, kv = rec["kind"], rec["kind_version"]
        if kind in BUILTIN_KINDS and kv > max_kind_version(kind, fv):
            req = "R-SHD-2" if (kind, kv, fv) == ("tree", 2, 1) else "R-CMP-19"
            raise E("UnsupportedVersion", "manifest.json", f"/components/{esc(name)}/kind_version",
                    f"kind {kind} version {kv} found in format version {fv}; this reader supports up to version "
                    f"{max_kind_version(kind, fv)}", req)


def payloads(reader, comps):
    """Step 13: the size limit of tree.msgpack / value.json, then its R-CHK-7. Returns name -> bytes."""
    out = {}
    for name, rec in comps.items():
        key = payload_key(rec["kind"])
        if key is None:
            continue
        limit, req = (MAX_TREE, "R-LIM-9") if key == "tree.msgpack" else (MAX_VALUE_JSON, "R-LIM-2")
        fp = rec["path"] + "/" + key
        sz = reader.store.size(fp)
        if sz > limit:
            raise E("LimitExceeded", fp, f"/components/{esc(name)}/files/{key}/size",
                    f"{key} is {sz} bytes (max {limit})", req)
        data = reader.store.read(fp)
        reader.check_crc(fp, name, key, rec["files"][key], data)
        out[name] = data
    return out


def parse(comps, payload, fv):
    """Step 14. Tag 10 is decoded in kind_version 2 trees, R-SHD-1 in kind_version 1 trees of a format
    version 2 checkpoint, and a reserved tag (R-TREE-18) in format version 1."""
    decoded = {}
    for name, rec in comps.items():
        if rec["kind"] == "json":
            decoded[name] = ("json", ojson.parse(payload[name], rec["path"] + "/value.json"))
        elif rec["kind"] == "tree":
            hook = None
            if fv >= 2:
                hook = oshard.read_sharded if rec["kind_version"] == 2 else oshard.forbid_sharded
            root, arrays, sharded = otree.decode_tree(payload[name], rec["path"] + "/tree.msgpack", hook)
            decoded[name] = ("tree", root, arrays, sharded)
    return decoded


def data_files(rec):
    return oshard.data_files(rec["files"]) if rec["kind_version"] == 2 else ["data.bin"]


def layouts(store, comps, decoded):
    """Step 15: version 1 layout of data.bin, or S.9 (a)-(c) for kind_version 2."""
    for name, rec in comps.items():
        if rec["kind"] != "tree":
            continue
        _, _, arrays, sharded = decoded[name]
        path = rec["path"]
        tfp = path + "/tree.msgpack"
        if rec["kind_version"] == 2:
            oshard.layout(tfp, path, rec["files"], lambda k, p=path: store.size(p + "/" + k), arrays, sharded)
        else:
            olayout.layout(tfp, path + "/data.bin", "data.bin", store.size(path + "/data.bin"), arrays)


def contents(store, comps, decoded):
    """Step 16 (array part): per tree component, per data file in step 15 order, R-ARR-14 then R-ARR-13
    extent by extent, then R-ARR-12. Returns name -> {data file key -> bytes}."""
    blobs = {}
    for name, rec in comps.items():
        if rec["kind"] != "tree":
            continue
        arrays = decoded[name][2]
        files = blobs[name] = {}
        for key in data_files(rec):
            fp = rec["path"] + "/" + key
            files[key] = data = store.read(fp)
            olayout.content(rec["path"] + "/tree.msgpack", fp, data, [a for a in arrays if oshard.file_of(a) == key])
    return blobs


def assemble(comps, decoded, blobs):
    """S.6: every sharded array becomes its global array, from shards verified in step 16."""
    for name, rec in comps.items():
        if rec["kind"] == "tree":
            for s in decoded[name][3]:
                s.data = oshard.assemble(s, blobs[name].__getitem__)
