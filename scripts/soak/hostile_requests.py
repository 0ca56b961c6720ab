"""Requests that ask too much or make no sense: each must get its clean refusal, never a 500.

- oversized answers: every bit with its embedding (`count` 100,000, `omit: ""`, a 90-byte body),
  and a count just over `--max-answer-bytes`: 400 saying to ask for less;
- answers just under the limit: 200, and no larger than it;
- many distinct answers of ~260 KB, each a new entry of the answer cache (sized in bytes): 200;
- hostile bodies: JSON nested 5,000 deep, a `count` of 4,400 digits: 400 with a one-line error;
- made-up method names: no 500, and none of them becomes a `/metrics` series.
"""

from __future__ import annotations

import json
import random
import string
import threading
from collections.abc import Callable

import httpx

from .ballast import BALLAST_MODEL, random_query
from .server import Limits
from .tally import Tally

# Ballast bits with embeddings are ~2.6 KB each; the soak's --max-answer-bytes is 7,000,000.
JUST_UNDER_COUNT = 2500  # ~6.5 MB
JUST_OVER_COUNT = 2900  # ~7.5 MB
CACHEABLE_COUNT = 100  # ~260 KB: under 1/8 of each answer cache, so it is kept
EVERYTHING_COUNT = 100_000  # the 60-byte query for every bit


class HostileRequests:
    def __init__(self, url: str, limits: Limits, stop: threading.Event, tally: Tally, seed: int) -> None:
        self.url, self.limits, self.stop, self.tally = url, limits, stop, tally
        self.rng = random.Random(seed)
        self.kinds: list[Callable[[], None]] = [self.everything, self.cacheable, self.just_over, self.cacheable,
                                                 self.just_under, self.cacheable, self.deep_body, self.cacheable,
                                                 self.long_number, self.cacheable, self.made_up_methods, self.cacheable]

    def run(self) -> None:
        turn = 0
        while not self.stop.wait(self.rng.uniform(0.2, 0.6)):
            try:
                self.kinds[turn % len(self.kinds)]()
            except httpx.HTTPError as problem:
                self.tally.fail(f"hostile request: {problem!r}")
            turn += 1

    def post(self, body: str | bytes) -> httpx.Response:
        return httpx.post(f"{self.url}/", content=body, headers={"Content-Type": "application/json"}, timeout=30)

    def ballast_query(self, count: int) -> httpx.Response:
        return self.post(json.dumps({"query_embedding": random_query(self.rng.getrandbits(64)), "count": count,
                                     "count_type": "bit", "omit": "", "query_embedding_model": BALLAST_MODEL}))

    def expect_refusal(self, what: str, response: httpx.Response, status: int, saying: str) -> None:
        """`status` with a one-line JSON error that contains `saying`."""
        try:
            error = response.json()["error"]
        except (ValueError, KeyError, TypeError):
            error = None
        if response.status_code != status or not isinstance(error, str) or saying not in error or "\n" in error:
            self.tally.fail(f"{what}: expected {status} saying {saying!r}, got {response.status_code} "
                            f"{response.text[:200]!r}")
        else:
            self.tally.count(f"{what}: {status}")

    def everything(self) -> None:
        self.expect_refusal("oversized answer (every bit)", self.ballast_query(EVERYTHING_COUNT), 400,
                            f"over this host's {self.limits.max_answer_bytes:,}-byte limit")

    def just_over(self) -> None:
        self.expect_refusal("oversized answer (just over the limit)", self.ballast_query(JUST_OVER_COUNT), 400,
                            f"over this host's {self.limits.max_answer_bytes:,}-byte limit")

    def just_under(self) -> None:
        self.expect_answer("answer just under the limit", JUST_UNDER_COUNT)

    def cacheable(self) -> None:
        self.expect_answer("distinct cacheable answer", CACHEABLE_COUNT)

    def expect_answer(self, what: str, count: int) -> None:
        response = self.ballast_query(count)
        size = len(response.content)
        if response.status_code != 200 or size > self.limits.max_answer_bytes or len(response.json()["bits"]) != count:
            self.tally.fail(f"{what}: got {response.status_code}, {size:,} bytes")
        else:
            self.tally.count(f"{what}: 200")
            self.tally.observe(f"{what} (KB)", size / 1000)

    def deep_body(self) -> None:
        body = '{"count": ' + "[" * 5000 + "]" * 5000 + "}"
        self.expect_refusal("request body nested 5,000 deep", self.post(body), 400, "nested too deeply")

    def long_number(self) -> None:
        body = '{"count": ' + "7" * 4400 + "}"
        self.expect_refusal("request count of 4,400 digits", self.post(body), 400, "a number has more than 4300 digits")

    def made_up_methods(self) -> None:
        names = ["".join(self.rng.choices(string.ascii_uppercase, k=12)) for _ in range(5)]
        with httpx.Client(timeout=30) as client:
            for name in names:
                status = client.request(name, f"{self.url}/").status_code
                if status >= 500:
                    self.tally.fail(f"made-up method: {status}")
                else:
                    self.tally.count(f"made-up method: {status}")
            metrics = client.get(f"{self.url}/metrics").text
        if any(name in metrics for name in names):
            self.tally.fail("made-up method: a method name became a /metrics series")
