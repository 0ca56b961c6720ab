"""The one query core every door asks: choose the model and run a query (query), rank rows by
meaning (engine, cluster_scan), by keywords (keywords) or both (fusion), the budget rule (budget),
the kernels (products, batching, scratch), and what it refuses (errors)."""
