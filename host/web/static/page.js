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
// The server renders every piece of the page (one renderer: the Jinja templates). The fetched
// page is parsed by DOMParser, which runs no script; its nodes are adopted as they are.

const TOKEN_KEY = "polymath-host.token";

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
  const token = storedToken();
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
  if (response.status === 401) {
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
  if (!storedToken() || event.defaultPrevented) return;
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
    if (storedToken()) show(new URL(location.href));
    else if (event.state?.withToken) location.reload(); // an entry this script made: the server's page for it
  });

  if (token) show(new URL(location.href));
}

start();
