/** Browser hosts for the two container forms: a Blob read by ranges, and a folder's File objects. */
import { CHUNK, type RandomAccess } from "../container.js";
import type { DirectoryBackend, DirEntry } from "../directory.js";

/** The reading of a verification pass: raised by the next read once the user cancels it. */
export class Cancelled extends Error {
  constructor() {
    super("cancelled");
  }
}

/**
 * Every byte the page reads is counted here, and a pass in progress can be cancelled: the next read raises
 * {@link Cancelled}. Reads are of at most one chunk (1 MiB), so this is how often a pass notices.
 */
export const meter = { bytes: 0, signal: null as AbortSignal | null, transient: false };

/** The one buffer of transient reads (see {@link metered}); null while a read holds it. */
let pooled: ArrayBuffer | null = null;

/**
 * The stream transient reads continue: one `Blob.slice(offset).stream()` read on while each read starts
 * where the previous one ended (a verification pass, a summary), opened again only when a read jumps.
 * A stream per 1 MiB read left its objects (reader, promises, queues) to the collector: verifying a 1 GiB
 * archive so raised the JS heap's peak from 2 to 24 MiB and the renderer's peak memory by 81 MiB over a
 * 16 MiB archive (docs/viewer.md).
 */
let current: { blob: Blob; position: number; reader: ReadableStreamBYOBReader; busy: boolean } | null = null;

/** The stream to read `blob` from `offset` with: the current one if it is there, else a new one (made current
 * unless the current one is in the middle of a read, which a read at once elsewhere must not disturb). */
function streamAt(blob: Blob, offset: number): ReadableStreamBYOBReader {
  if (current !== null && !current.busy && current.blob === blob && current.position === offset) return current.reader;
  const reader = blob.slice(offset).stream().getReader({ mode: "byob" });
  if (current === null || !current.busy) {
    if (current !== null) void current.reader.cancel().catch(() => undefined); // a jump: the old stream is dropped
    current = { blob, position: offset, reader, busy: false };
  }
  return reader;
}

/**
 * `length` bytes of `blob` from `offset` into the one reused buffer: a view that the next read overwrites.
 * A fresh 1 MiB ArrayBuffer per read is garbage at once, but the collector lets it pile up: verifying a
 * 256 MiB archive that way raised the renderer's peak memory by about 120 MiB over a 16 MiB one.
 */
async function intoPool(blob: Blob, offset: number, length: number): Promise<Uint8Array> {
  let buf = pooled !== null && pooled.byteLength >= length ? pooled : new ArrayBuffer(Math.max(length, CHUNK));
  pooled = null;
  const reader = streamAt(blob, offset);
  const mine = current !== null && current.reader === reader ? current : null;
  if (mine !== null) mine.busy = true;
  let filled = 0;
  try {
    while (filled < length) {
      const { value, done } = await reader.read(new Uint8Array(buf, filled, length - filled));
      if (value) buf = value.buffer as ArrayBuffer; // the stream hands the buffer back (transferred)
      if (done || !value) break;
      filled += value.byteLength;
    }
  } catch (e) {
    if (mine !== null && current === mine) current = null; // a failed stream is not continued
    throw e;
  } finally {
    if (mine !== null) mine.busy = false;
    else void reader.cancel().catch(() => undefined); // a stream of its own, for this read only
  }
  if (mine !== null) mine.position = offset + filled;
  pooled = buf;
  return new Uint8Array(buf, 0, filled);
}

/**
 * Every read of the page: counted, cancellable, and while {@link meter}.transient is set (verification,
 * summaries: each chunk is consumed before the next read) into one reused buffer, so the renderer's
 * memory is a chunk, not the file.
 */
async function metered(blob: Blob, offset: number, length: number): Promise<Uint8Array> {
  if (meter.signal?.aborted) throw new Cancelled();
  const out = meter.transient && length <= CHUNK
    ? await intoPool(blob, offset, length)
    : new Uint8Array(await blob.slice(offset, offset + length).arrayBuffer());
  meter.bytes += out.length;
  return out;
}

/** A File/Blob read lazily with Blob.slice: only the requested range is ever loaded. */
export class BlobSource implements RandomAccess {
  readonly size: number;
  constructor(private readonly blob: Blob) {
    this.size = blob.size;
  }
  read(offset: number, length: number): Promise<Uint8Array> {
    return metered(this.blob, offset, length);
  }
}

/**
 * A directory checkpoint given as files with their relative paths (folder
 * picker or drag-and-drop). Browsers resolve symbolic links before the page
 * sees them, so R-CON-4 cannot be checked here; everything else is.
 */
export class FileListDirectory implements DirectoryBackend {
  private files = new Map<string, File>();
  constructor(entries: [string, File][]) {
    for (const [p, f] of entries) this.files.set(p, f);
  }

  async stat(path: string): Promise<DirEntry | null> {
    const f = this.files.get(path);
    if (f) return { path, type: "file", size: f.size };
    for (const p of this.files.keys()) if (p.startsWith(path + "/")) return { path, type: "dir", size: 0 };
    return null;
  }

  async walk(): Promise<DirEntry[]> {
    const dirs = new Set<string>();
    const out: DirEntry[] = [];
    for (const [p, f] of this.files) {
      out.push({ path: p, type: "file", size: f.size });
      const segs = p.split("/");
      for (let n = 1; n < segs.length; n++) dirs.add(segs.slice(0, n).join("/"));
    }
    for (const d of dirs) out.push({ path: d, type: "dir", size: 0 });
    return out;
  }

  read(path: string, offset: number, length: number): Promise<Uint8Array> {
    return metered(this.files.get(path)!, offset, length);
  }
}

/** Files of an <input webkitdirectory>: strip the picked folder's own name from each relative path. */
export function fromFolderInput(list: FileList): { root: string; entries: [string, File][] } {
  const files = Array.from(list);
  const rel = (f: File): string => (f as File & { webkitRelativePath: string }).webkitRelativePath || f.name;
  const root = files.length ? rel(files[0]!).split("/")[0]! : "";
  return { root, entries: files.map((f) => [rel(f).split("/").slice(1).join("/"), f]) };
}

/** A dropped folder (FileSystemDirectoryEntry), walked recursively. */
export async function fromDroppedDirectory(dir: FileSystemDirectoryEntry): Promise<[string, File][]> {
  const out: [string, File][] = [];
  const readAll = (d: FileSystemDirectoryEntry): Promise<FileSystemEntry[]> =>
    new Promise((resolve, reject) => {
      const reader = d.createReader();
      const acc: FileSystemEntry[] = [];
      const next = (): void => reader.readEntries((batch) => (batch.length ? (acc.push(...batch), next()) : resolve(acc)), reject);
      next();
    });
  const visit = async (d: FileSystemDirectoryEntry, prefix: string): Promise<void> => {
    for (const e of await readAll(d)) {
      const p = prefix ? `${prefix}/${e.name}` : e.name;
      if (e.isDirectory) await visit(e as FileSystemDirectoryEntry, p);
      else out.push([p, await new Promise<File>((res, rej) => (e as FileSystemFileEntry).file(res, rej))]);
    }
  };
  await visit(dir, "");
  return out;
}
