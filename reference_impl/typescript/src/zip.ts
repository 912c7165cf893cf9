/**
 * Archive form (spec §3.3): a strict reader for the one ZIP layout the format allows.
 *
 * Only the end records and the central directory are read whole (both are
 * bounded by the file's size); member data is read by range. Checks follow
 * §15: step 2 in `open()`, step 10 in `checkInventory()`, R-ZIP-22 in
 * `verifyContainer()`.
 */
import { CHUNK, type Container, type RandomAccess } from "./container.js";
import { crcHex, newCrc32 } from "./crc.js";
import { ArchiveError, ExtraFile, IntegrityError, LimitExceeded, MissingFile, NotACheckpoint, UnsafePath } from "./errors.js";
import { MAX_PATH_BYTES, MAX_SEGMENT_BYTES, SEGMENT_RE } from "./paths.js";

const SIG_LOCAL = 0x04034b50;
const SIG_CENTRAL = 0x02014b50;
const SIG_EOCD = 0x06054b50;
const SIG_Z64_EOCD = 0x06064b50;
const SIG_Z64_LOCATOR = 0x07064b50;
const MAX_ENTRIES = 1_000_001; // R-LIM-17
const U32 = 0xffffffff;
const U16 = 0xffff;

interface Extra {
  id: number;
  data: Uint8Array;
}

export interface CentralEntry {
  index: number;
  name: Uint8Array;
  nameText: string;
  madeBy: number;
  flags: number;
  method: number;
  crc: number;
  csize: number;
  usize: number;
  diskStart: number;
  externalAttrs: number;
  localOffset: number;
  extras: Extra[];
  /** Filled by the local header check. */
  dataStart?: number;
}

const view = (b: Uint8Array): DataView => new DataView(b.buffer, b.byteOffset, b.byteLength);
const u64 = (dv: DataView, at: number): number => Number(dv.getBigUint64(at, true));
const latin1 = new TextDecoder("latin1");
const sameBytes = (a: Uint8Array, b: Uint8Array): boolean => a.length === b.length && a.every((x, i) => x === b[i]);

/** Parse an extra field area into records; R-ZIP-25: whole records that fill it exactly. */
function parseExtras(area: Uint8Array, where: string, file: string): Extra[] {
  const out: Extra[] = [];
  const dv = view(area);
  let p = 0;
  while (p < area.length) {
    if (p + 4 > area.length) throw new ArchiveError(file, `${where}: extra field`, "trailing partial extra field record", "R-ZIP-25");
    const id = dv.getUint16(p, true);
    const n = dv.getUint16(p + 2, true);
    if (p + 4 + n > area.length) throw new ArchiveError(file, `${where}: extra field 0x${id.toString(16)}`, "record runs past the extra field area", "R-ZIP-25");
    out.push({ id, data: area.subarray(p + 4, p + 4 + n) });
    p += 4 + n;
  }
  return out;
}

export class ArchiveContainer implements Container {
  readonly form = "archive" as const;
  private entries: CentralEntry[] = [];
  private byName = new Map<string, CentralEntry>();
  private cdOffset = 0;

  constructor(
    readonly root: string,
    private readonly src: RandomAccess,
  ) {}

  private fail(field: string, detail: string, rule: string): never {
    throw new ArchiveError(this.root, field, detail, rule);
  }

  /** Exactly `length` bytes at `offset`, or an ArchiveError naming the structure that points outside the file. */
  private async bytes(offset: number, length: number, field: string, rule: string): Promise<Uint8Array> {
    if (offset < 0 || length < 0 || offset + length > this.src.size) this.fail(field, `points outside the archive (${offset}+${length})`, rule);
    const b = await this.src.read(offset, length);
    if (b.length !== length) this.fail(field, "archive ended while reading", rule);
    return b;
  }

  async open(): Promise<number> {
    const size = this.src.size;
    const head = await this.src.read(0, Math.min(4, size));
    if (head.length < 4 || view(head).getUint32(0, true) !== SIG_LOCAL) {
      throw new NotACheckpoint(this.root, "offset 0", "not a ZIP archive (no local file header signature at offset 0)", "R-ZIP-1");
    }
    // R-ZIP-2: the end of central directory record is exactly the last 22 bytes.
    if (size < 22 + 30) this.fail("end of central directory record", "archive too short", "R-ZIP-2");
    const eocdAt = size - 22;
    const eocd = view(await this.bytes(eocdAt, 22, "end of central directory record", "R-ZIP-2"));
    if (eocd.getUint32(0, true) !== SIG_EOCD) this.fail("end of central directory record", "not in the last 22 bytes of the file", "R-ZIP-2");
    if (eocd.getUint16(20, true) !== 0) this.fail("end of central directory record: comment length", "ZIP comment is not empty", "R-ZIP-2");
    let diskNo = eocd.getUint16(4, true);
    let diskCd = eocd.getUint16(6, true);
    let onDisk: number = eocd.getUint16(8, true);
    let total: number = eocd.getUint16(10, true);
    let cdSize: number = eocd.getUint32(12, true);
    let cdOffset: number = eocd.getUint32(16, true);

    // ZIP64 end records: present when the locator sits right before the EOCD.
    let endStart = eocdAt;
    let z64: { at: number; end: number } | null = null;
    if (eocdAt >= 20 + 56) {
      const loc = view(await this.bytes(eocdAt - 20, 20, "ZIP64 end of central directory locator", "R-ZIP-15"));
      if (loc.getUint32(0, true) === SIG_Z64_LOCATOR) {
        if (loc.getUint32(4, true) !== 0) this.fail("ZIP64 end of central directory locator: disk number", "not 0", "R-ZIP-3");
        const at = u64(loc, 8);
        if (at + 56 > eocdAt - 20) this.fail("ZIP64 end of central directory locator: offset", "ZIP64 record out of range", "R-ZIP-15");
        const rec = view(await this.bytes(at, 56, "ZIP64 end of central directory record", "R-ZIP-15"));
        if (rec.getUint32(0, true) !== SIG_Z64_EOCD) this.fail("ZIP64 end of central directory record", "bad signature", "R-ZIP-15");
        if (rec.getUint32(16, true) !== 0 || rec.getUint32(20, true) !== 0) {
          this.fail("ZIP64 end of central directory record: disk number", "not 0", "R-ZIP-3");
        }
        // Only saturated fields are taken from the ZIP64 record (§3.3).
        if (diskNo === U16) diskNo = 0;
        if (diskCd === U16) diskCd = 0;
        if (onDisk === U16) onDisk = u64(rec, 24);
        if (total === U16) total = u64(rec, 32);
        if (cdSize === U32) cdSize = u64(rec, 40);
        if (cdOffset === U32) cdOffset = u64(rec, 48);
        z64 = { at, end: at + 12 + u64(rec, 4) };
        endStart = at;
      }
    }
    if (diskNo !== 0 || diskCd !== 0) this.fail("end of central directory record: disk number", "not 0", "R-ZIP-3");
    if (!z64 && (onDisk === U16 || total === U16 || cdSize === U32 || cdOffset === U32)) {
      this.fail("end of central directory record", "saturated field without ZIP64 end records", "R-ZIP-15");
    }
    if (onDisk > MAX_ENTRIES || total > MAX_ENTRIES) {
      throw new LimitExceeded(this.root, "end of central directory record: entry count", `declares more than ${MAX_ENTRIES} entries`, "R-LIM-17");
    }
    // R-ZIP-24: end records follow the central directory without gaps.
    if (cdOffset + cdSize !== endStart) this.fail("central directory", "end records do not follow the central directory immediately", "R-ZIP-24");
    if (z64 && z64.end !== eocdAt - 20) this.fail("ZIP64 end of central directory locator", "does not follow the ZIP64 record immediately", "R-ZIP-24");
    this.cdOffset = cdOffset;
    this.entries = this.parseCentral(await this.bytes(cdOffset, cdSize, "central directory", "R-ZIP-24"));
    if (this.entries.length !== total || this.entries.length !== onDisk) {
      this.fail("end of central directory record: entry count", `declares ${total}/${onDisk} entries, central directory has ${this.entries.length}`, "R-ZIP-4");
    }
    const manifest = this.entries.findIndex((e) => e.nameText === "manifest.json");
    if (manifest < 0) throw new NotACheckpoint(this.root, "manifest.json", "archive has no member manifest.json", "R-CON-1");
    if (manifest !== this.entries.length - 1) this.fail(`central directory entry ${manifest}`, "manifest.json is not the last entry", "R-ZIP-21");
    const m = this.entries[manifest]!;
    this.checkCentralMember(m);
    await this.checkLocal(m, manifest === 0 ? 0 : await this.dataEnd(this.entries[manifest - 1]!));
    return m.usize;
  }

  private parseCentral(cd: Uint8Array): CentralEntry[] {
    const dv = view(cd);
    const out: CentralEntry[] = [];
    let p = 0;
    while (p < cd.length) {
      const where = `central directory entry ${out.length}`;
      if (p + 46 > cd.length || dv.getUint32(p, true) !== SIG_CENTRAL) this.fail(where, "unreadable central directory entry", "R-ZIP-4");
      if (out.length >= MAX_ENTRIES) throw new LimitExceeded(this.root, where, `more than ${MAX_ENTRIES} entries`, "R-LIM-17");
      const n = dv.getUint16(p + 28, true);
      const m = dv.getUint16(p + 30, true);
      const k = dv.getUint16(p + 32, true);
      if (p + 46 + n + m + k > cd.length) this.fail(where, "entry runs past the central directory", "R-ZIP-4");
      const name = cd.slice(p + 46, p + 46 + n);
      const extras = parseExtras(cd.subarray(p + 46 + n, p + 46 + n + m), where, this.root);
      const e: CentralEntry = {
        index: out.length,
        name,
        nameText: latin1.decode(name),
        madeBy: dv.getUint16(p + 4, true),
        flags: dv.getUint16(p + 8, true),
        method: dv.getUint16(p + 10, true),
        crc: dv.getUint32(p + 16, true),
        csize: dv.getUint32(p + 20, true),
        usize: dv.getUint32(p + 24, true),
        diskStart: dv.getUint16(p + 34, true),
        externalAttrs: dv.getUint32(p + 38, true),
        localOffset: dv.getUint32(p + 42, true),
        extras,
      };
      // R-ZIP-15: saturated fields come from the ZIP64 extra field, in APPNOTE order.
      if (e.usize === U32 || e.csize === U32 || e.localOffset === U32 || e.diskStart === U16) {
        const z = extras.find((x) => x.id === 0x0001);
        if (!z) this.fail(`${where}: extra field`, "saturated field without ZIP64 extra field", "R-ZIP-15");
        const zv = view(z.data);
        let q = 0;
        const take8 = (): number => {
          if (q + 8 > z.data.length) this.fail(`${where}: ZIP64 extra field`, "too short for the saturated fields", "R-ZIP-15");
          q += 8;
          return u64(zv, q - 8);
        };
        if (e.usize === U32) e.usize = take8();
        if (e.csize === U32) e.csize = take8();
        if (e.localOffset === U32) e.localOffset = take8();
        if (e.diskStart === U16) {
          if (q + 4 > z.data.length) this.fail(`${where}: ZIP64 extra field`, "too short for the disk number", "R-ZIP-15");
          e.diskStart = zv.getUint32(q, true);
        }
      }
      if (e.diskStart !== 0) this.fail(`${where}: disk number start`, "not 0", "R-ZIP-3");
      out.push(e);
      p += 46 + n + m + k;
    }
    return out;
  }

  /** R-ZIP-5 … R-ZIP-9, R-ZIP-16, then R-ZIP-17 for a central directory entry. */
  private checkCentralMember(e: CentralEntry): void {
    const where = `central directory entry ${e.index} (${e.nameText})`;
    if (e.method !== 0) this.fail(`${where}: compression method`, `method ${e.method}, not 0 (STORED)`, "R-ZIP-5");
    if (e.csize !== e.usize) this.fail(`${where}: compressed size`, "differs from the uncompressed size", "R-ZIP-6");
    this.checkFlags(e.flags, where);
    if (e.extras.some((x) => x.id === 0x7075)) this.fail(`${where}: extra field 0x7075`, "Info-ZIP Unicode Path extra field", "R-ZIP-16");
    if (e.madeBy >> 8 === 3) {
      const type = e.externalAttrs >>> 28;
      if (type !== 0 && type !== 8) {
        throw new UnsafePath(this.root, `${where}: external attributes`, `member is not a regular file (type ${type})`, "R-ZIP-17");
      }
    }
  }

  private checkFlags(flags: number, where: string): void {
    if (flags & 1) this.fail(`${where}: general purpose flags`, "bit 0 (encrypted) is set", "R-ZIP-7");
    if (flags & 8) this.fail(`${where}: general purpose flags`, "bit 3 (data descriptor) is set", "R-ZIP-8");
    if (flags & 0x40) this.fail(`${where}: general purpose flags`, "bit 6 (strong encryption) is set", "R-ZIP-9");
    if (flags & 0x2000) this.fail(`${where}: general purpose flags`, "bit 13 (masked local header) is set", "R-ZIP-9");
  }

  /** Where a member's data ends, reading its local header if not checked yet. */
  private async dataEnd(e: CentralEntry): Promise<number> {
    if (e.dataStart === undefined) {
      const h = view(await this.bytes(e.localOffset, 30, `local file header ${e.index}`, "R-ZIP-19"));
      e.dataStart = e.localOffset + 30 + h.getUint16(26, true) + h.getUint16(28, true);
    }
    return e.dataStart + e.usize;
  }

  /** The local header rules of step 10 (R-ZIP-5, 7–9, 12–16, 18, 19, 25). */
  private async checkLocal(e: CentralEntry, expectedOffset: number): Promise<void> {
    const where = `local file header ${e.index} (${e.nameText})`;
    if (e.localOffset !== expectedOffset) this.fail(`${where}: offset`, `at ${e.localOffset}, expected ${expectedOffset}`, "R-ZIP-19");
    if (e.localOffset + 30 > this.cdOffset) this.fail(where, "runs into the central directory", "R-ZIP-19");
    const fixed = await this.bytes(e.localOffset, 30, where, "R-ZIP-19");
    const dv = view(fixed);
    if (dv.getUint32(0, true) !== SIG_LOCAL) this.fail(`${where}: signature`, "no local file header signature", "R-ZIP-19");
    const n = dv.getUint16(26, true);
    const m = dv.getUint16(28, true);
    if (e.localOffset + 30 + n + m > this.cdOffset) this.fail(where, "runs into the central directory", "R-ZIP-19");
    const var_ = await this.bytes(e.localOffset + 30, n + m, where, "R-ZIP-19");
    const method = dv.getUint16(8, true);
    if (method !== 0) this.fail(`${where}: compression method`, `method ${method}, not 0 (STORED)`, "R-ZIP-5");
    this.checkFlags(dv.getUint16(6, true), where);
    if (!sameBytes(var_.subarray(0, n), e.name)) this.fail(`${where}: file name`, "differs from the central directory entry", "R-ZIP-12");
    if (dv.getUint32(14, true) !== e.crc) this.fail(`${where}: CRC-32`, "differs from the central directory entry", "R-ZIP-13");
    const extras = parseExtras(var_.subarray(n), where, this.root);
    let csize: number = dv.getUint32(18, true);
    let usize: number = dv.getUint32(22, true);
    if (csize === U32 || usize === U32) {
      const z = extras.find((x) => x.id === 0x0001);
      if (!z || z.data.length < 16) this.fail(`${where}: extra field`, "saturated size without ZIP64 extra field", "R-ZIP-15");
      const zv = view(z.data);
      usize = usize === U32 ? u64(zv, 0) : usize;
      csize = csize === U32 ? u64(zv, 8) : csize;
    }
    if (csize !== e.csize || usize !== e.usize) this.fail(`${where}: sizes`, "differ from the central directory entry", "R-ZIP-14");
    if (extras.some((x) => x.id === 0x7075)) this.fail(`${where}: extra field 0x7075`, "Info-ZIP Unicode Path extra field", "R-ZIP-16");
    const dataStart = e.localOffset + 30 + n + m;
    if (dataStart % 64 !== 0) this.fail(`${where}: data offset`, `member data at ${dataStart}, not a multiple of 64`, "R-ZIP-18");
    if (dataStart + e.usize > this.cdOffset) this.fail(where, "member data runs into the central directory", "R-ZIP-19");
    e.dataStart = dataStart;
  }

  async checkInventory(listed: readonly string[]): Promise<void> {
    const seen = new Set<string>();
    let expected = 0;
    for (const e of this.entries) {
      const where = `central directory entry ${e.index}`;
      if (e.nameText.endsWith("/")) this.fail(`${where}: file name`, `${JSON.stringify(e.nameText)} is a directory entry`, "R-ZIP-10");
      if (e.name.length > MAX_PATH_BYTES) throw new LimitExceeded(this.root, `${where}: file name`, `longer than ${MAX_PATH_BYTES} bytes`, "R-LIM-7");
      const segs = e.nameText.split("/");
      if (segs.some((s) => s.length > MAX_SEGMENT_BYTES)) {
        throw new LimitExceeded(this.root, `${where}: file name`, `a segment is longer than ${MAX_SEGMENT_BYTES} bytes`, "R-LIM-8");
      }
      if (!segs.every((s) => SEGMENT_RE.test(s))) {
        throw new UnsafePath(this.root, `${where}: file name`, `${JSON.stringify(e.nameText)} is not a valid path`, "R-PATH-5");
      }
      if (seen.has(e.nameText)) this.fail(`${where}: file name`, `duplicate member ${JSON.stringify(e.nameText)}`, "R-ZIP-11");
      seen.add(e.nameText);
      this.checkCentralMember(e);
      await this.checkLocal(e, expected);
      expected = e.dataStart! + e.usize;
      this.byName.set(e.nameText, e);
    }
    if (expected !== this.cdOffset) this.fail("central directory", `starts at ${this.cdOffset}, last member data ends at ${expected}`, "R-ZIP-20");
    const listedSet = new Set(listed);
    for (const p of listed) {
      if (!this.byName.has(p)) throw new MissingFile(p, "files", "listed file is not a member of the archive", "R-CON-3");
    }
    for (const name of this.byName.keys()) {
      if (name !== "manifest.json" && !listedSet.has(name)) {
        throw new ExtraFile(name, "inventory", "archive member is not listed by any component", "R-CON-2");
      }
    }
  }

  private entry(path: string): CentralEntry {
    const e = this.byName.get(path) ?? (path === "manifest.json" ? this.entries[this.entries.length - 1] : undefined);
    if (!e || e.dataStart === undefined) throw new Error(`internal: unchecked member ${path}`);
    return e;
  }

  size(path: string): number {
    return this.entry(path).usize;
  }

  read(path: string, offset: number, length: number): Promise<Uint8Array> {
    const e = this.entry(path);
    return this.src.read(e.dataStart! + offset, length);
  }

  async close(): Promise<void> {
    await this.src.close?.();
  }

  async verifyContainer(): Promise<number> {
    for (const e of this.entries) {
      const crc = newCrc32();
      for (let pos = 0; pos < e.usize; pos += CHUNK) {
        crc.update(await this.src.read(e.dataStart! + pos, Math.min(CHUNK, e.usize - pos)));
      }
      if (crc.digest() !== e.crc) {
        throw new IntegrityError(e.nameText, `central directory entry ${e.index}: CRC-32`, `stored ${crcHex(e.crc)}, computed ${crcHex(crc.digest())}`, "R-ZIP-22");
      }
    }
    return this.entries.length;
  }
}
