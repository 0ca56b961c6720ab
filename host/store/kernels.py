"""The query core's compiled loops (host/store/_kernels.c), where they were built.

The 8-bit code scan (host/store/codes.py) and the candidates within a margin of the k-th best score
(host/search/budget.py) run in C where the package was installed with a C compiler (pyproject.toml
builds the extension, optional): numpy has no integer matrix-vector product, and each of the dozen
numpy steps they replace costs microseconds more in a server, whose caches the request around it
has filled with other things. Without it, `compiled` is None and numpy runs the same steps: the
same answers (the scores of the code scan move, within the margin that sends candidates to exact
re-scoring). The compile uses three of its loops too: the codes (host/store/codes.py), reading
scattered rows (host/store/writer.py's `read_ranges`) and packing records (`pack_records`: a dict
and an encoder call a bit cost ~1 µs). Callers read `compiled` at each call, so tests run both ways.
"""

from __future__ import annotations

try:
    import host.store._kernels as compiled
except ImportError:  # installed without a C compiler
    compiled = None  # type: ignore[assignment]

BUILT = compiled is not None
__all__ = ["BUILT", "compiled"]
