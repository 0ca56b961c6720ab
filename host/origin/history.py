"""The manifests of earlier publishes, kept under history names, and when each was published.

`publish` writes every manifest twice: under `manifests/<published>-<sha256>.json`, then as
`manifest.json`. The history names sort by publishing time, so `publish --prune` finds the last N
sets (and when each stopped being the one in force) without reading any manifest it will not keep.
Replicas never read them.

`published_at` has microseconds and always moves forward (a publish within the same microsecond as,
or on a clock behind, the one before is dated just after it): a replica that pins keys refuses a
signed manifest that is not newer than the set it serves (a replayed old set), and history names
never collide.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

MANIFESTS = "manifests"
_STAMP = "%Y%m%dT%H%M%S.%fZ"
_NAME = re.compile(rf"{MANIFESTS}/([0-9]{{8}}T[0-9]{{6}}\.[0-9]{{6}}Z)-([0-9a-f]{{64}})\.json")


@dataclass(frozen=True)
class HistoryEntry:
    key: str
    published: datetime
    digest: str  # SHA-256 of the manifest's bytes


def published_time(text: str) -> datetime | None:
    """A manifest's `published_at` as a time, or None when it has none (or one we cannot read)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def next_published_at(before: str | None, now: datetime | None = None) -> str:
    """Now, as `published_at`; or just after `before` if the clock has not passed it."""
    moment = now or datetime.now(UTC)
    earlier = published_time(before) if before else None
    if earlier is not None and moment <= earlier:
        moment = earlier + timedelta(microseconds=1)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def history_key(published_at: str, digest: str) -> str:
    moment = published_time(published_at) or datetime.now(UTC)
    return f"{MANIFESTS}/{moment.astimezone(UTC).strftime(_STAMP)}-{digest}.json"


def parse_history_key(key: str) -> HistoryEntry | None:
    """The entry a history name stands for; None for any other key (left alone by pruning)."""
    match = _NAME.fullmatch(key)
    if match is None:
        return None
    try:
        published = datetime.strptime(match[1], _STAMP).replace(tzinfo=UTC)
    except ValueError:
        return None
    return HistoryEntry(key, published, match[2])
