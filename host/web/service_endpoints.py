"""The endpoints for operators and tools: liveness, readiness, metrics, the OpenAPI document."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from host.search.batching import BATCHER
from host.service.prometheus import heading, sample
from host.web.openapi import OPENAPI
from host.web.responses import JSON, render_json
from host.web.state import host_state


async def healthz(request: Request) -> Response:
    return Response(render_json({"status": "ok"}), media_type=JSON)


async def readyz(request: Request) -> Response:
    """Ready once the libraries are loaded, whatever was found: the answer must not depend on
    private libraries (nor tell that only private ones exist), so it counts only public ones."""
    state = host_state(request)
    body = {"status": "ready", "public_generation": state.public_generation,
            "public_libraries": len(state.catalog.public_libraries())}
    return Response(render_json(body), 200, media_type=JSON)


async def metrics(request: Request) -> Response:
    state = host_state(request)
    # Embedding figures only for models anyone may see: an embedder of a private-only model is not named.
    public_models = [model for model, index in state.catalog.models.items() if index.visible_count(frozenset())]
    text = state.metrics.render() + "\n".join(state.embedders.stats.render_lines(public_models) + scan_lines()) + "\n"
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


def scan_lines() -> list[str]:
    """How well exact scans are shared (host/search/batching.py): queries scored over steps is the mean sharing."""
    return [*heading("polymath_scan_steps_total", "counter", "Steps of shared passes over libraries of 4,096+ bits."),
            sample("polymath_scan_steps_total", (), BATCHER.steps),
            *heading("polymath_scan_step_queries_total", "counter", "Queries scored by those steps (one per query aboard)."),
            sample("polymath_scan_step_queries_total", (), BATCHER.step_queries)]


async def openapi(request: Request) -> Response:
    return Response(render_json(OPENAPI), media_type=JSON)
