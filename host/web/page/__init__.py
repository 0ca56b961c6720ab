"""The page people use (SPEC §9): `GET /` and a library's map, rendered from Jinja2 templates.

Modules, in the order data flows:

- `request`: what a visitor asked (`?q=`, `?like=`, `?library=`, the budget), read leniently:
  a value the page cannot use becomes a notice, never a 400;
- `sampling`: a truly random sample of the bits a caller may see;
- `maps`: a library's 2-D map (PCA of the embeddings a caller may see);
- `data`: the page's data, built from the query core for one caller (plain dataclasses: the
  templates render them, `Accept: application/json` gets them as JSON);
- `rendering`: the Jinja2 environment (autoescaped) and the versioned static files;
- `endpoints`: the thin HTTP layer: who asks, text embedded, data built, page or JSON sent.

This package imports nothing from here at import time, so `host.web.state` can use `maps`.
"""
