"""Containers: the directory form (§3.2) and the archive form (§3.3), steps 2 and 10 of §15."""
from __future__ import annotations

import mmap
import os
import stat

import ozip
from ocommon import MANIFEST, MAX_PATH, MAX_SEGMENT, SEGMENT_RE, E


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

