"""Running a test both ways: with an optional C extension, and as where it was not built."""

from __future__ import annotations

import os
from types import ModuleType

import pytest

IN_CI = os.environ.get("CI") == "true"


def compiled_or_not(way: str, module: ModuleType, source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`way` "compiled": `module.compiled` as built (skipped where it was not, failed in CI, whose
    .ci/run installs a C compiler); any other way: `module.compiled` set to None for the test."""
    if way != "compiled":
        monkeypatch.setattr(module, "compiled", None)
    elif module.compiled is None:
        if IN_CI:
            pytest.fail(f"{source} did not build")
        pytest.skip(f"{source} was not built here")
