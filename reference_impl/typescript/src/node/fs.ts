/** Node file-system hosts for both container forms, and §15 step 1 (locate, R-PUB-10 … R-PUB-14). */
import { promises as fsp } from "node:fs";
import type { FileHandle } from "node:fs/promises";
import * as nodePath from "node:path";
import type { Container, RandomAccess } from "../container.js";
import { type DirectoryBackend, DirectoryContainer, type DirEntry, type EntryType } from "../directory.js";
import { CheckpointError, NotACheckpoint } from "../errors.js";
import { openCheckpoint, type Opened } from "../reader.js";
import { ArchiveContainer } from "../zip.js";

const typeOf = (st: { isFile(): boolean; isDirectory(): boolean; isSymbolicLink(): boolean }): EntryType =>
  st.isSymbolicLink() ? "symlink" : st.isFile() ? "file" : st.isDirectory() ? "dir" : "other";

/**
 * Open file handles, a few at a time: reading many small extents must not pay an
 * open() and a close() each, and a directory with many files must not exhaust
 * descriptors. `close()` releases them all.
 */
class HandlePool {
  private handles = new Map<string, Promise<FileHandle>>();
  constructor(private readonly max = 16) {}

  private get(file: string): Promise<FileHandle> {
    let h = this.handles.get(file);
    if (h) {
      this.handles.delete(file); // re-insert: most recently used last
    } else {
      h = fsp.open(file, "r");
      if (this.handles.size >= this.max) {
        const [oldest, old] = this.handles.entries().next().value as [string, Promise<FileHandle>];
        this.handles.delete(oldest);
        void old.then((x) => x.close(), () => undefined);
      }
    }
    this.handles.set(file, h);
    return h;
  }

  async read(file: string, offset: number, length: number): Promise<Uint8Array> {
    const h = await this.get(file);
    const buf = new Uint8Array(length);
    let done = 0;
    while (done < length) {
      const { bytesRead } = await h.read(buf, done, length - done, offset + done);
      if (bytesRead === 0) break;
      done += bytesRead;
    }
    // A file that shrank under us reads short; the size checks then fail as IntegrityError.
    return done === length ? buf : buf.subarray(0, done);
  }

  async close(): Promise<void> {
    const all = [...this.handles.values()];
    this.handles.clear();
    await Promise.all(all.map((h) => h.then((x) => x.close(), () => undefined)));
  }
}

/** A directory checkpoint on disk; entries are typed with lstat (R-CON-6) and links never followed (R-CON-7). */
export class NodeDirectory implements DirectoryBackend {
  private readonly pool = new HandlePool();
  constructor(private readonly root: string) {}

  async stat(path: string): Promise<DirEntry | null> {
    try {
      const st = await fsp.lstat(nodePath.join(this.root, path));
      return { path, type: typeOf(st), size: st.size };
    } catch {
      return null;
    }
  }

  async walk(): Promise<DirEntry[]> {
    const out: DirEntry[] = [];
    const visit = async (rel: string): Promise<void> => {
      const names = (await fsp.readdir(nodePath.join(this.root, rel))).sort();
      for (const name of names) {
        const p = rel ? `${rel}/${name}` : name;
        const st = await fsp.lstat(nodePath.join(this.root, p));
        const type = typeOf(st);
        out.push({ path: p, type, size: st.size });
        if (type === "dir") await visit(p);
      }
    };
    await visit("");
    return out;
  }

  read(path: string, offset: number, length: number): Promise<Uint8Array> {
    return this.pool.read(nodePath.join(this.root, path), offset, length);
  }

  close(): Promise<void> {
    return this.pool.close();
  }
}

/** A regular file read by range. */
export class NodeFile implements RandomAccess {
  private readonly pool = new HandlePool(1);
  constructor(private readonly file: string, readonly size: number) {}
  read(offset: number, length: number): Promise<Uint8Array> {
    return this.pool.read(this.file, offset, Math.max(0, Math.min(length, this.size - offset)));
  }
  close(): Promise<void> {
    return this.pool.close();
  }
}

/** The container for an existing path: a directory or a regular file (R-PUB-11). */
async function containerAt(path: string, label: string): Promise<Container> {
  const st = await fsp.stat(path); // follows links in the caller's path (§3.2)
  if (st.isDirectory()) return new DirectoryContainer(label, new NodeDirectory(path));
  if (st.isFile()) return new ArchiveContainer(label, new NodeFile(path, st.size));
  throw new NotACheckpoint(label, "path", "neither a directory nor a regular file", "R-PUB-11");
}

const exists = async (p: string): Promise<boolean> => {
  try {
    await fsp.stat(p);
    return true;
  } catch {
    return false;
  }
};

async function openClosingOnError(c: Container): Promise<Opened> {
  try {
    return await openCheckpoint(c);
  } catch (e) {
    await c.close();
    throw e;
  }
}

/**
 * §15 steps 1–11 for a path on disk, including the `.<name>.oc-old-*` fallback (R-PUB-13, R-PUB-14).
 * The caller closes `opened.container` when done (it holds file handles).
 */
export async function openPath(path: string): Promise<Opened> {
  const trimmed = path.replace(/\/+$/, "") || path;
  const name = nodePath.basename(trimmed);
  if (name.startsWith(".") && name.includes(".oc-staging-")) {
    throw new NotACheckpoint(path, "path", "a staging name is never a checkpoint", "R-PUB-12");
  }
  if (await exists(trimmed)) return openClosingOnError(await containerAt(trimmed, path));
  const parent = nodePath.dirname(trimmed);
  const prefix = `.${name}.oc-old-`;
  let names: string[] = [];
  try {
    names = (await fsp.readdir(parent)).filter((n) => n.startsWith(prefix) && n.length > prefix.length).sort();
  } catch {
    // No parent directory: nothing to fall back to.
  }
  const opened: Opened[] = [];
  for (const n of names) {
    const c = await containerAt(nodePath.join(parent, n), nodePath.join(parent, n));
    try {
      opened.push(await openCheckpoint(c));
    } catch (e) {
      await c.close();
      if (!(e instanceof CheckpointError)) throw e;
    }
  }
  if (opened.length === 1) return opened[0]!;
  for (const o of opened) await o.container.close();
  // The replacement may have completed while we looked (§12.3).
  if (opened.length === 0 && (await exists(trimmed))) return openClosingOnError(await containerAt(trimmed, path));
  throw new NotACheckpoint(path, "path", opened.length ? `${opened.length} old checkpoints open; ambiguous` : "path does not exist", opened.length ? "R-PUB-14" : "R-PUB-10");
}
