"""The endpoints for operators and tools: liveness, readiness, metrics, the OpenAPI document."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from access.issuer_keys import REGISTRY
from host.catalog.replica import Replica
from host.search.batching import BATCHER
from host.service.prometheus import heading, sample
from host.web.openapi import document_for
from host.web.responses import JSON, render_json
from host.web.server import DRAINING
from host.web.state import HostState, host_state


async def healthz(request: Request) -> Response:
    return Response(render_json({"status": "ok"}), media_type=JSON)


async def readyz(request: Request) -> Response:
    """Ready once the libraries are loaded, whatever was found: the answer must not depend on
    private libraries (nor tell that only private ones exist), so it counts only public ones."""
    state = host_state(request)
    if DRAINING.is_set():
        return Response(render_json({"status": "draining: stopping after the requests in flight"}), 503, media_type=JSON)
    replica = state.origins.replica if state.origins else None
    if replica is not None and replica.serving is None:
        return Response(render_json({"status": "waiting for a first good sync from the origin"}), 503, media_type=JSON)
    body = {"status": "ready", "public_generation": state.public_generation,
            "public_libraries": len(state.catalog.public_libraries())}
    return Response(render_json(body), 200, media_type=JSON)


async def metrics(request: Request) -> Response:
    state = host_state(request)
    # Embedding figures only for models anyone may see: an embedder of a private-only model is not named.
    public_models = [model for model, index in state.catalog.models.items() if index.visible_count(frozenset())]
    lines = state.embedders.stats.render_lines(public_models) + scan_lines() + origin_lines(state) + issuer_key_lines()
    text = state.metrics.render() + "\n".join(lines) + "\n"
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


def scan_lines() -> list[str]:
    """How well exact scans are shared (host/search/batching.py): queries scored over steps is the mean sharing."""
    return [*heading("polymath_scan_steps_total", "counter", "Steps of shared passes over libraries of 4,096+ bits."),
            sample("polymath_scan_steps_total", (), BATCHER.steps),
            *heading("polymath_scan_step_queries_total", "counter", "Queries scored by those steps (one per query aboard)."),
            sample("polymath_scan_step_queries_total", (), BATCHER.step_queries)]


def issuer_key_lines() -> list[str]:
    """The trusted identity providers' keys this process holds (access/issuer_keys.py): their age, failed fetches."""
    statuses = REGISTRY.statuses()
    if not statuses:
        return []
    now = time.time()
    # One IssuerKeys per (issuer, jwks_uri): two files may trust one issuer, by discovery and by a jwks_uri, and
    # each series must be named once (`keys` tells them apart).
    labelled = [((("issuer", status.issuer), ("keys", status.jwks_uri or "discovery")), status) for status in statuses]
    return [*heading("polymath_issuer_keys_age_seconds", "gauge",
                     "Seconds since a trusted issuer's keys were last fetched (-1: never yet)."),
            *(sample("polymath_issuer_keys_age_seconds", labels,
                     round(now - status.fetched_at, 3) if status.fetched_at is not None else -1)
              for labels, status in labelled),
            *heading("polymath_issuer_key_fetches_total", "counter", "Fetches of a trusted issuer's keys started."),
            *(sample("polymath_issuer_key_fetches_total", labels, status.fetches) for labels, status in labelled),
            *heading("polymath_issuer_key_refresh_failures_total", "counter",
                     "Fetches of a trusted issuer's keys that failed, by reason."),
            *(sample("polymath_issuer_key_refresh_failures_total", (*labels, ("reason", reason)), count)
              for labels, status in labelled for reason, count in sorted(status.failures.items()))]


def origin_lines(state: HostState) -> list[str]:
    """A replica's syncs (host/catalog/replica.py), this process's: how old its set is, how many polls failed."""
    sources = state.origins
    if sources is None or (sources.replica is None and sources.access_follower is None):
        return []
    now, present = time.time(), [("libraries", sources.replica), ("access", sources.access_follower)]
    statuses = [((("source", what),), source.status) for what, source in present if source is not None]
    ages = [(labels, round(now - status.last_good, 3) if status.last_good is not None else -1)
            for labels, status in statuses]
    return [*heading("polymath_origin_sync_age_seconds", "gauge",
                     "Seconds since this process last found itself in step with its origin (-1: never)."),
            *(sample("polymath_origin_sync_age_seconds", labels, age) for labels, age in ages),
            *heading("polymath_origin_sync_failures_total", "counter", "Polls of the origin that failed."),
            *(sample("polymath_origin_sync_failures_total", labels, status.failures) for labels, status in statuses),
            *heading("polymath_origin_in_step", "gauge", "1 when the last poll of the origin succeeded, else 0."),
            *(sample("polymath_origin_in_step", labels, int(status.problem is None and status.last_good is not None))
              for labels, status in statuses),
            *signature_lines(sources.replica)]


def signature_lines(replica: Replica | None) -> list[str]:
    """Whether a replica checks its manifests' signatures, and the manifests it refused (per reason)."""
    if replica is None:
        return []
    labels = (("source", "libraries"),)
    return [*heading("polymath_origin_signed", "gauge",
                     "1 when pinned publisher keys (--origin-key) must sign the set, 0 when the origin is trusted unsigned."),
            sample("polymath_origin_signed", labels, int(bool(replica.keys))),
            *heading("polymath_origin_signature_refusals_total", "counter",
                     "Polls that refused the origin's manifest: unsigned, unpinned_key, bad_signature or replayed."),
            *(sample("polymath_origin_signature_refusals_total", (*labels, ("reason", reason)), count)
              for reason, count in replica.status.refusals.items())]


async def openapi(request: Request) -> Response:
    return Response(render_json(document_for(host_state(request).settings.max_count)), media_type=JSON)
