"""What end-to-end tests share beyond libraries: real components that may be missing, and the
admin's command line.

A test that needs a real component (Node, Chromium, Python 3.13, the `embed` extra) is skipped
on a machine without it and fails in CI (`CI` set, as `.ci/run` has it): a missing component
never passes quietly there.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest

import access.cli

PROJECT = Path(__file__).resolve().parents[1]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(reason: str) -> NoReturn:
    """A skip on a laptop, a failure in CI."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set, so this is a failure)")
    pytest.skip(reason)


def admin(*argv: str, cwd: Path = PROJECT) -> str:
    """`python -m host ARGV...` run as an admin runs it, in `cwd` (where the access file is); its stdout."""
    done = subprocess.run([sys.executable, "-m", "host", *argv], capture_output=True, text=True, timeout=60,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(PROJECT)})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def access_cli(*argv: str | Path) -> str:
    """`polymath-host access|token ...` run in this process; its stdout (the token, for `token issue`)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = access.cli.main([str(arg) for arg in argv])
    assert code == 0, err.getvalue()
    return out.getvalue().strip()
