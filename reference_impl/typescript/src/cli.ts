#!/usr/bin/env node
/**
 * The conformance protocol of spec §17.2: `read CHECKPOINT`, `write EXPECTED_JSON OUT_PATH`,
 * `capabilities`. Failures print `error: <ErrorClass>: <message>` and exit 1 (R-RDR-12, R-WTR-7).
 */
import { CheckpointError } from "./errors.js";
import { J, stringifyJson } from "./json.js";
import { decodeCheckpoint } from "./reader.js";
import { render } from "./render.js";
import { openPath } from "./node/fs.js";
import { writeFromRendering } from "./node/write.js";
import { IMPLEMENTATION, VERSION } from "./version.js";


function oneLine(s: string): string {
  return s.replace(/[\r\n]+/g, " ").trim() || "(no message)";
}

async function main(argv: string[]): Promise<number> {
  const [cmd, ...args] = argv;
  if (cmd === "capabilities" && args.length === 0) {
    const caps = J.obj([
      ["implementation", J.str(IMPLEMENTATION)],
      ["version", J.str(VERSION)],
      ["modes", J.arr([J.str("read"), J.str("write")])],
      // Format version 2 (sharded arrays, spec opencheckpoint-v2.md) is not implemented: an optional
      // capability (Table 17-1 as amended by §S.8); a version 2 checkpoint fails with UnsupportedVersion.
      ["skip", J.obj([["sharding", J.str("format version 2 (sharded arrays) is not implemented")]])],
    ]);
    process.stdout.write(stringifyJson(caps, 0) + "\n");
    return 0;
  }
  if (cmd === "read" && args.length === 1) {
    const opened = await openPath(args[0]!);
    let text: string;
    try {
      text = stringifyJson(await render(opened, await decodeCheckpoint(opened)), 2) + "\n";
    } finally {
      await opened.container.close();
    }
    await new Promise<void>((resolve, reject) => process.stdout.write(text, (e) => (e ? reject(e) : resolve())));
    return 0;
  }
  if (cmd === "write" && args.length === 2) {
    await writeFromRendering(args[0]!, args[1]!);
    return 0;
  }
  process.stderr.write("usage: conformance read CHECKPOINT | write EXPECTED_JSON OUT_PATH | capabilities\n");
  return 2;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    if (e instanceof CheckpointError) {
      process.stderr.write(`error: ${e.errorClass}: ${oneLine(e.message)}\n`);
    } else {
      // Not a file defect: an I/O failure or a bug. Still one parseable line, class CheckpointError.
      const msg = e instanceof Error ? e.message : String(e);
      process.stderr.write(`error: CheckpointError: internal error: ${oneLine(msg)}\n`);
      if (e instanceof Error && e.stack) process.stderr.write(e.stack + "\n");
    }
    process.exitCode = 1;
  },
);
