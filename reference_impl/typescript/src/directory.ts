/** Directory form (spec §3.2) over any backend that can lstat, walk and read files. */
import type { Container } from "./container.js";
import { ExtraFile, MissingFile, NotACheckpoint, UnsafePath } from "./errors.js";

export type EntryType = "file" | "dir" | "symlink" | "other";

export interface DirEntry {
  path: string; // relative, "/"-separated
  type: EntryType; // determined without following links (R-CON-6)
  size: number;
}

/** What a directory container needs from its host (Node fs, or browser File objects). */
export interface DirectoryBackend {
  /** lstat one relative path; null when absent. */
  stat(path: string): Promise<DirEntry | null>;
  /** Every entry below the root, never descending into a symbolic link (R-CON-7). */
  walk(): Promise<DirEntry[]>;
  read(path: string, offset: number, length: number): Promise<Uint8Array>;
  close?(): Promise<void>;
}

export class DirectoryContainer implements Container {
  readonly form = "directory" as const;
  private sizes = new Map<string, number>();

  constructor(
    readonly root: string,
    private readonly backend: DirectoryBackend,
  ) {}

  async open(): Promise<number> {
    const m = await this.backend.stat("manifest.json");
    // R-CON-1: a directory without manifest.json is not a checkpoint; then R-CON-4 for it.
    if (m === null || m.type === "dir") {
      throw new NotACheckpoint(this.root, "manifest.json", "no manifest.json in the directory", "R-CON-1");
    }
    if (m.type !== "file") {
      throw new UnsafePath(this.root, "manifest.json", `manifest.json is a ${m.type}, not a regular file`, "R-CON-4");
    }
    this.sizes.set("manifest.json", m.size);
    return m.size;
  }

  async checkInventory(listed: readonly string[]): Promise<void> {
    const entries = await this.backend.walk();
    for (const e of entries) {
      if (e.type === "symlink" || e.type === "other") {
        throw new UnsafePath(e.path, "entry type", `${e.type === "symlink" ? "symbolic link" : "special file"} below the root`, "R-CON-4");
      }
    }
    const files = new Map(entries.filter((e) => e.type === "file").map((e) => [e.path, e]));
    for (const p of listed) {
      const e = files.get(p);
      if (!e) throw new MissingFile(p, "files", "listed file is missing or not a regular file", "R-CON-3");
      this.sizes.set(p, e.size);
    }
    const listedSet = new Set(listed);
    for (const p of files.keys()) {
      if (p !== "manifest.json" && !listedSet.has(p)) {
        throw new ExtraFile(p, "inventory", "file is not listed by any component", "R-CON-2");
      }
    }
  }

  size(path: string): number {
    const s = this.sizes.get(path);
    if (s === undefined) throw new Error(`internal: size of unchecked file ${path}`);
    return s;
  }

  read(path: string, offset: number, length: number): Promise<Uint8Array> {
    return this.backend.read(path, offset, length);
  }

  async close(): Promise<void> {
    await this.backend.close?.();
  }

  async verifyContainer(): Promise<number> {
    return 0; // a directory has no container-level checksums
  }
}
