"""The neighbours' dialects: thin adapters from other systems' HTTP APIs to the one query core.

Each module reads its dialect's request, asks `host.search.query` (or the embedders) as `POST /` does,
and writes its dialect's answer and errors. None ranks, budgets or filters by itself.
"""
