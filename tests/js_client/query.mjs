#!/usr/bin/env node
// End-to-end harness: query a polymath host with the REAL @polymath-ai/client
// package (PolymathEndpoint.ask: its FormData encoding, its zod validation of
// the arguments and of the result, its Link/<link rel="polymath"> rediscovery).
//
// Usage:
//   node query.mjs <host-url> '<json-args>'
//   echo '<json-args>' | node query.mjs <host-url>        (or '-' as 2nd arg)
//
// json-args (all optional; unknown keys are passed to the client, which drops them):
//   query_embedding   base64 of little-endian float32, or an array of numbers
//                     (the client itself insists on exactly 1536 numbers)
//   count, count_type, omit ("embedding" | ["embedding", "similarity"] | ...),
//   access_token, version, query_embedding_model, sort
//   float64: true     send the embedding as base64 float64 instead of float32.
//                     No published client does this; it is emulated by
//                     overriding only PolymathEndpoint.prepareFormData.
//   trace: true       print {"library": ..., "requests": [...]} instead of the
//                     library alone; each request has method, url, status,
//                     content_type, link, the form fields sent (query_embedding
//                     cut short; query_embedding_bytes is its decoded length)
//                     and the raw response body (parsed if JSON).
//   validate: true    instead of one query, run the package's own conformance
//                     check, PolymathEndpoint.validate() (random 1536-d query;
//                     token budget 1500, then exactly the tokens of all but the
//                     last bit with the same bit ids in order, then 2 bits);
//                     prints {"valid": bool, "details": [...]}, exit 0 or 6.
//
// Output (stdout, one JSON document) and exit status:
//   0  the library exactly as the client returned it (after its zod parse,
//      which strips keys it does not know, such as "details")
//   2  usage error                       {"usage_error": "..."}
//   3  the host answered a POST with an HTTP error and the client threw
//      {"error_status": <status of the first failed POST>, "message": ...,
//       "error_body": <that response's body, parsed if JSON>, "requests": [...]}
//   4  the client's zod schema rejected the arguments ("stage": "arguments")
//      or the host's 2xx JSON response ("stage": "response")
//      {"client_validation_error": [...zod issues], "stage": ..., "message": ...}
//   5  anything else (connection refused, discovery failure on a 2xx non-JSON
//      answer, ...)                      {"client_error": name, "message": ...}

import process from "node:process";

function out(obj, code) {
  process.stdout.write(JSON.stringify(obj) + "\n");
  process.exit(code);
}

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
}

const [hostUrl, rawArgv] = process.argv.slice(2);
if (!hostUrl) {
  out({ usage_error: "usage: node query.mjs <host-url> ['<json-args>' | -]" }, 2);
}

let args;
try {
  const text = rawArgv === undefined || rawArgv === "-" ? await readStdin() : rawArgv;
  args = text.trim() ? JSON.parse(text) : {};
  if (args === null || typeof args !== "object" || Array.isArray(args)) {
    throw new Error("arguments must be a JSON object");
  }
} catch (e) {
  out({ usage_error: `bad JSON arguments: ${e.message}` }, 2);
}

const { float64 = false, trace = false, validate = false, ...askOptions } = args;

if (typeof askOptions.query_embedding === "string") {
  const bytes = Buffer.from(askOptions.query_embedding, "base64");
  if (bytes.length % 4 !== 0) {
    out({ usage_error: "query_embedding base64 is not a whole number of float32s" }, 2);
  }
  const copy = new Uint8Array(bytes); // aligned copy
  askOptions.query_embedding = Array.from(new Float32Array(copy.buffer));
}

// Observe (never replace) every HTTP exchange the client makes.
const requests = [];
const realFetch = globalThis.fetch;
globalThis.fetch = async (input, init = {}) => {
  const method = (init.method || "GET").toUpperCase();
  const entry = { method, url: String(input) };
  if (init.body instanceof FormData) {
    entry.form = {};
    for (const [k, v] of init.body.entries()) {
      entry.form[k] = typeof v === "string" ? v : `<${v.constructor.name}>`;
    }
    if (typeof entry.form.query_embedding === "string") {
      const qe = entry.form.query_embedding;
      entry.query_embedding_bytes = Buffer.from(qe, "base64").length;
      if (qe.length > 40) entry.form.query_embedding = qe.slice(0, 40) + "...";
    }
  }
  requests.push(entry);
  const response = await realFetch(input, init);
  entry.status = response.status;
  entry.content_type = response.headers.get("content-type");
  entry.link = response.headers.get("link");
  try {
    const body = await response.clone().text();
    try {
      entry.body = JSON.parse(body);
    } catch {
      entry.body = body.length > 2000 ? body.slice(0, 2000) + "..." : body;
    }
  } catch {
    entry.body = null;
  }
  return response;
};

// Quiet dotenv (the client calls dotenv.config() on import).
process.env.DOTENV_CONFIG_QUIET ??= "true";
const { PolymathEndpoint, DiscoveryError } = await import("@polymath-ai/client");

class Float64Endpoint extends PolymathEndpoint {
  prepareFormData(endpointArgs) {
    const form = super.prepareFormData(endpointArgs);
    if (endpointArgs.query_embedding) {
      const b64 = Buffer.from(new Float64Array(endpointArgs.query_embedding).buffer).toString("base64");
      form.set("query_embedding", b64);
    }
    return form;
  }
}

const endpoint = float64 ? new Float64Endpoint(hostUrl) : new PolymathEndpoint(hostUrl);

if (validate) {
  // The package's own conformance check (what `polymath validate` runs).
  const { valid, details } = await endpoint.validate();
  const shown = details.map(({ description, success, exception }) =>
    exception ? { description, success, exception: `${exception.name}: ${exception.message}` } : { description, success },
  );
  out(trace ? { valid, details: shown, requests } : { valid, details: shown }, valid ? 0 : 6);
}

try {
  const library = await endpoint.ask(askOptions);
  out(trace ? { library, requests } : library, 0);
} catch (err) {
  const posts = requests.filter((r) => r.method === "POST");
  const failed = posts.find((r) => r.status !== undefined && (r.status < 200 || r.status > 299));
  if (err && err.name === "ZodError") {
    out(
      {
        client_validation_error: err.issues,
        stage: posts.length ? "response" : "arguments",
        message: err.message,
        requests,
      },
      4,
    );
  }
  if (failed) {
    out(
      {
        error_status: failed.status,
        message: String(err && err.message),
        client_error: err && err.name,
        discovery_status: err instanceof DiscoveryError ? err.data.status ?? null : null,
        error_body: failed.body,
        requests,
      },
      3,
    );
  }
  out(
    {
      client_error: err && err.name,
      message: String(err && err.message),
      cause: err && err.cause ? String(err.cause.code || err.cause) : null,
      requests,
    },
    5,
  );
}
