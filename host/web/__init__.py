"""The HTTP edge: the ASGI app, the caller, the endpoints, the page, middleware."""
