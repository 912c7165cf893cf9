/**
 * OpenCheckpoint for JavaScript runtimes (Node ≥ 20 and browsers): the
 * platform-independent reader, writer core and value decoding. Node file
 * system helpers live in `./node/fs.js` and `./node/write.js`.
 */
export * from "./errors.js";
export { crc32, crc32c, crcHex, newCrc32, newCrc32c } from "./crc.js";
export type { Container, Form, RandomAccess } from "./container.js";
export { DirectoryContainer, type DirectoryBackend, type DirEntry } from "./directory.js";
export { ArchiveContainer } from "./zip.js";
export { openCheckpoint, decodeCheckpoint, decodeComponents, verifyContent, type ContentReport, type Opened, type DecodedComponent, type Content } from "./reader.js";
export { render, toHex, floatText } from "./render.js";
export { parseJsonBytes, parseJsonText, stringifyJson, formatFloat, J, type JsonValue } from "./json.js";
export { ITEMSIZE, isDtype } from "./dtypes.js";
export type { TreeNode, ArrayNode, DictKey } from "./tree.js";
export { encodeTree, sealManifest, type WriteNode, type WriteArray } from "./encode.js";
export { planCheckpoint, specFromRendering, type CheckpointSpec, type ComponentSpec } from "./plan.js";
export { zipArchive } from "./zipwrite.js";
export { decodeElements, summarize, decodeFloat16, decodeBfloat16, decodeFloat8, type Summary } from "./values.js";
