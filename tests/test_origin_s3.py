"""S3 origins against moto's real S3 server (a process of its own on loopback): publish, a replica,
and the starts that cannot work, each one clear line and never a credential.

- a wrong bucket or missing credentials with nothing cached: `serve` exits 1 with one line;
- an unreachable endpoint with nothing cached: alive (/healthz 200), not ready (/readyz 503), and
  ready by itself once the store answers and a set is published;
- `publish` to a wrong bucket: one line, exit 1;
- `--access s3://...`: an access file followed at the store grants, then revokes without a restart.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from components import PROJECT, admin
from conftest import start_host
from origin_support import CREDENTIALS, MotoServer, publish, running_moto, set_environment

from access.edge import edge_edition
from host.origin import open_origin
from host.service.harness import RunningHost, child_environment, free_port, http_status, spawn_host

SAMPLE = PROJECT / "libraries"
NO_AMBIENT_CREDENTIALS = {"AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_CONFIG_FILE": "/nonexistent",
                          "AWS_EC2_METADATA_DISABLED": "true"}


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    with running_moto(tmp_path_factory.mktemp("moto")) as server:
        server.make_bucket("library")
        yield server


def serve_once(tmp_path: Path, libraries: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A `serve` expected to stop by itself: its exit code and its output."""
    command = [sys.executable, "-m", "host", "serve", "--libraries", libraries, "--port", str(free_port()),
               "--cache-dir", str(tmp_path / "cache"), "--embedder", "none"]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env=child_environment({**NO_AMBIENT_CREDENTIALS, **env}))


def test_a_replica_serves_what_was_published_to_s3(moto: MotoServer, tmp_path: Path) -> None:
    done = publish(SAMPLE, "s3://library/sample", "--compiled", env={**moto.environment, **NO_AMBIENT_CREDENTIALS})
    assert done.returncode == 0, done.stderr
    assert "published 2 libraries to s3://library/sample" in done.stderr
    host = start_host("s3://library/sample", "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path,
                      env={**moto.environment, **NO_AMBIENT_CREDENTIALS}, ready_path="/readyz")
    try:
        listed = httpx.get(f"{host.url}/libraries").json()
        assert [library["name"] for library in listed["libraries"]] == ["sample"]
        assert "2 libraries in 1 segment, none compiled" in host.log(), host.log()  # the published segment
        metrics = httpx.get(f"{host.url}/metrics").text
        assert 'polymath_origin_in_step{source="libraries"} 1' in metrics
        assert CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in host.log() + metrics
    finally:
        host.stop()


def test_a_wrong_bucket_at_start_is_one_line_and_exit_1(moto: MotoServer, tmp_path: Path) -> None:
    done = serve_once(tmp_path, "s3://no-such-bucket/sample", moto.environment)
    assert done.returncode == 1
    assert done.stderr.strip() == ("error: s3://no-such-bucket/sample: bucket no-such-bucket does not exist "
                                   "(check the URL and AWS_ENDPOINT_URL)")


def test_missing_credentials_at_start_are_one_line_and_exit_1(moto: MotoServer, tmp_path: Path) -> None:
    endpoint = {"AWS_ENDPOINT_URL": moto.environment["AWS_ENDPOINT_URL"], "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}
    done = serve_once(tmp_path, "s3://library/sample", endpoint)
    assert done.returncode == 1
    assert done.stderr.strip().startswith("error: s3://library/sample: no usable AWS credentials (set AWS_ACCESS_KEY_ID")
    assert "\n" not in done.stderr.strip()


def test_publishing_to_a_wrong_bucket_is_one_line_and_nothing_is_published(moto: MotoServer) -> None:
    done = publish(SAMPLE, "s3://no-such-bucket/x", env={**moto.environment, **NO_AMBIENT_CREDENTIALS})
    assert done.returncode == 1
    assert "error: s3://no-such-bucket/x: bucket no-such-bucket does not exist" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_unreachable_store_at_start_is_alive_not_ready_and_ready_once_it_answers(tmp_path: Path) -> None:
    port = free_port()
    server = MotoServer(port, tmp_path / "moto.log")
    host = spawn_host("s3://library/later", "--cache-dir", str(tmp_path / "cache"), "--embedder", "none",
                      "--watch-interval", "0.5", cwd=tmp_path, env={**server.environment, **NO_AMBIENT_CREDENTIALS})
    try:
        host.wait_until_ready("/healthz", timeout=60)
        assert http_status(host.port, "GET", "/readyz")[0] == 503
        assert json.loads(http_status(host.port, "GET", "/readyz")[1])["status"].startswith("waiting for a first good sync")
        said = [line for line in host.log().splitlines() if line.startswith("origin:")]
        assert len(said) == 1 and "cannot connect to the store" in said[0] and "not ready" in said[0]
        server.start()
        server.make_bucket("library")
        done = publish(SAMPLE, "s3://library/later", env={**server.environment, **NO_AMBIENT_CREDENTIALS})
        assert done.returncode == 0, done.stderr
        host.wait_until_ready("/readyz", timeout=host_age(host) + 30)
        assert http_status(host.port, "POST", "/", b"count=1&count_type=bit",
                           {"content-type": "application/x-www-form-urlencoded"})[0] == 200
        assert "Traceback" not in host.log()
    finally:
        host.stop()
        server.stop()


def test_an_access_file_followed_at_an_origin_grants_then_revokes(moto: MotoServer, tmp_path: Path) -> None:
    libraries = tmp_path / "libraries"
    shutil.copytree(SAMPLE, libraries, ignore=shutil.ignore_patterns(".compiled"))
    keys = tmp_path / "access.SECRET.json"
    admin("access", "init", "--alg", "ES256", "--access", str(keys), cwd=tmp_path)
    token = admin("token", "issue", "carol", "--tag", "unpublished", "--access", str(keys), cwd=tmp_path)
    environment = {**moto.environment, **NO_AMBIENT_CREDENTIALS}

    def publish_edge_edition() -> None:
        with set_environment(environment):
            open_origin("s3://library/edge").put("access.json", edge_edition(keys)[0])

    publish_edge_edition()
    host = start_host(libraries, "--access", "s3://library/edge/access.json", "--watch-interval", "0.5",
                      "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path, env=environment, ready_path="/readyz")
    try:
        granted = httpx.get(f"{host.url}/libraries", headers={"Authorization": f"Bearer {token}"}).json()
        assert "access/unpublished/drafts" in [library["name"] for library in granted["libraries"]]
        admin("token", "revoke", "carol", "--access", str(keys), cwd=tmp_path)
        publish_edge_edition()
        host.wait_until(lambda: httpx.get(f"{host.url}/libraries",
                                          headers={"Authorization": f"Bearer {token}"}).status_code == 401,
                        timeout=host_age(host) + 10, what="refuse the revoked token")
        assert 'polymath_origin_in_step{source="access"} 1' in httpx.get(f"{host.url}/metrics").text
    finally:
        host.stop()


def host_age(host: RunningHost) -> float:
    """Seconds since `host` was spawned (the harness's timeouts count from the spawn)."""
    return time.perf_counter() - host.spawned_at


def test_pruning_an_s3_origin_lists_and_deletes_under_its_prefix_only(moto: MotoServer, tmp_path: Path) -> None:
    environment = {**moto.environment, **NO_AMBIENT_CREDENTIALS}
    source = tmp_path / "source"
    shutil.copytree(SAMPLE, source, ignore=shutil.ignore_patterns(".compiled"))
    neighbour = publish(source, "s3://library/neighbour", env=environment)  # another prefix of the same bucket
    assert neighbour.returncode == 0, neighbour.stderr
    for text in ("first", "second", "third"):
        (source / "note.json").write_text(json.dumps({"version": 1, "embedding_model": "test:unit-2", "bits": [
            {"text": text, "embedding": "AACAPwAAAAA=", "token_count": 1, "info": {"url": f"https://example.com/{text}"}}]}))
        done = publish(source, "s3://library/pruned", "--prune", "--keep-sets", "1", "--older-than", "0", env=environment)
        assert done.returncode == 0, done.stderr
    assert "pruned s3://library/pruned: deleted 2 objects" in done.stderr  # the second set's note and manifest
    with set_environment(environment):
        origin = open_origin("s3://library/pruned")
        keys = {item.key for item in origin.list_objects("")}
        neighbours = {item.key for item in open_origin("s3://library/neighbour").list_objects("")}
        fetched = origin.fetch("manifest.json", limit=1 << 20)
    assert fetched is not None
    manifest = json.loads(fetched.body)
    named = {f"objects/sha256/{entry['sha256']}" for entry in manifest["libraries"]}
    assert keys == named | {"manifest.json"} | {key for key in keys if key.startswith("manifests/")}
    assert len([key for key in keys if key.startswith("manifests/")]) == 1
    assert len(neighbours) == 4  # two libraries, one history manifest, manifest.json: untouched
