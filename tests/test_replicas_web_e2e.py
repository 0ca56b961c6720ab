"""Three replicas of a plain HTTP static origin (`python -m http.server` over a published folder)
behind HAProxy with the shipped config: the scenario of the S3 test (tests/replica_cluster.py),
with a 20 s load: kill -9 a replica and restart it, stop the web server and start it again, publish
a new library and revoke a token. No failed request, every answer a single local host's answer.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from origin_support import publish, wait_for_port
from replica_cluster import run_scenario

from host.service.harness import free_port


class StaticServer:
    def __init__(self, folder: Path) -> None:
        self.folder = folder / "published"
        self.log_path = folder / "http-server.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.environment = {}
        self.process: subprocess.Popen[bytes] | None = None

    def publish(self, source: Path, access_file: Path) -> None:
        done = publish(source, str(self.folder), "--compiled", "--access", str(access_file), "--quiet")
        assert done.returncode == 0, done.stderr
        if self.process is None:
            self.restart()

    def restart(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "http.server", str(self.port), "--bind", "127.0.0.1", "--directory", str(self.folder)],
                stdout=log, stderr=subprocess.STDOUT, process_group=0)
        wait_for_port(self.port, what="python -m http.server", process=self.process, log_path=self.log_path)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)


def test_replicas_of_a_plain_web_origin_behind_haproxy_lose_no_request_under_faults(tmp_path: Path) -> None:
    origin = StaticServer(tmp_path)
    try:
        run_scenario(tmp_path, origin, load_seconds=20)
    finally:
        origin.stop()
