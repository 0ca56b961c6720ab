"""Everything `serve` can be told, with the defaults a first run needs: plain data.

Each field is also a `serve` option of the same name (`--max-count` fills `max_count`), described
by its `option(...)` metadata: adding a setting is adding a field here.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from host.search.batching import MAX_BATCH
from host.search.engine import OVERSAMPLE, PROBES
from host.store.clusters import CLUSTER_FROM
from host.store.compiled import DEFAULT_MAX_SOURCE_BYTES
from host.store.residency import default_populate_bytes

ENVIRONMENT_VARIABLE = "POLYMATH_HOST_SETTINGS"  # how `serve --workers N` hands settings to workers


def option(help: str, *, metavar: str | None = None, choices: tuple[str, ...] | None = None,
           repeatable: bool = False) -> dict[str, Any]:
    """Field metadata that makes a setting a command-line option; `%(default)s` in help is filled in.
    A `repeatable` option may be given several times: its values are joined with commas."""
    return {"help": help, "metavar": metavar, "choices": choices, "repeatable": repeatable}


@dataclass(frozen=True)
class Settings:
    libraries: str = field(default="libraries", metadata=option(
        "a folder of library files, or one file (default: libraries/); or the URL of a published set to "
        "mirror: s3://BUCKET/PREFIX (endpoint and credentials from the AWS_* variables), https://HOST/PATH "
        "or file:///PATH (see polymath-host publish)", metavar="PATH|URL"))
    access: str | None = field(default=None, metadata=option(
        "the access file (default: access.SECRET.json if present, or with --libraries URL the one published "
        "with the set; without one only public bits are served); may be the URL of one", metavar="FILE|URL"))
    cache_dir: Path | None = field(default=None, metadata=option(
        "where compiled libraries go (default: <libraries>/.compiled); with --libraries URL, the mirror of "
        "the published set too (default: $POLYMATH_HOST_CACHE_DIR or ~/.cache/polymath-host, under origins/)",
        metavar="DIR"))
    origin_key: str | None = field(default=None, metadata=option(
        "with --libraries URL: a publisher key that signs the published set (ed25519:..., as polymath-host "
        "publisher-key public prints it, or a file holding it); repeat it to pin several (during a key rotation). "
        "A manifest no pinned key signed is refused and the last good set keeps serving. Without it, the origin "
        "is trusted unsigned: whoever can write to it decides what this replica serves", metavar="KEY_OR_FILE",
        repeatable=True))
    max_body_bytes: int = field(default=1 << 20, metadata=option(
        "largest request body accepted (default %(default)s)", metavar="N"))
    max_count: int = field(default=100_000, metadata=option(
        "largest count a query may ask for (default %(default)s)", metavar="N"))
    max_answer_bytes: int = field(default=16 << 20, metadata=option(
        "largest answer a query may get, in bytes (default %(default)s); a larger one is a 400 "
        "saying to ask for less", metavar="N"))
    max_form_fields: int = 32
    answer_cache_bytes: int = field(default=64 << 20, metadata=option(
        "memory for rendered answers to repeated queries and library files, in bytes (default %(default)s; "
        "0 turns caching off)", metavar="N"))
    max_connections: int = field(default=1000, metadata=option(
        "open connections a worker holds at once (default %(default)s), lowered to fit the open-file limit; "
        "past it the connection idle longest is closed, and if none is idle requests get a 503", metavar="N"))
    header_timeout: float = field(default=10.0, metadata=option(
        "longest wait for a request's headers on a new or idle connection, in seconds (default %(default)s)",
        metavar="SECONDS"))
    write_timeout: float = field(default=30.0, metadata=option(
        "longest a client may leave an answer unread before its connection is dropped, in seconds "
        "(default %(default)s)", metavar="SECONDS"))
    max_library_bytes: int = field(default=DEFAULT_MAX_SOURCE_BYTES, metadata=option(
        "largest library file accepted (default %(default)s)", metavar="N"))
    body_read_timeout: float = field(default=10.0, metadata=option(
        "longest wait for the next chunk of a request body, in seconds (default %(default)s)", metavar="SECONDS"))
    rate_limit: float = field(default=0.0, metadata=option(
        "requests per second allowed per client (its token, else its address) and worker; "
        "0 (default) means no limit", metavar="PER_SECOND"))
    rate_burst: int = field(default=60, metadata=option(
        "requests a client may make at once above the rate (default %(default)s)", metavar="N"))
    watch_interval: float = field(default=1.0, metadata=option(
        "how often to look for published, changed or deleted library files, in seconds "
        "(default %(default)s; 0 turns it off; SIGHUP reloads at once)", metavar="SECONDS"))
    drain_seconds: float = field(default=0.0, metadata=option(
        "on SIGTERM, answer /readyz with 503 for this long while still serving, so a load balancer stops "
        "sending requests, then finish those in flight and exit (default %(default)s; behind HAProxy: "
        "at least its check interval times fall)", metavar="SECONDS"))
    blas_threads: int = field(default=1, metadata=option(
        "threads each query's matrix product may use (default 1: a loaded server answers more queries, "
        "sooner, when concurrent queries do not fight over cores; 0 lets the BLAS library choose, faster "
        "for a lone client on a large exact library)", metavar="N"))
    embedder: str = field(default="auto", metadata=option(
        "auto (default): embed query text with the built-in local embedder for "
        "sentence-transformers:all-MiniLM-L6-v2 when the `embed` extra is installed; none: no text queries",
        choices=("auto", "none")))
    embedder_url: str | None = field(default=None, metadata=option(
        "an OpenAI-compatible /v1/embeddings service (OpenAI, Ollama, vLLM, TEI) for another model; "
        "its key comes from POLYMATH_EMBEDDER_KEY or OPENAI_API_KEY (default with --embedder-model: "
        "https://api.openai.com/v1)", metavar="URL"))
    embedder_model: str | None = field(default=None, metadata=option(
        "the model NAME that service knows, e.g. text-embedding-ada-002", metavar="NAME"))
    embedder_library_model: str | None = field(default=None, metadata=option(
        "the library embedding_model that service's vectors belong to (default openai.com:NAME)", metavar="ID"))
    embedder_precision: str = field(default="fp32", metadata=option(
        "the local embedder's precision: fp32 (default: the vectors libraries are made of) or int8 (query text "
        "embedded about twice as fast, its vectors slightly apart: see docs/importing.md)", choices=("fp32", "int8")))
    embedder_device: str = field(default="cpu", metadata=option(
        "where the local embedder runs: cpu (default) or cuda (needs onnxruntime-gpu and a CUDA device; fp32 only)",
        choices=("cpu", "cuda")))
    embedder_timeout: float = field(default=10.0, metadata=option(
        "longest a query waits for its text to be embedded, in seconds (default %(default)s; then 504)",
        metavar="SECONDS"))
    search: str = field(default="auto", metadata=option(
        "exact scans every vector; approximate reads the nearest clusters of clustered libraries (sign-bit "
        "codes for the others) and re-scores the best exactly; auto (default) is approximate when the caller "
        "may see at least --approximate-from bits of the model",
        choices=("auto", "exact", "approximate")))
    approximate_from: int = field(default=CLUSTER_FROM, metadata=option(
        "with --search auto, the number of bits a caller may see from which search is approximate "
        "(default %(default)s)", metavar="BITS"))
    oversample: int = field(default=OVERSAMPLE, metadata=option(
        "approximate search considers at least this many visible bits, and at least 0.5%% of them "
        "(default %(default)s)", metavar="N"))
    probes: int = field(default=PROBES, metadata=option(
        "approximate search reads at least this many nearest clusters of a clustered library "
        "(default %(default)s)", metavar="N"))
    scan_threads: int = field(default=1, metadata=option(
        "threads one exact pass over a library may use; concurrent queries share passes (default %(default)s; "
        "the number of cores divided by --workers uses the machine best under load)", metavar="N"))
    max_batch: int = field(default=MAX_BATCH, metadata=option(
        "exact queries scored together in one step of a shared pass over a library at most (default "
        "%(default)s; 1: each query scans alone)", metavar="N"))
    populate_bytes: int = field(default=default_populate_bytes(), metadata=option(
        "read the libraries' vectors and records into memory at load and map every page, so that no query "
        "waits for a page fault, while they total at most N bytes (default %(default)s, half of the memory "
        "of this machine or its container; the pages are shared by every worker; 0: never); a model whose "
        "vectors are larger is searched through its 8-bit codes, which are read in their place (where the "
        "compiled loops are built, every clustered model is searched through them)", metavar="N"))
    sign_in: str | None = field(default=None, metadata=option(
        "the identity provider readers sign in at from the page (OpenID Connect: authorization code with PKCE, "
        "as a public client), to search with its token; the access file must trust it (polymath-host access "
        "trust ISSUER_URL ...). Needs --sign-in-client. See docs/sign-in.md", metavar="ISSUER_URL"))
    sign_in_client: str | None = field(default=None, metadata=option(
        "the client id of this page at that provider: a public client (no secret) whose redirect URI is this "
        "host's page, e.g. https://library.example.com/", metavar="CLIENT_ID"))
    sign_in_scope: str = field(default="openid", metadata=option(
        "the scopes the page asks for (default %(default)s; add what your provider needs to issue an access token "
        "for this host, e.g. 'openid library')", metavar="SCOPES"))
    sign_in_parameters: str | None = field(default=None, metadata=option(
        "more parameters for the provider's authorization request, as a query string: audience=https://... "
        "(Auth0), resource=https://... (RFC 8707)", metavar="QUERY"))
    sign_in_token: str = field(default="access", metadata=option(
        "the token the page searches with: access (default), or id for a provider whose access tokens are not "
        "JWTs for this host (Google: trust it with --audience CLIENT_ID)", choices=("access", "id")))
    cors_origin: str = field(default="*", metadata=option(
        "origins whose web pages may call this host from a browser (CORS): * (default) for any page, "
        "none for no page of another origin, or origins such as https://app.example (repeat the option, "
        "or separate them with commas). Never with credentials: tokens travel only in Authorization",
        metavar="ORIGIN", repeatable=True))

    @property
    def max_embedding_bytes(self) -> int:
        return self.max_body_bytes

    @classmethod
    def from_arguments(cls, arguments: object) -> Settings:
        """The settings an argparse namespace names, field by field; the rest keep their defaults."""
        given: dict[str, Any] = {}
        for item in fields(cls):
            if not hasattr(arguments, item.name):
                continue
            value = getattr(arguments, item.name)
            if isinstance(value, list):  # a repeatable option, given once or more
                value = ",".join(value)
            elif value is None and item.default is not None:  # a repeatable option not given
                continue
            given[item.name] = value
        return cls(**given)

    def to_environment(self) -> str:
        return json.dumps({key: str(value) if isinstance(value, Path) else value for key, value in asdict(self).items()})

    @classmethod
    def from_environment(cls) -> Settings:
        raw = json.loads(os.environ.get(ENVIRONMENT_VARIABLE, "{}"))
        paths = {item.name for item in fields(cls) if "Path" in str(item.type)}
        given: dict[str, Any] = {key: Path(value) if key in paths and value is not None else value
                                 for key, value in raw.items()}
        return cls(**given)
