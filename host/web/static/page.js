// page.js: the page's only script (loaded with `defer`; nothing inline, so a strict CSP holds).
//
// Without it the page already searches, pages, expands texts and shows "more like this". It adds
// the access token: kept in this tab's sessionStorage (never a cookie, never in a URL), sent only
// to this host as `Authorization: Bearer`. With a token, every results section that carries a
// `data-ask` (the POST / body that gives it) is asked again with the token, and redrawn: bits the
// public page did not show are the ones the token added, and are marked private (with their
// access tag when the answer names it). A refused token (401) is forgotten and said so.
//
// Every piece of text goes into the page through textContent or an attribute, never as HTML.

const TOKEN_KEY = "polymath-host.token";

function storedToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || null;
  } catch {
    return null; // storage blocked (private mode, policy): the page works without a token
  }
}

function storeToken(token) {
  try {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
    return true;
  } catch {
    return false;
  }
}

function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value !== null && value !== undefined && value !== false) node.setAttribute(name, value === true ? "" : value);
  }
  node.append(...children.filter((child) => child !== null && child !== undefined));
  return node;
}

function showNotice(level, text) {
  const notices = document.getElementById("notices");
  if (!notices) return;
  notices.append(element("p", { class: `notice notice-${level}`, role: level === "error" ? "alert" : "status", "data-from-script": "" }, text));
}

function clearScriptNotices() {
  for (const node of document.querySelectorAll("#notices [data-from-script]")) node.remove();
}

function currentBudget() {
  const count = document.getElementById("count")?.value || "";
  const countType = document.getElementById("count_type")?.value || "token";
  return { count, count_type: countType };
}

function isWebLink(url) {
  try {
    const parsed = new URL(url);
    return parsed.protocol === "https:" || parsed.protocol === "http:";
  } catch {
    return false;
  }
}

const SNIPPET_CHARACTERS = 320; // as _bit.html

// The same markup as _bit.html's bit_card: keep the two in step.
function renderBit(bit, { kind, privateTag, budget }) {
  const info = bit.info || {};
  const title = info.title || info.url || "(untitled)";
  const heading = element("h3", { class: "bit-title" },
    isWebLink(info.url) ? element("a", { href: info.url, rel: "noopener noreferrer" }, title) : element("span", {}, title));

  const meta = element("p", { class: "bit-meta" });
  if (privateTag) meta.append(element("span", { class: "tag", title: "private: your token grants this tag" }, privateTag), " ");
  if (kind === "ranked" && typeof bit.similarity === "number") {
    meta.append(element("span", { class: "similarity", title: "cosine similarity to the query" }, bit.similarity.toFixed(3)), " · ");
  }
  meta.append(element("span", { class: "tokens" }, `${bit.token_count} tokens`));
  if (bit.library) meta.append(" · ", element("span", { class: "library" }, bit.library));

  const text = bit.text || "";
  let body;
  if (text.length > SNIPPET_CHARACTERS) {
    body = element("details", { class: "bit-text" },
      element("summary", {},
        element("span", { class: "snippet" }, `${text.slice(0, SNIPPET_CHARACTERS).trim()}…`), " ",
        element("span", { class: "expand" }, "Show the whole text"),
        element("span", { class: "collapse" }, "Show less")),
      element("div", { class: "full" }, text));
  } else {
    body = element("div", { class: "bit-text full" }, text);
  }

  // "More like this" is a plain link to a page rendered without the token, which cannot find a
  // private bit: a private card offers none rather than a link to a "no such bit" notice.
  const like = new URLSearchParams({ like: bit.id, ...budget });
  const actions = privateTag ? null
    : element("p", { class: "bit-actions" }, element("a", { class: "more-like-this", href: `/?${like}` }, "More like this"));
  return element("article", { class: privateTag ? "bit bit-private" : "bit", "data-bit-id": bit.id }, heading, meta, body, actions);
}

class TokenRefused extends Error {}

async function askWithToken(ask, token) {
  const response = await fetch("/", {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json", Authorization: `Bearer ${token}` },
    body: JSON.stringify(ask),
    credentials: "omit",
    cache: "no-store",
  });
  let answer = {};
  try {
    answer = await response.json();
  } catch {
    // an error page that is not JSON: the status says enough
  }
  if (response.status === 401) throw new TokenRefused(answer.error || "the token was refused");
  if (!response.ok) throw new Error(answer.error || `the host answered ${response.status}`);
  return answer;
}

const publicIds = new WeakMap(); // section -> the ids the public page showed

async function redrawWithToken(section, token) {
  if (!publicIds.has(section)) {
    // A result bit does not say its library: the public cards do, for the bits they show.
    const cards = [...section.querySelectorAll(".bit")];
    publicIds.set(section, new Map(cards.map((card) => [card.dataset.bitId, card.querySelector(".library")?.textContent || ""])));
  }
  const shown = publicIds.get(section);
  const ask = JSON.parse(section.dataset.ask);
  const kind = section.classList.contains("results-sample") ? "sample" : "ranked";
  const budget = currentBudget();
  const answer = await askWithToken(ask, token);
  let added = 0;
  const cards = (answer.bits || []).map((bit) => {
    const isNew = !shown.has(bit.id);
    if (isNew) added += 1;
    return renderBit({ ...bit, library: shown.get(bit.id) || "" }, { kind, budget, privateTag: isNew ? bit.access_tag || "private" : null });
  });
  const list = section.querySelector(".bits");
  list.replaceChildren(...(cards.length ? cards : [element("p", { class: "empty" }, "No bit here for this request.")]));
  return added;
}

async function applyToken(token) {
  const sections = [...document.querySelectorAll("section.results[data-ask]")];
  clearScriptNotices();
  let added = 0;
  for (const section of sections) {
    try {
      added += await redrawWithToken(section, token);
    } catch (error) {
      if (error instanceof TokenRefused) {
        storeToken(null);
        showTokenState(null);
        showNotice("error", `The host refused the token (${error.message}); this tab has forgotten it.`);
        return;
      }
      showNotice("error", `Asking again with the token failed: ${error.message}`);
    }
  }
  if (sections.length) {
    showNotice("info", added ? `Your token adds ${added} private bit${added === 1 ? "" : "s"} here, marked with their tag.`
                             : "Your token adds no private bit to these results.");
  }
}

function showTokenState(token) {
  const entry = document.getElementById("token-entry");
  const state = document.getElementById("token-state");
  if (!entry || !state) return;
  entry.hidden = Boolean(token);
  entry.open = false;
  state.hidden = !token;
}

function start() {
  const panel = document.getElementById("token");
  if (!panel) return;
  panel.hidden = false;
  const token = storedToken();
  showTokenState(token);

  document.getElementById("token-form").addEventListener("submit", (event) => {
    event.preventDefault(); // the token never goes into a URL
    const input = document.getElementById("token-input");
    const value = input.value.trim();
    input.value = "";
    if (!value) return;
    if (!storeToken(value)) {
      showNotice("warning", "This browser does not let the page keep a token (session storage is blocked).");
      return;
    }
    showTokenState(value);
    applyToken(value);
  });

  document.getElementById("token-forget").addEventListener("click", () => {
    storeToken(null);
    location.reload(); // back to exactly what the public page shows
  });

  if (token) applyToken(token);
}

start();
