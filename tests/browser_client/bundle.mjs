#!/usr/bin/env node
// Bundle the real @polymath-ai/client's PolymathEndpoint for a browser page (see polymath-client.mjs).
// Usage: node bundle.mjs <out-file.js>     (run from anywhere; prints nothing unless it fails)
import { build } from "esbuild";
import { fileURLToPath } from "node:url";
import process from "node:process";

const here = fileURLToPath(new URL(".", import.meta.url));
const [outfile] = process.argv.slice(2);
if (!outfile) {
  console.error("usage: node bundle.mjs <out-file.js>");
  process.exit(2);
}

await build({
  absWorkingDir: here,
  entryPoints: ["polymath-client.mjs"],
  outfile,
  bundle: true,
  format: "esm",
  platform: "browser",
  target: "es2022",
  // @polymath-ai/host's index also exports its file and Pinecone hosts (fs, globby, ...); the
  // client needs only encodeEmbedding from it, which lives in utils.js.
  alias: { "@polymath-ai/host": "./node_modules/@polymath-ai/host/dist/src/utils.js" },
  logLevel: "warning",
});
