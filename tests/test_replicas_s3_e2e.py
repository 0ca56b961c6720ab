"""Three replicas of an S3 origin (moto's real server) behind HAProxy with the shipped config, under
16 clients for 30 s (tests/replica_cluster.py has the scenario): kill -9 a replica and restart it;
stop the store and start it again (moto starts empty), then publish the set again with a new
library and a revoked token. Every answer must be 200 and byte-identical to a single local host's
answer to the same query; the publish and the revocation must reach every replica within
--watch-interval + 2 s; the store's outage shows in /metrics and passes by itself.
"""

from __future__ import annotations

from pathlib import Path

from origin_support import MotoServer, publish, running_moto
from replica_cluster import run_scenario

DESTINATION = "s3://library/published"


class MotoOrigin:
    def __init__(self, moto: MotoServer) -> None:
        self.moto = moto
        self.url = DESTINATION
        self.environment = moto.environment

    def publish(self, source: Path, access_file: Path) -> None:
        done = publish(source, DESTINATION, "--compiled", "--access", str(access_file), "--quiet", env=self.environment)
        assert done.returncode == 0, done.stderr

    def stop(self) -> None:
        self.moto.stop()

    def restart(self) -> None:
        self.moto.start()
        self.moto.make_bucket("library")


def test_replicas_of_an_s3_origin_behind_haproxy_lose_no_request_under_faults(tmp_path: Path) -> None:
    with running_moto(tmp_path) as moto:
        moto.make_bucket("library")
        run_scenario(tmp_path, MotoOrigin(moto), load_seconds=30)
