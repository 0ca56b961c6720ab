// The REAL @polymath-ai/client's PolymathEndpoint, as a browser bundles it (esbuild, at test time).
//
// Why not `import { PolymathEndpoint } from "@polymath-ai/client"`: the package's entry,
// dist/src/main.js, also loads dotenv, find-up, gpt-3-encoder and openai, which need Node's fs,
// path and os, so no bundler can build it for a browser. PolymathEndpoint is in
// dist/src/endpoint.js, which needs only fetch, FormData, URL and a global Buffer (the package's
// encodeEmbedding, in @polymath-ai/host, calls Buffer.from): the `buffer` package provides it, as
// bundlers used to for every browser app. The path is relative because the package's "exports"
// names only its entry.
import { Buffer } from "buffer";

globalThis.Buffer ??= Buffer;

export { PolymathEndpoint } from "./node_modules/@polymath-ai/client/dist/src/endpoint.js";
export { DiscoveryError } from "./node_modules/@polymath-ai/client/dist/src/discover.js";
