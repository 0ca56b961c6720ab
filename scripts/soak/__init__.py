"""The soak of `scripts/soak.py`, one job per module.

- `model`: what is published (the checkable versions) and the well-behaved requests;
  `check`: the Python check of an answer, and the settings of its twin for wrk, `check.lua`.
- `server`: the server, the CLI, its processes, metrics and log.
- The actors beside the load: `publisher`, `admin`, `sampler` (memory); `load` (wrk or Python).
- After the load: `end_state`; then `report`. `run` puts it together.

Everything here imports the installed `host` package (`pip install -e .`).
"""
