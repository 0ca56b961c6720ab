"""What a site's robots.txt allows this importer, read as RFC 9309 says.

The rules are parsed by Protego (Scrapy's parser, part of the `import` extra): the group of the
`polymath-host` token if the file has one, else `*`; the longest matching Allow/Disallow wins and
`*` and `$` patterns work, where the standard library's `urllib.robotparser` takes the first
match and knows no patterns, so it would fetch pages a modern robots.txt forbids. A Crawl-delay
(or Request-rate) for us slows the crawl to it; the file's Sitemap lines are where the crawl
looks for the site's pages first.

Which answer means what (RFC 9309, 2.3.1): a 2xx is the rules; a 4xx (no robots.txt, 404) is no
rules at all; a 5xx or no answer means the site cannot say, so nothing may be fetched: the import
stops with one line rather than crawl a site against rules it could not read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from host.importer.errors import ImporterError, decode_text, require
from host.importer.website.fetching import ROBOTS_AGENT

MAX_ROBOTS_BYTES = 500 * 1024  # RFC 9309: a crawler must read at least 500 KiB; later lines may be ignored


@dataclass
class Robots:
    """The rules of one origin for this importer; `rules` None allows everything."""

    rules: Any = None  # a protego.Protego
    sitemaps: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, body: bytes) -> Robots:
        protego = require("protego", "importing a website (robots.txt)")
        try:
            text = decode_text(body[:MAX_ROBOTS_BYTES])
        except Exception:
            text = body[:MAX_ROBOTS_BYTES].decode("latin-1")  # rules are ASCII: a stray byte spoils no rule
        rules = protego.Protego.parse(text)
        return cls(rules, [str(url).strip() for url in rules.sitemaps])

    def allows(self, url: str) -> bool:
        return self.rules is None or bool(self.rules.can_fetch(url, ROBOTS_AGENT))

    def delay(self) -> float | None:
        """Seconds between two requests that the rules ask of us (Crawl-delay, or Request-rate), if any."""
        if self.rules is None:
            return None
        delays = []
        crawl_delay = self.rules.crawl_delay(ROBOTS_AGENT)
        if crawl_delay is not None:
            delays.append(float(crawl_delay))
        rate = self.rules.request_rate(ROBOTS_AGENT)
        if rate is not None and rate.requests:
            delays.append(rate.seconds / rate.requests)
        return max(delays) if delays else None


def robots_from(url: str, status: int, body: bytes) -> Robots:
    """The rules an answer to `<origin>/robots.txt` gives (its redirects already followed)."""
    if 200 <= status < 300:
        return Robots.parse(body)
    if 400 <= status < 500:
        return Robots()
    raise ImporterError(f"{url}: the server answered {status}, so which pages it allows is unknown and none "
                        "is fetched (RFC 9309); try again later")
