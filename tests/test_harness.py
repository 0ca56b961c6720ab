"""host.service.harness: the server harness of the tests, the benchmark and the soak, run for real."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest
from librarian import make_library, unit_vectors, write_library

from host.service import harness
from host.service.harness import HostFailed, free_port, http_status, spawn_host, start_host


def running(pid: int) -> bool:
    """Neither gone nor a zombie (a killed worker waits for whoever adopted it to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def one_library(folder: Path) -> Path:
    write_library(folder / "libraries" / "four.json", make_library(unit_vectors(4, seed=3)))
    return folder / "libraries"


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))


def test_a_started_host_answers_logs_and_stops_with_exit_code_0(tmp_path: Path) -> None:
    libraries = one_library(tmp_path)
    with start_host(libraries, "--workers", "2", ready_path="/readyz") as host:
        status, body = http_status(host.port, "GET", "/readyz")
        assert status == 200 and json.loads(body)["status"] == "ready"
        assert host.url == f"http://127.0.0.1:{host.port}"
        assert host.log_path == tmp_path / f"host-{host.port}.log"  # beside the libraries folder by default
        deadline = time.monotonic() + 20
        while len(host.pids()) < 3 and time.monotonic() < deadline:  # serve, two workers (and a resource tracker)
            time.sleep(0.1)
        assert host.process.pid in host.pids() and len(host.pids()) >= 3
        # Its own process group (a kill reaches the workers), in our session (our CPU-share group).
        assert os.getpgid(host.process.pid) == host.process.pid and os.getsid(host.process.pid) == os.getsid(0)
        assert host.stop() == 0
    assert "loaded 1 libraries" in host.log()
    assert host.stop() == 0  # stopping a stopped host only says how it ended


def test_relative_libraries_with_cwd_env_and_log_path(tmp_path: Path) -> None:
    one_library(tmp_path)
    log_path = tmp_path / "server.log"
    with start_host("libraries", cwd=tmp_path, env={"POLYMATH_HARNESS_PROBE": "1"}, log_path=log_path) as host:
        environment = Path(f"/proc/{host.process.pid}/environ").read_bytes().split(b"\0")
        assert b"POLYMATH_HARNESS_PROBE=1" in environment
        assert Path(os.readlink(f"/proc/{host.process.pid}/cwd")) == tmp_path
    assert host.log_path == log_path and "loaded 1 libraries" in log_path.read_text()


def test_a_host_in_its_own_session_is_killed_with_its_workers(tmp_path: Path) -> None:
    host = start_host(one_library(tmp_path), workers=2, own_session=True)
    assert os.getsid(host.process.pid) == host.process.pid
    deadline = time.monotonic() + 20
    while len(host.pids()) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    everyone = host.pids()
    host.kill()
    assert host.process.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in everyone) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(running(pid) for pid in everyone)


def test_a_host_that_exits_raises_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(HostFailed, match=r"(?s)exited with 1.*does not exist"):
        start_host(tmp_path / "missing", timeout=30)


def test_a_host_that_never_gets_ready_is_killed_and_raises_with_its_log(tmp_path: Path) -> None:
    empty = tmp_path / "libraries"
    empty.mkdir()
    host = spawn_host(empty)
    host.wait_until_ready(timeout=60)  # serving (however busy the machine), so its log says so
    with pytest.raises(HostFailed, match=r"(?s)did not answer GET /libraries/none.json with 200 within 1 s.*serving on"):
        host.wait_until_ready("/libraries/none.json", timeout=1)  # 404: never ready
    assert host.process.poll() == -signal.SIGKILL


def test_a_child_imports_this_very_host_package() -> None:
    import host

    assert (harness.PACKAGE_ROOT / "host" / "__init__.py").resolve() == Path(host.__file__).resolve()
