"""Step `encoding`: build_result + render_json / render_msgpack for a 1500-token result, at the middle size."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from host.library.omit import parse_omit
from host.results.answers import build_result
from host.search.engine import Search
from host.web.responses import render_json, render_msgpack

from .config import Config, label
from .libraries import matrix_of, near_queries
from .measure import host_search, interleaved
from .report import ms, ratio, say, table
from .step import INDEX, Numbers, Results, Size, Step


def measure(size: Size) -> Numbers | None:
    if size.bits != size.config.mid:
        return None
    say(f"{label(size.bits)}: response building")
    index, config = size.index, size.config
    queries = near_queries(matrix_of(index), 16, size.rng)
    selections = [host_search(index)(q) for q in queries]
    result: dict[str, Any] = {"bits_in_result": float(np.median([len(s.rows) for s in selections]))}
    for selection in selections:  # the first read of each record pages it in: not what is measured here
        build_result(index, selection, parse_omit(""))
    for omit_text in ("embedding", ""):
        omit = parse_omit(omit_text)
        for fmt in ("json", "msgpack"):
            binary = fmt == "msgpack"
            render = render_msgpack if binary else render_json
            build_times, render_times, sizes = [], [], []
            deadline = time.perf_counter() + config.budget / 2
            for repetition in range(config.encoding_repetitions):
                selection = selections[repetition % len(selections)]
                t0 = time.perf_counter()
                content = build_result(index, selection, omit, binary_embeddings=binary)
                t1 = time.perf_counter()
                body = render(content)
                t2 = time.perf_counter()
                build_times.append(t1 - t0)
                render_times.append(t2 - t1)
                sizes.append(len(body))
                if time.perf_counter() > deadline and repetition >= 4:
                    break
            result[f"{fmt} omit={omit_text!r}"] = {
                "build": float(np.median(build_times)), "render": float(np.median(render_times)),
                "total": float(np.median(np.add(build_times, render_times))), "bytes": int(np.median(sizes))}
    timing = interleaved({"exact": host_search(index), "approximate": host_search(index, Search(approximate=True))},
                         queries, 30, config.budget / 2)
    result["rank_exact_p50"] = timing["exact"]["p50"]
    result["rank_approximate_p50"] = timing["approximate"]["p50"]
    return result


def report(results: Results, config: Config) -> list[str]:
    out = []
    for bits, entry in results["sizes"].items():
        encoding = entry.get("encoding")
        if not encoding:
            continue
        rows = []
        for name, value in encoding.items():
            if isinstance(value, dict):
                rows.append([name, ms(value["build"]), ms(value["render"]), ms(value["total"]), f"{value['bytes']:,}",
                             ratio(value["total"], encoding["rank_exact_p50"]),
                             ratio(value["total"], encoding["rank_approximate_p50"])])
        out.append(table(f"Response building at {label(bits)} ({encoding['bits_in_result']:.0f} bits in a 1500-token result), ms",
                         ["format", "build_result", "render", "total", "bytes", "/ exact rank", "/ approx rank"], rows,
                         f"rank() p50 in the same step: exact {ms(encoding['rank_exact_p50'])} ms, "
                         f"approximate {ms(encoding['rank_approximate_p50'])} ms."))
    return out


STEP = Step("encoding", "build_result + render_json / render_msgpack for a 1500-token result", INDEX, measure, report)
