"""What the core refuses, in words any client may read. The edge picks the status or code.

Every message is one sentence naming what was wrong (the argument, the value); none ever names a
bit, library or model the caller may not see.
"""

from __future__ import annotations


class QueryError(ValueError):
    """A question the host cannot answer as asked (HTTP 400)."""


class NothingLoaded(Exception):
    """No library is loaded for this caller to ask (HTTP 503)."""
