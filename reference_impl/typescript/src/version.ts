/** This implementation's name and version (capabilities, producer of written checkpoints). */
export const IMPLEMENTATION = "opencheckpoint-ts";
export const VERSION = "0.1.0"; // keep equal to package.json (test/node.test.mjs checks)
