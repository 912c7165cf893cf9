/**
 * Archive layout writer (spec §3.3), browser-safe: STORED members with data
 * 64-byte aligned by a zero-filled extra field (id 0xd935), manifest.json
 * last, no comment. Produces the archive as a list of byte chunks.
 */
import { crc32 } from "./crc.js";
import { CheckpointError } from "./errors.js";

const le = (v: number, n: number): number[] => Array.from({ length: n }, (_, k) => Math.floor(v / 2 ** (8 * k)) & 0xff);
const MAX32 = 0xfffffffe;

/** Members in order; the last one must be manifest.json (R-ZIP-21). */
export function zipArchive(members: [string, Uint8Array][]): Uint8Array[] {
  const enc = new TextEncoder();
  const chunks: Uint8Array[] = [];
  const central: number[][] = [];
  let offset = 0;
  if (members.length > 0xfffe) throw new CheckpointError("(archive)", "members", "more than 65534 members needs ZIP64, not written by this writer", "R-ZIP-15");
  for (const [name, data] of members) {
    const n = enc.encode(name);
    if (data.length > MAX32 || offset > MAX32) {
      throw new CheckpointError(name, "size", "archives over 4 GiB need ZIP64, not written by this writer", "R-ZIP-15");
    }
    let pad = (64 - ((offset + 30 + n.length) % 64)) % 64;
    if (pad > 0 && pad < 4) pad += 64; // an extra field record needs at least its 4-byte header (R-ZIP-25)
    const extra = pad ? [0x35, 0xd9, ...le(pad - 4, 2), ...new Array<number>(pad - 4).fill(0)] : [];
    const crc = crc32(data);
    const common = [...le(20, 2), 0, 0, 0, 0, 0, 0, 0x21, 0, ...le(crc, 4), ...le(data.length, 4), ...le(data.length, 4), ...le(n.length, 2)];
    chunks.push(new Uint8Array([0x50, 0x4b, 0x03, 0x04, ...common, ...le(extra.length, 2), ...n, ...extra]));
    chunks.push(data);
    // Central entry: made by UNIX (3), regular file mode 0644 (R-ZIP-17), no extra field.
    central.push([0x50, 0x4b, 0x01, 0x02, 20, 3, ...common, 0, 0, 0, 0, 0, 0, 0, 0, ...le(0o100644 * 65536, 4), ...le(offset, 4), ...n]);
    offset += 30 + n.length + extra.length + data.length;
  }
  const cd = new Uint8Array(central.flat());
  chunks.push(cd);
  chunks.push(new Uint8Array([0x50, 0x4b, 0x05, 0x06, 0, 0, 0, 0, ...le(members.length, 2), ...le(members.length, 2), ...le(cd.length, 4), ...le(offset, 4), 0, 0]));
  return chunks;
}
