// page.js: the page's only script (loaded with `defer`; nothing inline, so a strict CSP holds).
//
// Without it the page already searches, pages, expands texts, shows a random sample, a library's
// map and "more like this": everything the server renders. It adds the access token:
//
// - kept in this tab's sessionStorage only (never a cookie, never in a URL), and sent only to this
//   host, as `Authorization: Bearer`;
// - while a token is kept, the page is fetched again with it (the same URL: the server renders
//   what that token may see, marked with tags, `Cache-Control: private`) and <main> is swapped
//   for the new one. Links and forms inside <main> that lead to another page of this host are
//   followed the same way (history entries included), so "more like this" on a private bit works;
// - a refused token (401) is forgotten, and the server's page says why.
//
// With `serve --sign-in`, it also signs readers in at their identity provider (OAuth 2.0 for
// Browser-Based Apps: the authorization code flow with PKCE, as a public client), from the
// #sign-in section's data attributes. The token so obtained is kept in this tab's memory only:
// never in a URL, a cookie, or any storage (a reload, or "Sign out", forgets it). What crosses the
// round trip to the provider in session storage is only the flow's state, nonce and PKCE verifier,
// removed as soon as the reader is back; the code is taken out of the address bar at once.
//
// The server renders every piece of the page (one renderer: the Jinja templates). The fetched
// page is parsed by DOMParser, which runs no script; its nodes are adopted as they are.

const TOKEN_KEY = "polymath-host.token";
const SIGN_IN_KEY = "polymath-host.sign-in"; // the flow's state and verifier, for the provider's round trip only
let signedIn = null; // {token, who}: the signed-in reader's token, in this tab's memory only

function currentToken() {
  return signedIn?.token || storedToken();
}

function storedToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || null;
  } catch {
    return null; // storage blocked (a policy, private mode): the page works without a token
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

function say(level, text) {
  const notices = document.getElementById("token-notices");
  if (!notices) return;
  const notice = document.createElement("p");
  notice.className = `notice notice-${level}`;
  notice.setAttribute("role", level === "error" ? "alert" : "status");
  notice.textContent = text;
  notices.replaceChildren(notice);
}

function showTokenState(token) {
  document.getElementById("token-entry").hidden = Boolean(token);
  document.getElementById("token-entry").open = false;
  document.getElementById("token-state").hidden = !token;
}

// A URL of one of this host's pages (GET /, or a publisher's GET /p/<name>/), which the token may
// change: the only ones fetched with it.
function pageUrl(href) {
  const url = new URL(href, location.href);
  const page = url.pathname === "/" || (url.pathname.startsWith("/p/") && url.pathname.endsWith("/"));
  return url.origin === location.origin && page ? url : null;
}

let latest = 0; // only the last navigation's answer is shown

async function show(url, { push = false, scroll = false } = {}) {
  const token = currentToken();
  if (!token) {
    location.assign(url.href);
    return;
  }
  const main = document.getElementById("main");
  const mine = ++latest;
  main.setAttribute("aria-busy", "true");
  let response;
  try {
    response = await fetch(url.href, {
      headers: { Accept: "text/html", Authorization: `Bearer ${token}` },
      credentials: "omit",
      cache: "no-store",
    });
  } catch (error) {
    if (mine === latest) main.removeAttribute("aria-busy");
    say("error", `The host could not be reached (${error.message}); the page shows what it showed before.`);
    return;
  }
  const html = await response.text();
  if (mine !== latest) return;
  const fetched = new DOMParser().parseFromString(html, "text/html");
  const newMain = fetched.getElementById("main");
  if (!newMain) {
    main.removeAttribute("aria-busy");
    say("error", `The host answered ${response.status} without a page; the page shows what it showed before.`);
    return;
  }
  if (response.status === 401 && signedIn?.token === token) {
    signedIn = null;
    showSignIn();
    say("error", "The host refused the token of your sign-in (the notice below says why): sign in again.");
  } else if (response.status === 401) {
    storeToken(null);
    showTokenState(null);
    say("error", "The host refused the token, so this tab has forgotten it (the notice below says why).");
  }
  if (push) history.pushState({ withToken: true }, "", url.href);
  document.title = fetched.title;
  main.replaceChildren(...[...newMain.childNodes].map((node) => document.adoptNode(node)));
  main.removeAttribute("aria-busy");
  if (scroll) {
    const target = url.hash ? document.getElementById(decodeURIComponent(url.hash.slice(1))) : null;
    if (target) target.scrollIntoView();
    else window.scrollTo(0, 0);
    main.focus({ preventScroll: true });
  }
}

function followWithToken(event) {
  if (!currentToken() || event.defaultPrevented) return;
  if (event.type === "click") {
    if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    const link = event.target.closest("a[href]"); // the map's points are SVG <a> elements: attributes only
    if (!link || link.getAttribute("target")) return;
    const url = pageUrl(link.getAttribute("href"));
    if (!url || (url.search === location.search && url.hash)) return; // a jump within this page
    event.preventDefault();
    show(url, { push: true, scroll: true });
  } else if (event.type === "submit") {
    const form = event.target;
    if ((form.getAttribute("method") || "get").toLowerCase() !== "get") return;
    const url = pageUrl(form.getAttribute("action") || location.href);
    if (!url) return;
    url.search = new URLSearchParams(new FormData(form)).toString();
    url.hash = "";
    event.preventDefault();
    show(url, { push: true, scroll: true });
  }
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
      say("warning", "This browser does not let the page keep a token (session storage is blocked).");
      return;
    }
    showTokenState(value);
    say("info", "Asking the host with your token…");
    show(new URL(location.href)).then(() => {
      if (storedToken()) document.getElementById("token-notices").replaceChildren();
    });
  });

  document.getElementById("token-forget").addEventListener("click", () => {
    storeToken(null);
    location.reload(); // back to exactly what the public page shows
  });

  const main = document.getElementById("main");
  main.addEventListener("click", followWithToken);
  main.addEventListener("submit", followWithToken);
  window.addEventListener("popstate", (event) => {
    if (currentToken()) show(new URL(location.href));
    else if (event.state?.withToken) location.reload(); // an entry this script made: the server's page for it
  });

  startSignIn().then((finished) => {
    if (!finished && token) show(new URL(location.href));
  });
}

// ---- sign-in -----------------------------------------------------------------------------------

function signInConfig() {
  const section = document.getElementById("sign-in");
  if (!section) return null;
  const data = section.dataset;
  return {
    section,
    issuer: data.issuer,
    clientId: data.clientId,
    authorizationEndpoint: data.authorizationEndpoint,
    tokenEndpoint: data.tokenEndpoint,
    scope: data.scope,
    parameters: data.parameters || "",
    token: data.token === "id" ? "id" : "access",
  };
}

function showSignIn() {
  const config = signInConfig();
  if (!config) return;
  config.section.hidden = false;
  document.getElementById("sign-in-start").hidden = Boolean(signedIn);
  document.getElementById("sign-in-state").hidden = !signedIn;
  document.getElementById("sign-in-who").textContent = signedIn?.who ? `Signed in as ${signedIn.who}.` : "Signed in.";
  document.getElementById("token").hidden = Boolean(signedIn); // one token at a time: the sign-in's
}

function base64url(bytes) {
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function randomText(size) {
  return base64url(crypto.getRandomValues(new Uint8Array(size)));
}

async function codeChallenge(verifier) {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  return base64url(new Uint8Array(digest));
}

// What a JWT says about itself, to greet the reader: never trusted (the host verifies every token).
function claimsOf(jwt) {
  try {
    const part = jwt.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(atob(part + "=".repeat((4 - (part.length % 4)) % 4)));
  } catch {
    return null;
  }
}

function redirectUri() {
  return `${location.origin}/`; // the page itself: register it at the provider
}

async function beginSignIn(config) {
  if (!window.crypto?.subtle) {
    say("error", "Signing in needs this page over HTTPS.");
    return;
  }
  const pending = {
    state: randomText(32),
    verifier: randomText(48),
    nonce: randomText(16),
    returnTo: location.pathname + location.search + location.hash,
  };
  try {
    sessionStorage.setItem(SIGN_IN_KEY, JSON.stringify(pending));
  } catch {
    say("warning", "This browser does not let the page remember a sign-in across the provider's pages (session storage is blocked).");
    return;
  }
  const url = new URL(config.authorizationEndpoint);
  const parameters = new URLSearchParams(config.parameters);
  parameters.set("response_type", "code");
  parameters.set("client_id", config.clientId);
  parameters.set("redirect_uri", redirectUri());
  parameters.set("scope", config.scope);
  parameters.set("state", pending.state);
  parameters.set("nonce", pending.nonce);
  parameters.set("code_challenge", await codeChallenge(pending.verifier));
  parameters.set("code_challenge_method", "S256");
  for (const [name, value] of parameters) url.searchParams.set(name, value);
  location.assign(url.href);
}

function takePending(state) {
  try {
    const pending = JSON.parse(sessionStorage.getItem(SIGN_IN_KEY) || "null");
    if (!pending || pending.state !== state) return null;
    sessionStorage.removeItem(SIGN_IN_KEY);
    return pending;
  } catch {
    return null;
  }
}

// Back from the provider (?code=...&state=..., or ?error=...): redeem the code, keep the token in memory.
async function finishSignIn(config) {
  const query = new URLSearchParams(location.search);
  if (!query.has("state") || !(query.has("code") || query.has("error"))) return false;
  const pending = takePending(query.get("state"));
  if (!pending) return false; // not this tab's sign-in: the URL is left as it is
  history.replaceState(null, "", pending.returnTo); // the code leaves the address bar and the history at once
  if (query.has("error")) {
    say("error", `The sign-in did not complete: ${query.get("error_description") || query.get("error")}.`);
    return false;
  }
  if (query.has("iss") && query.get("iss") !== config.issuer) {
    say("error", "The sign-in came back from another issuer than this host's provider, so it was ignored.");
    return false;
  }
  let answer;
  try {
    const response = await fetch(config.tokenEndpoint, {
      method: "POST",
      headers: { Accept: "application/json" },
      body: new URLSearchParams({
        grant_type: "authorization_code",
        code: query.get("code"),
        redirect_uri: redirectUri(),
        client_id: config.clientId,
        code_verifier: pending.verifier,
      }),
      credentials: "omit",
      cache: "no-store",
    });
    answer = await response.json();
    if (!response.ok) throw new Error(answer.error_description || answer.error || `it answered ${response.status}`);
  } catch (error) {
    say("error", `The sign-in could not be completed at the provider (${error.message}).`);
    return false;
  }
  const idClaims = answer.id_token ? claimsOf(answer.id_token) : null;
  if (answer.id_token && idClaims?.nonce !== pending.nonce) {
    say("error", "The provider's answer did not match this sign-in, so it was ignored.");
    return false;
  }
  const token = config.token === "id" ? answer.id_token : answer.access_token;
  if (!token) {
    say("error", `The provider gave no ${config.token === "id" ? "ID" : "access"} token.`);
    return false;
  }
  const claims = idClaims || claimsOf(token) || {};
  signedIn = { token, who: claims.email || claims.name || claims.preferred_username || claims.sub || "" };
  showSignIn();
  await show(new URL(location.href));
  return true;
}

async function startSignIn() {
  const config = signInConfig();
  if (!config) return false;
  showSignIn();
  document.getElementById("sign-in-button").addEventListener("click", () => beginSignIn(config));
  document.getElementById("sign-out-button").addEventListener("click", () => {
    signedIn = null; // the provider's own session is the provider's: this page only forgets the token
    location.reload();
  });
  return finishSignIn(config);
}

start();
