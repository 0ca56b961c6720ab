#!/usr/bin/env python3
"""Identity providers' tokens beside the host's own (issue 37): what they cost, measured in one run.

Three parts, each on this machine, each with the 1-minute load average before and after and the CPU
seconds the server spent:

1. **Query p50, provider token vs own token** (goal: within 0.1 ms, both cached). A real `serve`
   (`--workers 1 --embedder none --answer-cache-bytes 0`: every query a real search) on a synthetic
   library of `--bits` 384-dimension bits and a private `access/members/` library; its access file
   holds an EdDSA key of its own and trusts a provider (an HTTP server in this process, on loopback,
   publishing an RS256 key by OpenID discovery) with `groups=members:members`. Two tokens grant the
   same tag: the host's own (`token issue`) and the provider's (RS256, `typ: at+jwt`). After a
   warm-up (each token verified once, then cached), rounds alternate A, B, A, B on one keep-alive
   connection each, the same query vectors in the same order for both. Beside it, in this process,
   `AccessControl.authorize` on both cached tokens (the path that differs), in turns.
2. **A flood of made-up key ids** (goal: at most one fetch of the provider's keys). For
   `--flood-seconds`, `--flood-kids` requests to the same server, each a provider-shaped token naming
   a different unknown `kid`, from four connections; the provider counts the fetches of its
   discovery document and keys while it lasts. A valid provider token is answered after it.
3. **Memory of the verified-token cache**. In this process: `--tokens` distinct provider tokens
   (EdDSA, keys given in the file, so nothing is fetched) authorized once each; tracemalloc's count of
   what the cache then holds (tokens themselves excluded), per entry; then twice as many, to show the
   bound (the cache keeps at most `access.control.CACHE_SIZE` entries).

    python scripts/bench_provider_tokens.py                       # the figures in docs/sign-in.md
    python scripts/bench_provider_tokens.py --small               # a quick check of the script itself

A ratio or difference measured while the 1-minute load exceeded 2 (the core count) is reported as such
and not taken as a figure. Progress on stderr, Markdown on stdout.
"""

from __future__ import annotations

import argparse
import base64
import gc
import http.client
import http.server
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import jwt
import numpy as np
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from jwt.algorithms import OKPAlgorithm, RSAAlgorithm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchmarks.import_rounds import cpu_description  # noqa: E402
from benchmarks.measure import cpu_seconds  # noqa: E402
from benchmarks.report import describe_machine, say, table  # noqa: E402

from access import AccessControl  # noqa: E402
from access.config import load_settings  # noqa: E402
from access.control import CACHE_SIZE  # noqa: E402
from access.issuer_keys import IssuerKeyRegistry  # noqa: E402
from access.keys import generate_key_entry  # noqa: E402
from access.tokens import issue_token  # noqa: E402
from host.service.harness import RunningHost, spawn_host  # noqa: E402

AUDIENCE = "https://library.bench"
OWN_ISSUER = "https://polymath.bench"
DIMENSION = 384
MAX_LOAD = 2.0


# ---- the provider: discovery and keys on loopback, every fetch counted -----------------------------------------


class Provider:
    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = "bench-rsa"
        self.fetches: Counter[str] = Counter()
        provider = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                provider.fetches[self.path] += 1
                if self.path == "/.well-known/openid-configuration":
                    body = {"issuer": provider.issuer, "jwks_uri": f"{provider.issuer}/jwks"}
                elif self.path == "/jwks":
                    body = {"keys": [{**json.loads(RSAAlgorithm.to_jwk(provider.key.public_key())),
                                      "kid": provider.kid, "alg": "RS256", "use": "sig"}]}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "max-age=3600")
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def token(self, subject: str, kid: str | None = None) -> str:
        now = int(time.time())
        claims = {"iss": self.issuer, "aud": AUDIENCE, "sub": subject, "groups": ["members"], "iat": now,
                  "exp": now + 3600, "scope": "library", "client_id": "bench"}
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": kid or self.kid, "typ": "at+jwt"})


# ---- the world on disk ----------------------------------------------------------------------------------------


def write_world(root: Path, bits: int, provider: Provider) -> tuple[Path, Path]:
    rng = np.random.default_rng(7)
    folder = root / "libraries"

    def library(count: int, start: int) -> dict[str, Any]:
        vectors = rng.normal(size=(count, DIMENSION)).astype("<f4")
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return {"version": 1, "embedding_model": "bench:unit-384", "bits": [
            {"text": f"passage {start + i}", "embedding": base64.b64encode(vector.tobytes()).decode(),
             "token_count": 20, "info": {"url": f"https://example.com/{start + i}"}}
            for i, vector in enumerate(vectors)]}

    (folder / "access" / "members").mkdir(parents=True)
    (folder / "public.json").write_text(json.dumps(library(bits, 0)))
    (folder / "access" / "members" / "private.json").write_text(json.dumps(library(max(bits // 10, 10), bits)))
    access = root / "access.SECRET.json"
    access.write_text(json.dumps({
        "issuer": OWN_ISSUER, "keys": [generate_key_entry("EdDSA", "own")],
        "trusted_issuers": [{"issuer": provider.issuer, "audience": AUDIENCE,
                             "grants": [{"claim": "groups", "value": "members", "tags": ["members"]}]}]}))
    access.chmod(0o600)
    return folder, access


# ---- part 1: query p50 ----------------------------------------------------------------------------------------


class Connection:
    def __init__(self, host: RunningHost, token: str) -> None:
        self.host = host
        self.connection = http.client.HTTPConnection("127.0.0.1", host.port, timeout=60)
        self.headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}

    def reopen(self) -> None:
        """A fresh connection: the server closes one left idle (while the other token's round runs)."""
        self.connection.close()
        self.connection = http.client.HTTPConnection("127.0.0.1", self.host.port, timeout=60)

    def ask(self, body: bytes) -> tuple[float, int]:
        started = time.perf_counter()
        self.connection.request("POST", "/", body, self.headers)
        response = self.connection.getresponse()
        response.read()
        return time.perf_counter() - started, response.status


def query_rounds(host: RunningHost, tokens: dict[str, str], bodies: list[bytes], rounds: int) -> dict[str, Any]:
    connections = {name: Connection(host, token) for name, token in tokens.items()}
    for name, connection in connections.items():  # verified once, then cached; the server warmed
        for body in bodies[:50]:
            _, status = connection.ask(body)
            assert status == 200, (name, status)
    times: dict[str, list[float]] = {name: [] for name in tokens}
    cpu: dict[str, float] = dict.fromkeys(tokens, 0.0)
    loads = [os.getloadavg()[0]]
    names = list(tokens)
    for number in range(rounds):
        for name in names if number % 2 == 0 else names[::-1]:
            connections[name].reopen()
            connections[name].ask(bodies[0])  # untimed: the connection's first request
            before = cpu_seconds(host.pids())
            for body in bodies:
                seconds, status = connections[name].ask(body)
                assert status == 200
                times[name].append(seconds)
            cpu[name] += cpu_seconds(host.pids()) - before
        loads.append(os.getloadavg()[0])
        say(f"  round {number + 1}/{rounds}: load {loads[-1]:.2f}")
    return {"times": times, "cpu": cpu, "loads": loads}


def authorize_turns(access: Path, tokens: dict[str, str], calls: int) -> dict[str, float]:
    """Microseconds per cached `authorize` of each token, in turns, in this process."""
    control = AccessControl.from_file(access, registry=IssuerKeyRegistry())
    for token in tokens.values():
        pending = control.keys_pending(token)
        if pending is not None:
            pending.result(timeout=30)
        control.authorize(token)
    best: dict[str, list[float]] = {name: [] for name in tokens}
    for _ in range(5):
        for name, token in tokens.items():
            started = time.perf_counter()
            for _ in range(calls):
                control.authorize(token)
            best[name].append((time.perf_counter() - started) / calls * 1e6)
    return {name: min(values) for name, values in best.items()}


# ---- part 2: the flood ----------------------------------------------------------------------------------------


def flood(host: RunningHost, provider: Provider, seconds: float, kids: int) -> dict[str, Any]:
    forged = [provider.token("flood", kid=f"made-up-{n}") for n in range(kids)]
    before = dict(provider.fetches)
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    started = time.monotonic()
    spacing = seconds / kids
    cpu_before, load_before = cpu_seconds(host.pids()), os.getloadavg()[0]

    def send(part: list[tuple[int, str]]) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", host.port, timeout=60)
        for index, token in part:
            wait = started + index * spacing - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            connection.request("GET", "/libraries", headers={"Authorization": f"Bearer {token}"})
            response = connection.getresponse()
            response.read()
            with lock:
                statuses[response.status] += 1

    numbered = list(enumerate(forged))
    threads = [threading.Thread(target=send, args=(numbered[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took = time.monotonic() - started
    after = dict(provider.fetches)
    valid = Connection(host, provider.token("after-the-flood"))
    connection = valid.connection
    connection.request("GET", "/libraries", headers=valid.headers)
    answer = connection.getresponse()
    names = [library["name"] for library in json.loads(answer.read())["libraries"]]
    return {"requests": kids, "seconds": took, "statuses": dict(statuses),
            "keys_fetches": after.get("/jwks", 0) - before.get("/jwks", 0),
            "discovery_fetches": after.get("/.well-known/openid-configuration", 0)
            - before.get("/.well-known/openid-configuration", 0),
            "cpu": cpu_seconds(host.pids()) - cpu_before, "loads": [load_before, os.getloadavg()[0]],
            "valid_after": answer.status == 200 and "access/members/private" in names}


# ---- part 3: the cache's memory -------------------------------------------------------------------------------


def cache_memory(root: Path, count: int) -> dict[str, Any]:
    key = ed25519.Ed25519PrivateKey.generate()
    issuer = "https://members.bench"
    jwk = {**json.loads(OKPAlgorithm.to_jwk(key.public_key())), "kid": "ed", "alg": "EdDSA"}
    access = root / "memory.SECRET.json"
    access.write_text(json.dumps({"issuer": OWN_ISSUER, "trusted_issuers": [{
        "issuer": issuer, "audience": AUDIENCE, "algorithms": ["EdDSA"], "jwks": {"keys": [jwk]},
        "grants": [{"claim": "groups", "value": "members", "tags": ["members"]}]}]}))
    access.chmod(0o600)
    now = int(time.time())
    say(f"  signing {2 * count:,} distinct tokens")
    tokens = [jwt.encode({"iss": issuer, "aud": AUDIENCE, "sub": f"reader-{n % 2000}", "groups": ["members"],
                          "iat": now, "exp": now + 3600, "jti": f"{n:012d}"}, key, algorithm="EdDSA",
                         headers={"kid": "ed"}) for n in range(2 * count)]
    timing = AccessControl.from_file(access, registry=IssuerKeyRegistry())
    started = time.perf_counter()
    for token in tokens[:count]:
        timing.authorize(token)
    figures: dict[str, Any] = {"token_bytes": statistics.mean(len(token) for token in tokens[:1000]),
                               "verify_us": (time.perf_counter() - started) / count * 1e6}
    del timing
    control = AccessControl.from_file(access, registry=IssuerKeyRegistry())
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for token in tokens[:count]:
        control.authorize(token)
    gc.collect()
    figures["at_count"] = tracemalloc.get_traced_memory()[0] - base
    for token in tokens[count:]:
        control.authorize(token)
    gc.collect()
    figures["at_twice"] = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    figures["entries"] = control.cached_verifications
    return figures


# ---- the run --------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bits", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=8, help="rounds of each token, alternating (default 8)")
    parser.add_argument("--requests", type=int, default=500, help="queries per round (default 500)")
    parser.add_argument("--flood-seconds", type=float, default=10.0)
    parser.add_argument("--flood-kids", type=int, default=10_000)
    parser.add_argument("--tokens", type=int, default=100_000, help="distinct tokens for the cache's memory")
    parser.add_argument("--small", action="store_true", help="a quick check: small sizes everywhere")
    args = parser.parse_args()
    if args.small:
        args.bits, args.rounds, args.requests, args.flood_seconds, args.flood_kids, args.tokens = \
            2000, 2, 50, 2.0, 500, 2000
    machine, cpu = describe_machine(), cpu_description()
    started = time.strftime("%Y-%m-%d %H:%M")
    provider = Provider()
    out = [f"## Identity providers' tokens ({started})\n",
           f"`{' '.join(['python scripts/bench_provider_tokens.py', *sys.argv[1:]])}` on {machine['cpus']} CPUs "
           f"({cpu['model']}, {cpu['vector']}), Python {machine['python']}; commit {machine.get('commit', '?')}\n"]
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        libraries, access = write_world(root, args.bits, provider)
        settings = load_settings(access)
        own = issue_token(settings, "own-reader", ["members"]).token
        tokens = {"own (EdDSA)": own, "provider (RS256)": provider.token("provider-reader")}
        rng = np.random.default_rng(11)
        vectors = rng.normal(size=(args.requests, DIMENSION)).astype("<f4")
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        bodies = [json.dumps({"query_embedding": base64.b64encode(vector.tobytes()).decode(), "count": 10,
                              "count_type": "bit"}).encode() for vector in vectors]
        say(f"serving {args.bits:,} bits")
        host = spawn_host(libraries, "--access", str(access), "--embedder", "none", "--answer-cache-bytes", "0",
                          "--rate-limit", "0", workers=1)
        try:
            host.wait_until_ready("/healthz", timeout=300)
            say("part 1: query p50, own token and provider token, alternating")
            measured = query_rounds(host, tokens, bodies, args.rounds)
            micro = authorize_turns(access, tokens, 20_000 if not args.small else 2000)
            say("part 2: the flood")
            flooded = flood(host, provider, args.flood_seconds, args.flood_kids)
        finally:
            host.stop()
        say("part 3: the cache's memory")
        memory = cache_memory(root, args.tokens)

    p50 = {name: float(np.percentile(values, 50)) for name, values in measured["times"].items()}
    p99 = {name: float(np.percentile(values, 99)) for name, values in measured["times"].items()}
    own_name, provider_name = list(tokens)
    difference = p50[provider_name] - p50[own_name]
    loud = max(measured["loads"]) > MAX_LOAD
    rows = [[name, f"{p50[name] * 1000:.3f}", f"{p99[name] * 1000:.3f}", len(measured["times"][name]),
             f"{measured['cpu'][name]:.2f}", f"{micro[name]:.2f}"] for name in tokens]
    verdict = (f"p50 difference (provider - own): {difference * 1000:+.3f} ms (goal: within 0.1 ms)"
               + (" - NOT A FIGURE: the load exceeded 2 during the rounds" if loud else ""))
    out.append(table(f"Query p50 over HTTP, {args.bits:,} bits, {args.rounds} rounds of {args.requests} each, "
                     "alternating", ["token", "p50 ms", "p99 ms", "queries", "server CPU s", "authorize µs (cached)"],
                     rows, note=f"{verdict}. 1-minute load during the rounds: "
                                f"{min(measured['loads']):.2f}-{max(measured['loads']):.2f}."))
    out.append(table("A flood of made-up key ids", ["requests", "seconds", "answers", "key fetches",
                                                     "discovery fetches", "server CPU s", "valid token after"],
                     [[f"{flooded['requests']:,}", f"{flooded['seconds']:.1f}",
                       ", ".join(f"{status}: {count:,}" for status, count in sorted(flooded["statuses"].items())),
                       flooded["keys_fetches"], flooded["discovery_fetches"], f"{flooded['cpu']:.2f}",
                       "200, sees members" if flooded["valid_after"] else "REFUSED"]],
                     note=f"Goal: at most one fetch of the keys per issuer. 1-minute load "
                          f"{flooded['loads'][0]:.2f} -> {flooded['loads'][1]:.2f}."))
    per_entry = memory["at_count"] / args.tokens
    out.append(table("The verified-token cache's memory (tracemalloc, tokens themselves excluded)",
                     ["distinct tokens", "held by the cache", "entries kept", "bytes per entry"],
                     [[f"{args.tokens:,}", f"{memory['at_count'] / 2**20:.1f} MiB", f"{min(args.tokens, CACHE_SIZE):,}",
                       f"{per_entry:.0f}"],
                      [f"{2 * args.tokens:,}", f"{memory['at_twice'] / 2**20:.1f} MiB", f"{memory['entries']:,}",
                       f"{memory['at_twice'] / max(1, memory['entries']):.0f}"]],
                     note=f"At most {CACHE_SIZE:,} entries (access.control.CACHE_SIZE), the oldest going first. Each "
                          f"token is {memory['token_bytes']:.0f} bytes (EdDSA); a first verification took "
                          f"{memory['verify_us']:.0f} µs."))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
