"""The soak of `scripts/soak.py`, one job per module.

- `model`: what is published (the checkable versions) and the well-behaved requests;
  `check`: the Python check of an answer, and the settings of its twin for wrk, `check.lua`;
  `ballast`: the abusers' own model, a large library and a target library.
- `server`: the server with its tight `Limits`, the CLI, its processes, metrics and log.
- The actors beside the load: `publisher`, `admin`, `sampler` (memory); `load` (wrk or Python).
- The abusers: `hostile_sockets` (idle, half-sent headers and bodies, slow readers),
  `hostile_requests` (oversized answers, hostile bodies, made-up methods), `hostile_files` (bad
  library files, replacing one or new), all run by `abuse` and counted in a `tally`;
  `connection_cap`, the step after the load that shows the cap's 503.
- After the load: `end_state`; then `report`. `run` puts it together.

Everything here imports the installed `host` package (`pip install -e .`).
"""
