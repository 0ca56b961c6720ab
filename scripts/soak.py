#!/usr/bin/env python3
"""Soak: load while publishing, beside an abuse phase. Every answer is checked; exits 1 if any failed or was wrong.

A real `python -m host serve --workers 2` (127.0.0.1 only) with tight limits serves a synthetic
library set in a temporary folder while, for --duration seconds:

- a load generator hammers `POST /`: wrk with scripts/soak/check.lua, which checks every response
  body (if wrk is installed; else a bounded pool of Python threads running the same check);
- a publisher replaces (atomically or in place), deletes, re-adds and breaks library files,
  always fixing what it broke;
- an admin issues and revokes tokens with the CLI, and checks the running server follows;
- a sampler records the RSS and PSS of the server and its workers every second;
- with --abuse (the default), abusers hold idle sockets, half-sent headers and bodies, never read
  large answers, ask for oversized answers, send hostile bodies and made-up methods, and publish
  hostile library files; each checks the server's answer to it. After the load, a short step shows
  the connection cap's 503 (never during the checked load).

The well-behaved clients must see 0 errors. --no-abuse runs the same without the abusers, for
comparison. The modules are in scripts/soak/ (see its __init__).

Run: .venv/bin/python scripts/soak.py [--duration 150] [--connections 8] [--workers 2] [--no-abuse]
"""

# This file only starts the run: scripts/soak/run.py puts it together.

from __future__ import annotations

import sys

from soak.run import main

if __name__ == "__main__":
    sys.exit(main(description=__doc__.split("\n\n")[0]))
