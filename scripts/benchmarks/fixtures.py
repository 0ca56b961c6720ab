"""Step `fixtures`: recall of the sign-code search on the real ada-002 fixtures (../shared/fixtures), once."""

from __future__ import annotations

import shutil

import numpy as np

from host.catalog.generations import load_catalog
from host.library.embeddings import ADA_002
from host.search.engine import EXACT, Search
from host.store.sign_codes import hamming_distances

from .config import Config
from .measure import EVERYONE, host_search
from .report import ROOT, say, table
from .step import ONCE, Numbers, Results, Step

FIXTURES = ROOT.parent / "shared" / "fixtures"


def measure(config: Config) -> Numbers | None:
    """Recall on real ada-002 vectors: perturbed bits and midpoints of two bits as queries."""
    say("fixtures: recall on the real ada-002 libraries")
    if not FIXTURES.is_dir():
        say(f"fixtures: {FIXTURES} is absent; skipped")
        return None
    rng = np.random.default_rng(config.seed)
    cache = config.workdir / "fixtures-compiled"
    shutil.rmtree(cache, ignore_errors=True)
    catalog = load_catalog(FIXTURES, cache_dir=cache)
    index = catalog.models[ADA_002]
    mask = index.visible_rows(EVERYONE)  # duplicates across the files are ranked once
    embeddings = np.concatenate([library.embeddings for library in index.libraries])
    rows = np.arange(len(embeddings)) if mask is None else np.flatnonzero(mask)
    visible = len(rows)
    perturbed = embeddings[rows] + rng.standard_normal((len(rows), embeddings.shape[1]), dtype=np.float32) * np.float32(
        0.3 / np.sqrt(embeddings.shape[1]))
    pairs = rng.choice(rows, size=(100, 2))
    midpoints = embeddings[pairs[:, 0]] + embeddings[pairs[:, 1]]
    queries = np.concatenate([perturbed, midpoints]).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    result: Numbers = {"bits": int(index.bit_count), "visible_bits": visible, "queries": len(queries), "runs": []}
    for k in (5, 10):
        truths = [host_search(index, EXACT, k, "bit")(q).rows for q in queries]
        for oversample in (20, 30, 1000):
            pool = max(oversample, 4 * k)
            found = [host_search(index, Search(approximate=True, oversample=oversample), k, "bit")(q).rows for q in queries]
            recall = np.mean([len(np.intersect1d(f, t)) / len(t) for f, t in zip(found, truths)])
            result["runs"].append({"k": k, "oversample": oversample, "pool": min(pool, visible),
                                   "falls_back_to_exact": pool >= visible // 2, "recall": float(recall)})
    # The candidate pool alone (no fallback): how many of the true top 10 are among the nearest codes.
    codes = np.concatenate([library.sign_codes for library in index.libraries], axis=1)
    truths = [host_search(index, EXACT, 10, "bit")(q).rows for q in queries]
    hidden = np.ones(len(embeddings), dtype=bool)
    hidden[rows] = False
    for pool in (10, 20, 30, 40):
        hits = []
        for query, truth in zip(queries, truths):
            distances = hamming_distances(codes, query).astype(np.int32)
            distances[hidden] = 1 << 20
            nearest = np.argsort(distances, kind="stable")[:pool]
            hits.append(len(np.intersect1d(nearest, truth)) / len(truth))
        result.setdefault("candidate_pool_recall_at_10", {})[pool] = float(np.mean(hits))
    shutil.rmtree(cache, ignore_errors=True)
    return result


def report(results: Results, config: Config) -> list[str]:
    fixtures = results.get("fixtures")
    if not fixtures:
        return []
    rows = [[run["k"], run["oversample"], run["pool"], "yes" if run["falls_back_to_exact"] else "no", f"{run['recall']:.4f}"]
            for run in fixtures["runs"]]
    pools = ", ".join(f"{pool}: {value:.3f}" for pool, value in fixtures["candidate_pool_recall_at_10"].items())
    return [table(f"Real ada-002 fixtures ({fixtures['visible_bits']} distinct bits, {fixtures['queries']} queries: "
                  "perturbed bits and midpoints of two bits)",
                  ["k", "oversample", "pool", "falls back to exact", "recall@k"], rows,
                  f"Share of the exact top 10 among the nearest sign codes alone, by pool size: {pools}.")]


STEP = Step("fixtures", "recall of the sign-code search on the real ada-002 fixtures (../shared/fixtures)", ONCE,
            measure, report)
