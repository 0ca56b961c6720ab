"""Everything `serve` can be told, with the defaults a first run needs."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from host.engine import Search
from host.store import DEFAULT_MAX_SOURCE_BYTES

ENVIRONMENT_VARIABLE = "POLYMATH_HOST_SETTINGS"  # how `serve --workers N` hands settings to workers


@dataclass(frozen=True)
class Settings:
    libraries: Path = Path("libraries")
    access: Path | None = None  # access.SECRET.json; None serves public bits only
    cache_dir: Path | None = None  # default: <libraries>/.compiled
    max_body_bytes: int = 1 << 20
    max_count: int = 100_000
    max_form_fields: int = 32
    query_cache_entries: int = 2048
    max_library_bytes: int = DEFAULT_MAX_SOURCE_BYTES
    body_read_timeout: float = 10.0  # seconds allowed between chunks of a request body
    rate_limit_per_second: float = 0.0  # per client and worker; 0 turns rate limiting off
    rate_limit_burst: int = 60
    watch_interval: float = 1.0  # seconds between looks for changed library files; 0 turns it off
    blas_threads: int = 1  # per process; 0 leaves the BLAS library's own choice
    search: str = "auto"  # exact | approximate | auto (approximate from `approximate_from_bits`)
    approximate_from_bits: int = 100_000
    oversample: int = 1000

    def search_for(self, bits: int) -> Search:
        approximate = self.search == "approximate" or (self.search == "auto" and bits >= self.approximate_from_bits)
        # The pool that holds the true top 10 grows with the library (p90 ~0.3% of the bits in
        # scripts/bench.py's clustered 100k and 1M libraries): a fixed 1000 gave recall@10 0.85 at 1M.
        return Search(approximate=approximate, oversample=max(self.oversample, bits // 250))

    @property
    def max_embedding_bytes(self) -> int:
        return self.max_body_bytes

    def to_environment(self) -> str:
        return json.dumps({key: str(value) if isinstance(value, Path) else value for key, value in asdict(self).items()})

    @classmethod
    def from_environment(cls) -> Settings:
        raw = json.loads(os.environ.get(ENVIRONMENT_VARIABLE, "{}"))
        paths = {field.name for field in fields(cls) if "Path" in str(field.type)}
        return cls(**{key: Path(value) if key in paths and value is not None else value for key, value in raw.items()})
