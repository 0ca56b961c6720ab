"""The page signs readers in at their identity provider (issue 37), in a real headless Chromium.

A real `serve --sign-in ISSUER --sign-in-client library-page --sign-in-scope "openid library"` serves a
copy of `libraries/` (the sample, and 11 drafts tagged `unpublished`); the access file trusts the real
oidc-provider (tests/oidc_provider/) with `groups=members:unpublished`, and the provider puts the login
`alice` in `members`. The reader signs in through the provider's own login and consent screens and
comes back to a private passage; the token is kept in the tab's memory only (never in a URL, a cookie
or any storage), the page's Content-Security-Policy stays strict but for the provider's token
endpoint, and "Sign out" forgets it.

The provider's development screens import a web font from the internet, which this machine cannot
reach: those lines, and only those, are taken from the tab's problems.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from browser_support import Tab
from components import admin, unavailable
from conftest import PROJECT
from oidc_support import AUDIENCE, PAGE_CLIENT, OidcProvider

from host.embedders import minilm
from host.service.harness import RunningHost, free_port, spawn_host
from host.web.middleware.security_headers import CONTENT_SECURITY_POLICY

LIONS = "Daniel in the den of lions"  # Daniel 6 is only in the private drafts


@dataclass(frozen=True)
class Site:
    host: RunningHost
    provider: OidcProvider
    access: Path

    @property
    def url(self) -> str:
        return self.host.url


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    problem = minilm.missing_requirement()  # text search needs the `embed` extra
    if problem is not None:
        unavailable(problem)
    root = tmp_path_factory.mktemp("sign-in")
    shutil.copytree(PROJECT / "libraries", root / "libraries", ignore=shutil.ignore_patterns(".compiled"))
    access = root / "access.SECRET.json"
    port = free_port()
    with OidcProvider(redirect_uris=(f"http://127.0.0.1:{port}/",)) as provider:
        admin("access", "init", "--access", str(access), "--issuer", "https://polymath.test", cwd=root)
        admin("access", "trust", provider.issuer, "--audience", AUDIENCE, "--grant", "groups=members:unpublished",
              "--access", str(access), cwd=root)
        host = spawn_host(root / "libraries", "--access", str(access), "--embedder", "auto",
                          "--sign-in", provider.issuer, "--sign-in-client", PAGE_CLIENT,
                          "--sign-in-scope", "openid library", port=port)
        try:
            host.wait_until_ready("/healthz", timeout=60)
            wait_for_sign_in(host.url)
            yield Site(host, provider, access)
        finally:
            host.stop()


def wait_for_sign_in(url: str) -> None:
    """The page offers "Sign in" once the host has read the provider's endpoints (a background fetch at start)."""
    for _ in range(100):
        if 'id="sign-in"' in httpx.get(f"{url}/", timeout=10).text:
            return
        time.sleep(0.1)
    raise AssertionError("the page never offered Sign in")


def results(tab: Tab) -> list[str]:
    return tab.page.locator("section.results .bit .bit-title").all_inner_texts()


def take_provider_font_problems(tab: Tab) -> None:
    """The provider's screens import fonts.googleapis.com, unreachable here; nothing else may have gone wrong."""
    left = [problem for problem in tab.take_problems()
            if "fonts.googleapis.com" not in problem.text and "ERR_" not in problem.text]
    assert left == [], left


def test_the_page_signs_a_reader_in_through_the_providers_screens(site: Site, tab: Tab) -> None:
    tokens: list[str] = []

    def keep_token(response: Any) -> None:
        if response.url == f"{site.provider.issuer}/token" and response.request.method == "POST":
            tokens.append(response.json()["access_token"])

    tab.page.on("response", keep_token)
    tab.page.goto(f"{site.url}/?q={LIONS.replace(' ', '+')}")
    assert not any("Daniel 6" in title for title in results(tab))  # the drafts are private
    tab.page.get_by_role("button", name="Sign in").click()

    tab.page.wait_for_url(f"{site.provider.issuer}/interaction/**")
    tab.page.locator("input[name=login]").fill("alice")
    tab.page.locator("input[name=password]").fill("any password")
    tab.page.get_by_role("button", name="Sign-in").click()
    tab.page.get_by_role("button", name="Continue").click()  # the consent screen

    tab.page.wait_for_url(f"{site.url}/?q=*")
    tab.page.get_by_text("Signed in as alice.").wait_for()
    tab.page.locator("section.results .bit .tag").first.wait_for()  # a private passage, marked with its tag
    assert any("Daniel 6" in title for title in results(tab))
    take_provider_font_problems(tab)
    tab.screenshot("signed-in")

    assert len(tokens) == 1
    token = tokens[0]
    assert "code=" not in tab.page.url and token not in tab.page.url
    history = tab.page.evaluate("() => [history.length, location.href]")
    assert token not in str(history)
    storage = tab.page.evaluate("() => JSON.stringify([Object.entries(sessionStorage), Object.entries(localStorage)])")
    assert storage == "[[],[]]"  # the flow's state and verifier were removed on the way back; the token never went in
    assert all(token not in cookie["value"] for cookie in tab.context.cookies())
    assert tab.page.evaluate("() => document.cookie") == ""

    # Following a link keeps the token (the page fetches with it); the tab's memory holds it.
    tab.page.get_by_label("Search the libraries").fill("the rose of Sharon")
    tab.page.get_by_role("button", name="Search", exact=True).click()
    tab.page.wait_for_url("**/?q=the+rose*")
    tab.page.locator("section.results .bit .tag").first.wait_for()

    tab.page.get_by_role("button", name="Sign out").click()
    tab.page.get_by_role("button", name="Sign in").wait_for()
    assert not tab.page.locator("section.results .bit .tag").count()


def sign_in(tab: Tab, site: Site, login: str) -> None:
    tab.page.get_by_role("button", name="Sign in").click()
    tab.page.wait_for_url(f"{site.provider.issuer}/interaction/**")
    tab.page.locator("input[name=login]").fill(login)
    tab.page.locator("input[name=password]").fill("any password")
    tab.page.get_by_role("button", name="Sign-in").click()
    tab.page.get_by_role("button", name="Continue").click()
    tab.page.get_by_text(f"Signed in as {login}.").wait_for()


def test_a_reader_whose_token_is_refused_is_asked_to_sign_in_again(site: Site, tab: Tab) -> None:
    tab.page.goto(f"{site.url}/?q=the+rose+of+Sharon")
    sign_in(tab, site, "bob")  # valid, in no group a rule names: public passages only, with a token
    assert not tab.page.locator("section.results .bit .tag").count()
    take_provider_font_problems(tab)
    admin("token", "revoke", "bob", "--access", str(site.access), cwd=site.access.parent)
    time.sleep(1.5)  # the host re-reads the access file within a second
    tab.page.get_by_role("link", name="More results").first.click()
    tab.page.get_by_text("The host refused the token of your sign-in").wait_for()
    tab.page.get_by_role("button", name="Sign in").wait_for()
    assert "The access token was refused: revoked." in tab.page.locator("#main").inner_text()
    problems = tab.take_problems()
    refused = [problem for problem in problems if "status of 401" in problem.text]
    assert len(refused) == 1  # the browser logs the 401 itself as a failed resource: expected here
    assert all("fonts.googleapis.com" in p.text or "ERR_" in p.text for p in problems if p not in refused)


def test_the_pages_policy_stays_strict_but_for_the_providers_token_endpoint(site: Site) -> None:
    page = httpx.get(f"{site.url}/", timeout=30)
    policy = page.headers["content-security-policy"]
    assert policy == CONTENT_SECURITY_POLICY.replace("connect-src 'self'", f"connect-src 'self' {site.provider.issuer}")
    assert f'data-token-endpoint="{site.provider.issuer}/token"' in page.text
    assert f'data-client-id="{PAGE_CLIENT}"' in page.text
    for other in ("/libraries", "/openapi.json"):
        assert httpx.get(f"{site.url}{other}", timeout=30).headers["content-security-policy"] == CONTENT_SECURITY_POLICY


def test_a_sign_in_that_comes_back_with_an_error_says_so(site: Site, tab: Tab) -> None:
    tab.page.goto(f"{site.url}/")
    tab.page.get_by_role("button", name="Sign in").click()
    tab.page.wait_for_url(f"{site.provider.issuer}/interaction/**")
    tab.page.goto(tab.page.url + "/abort")  # the reader cancels at the provider
    tab.page.wait_for_url(f"{site.url}/**")
    tab.page.get_by_text("The sign-in did not complete").wait_for()
    assert "error=" not in tab.page.url
    tab.page.get_by_role("button", name="Sign in").wait_for()
    take_provider_font_problems(tab)


def test_serve_refuses_a_sign_in_without_its_client(tmp_path: Path) -> None:
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "host", "serve", "--libraries", str(tmp_path), "--embedder", "none",
                           "--sign-in", "https://id.example.com"], capture_output=True, text=True, timeout=60,
                          cwd=PROJECT)
    assert done.returncode == 1
    assert "error: --sign-in ISSUER_URL and --sign-in-client CLIENT_ID go together" in done.stderr


def test_the_code_a_reader_comes_back_with_is_never_logged() -> None:
    from host.web.middleware.access_log import redacted_query
    assert redacted_query(b"code=SplxlOBeZQQYbYS6WxSbIA&state=af0ifjsldkj&iss=x") == "code=REDACTED&state=af0ifjsldkj&iss=x"
