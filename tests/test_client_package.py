"""clients/python builds and installs as its own distribution, polymath-host-client: its wheel holds
the client and none of the server, says its dependencies and extras, and, installed alone into a
folder, queries a real host without the server's package ever being imported."""

from __future__ import annotations

import email
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PROJECT, start_host, stop_host
from librarian import make_library, unit_vectors, write_library

from host.service.harness import RunningHost

CLIENT = PROJECT / "clients" / "python"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built offline from a copy of clients/python (no build isolation: this venv's setuptools;
    the copy keeps setuptools' build folders out of the repository)."""
    out = tmp_path_factory.mktemp("wheel")
    source = shutil.copytree(CLIENT, out / "source", ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "--quiet", "--wheel-dir", str(out), str(source)], check=True, capture_output=True, timeout=300,
                   cwd=out)
    (built,) = out.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHost]:
    folder = tmp_path_factory.mktemp("package-host")
    write_library(folder / "numbers.json", make_library(unit_vectors(5, dimension=8, seed=1)))
    host = start_host(folder)
    yield host
    stop_host(host)


def test_the_wheel_is_polymath_host_client_with_its_extras_and_no_server(wheel: Path) -> None:
    assert wheel.name == "polymath_host_client-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = email.message_from_bytes(archive.read("polymath_host_client-0.1.0.dist-info/METADATA"))

    assert sorted(name for name in names if not name.startswith("polymath_host_client-0.1.0.dist-info/")) == [
        f"polymath_host_client/{module}" for module in (
            "__init__.py", "client.py", "errors.py", "langchain.py", "llama_index.py", "py.typed", "results.py")]
    assert metadata["Name"] == "polymath-host-client" and metadata["License-Expression"] == "MIT"
    assert sorted(metadata.get_all("Provides-Extra")) == ["langchain", "llama-index"]
    assert sorted(metadata.get_all("Requires-Dist")) == [
        "httpx>=0.27", 'langchain-core<2,>=1.0; extra == "langchain"', 'llama-index-core<0.15,>=0.14; extra == "llama-index"']
    assert "PolymathRetriever" in metadata.get_payload()  # the README is its long description


def test_installed_alone_it_queries_a_host_without_the_server_package(wheel: Path, served: RunningHost,
                                                                     tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", "--target",
                    str(target), str(wheel)], check=True, capture_output=True, timeout=300)
    program = (
        "import json, sys\n"
        "import polymath_host_client as client\n"
        f"with client.PolymathClient({served.url!r}) as host:\n"
        "    answer = host.query(count=2, count_type='bit')\n"
        "    libraries = host.libraries()\n"
        "print(json.dumps({'file': client.__file__, 'bits': len(answer.bits), 'library': libraries[0].name,\n"
        "                  'server imported': 'host' in sys.modules}))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(target)})
    assert done.returncode == 0, done.stderr

    seen = json.loads(done.stdout)
    assert Path(seen["file"]).is_relative_to(target)
    assert (seen["bits"], seen["library"], seen["server imported"]) == (2, "numbers", False)
