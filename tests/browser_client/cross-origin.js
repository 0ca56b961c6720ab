// A browser app on another origin asking a polymath host, written as an app author would write it.
// The outcome goes into the DOM: #state says "answered" or "failed", #bits lists the bits (id,
// similarity, token count, title), #error the error's name and message.
import { PolymathEndpoint } from "./polymath-client.js";

const params = new URLSearchParams(location.search);
const host = params.get("host");
const mode = params.get("mode") ?? "client";
const count = Number(params.get("count") ?? "5");

async function askWithClient(queryEmbedding, server) {
  return new PolymathEndpoint(server).ask({ query_embedding: queryEmbedding, count, count_type: "bit" });
}

async function askWithPreflight(queryEmbedding) {
  // JSON and Authorization are not "simple": the browser sends OPTIONS first.
  const base64 = btoa(String.fromCharCode(...new Uint8Array(new Float32Array(queryEmbedding).buffer)));
  const response = await fetch(new URL("/", host), {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: "Bearer not-a-token-this-host-knows" },
    body: JSON.stringify({ query_embedding: base64, count, count_type: "bit" }),
  });
  if (!response.ok) throw new Error(`HTTP ${response.status}: ${await response.text()}`);
  return response.json();
}

function show(library) {
  const list = document.getElementById("bits");
  for (const bit of library.bits) {
    const item = document.createElement("li");
    item.dataset.id = bit.id ?? "";
    item.dataset.similarity = String(bit.similarity);
    item.dataset.tokenCount = String(bit.token_count);
    item.textContent = bit.info?.title ?? bit.info?.url ?? "";
    list.append(item);
  }
}

const state = document.getElementById("state");
try {
  const queryEmbedding = await (await fetch("query.json")).json();
  const library =
    mode === "preflight"
      ? await askWithPreflight(queryEmbedding)
      : await askWithClient(queryEmbedding, mode === "discover" ? new URL("/libraries", host).href : host);
  show(library);
  state.textContent = "answered";
} catch (error) {
  document.getElementById("error").textContent = `${error.name}: ${error.message}`;
  state.textContent = "failed";
}
