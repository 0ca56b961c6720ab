"""The one query core every door asks: choose the model and run a query (query), rank rows
(engine, cluster_scan, hybrid), the budget rule (budget), the kernels (products, batching, scratch),
and what it refuses (errors)."""
