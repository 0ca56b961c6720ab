"""The admin: issues tokens with the CLI and checks the running server grants, then refuses, each."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from .model import PRIVATE, library_name
from .server import cli

ACCESS_FILE = "access.SECRET.json"


@dataclass
class Admin:
    workdir: Path
    url: str
    stop: threading.Event
    issued: int = 0
    revoked: int = 0
    failures: list[str] = field(default_factory=list)
    grant_seconds: list[float] = field(default_factory=list)
    revoke_seconds: list[float] = field(default_factory=list)

    def wait_for(self, token: str, status: int) -> float | None:
        """Seconds until the private library answers `status` to this token, or None after 5 s."""
        started = time.monotonic()
        while time.monotonic() - started < 5:
            # Every worker must agree: look several times over fresh connections.
            if all(httpx.get(f"{self.url}/libraries/{library_name(PRIVATE)}.json",
                             headers={"Authorization": f"Bearer {token}"}, timeout=5).status_code == status
                   for _ in range(4)):
                return time.monotonic() - started
            time.sleep(0.1)
        return None

    def run(self) -> None:
        number = 0
        while not self.stop.wait(1.0) and number < 1000:
            number += 1
            subject = f"soak-admin-{number}"
            issued = cli("token", "issue", subject, "--tag", "unpublished", "--expires", "1h", "--access", ACCESS_FILE,
                         cwd=self.workdir)
            if issued.returncode:
                self.failures.append(f"token issue failed: {issued.stderr.strip()}")
                continue
            self.issued += 1
            seconds = self.wait_for(issued.stdout.strip(), 200)
            if seconds is None:
                self.failures.append(f"{subject}: an issued token was not granted within 5 s")
                continue
            self.grant_seconds.append(seconds)
            revoked = cli("token", "revoke", subject, "--access", ACCESS_FILE, cwd=self.workdir)
            if revoked.returncode:
                self.failures.append(f"token revoke failed: {revoked.stderr.strip()}")
                continue
            self.revoked += 1
            seconds = self.wait_for(issued.stdout.strip(), 401)
            if seconds is None:
                self.failures.append(f"{subject}: a revoked token was still granted after 5 s")
                continue
            self.revoke_seconds.append(seconds)
