"""Step `compile`: compiling a real JSON library file (host.store.compiled.load_library) in a fresh process.

The synthetic library is written out once as a version-1 JSON file (base64 embeddings) and
compiled from scratch in a child process (its peak RSS is the compile's alone); then, in this
process, the phases are timed one by one.
"""

from __future__ import annotations

import gc
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from host.catalog.model_index import ModelIndex
from host.library.embeddings import ADA_002, encode_embedding
from host.library.format import parse_library
from host.service.harness import child_environment
from host.store.compiled import SourceKey, open_segment, read_library_file, write_compiled

from .config import Config, label
from .libraries import generator_params, matrix_of
from .report import ROOT, say, table
from .step import INDEX, Numbers, Results, Size, Step

COMPILE_CHILD = """
import json, resource, sys, time
started = time.perf_counter()
from pathlib import Path
from host.store.compiled import load_library
imported = time.perf_counter()
library, compiled = load_library(Path(sys.argv[1]), Path(sys.argv[2]), name="library")
done = time.perf_counter()
assert compiled, "expected a compilation"
print(json.dumps({"seconds": done - imported, "with_imports": done - started, "bits": library.bit_count,
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def ensure_json_library(workdir: Path, index: ModelIndex, bits: int, seed: int) -> Path:
    """A real version-1 JSON file of the synthetic library (base64 embeddings), reused when present."""
    path = workdir / f"json-{label(bits)}" / "library.json"
    marker = path.with_suffix(".params")
    params = json.dumps(generator_params(bits, seed))
    if path.exists() and marker.exists() and marker.read_text() == params:
        return path
    say(f"compile: writing {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    library, embeddings = index.libraries[0], matrix_of(index)
    with open(path.with_suffix(".tmp"), "w") as handle:
        handle.write('{"version":1,"embedding_model":' + json.dumps(ADA_002) + ',"bits":[')
        for row in range(bits):
            record = library.record(row)
            bit = {"text": record["text"], "embedding": encode_embedding(embeddings[row]),
                   "token_count": int(library.token_counts[row]), "info": record["info"]}
            handle.write(("," if row else "") + json.dumps(bit, separators=(",", ":")))
        handle.write("]}")
    path.with_suffix(".tmp").rename(path)
    marker.write_text(params)
    return path


def measure(size: Size) -> Numbers | None:
    if size.bits not in size.config.compile_sizes:
        return None
    bits, workdir = size.bits, size.config.workdir
    source = ensure_json_library(workdir, size.index, bits, size.config.seed)
    target = workdir / f"json-{label(bits)}" / "compiled"
    result: Numbers = {"json_bytes": source.stat().st_size}
    shutil.rmtree(target, ignore_errors=True)
    say(f"compile {label(bits)}: load_library from scratch in a fresh process")
    child = subprocess.run([sys.executable, "-c", COMPILE_CHILD, str(source), str(target)], capture_output=True,
                           text=True, cwd=ROOT, env=child_environment(), timeout=3600, check=False)
    if child.returncode:
        raise RuntimeError(f"compile child failed: {child.stderr[-2000:]}")
    result.update(json.loads(child.stdout.strip().splitlines()[-1]))
    result["bits_per_second"] = bits / result["seconds"]
    t0 = time.perf_counter()
    data = read_library_file(source)
    t1 = time.perf_counter()
    parsed = parse_library(data)
    del data
    t2 = time.perf_counter()
    shutil.rmtree(target, ignore_errors=True)
    stat = source.stat()
    write_compiled(parsed, target, SourceKey(stat.st_size, stat.st_mtime_ns, "0" * 64), "library")
    t3 = time.perf_counter()
    open_segment(target)
    t4 = time.perf_counter()
    result["phases"] = {"read_and_json_loads": t1 - t0, "parse_library": t2 - t1, "write_compiled": t3 - t2,
                        "open_segment": t4 - t3}
    del parsed
    gc.collect()
    shutil.rmtree(target, ignore_errors=True)
    return result


def report(results: Results, config: Config) -> list[str]:
    sizes = results["sizes"]
    rows = []
    for bits, entry in sizes.items():
        compiled = entry.get("compile")
        if compiled:
            phases = compiled.get("phases", {})
            rows.append([label(bits), f"{compiled['json_bytes'] / 1e6:,.0f}", f"{compiled['seconds']:.2f}",
                         f"{compiled['bits_per_second']:,.0f}", f"{compiled['json_bytes'] / compiled['seconds'] / 1e6:.0f}",
                         f"{compiled['peak_rss_bytes'] / 2**20:,.0f}",
                         " / ".join(f"{phases[p]:.2f}" for p in ("read_and_json_loads", "parse_library", "write_compiled",
                                                                 "open_segment")) if phases else "-"])
    if not rows:
        return []
    largest = max(bits for bits, entry in sizes.items() if entry.get("compile"))
    throughput = sizes[largest]["compile"]["bits_per_second"]
    memory_ratio = sizes[largest]["compile"]["peak_rss_bytes"] / sizes[largest]["compile"]["json_bytes"]
    json_1m = sizes[largest]["compile"]["json_bytes"] * 1_000_000 / largest
    return [table("Compiling a JSON library file (host.store.compiled.load_library, fresh process)",
                  ["bits", "JSON MB", "seconds", "bits/s", "MB/s", "peak RSS MiB", "read+loads / parse / write / open s"], rows,
                  f"1M is not compiled from JSON in this step (a ~{json_1m / 1e9:.1f} GB file; scripts/bench_compile.py "
                  f"compiles any file beside faiss). Extrapolated at {label(largest)}'s rate: "
                  f"~{1_000_000 / throughput:.0f} s; peak memory was {memory_ratio:.2f}x the file here, and a streamed "
                  "compile's does not grow with the file.")]


STEP = Step("compile", "bits/s compiling a real JSON library file (host.store.compiled.load_library)", INDEX, measure, report)
