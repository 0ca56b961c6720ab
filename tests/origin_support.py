"""What the origin tests share: moto's real S3 server in a process of its own on loopback, the AWS
variables that point clients at it, HAProxy (a Debian package: skipped on a laptop without it,
a failure in CI), and `publish` run as an admin runs it."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from components import PROJECT, unavailable
from librarian import TEST_MODEL, make_library, unit_vectors, write_library

from host.cli import main
from host.service.harness import free_port

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing-key-id", "AWS_SECRET_ACCESS_KEY": "testing-secret-key",
               "AWS_DEFAULT_REGION": "us-east-1"}


@dataclass
class MotoServer:
    """moto's S3 server (`python -m moto.server`), restartable on the same port (its contents start empty)."""

    port: int
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def environment(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.port}", **CREDENTIALS}

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                            stdout=log, stderr=subprocess.STDOUT, process_group=0)
        wait_for_port(self.port, what="moto's S3 server", process=self.process, log_path=self.log_path)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def make_bucket(self, name: str) -> None:
        import boto3

        with set_environment(self.environment):
            boto3.session.Session().client("s3").create_bucket(Bucket=name)


@contextlib.contextmanager
def running_moto(folder: Path) -> Iterator[MotoServer]:
    server = MotoServer(free_port(), folder / "moto.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def set_environment(variables: Mapping[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def wait_for_port(port: int, *, what: str, process: subprocess.Popen[bytes], log_path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}:\n{log_path.read_text(errors='replace')[-3000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout} s")


def haproxy() -> str:
    """Debian's haproxy binary: skipped on a machine without it, a failure in CI (.ci/run installs it)."""
    found = shutil.which("haproxy") or next((path for path in ("/usr/sbin/haproxy",) if Path(path).exists()), None)
    if found is None:
        unavailable("haproxy is not installed (apt-get install haproxy)")
    return str(found)


def publish(source: Path, destination: str, *options: str, env: Mapping[str, str] | None = None,
            cwd: Path = PROJECT) -> subprocess.CompletedProcess[str]:
    """`polymath-host publish SOURCE DESTINATION OPTIONS...` in a process of its own, as an admin runs it."""
    return subprocess.run([sys.executable, "-m", "host", "publish", str(source), destination, *options],
                          capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(PROJECT), **(env or {})})


def library_folder(root: Path, **versions: int) -> Path:
    """Libraries named by the keywords, each of three bits whose vectors follow its version: a new
    version is a changed library."""
    for name, version in versions.items():
        write_library(root / f"{name}.json", make_library(unit_vectors(3, seed=version), model=TEST_MODEL))
    return root


def publish_now(source: Path, destination: Path, *options: str) -> None:
    """`publish SOURCE DESTINATION OPTIONS...` in this process, quietly; it must succeed."""
    assert main(["publish", str(source), str(destination), "--quiet", *options]) == 0
