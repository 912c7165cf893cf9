// Bundle the viewer (src/viewer/main.ts and the reader it uses) into one file of the docs site.
import { build } from "esbuild";
import { fileURLToPath } from "node:url";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
await build({
  entryPoints: [here("../src/viewer/main.ts")],
  outfile: here("../../../docs/viewer-app/viewer.js"),
  bundle: true,
  format: "esm",
  platform: "browser",
  target: "es2022",
  minify: true,
  legalComments: "none",
  logLevel: "warning",
});
