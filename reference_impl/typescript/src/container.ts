/**
 * The two container forms behind one interface (spec §3), independent of where
 * the bytes come from: a Node file system or browser File/Blob objects.
 *
 * A container answers exactly the questions the validation order asks of it
 * (§15 steps 2, 10, 11 and the archive part of 16); every read is a byte range,
 * so large files are never loaded whole.
 */

export type Form = "directory" | "archive";

/** A byte-addressable source: a file handle, a Blob. */
export interface RandomAccess {
  readonly size: number;
  read(offset: number, length: number): Promise<Uint8Array>;
  /** Release what reading holds open (file handles); optional. */
  close?(): Promise<void>;
}

export interface Container {
  readonly form: Form;
  /** The checkpoint path, for messages. */
  readonly root: string;
  /** §15 step 2: the container checks up to the manifest; returns the manifest's size. */
  open(): Promise<number>;
  /** §15 step 10: symlinks/special entries, listed files present, nothing unlisted. */
  checkInventory(listed: readonly string[]): Promise<void>;
  /** Size of a file known to exist (after step 10). */
  size(path: string): number;
  /** `length` bytes of a file from `offset` (bounds already checked by the caller). */
  read(path: string, offset: number, length: number): Promise<Uint8Array>;
  /** §15 step 16, container part: R-ZIP-22 for every member; returns how many (0 for directories). */
  verifyContainer(): Promise<number>;
  /** Release open file handles; reading again reopens them. */
  close(): Promise<void>;
}

/** Chunk size for streaming checksums: large enough to be fast, small enough to stay hot in cache. */
export const CHUNK = 1 << 20;

/** Feed `length` bytes of `path` from `offset` to `sink` in chunks. */
export async function streamRange(
  c: Pick<Container, "read">,
  path: string,
  offset: number,
  length: number,
  sink: (chunk: Uint8Array) => void,
): Promise<void> {
  for (let pos = 0; pos < length; pos += CHUNK) {
    sink(await c.read(path, offset + pos, Math.min(CHUNK, length - pos)));
  }
}
