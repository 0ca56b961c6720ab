"""An identity provider's side, for the tests of trusted issuers: keys, signed tokens and a real HTTP server.

- `ProviderKey`: a signing key (RSA, EC or Ed25519) with its kid, its public JWK and `sign(claims)`.
- `KeyServer`: a real threaded HTTP server on 127.0.0.1 that publishes an OpenID discovery document
  and a key set, as a provider does, and can be told to misbehave the ways a provider can: answer
  slowly (a byte at a time), with garbage, an HTML page, 50 MB, a 500, a key set holding a symmetric
  key, or a discovery document naming another issuer. It counts every request per path, so a test
  can say how many fetches the host made.

- `OidcProvider`: the real provider, oidc-provider from npm (tests/oidc_provider/provider.mjs), started
  as a child process: client-credentials tokens, the login and consent screens, key rotation.

The KeyServer stands in where a test needs a provider to do what no well-behaved one does.
"""

from __future__ import annotations

import base64
import http.server
import json
import select
import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jwt
from components import unavailable
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

AUDIENCE = "https://library.test"


@dataclass
class ProviderKey:
    kid: str
    alg: str
    private: Any

    @classmethod
    def make(cls, kid: str, alg: str = "RS256") -> ProviderKey:
        private: Any
        if alg.startswith(("RS", "PS")):
            private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        elif alg == "ES256":
            private = ec.generate_private_key(ec.SECP256R1())
        elif alg == "ES384":
            private = ec.generate_private_key(ec.SECP384R1())
        elif alg == "EdDSA":
            private = ed25519.Ed25519PrivateKey.generate()
        else:
            raise ValueError(alg)
        return cls(kid, alg, private)

    @property
    def jwk(self) -> dict[str, Any]:
        public = self.private.public_key()
        if isinstance(public, rsa.RSAPublicKey):
            entry = json.loads(RSAAlgorithm.to_jwk(public))
        elif isinstance(public, ec.EllipticCurvePublicKey):
            entry = json.loads(ECAlgorithm.to_jwk(public))
        else:
            entry = json.loads(OKPAlgorithm.to_jwk(public))
        return {**entry, "kid": self.kid, "use": "sig", "alg": self.alg}

    @property
    def public_pem(self) -> bytes:
        return bytes(self.private.public_key().public_bytes(serialization.Encoding.PEM,
                                                            serialization.PublicFormat.SubjectPublicKeyInfo))

    def sign(self, claims: dict[str, Any], **header: Any) -> str:
        headers = {"kid": self.kid, **header}
        if headers.get("kid") is None:
            del headers["kid"]
        return jwt.encode(claims, self.private, algorithm=self.alg, headers=headers)


def claims_for(issuer: str, subject: str = "reader-1", *, lifetime: int = 600, **extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": issuer, "sub": subject, "aud": AUDIENCE, "iat": now, "exp": now + lifetime, **extra}


def unsigned(claims: dict[str, Any], **header: Any) -> str:
    """An `alg: none` token, as an attacker makes one."""
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()
    return f"{part({'alg': 'none', 'typ': 'JWT', **header})}.{part(claims)}."


def hs256_with_public_key(claims: dict[str, Any], key: ProviderKey) -> str:
    """The old confusion attack: an HS256 token whose HMAC secret is the provider's public key."""
    import hashlib
    import hmac

    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()
    signing_input = f"{part({'alg': 'HS256', 'typ': 'JWT', 'kid': key.kid})}.{part(claims)}"
    signature = hmac.new(key.public_pem, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"


@dataclass
class Behaviour:
    """What the server answers for the key set (and the discovery document)."""

    keys: list[dict[str, Any]] = field(default_factory=list)
    mode: str = "ok"  # ok | slow | garbage | html | huge | error | oct | hang | not_http | cut
    max_age: int | None = 300
    discovery_issuer: str | None = None  # None: the server's own issuer


class KeyServer:
    """A provider's discovery document at /.well-known/openid-configuration and its keys at /jwks."""

    def __init__(self, keys: list[ProviderKey]) -> None:
        self.behaviour = Behaviour([key.jwk for key in keys])
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                with server._lock:
                    server.requests[self.path] += 1
                    behaviour = server.behaviour
                if self.path == "/.well-known/openid-configuration":
                    document = {"issuer": behaviour.discovery_issuer or server.issuer,
                                "jwks_uri": f"{server.url}/jwks",
                                "authorization_endpoint": f"{server.url}/auth", "token_endpoint": f"{server.url}/token"}
                    self._send(json.dumps(document).encode())
                elif self.path == "/jwks":
                    self._keys(behaviour)
                else:
                    self.send_error(404)

            def _keys(self, behaviour: Behaviour) -> None:
                mode = behaviour.mode
                if mode == "error":
                    self.send_error(500)
                elif mode == "garbage":
                    self._send(b"\x00\x01{not json at all" * 10)
                elif mode == "html":
                    self._send(b"<!doctype html><html><body>Sign in to continue</body></html>", "text/html")
                elif mode == "oct":
                    self._send(json.dumps({"keys": [*behaviour.keys, {"kty": "oct", "kid": "shared", "k": "c2VjcmV0"}]})
                               .encode())
                elif mode == "huge":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()  # no Content-Length: the host must stop reading by itself
                    chunk = b" " * 65536
                    try:
                        for _ in range(50 * 16):  # 50 MB
                            self.wfile.write(chunk)
                    except OSError:
                        pass
                elif mode == "slow":
                    body = json.dumps({"keys": behaviour.keys}).encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    try:
                        for byte in body:
                            if server._stop.wait(0.5):
                                return
                            self.wfile.write(bytes([byte]))
                            self.wfile.flush()
                    except OSError:
                        pass
                elif mode == "hang":
                    server._stop.wait(60)
                elif mode == "not_http":  # another kind of server on the port: no status line at all
                    self.wfile.write(b"SSH-2.0-OpenSSH_9.6\r\n")
                    self.close_connection = True
                elif mode == "cut":  # a chunked answer that breaks off in the middle
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self.wfile.write(b"40\r\n{\"keys\": [")
                    self.close_connection = True
                else:
                    headers = {"Cache-Control": f"max-age={behaviour.max_age}"} if behaviour.max_age is not None else {}
                    self._send(json.dumps({"keys": behaviour.keys}).encode(), extra=headers)

            def _send(self, body: bytes, content_type: str = "application/json",
                      extra: dict[str, str] | None = None) -> None:
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in (extra or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.issuer = self.url
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def set(self, **changes: Any) -> None:
        with self._lock:
            for name, value in changes.items():
                setattr(self.behaviour, name, value)

    def publish(self, keys: list[ProviderKey]) -> None:
        self.set(keys=[key.jwk for key in keys])

    def count(self, path: str = "/jwks") -> int:
        with self._lock:
            return self.requests[path]

    def __enter__(self) -> KeyServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def key_server(keys: list[ProviderKey]) -> Iterator[KeyServer]:
    with KeyServer(keys) as server:
        yield server


# ---- the real provider: oidc-provider, from npm --------------------------------------------------------------

HARNESS = Path(__file__).resolve().parent / "oidc_provider"
MACHINES = {"members": ("members-machine", "members-secret"), "free": ("free-machine", "free-secret")}
PAGE_CLIENT = "library-page"


class OidcProvider:
    """`node tests/oidc_provider/provider.mjs` (oidc-provider) on a free loopback port; stopped on exit."""

    def __init__(self, *, audience: str = AUDIENCE, redirect_uris: tuple[str, ...] = ()) -> None:
        node = node_for_provider()
        self._process = subprocess.Popen(
            [node, str(HARNESS / "provider.mjs"), json.dumps({"audience": audience, "redirectUris": list(redirect_uris)})],
            cwd=HARNESS, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self._process.stdout is not None
        ready = select.select([self._process.stdout], [], [], 30)[0]
        line = self._process.stdout.readline() if ready else ""
        if not line:
            self.stop()
            raise RuntimeError(f"oidc-provider did not start: {self._process.stderr.read() if self._process.stderr else ''}")
        started = json.loads(line)
        self.issuer: str = started["issuer"]
        self.kids: list[str] = started["kids"]

    def token(self, who: str = "members") -> str:
        """A JWT access token for the client-credentials client `members` or `free`."""
        client, secret = MACHINES[who]
        answer = httpx.post(f"{self.issuer}/token", data={"grant_type": "client_credentials", "scope": "library"},
                            auth=(client, secret), timeout=10)
        answer.raise_for_status()
        token: str = answer.json()["access_token"]
        return token

    def rotate(self) -> list[str]:
        """A new signing key at the provider (the old ones stay published); the kids, newest first."""
        answer = httpx.post(f"{self.issuer}/test/rotate", timeout=10)
        answer.raise_for_status()
        self.kids = answer.json()["kids"]
        return self.kids

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        for stream in (self._process.stdout, self._process.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> OidcProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def node_for_provider() -> str:
    """Node (>= 20) with the harness's packages installed (npm ci on first use); skips outside CI if absent."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        unavailable("node and npm (Node >= 20) are needed to run the real oidc-provider")
    assert node is not None and npm is not None
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 20:
        unavailable(f"oidc-provider needs Node >= 20, found {version}")
    if not (HARNESS / "node_modules" / "oidc-provider").is_dir():
        installed = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HARNESS,
                                   capture_output=True, text=True, timeout=600)
        if installed.returncode != 0:
            unavailable(f"npm ci failed in {HARNESS}:\n{installed.stdout}\n{installed.stderr}")
    return node
