"""A published set you can trust, end to end: three replicas of an S3 origin (moto's real server)
pinning two publisher keys, behind HAProxy with the shipped config, under 16 clients
(tests/replica_cluster.py has the cluster and the load).

- A bucket writer (a leaked write credential, no publisher key) forges the manifest four ways: a
  new library unsigned, a revocation removed and signed with a key of their own, a tag granted to
  their own token key with the publisher's real signature pasted beside it, and the set before
  the revocation put back (validly signed, but older). Every replica refuses each one (counted by
  reason in /metrics, a line in its log), keeps serving the last good set (the revoked token and
  the forger's token stay refused, no injected library), and no request fails.
- The publisher then rotates: a new set signed with the second pinned key reaches every replica
  within --watch-interval + 2 s, without a failed request or a refused poll.
- Pruning while the replicas sync: sets published one after another with --prune (keep the last
  set, a 6 s grace period) while the load runs: the origin shrinks, and no replica ever fails a
  download (no failed poll at all).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from forgery import BucketWriter
from librarian import write_library
from origin_support import MotoServer, publish, running_moto, set_environment
from replica_cluster import (
    BOUND,
    FRESH_MODEL,
    SAMPLE,
    SYNTHETIC_MODEL,
    Admin,
    Cluster,
    Load,
    answers_of,
    phase,
    queries,
    synthetic_library,
)

from host.origin import open_origin
from host.origin.manifest import MANIFEST_KEY
from host.origin.publisher_keys import SigningKey, new_key_file

DESTINATION = "s3://library/trusted"


@dataclass
class Trusted:
    folder: Path
    moto: MotoServer
    source: Path
    admin: Admin
    keys: tuple[SigningKey, SigningKey]
    cluster: Cluster
    asked: list[tuple[dict[str, object], dict[str, str]]]
    expected: list[bytes]
    began: float

    def new_load(self) -> Load:
        """Clients asking through HAProxy, every answer compared with the first answers of the set signed."""
        return Load(self.cluster.url, self.asked, self.expected, pause=0.01)

    def publish(self, *options: str) -> str:
        done = publish(self.source, DESTINATION, "--access", str(self.admin.file), "--quiet", *options,
                       env=self.moto.environment)
        assert done.returncode == 0, done.stderr
        return done.stderr

    def writer(self) -> BucketWriter:
        with set_environment(self.moto.environment):
            return BucketWriter(open_origin(DESTINATION))

    def counter(self, index: int, name: str, labels: str) -> float:
        pattern = re.compile(rf"^{name}\{{{re.escape(labels)}\}} (\S+)$", re.M)
        found = pattern.search(self.cluster.metrics(index))
        assert found is not None, f"no {name}{{{labels}}} in /metrics"
        return float(found[1])

    def refusals(self, index: int, reason: str) -> float:
        return self.counter(index, "polymath_origin_signature_refusals_total", f'source="libraries",reason="{reason}"')

    def failures(self, index: int) -> float:
        return self.counter(index, "polymath_origin_sync_failures_total", 'source="libraries"')

    def wait_refused(self, reason: str, timeout: float = 30) -> None:
        """Until every replica has refused a manifest for `reason` at least once."""
        deadline = time.monotonic() + timeout
        while not all(self.refusals(index, reason) >= 1 for index in range(3)):
            assert time.monotonic() < deadline, f"a replica did not refuse the forgery ({reason})"
            time.sleep(0.1)
        phase(self.began, f"every replica refused it: {reason}")


def small_source(root: Path) -> Path:
    """The sample library (public and private) and a 2,000-bit synthetic one."""
    for path in (SAMPLE / "sample.json", SAMPLE / "access" / "unpublished" / "drafts.json"):
        target = root / path.relative_to(SAMPLE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    write_library(root / "synthetic.json", synthetic_library(2_000, 32, SYNTHETIC_MODEL, seed=19))
    return root


@pytest.fixture(scope="module")
def trusted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trusted]:
    folder = tmp_path_factory.mktemp("trusted")
    began = time.monotonic()
    with running_moto(folder) as moto:
        moto.make_bucket("library")
        keys = (new_key_file(folder / "a.SECRET.pem"), new_key_file(folder / "b.SECRET.pem"))
        (folder / "b.pub").write_text(keys[1].public.text + "\n")
        admin = Admin.create(folder)
        cluster = Cluster(folder, DESTINATION, moto.environment,
                          arguments=("--origin-key", keys[0].public.text, "--origin-key", str(folder / "b.pub")))
        state = Trusted(folder, moto, small_source(folder / "source"), admin, keys, cluster, [], [], began)
        state.publish("--compiled", "--sign", str(keys[0].path))  # the leaver's token is still good in this set...
        admin.revoke_leaver()
        state.publish("--compiled", "--sign", str(keys[0].path))  # ...and revoked in this one, which replicas start with
        phase(began, "published twice, signed")
        try:
            cluster.spawn_replicas()
            cluster.start_balancer()
            state.asked = queries(admin.reader)
            state.expected = answers_of(cluster.url, state.asked)
            for port in cluster.ports:  # every replica answers as the others do
                assert answers_of(f"http://127.0.0.1:{port}", state.asked) == state.expected
            phase(began, "replicas behind haproxy")
            yield state
        finally:
            cluster.stop()


def refused(cluster: Cluster, index: int, token: str) -> bool:
    answer = httpx.post(f"http://127.0.0.1:{cluster.ports[index]}/", json={"count": 1, "count_type": "bit"},
                        headers={"Authorization": f"Bearer {token}"}, timeout=5)
    return answer.status_code == 401


def test_every_replica_refuses_a_bucket_writers_forgeries_under_load_and_a_key_rotation_has_no_gap(
        trusted: Trusted) -> None:
    cluster, writer = trusted.cluster, trusted.writer()
    history = writer.history()
    before_revocation, in_force = history[-2], history[-1]
    source = trusted.source
    with trusted.new_load().running() as load:
        writer.put_manifest(writer.add_library("injected.json", (source / "sample.json").read_bytes()))
        trusted.wait_refused("unsigned")
        forged = writer.edit_access(lambda access: access["revoked"].clear())
        writer.sign_with_own_key(forged, trusted.folder)
        writer.put_manifest(forged)
        trusted.wait_refused("unpinned_key")
        forged, mallory = writer.grant_tag("unpublished")
        writer.paste_signature(forged, in_force)
        writer.put_manifest(forged)
        trusted.wait_refused("bad_signature")
        writer.replay(before_revocation)
        trusted.wait_refused("replayed")
        for index in range(3):
            listed = httpx.get(f"http://127.0.0.1:{cluster.ports[index]}/libraries", timeout=5).text
            assert "injected" not in listed
            assert refused(cluster, index, trusted.admin.leaver), "a forgery un-revoked a token"
            assert refused(cluster, index, mallory), "a forgery granted a tag"
        # The rotation: the publisher signs with the second key, and adds a library.
        write_library(source / "fresh.json", synthetic_library(5, 16, FRESH_MODEL, seed=5))
        trusted.publish("--sign", str(trusted.keys[1].path))
        published = time.monotonic()
        reached = cluster.time_to_reflect(published, trusted.admin.leaver)
        phase(trusted.began, "the set signed with the new key reached each replica after "
              + ", ".join(f"{seconds:.2f} s" for seconds in reached))
    phase(trusted.began, f"load done: {load.answered} answers, {len(load.failures)} failed")
    assert load.failures == [], f"{len(load.failures)} of {load.answered} requests failed: {load.failures[:10]}"
    assert load.answered > 200
    assert max(reached) <= BOUND, f"seconds for each replica to take the set signed with the new key: {reached}"
    assert cluster.wait_in_step(), "the replicas did not take the set signed with the new key"
    for index, host in enumerate(cluster.replicas):
        said = [line for line in host.log().splitlines() if "origin sync failed" in line]
        assert len(said) == 4 and all("refused" in line for line in said), said  # one line per forgery
        assert "Traceback" not in host.log()
        assert all(trusted.refusals(index, reason) >= 1 for reason in ("unsigned", "unpinned_key", "bad_signature", "replayed"))


def test_pruning_while_replicas_sync_costs_no_download(trusted: Trusted) -> None:
    cluster, source = trusted.cluster, trusted.source
    cluster.wait_in_step()
    failures = [trusted.failures(index) for index in range(3)]
    with set_environment(trusted.moto.environment):
        origin = open_origin(DESTINATION)
        stored_before = {item.key for item in origin.list_objects("")}
    deleted = 0
    bits = 0
    with trusted.new_load().running() as load:
        for round_ in range(4):
            bits = 3_000 + round_
            write_library(source / "fresh.json", synthetic_library(bits, 16, FRESH_MODEL, seed=100 + round_))
            said = trusted.publish("--sign", str(trusted.keys[1].path), "--prune", "--keep-sets", "1", "--older-than", "6s")
            line = next(line for line in said.splitlines() if line.startswith("pruned "))
            deleted += int(re.search(r"deleted (\d+) objects", line)[1])  # type: ignore[index]
            phase(trusted.began, line)

        def serving_the_last_set(port: int) -> bool:
            listed = httpx.get(f"http://127.0.0.1:{port}/libraries", timeout=5).json()["libraries"]
            return next(library["bits"] for library in listed if library["name"] == "fresh") == bits

        deadline = time.monotonic() + 30
        while not all(serving_the_last_set(port) for port in cluster.ports):
            assert time.monotonic() < deadline, "a replica did not take the last set"
            time.sleep(0.2)
    phase(trusted.began, f"load done: {load.answered} answers, {len(load.failures)} failed; {deleted} objects pruned")
    assert load.failures == [], f"{len(load.failures)} of {load.answered} requests failed: {load.failures[:10]}"
    assert [trusted.failures(index) for index in range(3)] == failures, "a replica failed a sync while the origin was pruned"
    for host in cluster.replicas:
        assert "no such object" not in host.log()
    with set_environment(trusted.moto.environment):
        stored_after = {item.key for item in origin.list_objects("")}
    assert deleted > 0 and not (stored_before - {MANIFEST_KEY}) <= stored_after, "nothing was pruned"
