"""Cold start of a replica (issue 19.7): a fresh `serve --libraries s3://...` with an empty cache,
pulling a published 100k-bit library and its compiled store, against boto3 downloading the same
bytes in a fresh process (the same client library the replica uses).

    .venv/bin/python scripts/bench_origin_coldstart.py            # --bits 100000 --dimension 384 --runs 3

Everything runs on this machine: moto's S3 server (`moto[server]`, the test extra) on loopback, one
process of its own. Reported per run and as medians: the bytes of the set; the reference (a fresh
`python` that imports boto3 and downloads every object the manifest names, one after another and
four at a time: its wall time from spawn to done, and the downloads alone); the replica's time from
spawn to its first `/readyz` 200; and whether it meets the goal: ready within 1.5x the reference's
download time + 1 s. Runs alternate between the two, so the machine's noise falls on both.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from host.service.harness import free_port, spawn_host  # noqa: E402

BUCKET = "coldstart"
PREFIX = f"s3://{BUCKET}/set"

REFERENCE = r"""
import json, sys, time
from concurrent.futures import ThreadPoolExecutor
import boto3
manifest, folder, threads = json.loads(open(sys.argv[1]).read()), sys.argv[2], int(sys.argv[3])
client = boto3.session.Session().client("s3")
keys = sorted({blob["sha256"] for library in manifest["libraries"]
               for blob in [library, *library.get("compiled", {}).get("files", [])]})
started = time.perf_counter()
def get(key): client.download_file("coldstart", f"set/objects/sha256/{key}", f"{folder}/{key}")
with ThreadPoolExecutor(threads) as pool:
    list(pool.map(get, keys))
print(time.perf_counter() - started)
"""


def library(bits: int, dimension: int) -> dict[str, object]:
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((bits, dimension), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return {"version": 1, "embedding_model": f"bench:{dimension}", "bits": [
        {"text": f"bit {row} " + "words " * 20, "embedding": base64.b64encode(vector.tobytes()).decode(),
         "token_count": 25, "info": {"url": f"https://example.com/{row}"}} for row, vector in enumerate(vectors)]}


def wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    for _ in range(600):
        if process.poll() is not None:
            raise SystemExit(f"moto exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("moto did not start")


def run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=PROJECT)
    if done.returncode:
        raise SystemExit(f"{' '.join(command[:4])} failed:\n{done.stderr[-3000:]}")
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", type=int, default=100_000)
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--runs", type=int, default=3)
    arguments = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="coldstart-"))
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
           "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
    moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, process_group=0)
    try:
        wait_for_port(port, moto)
        run([sys.executable, "-c", f"import boto3; boto3.client('s3').create_bucket(Bucket='{BUCKET}')"], env)
        source = work / "source"
        source.mkdir()
        started = time.perf_counter()
        (source / "big.json").write_text(json.dumps(library(arguments.bits, arguments.dimension)))
        print(f"library: {arguments.bits:,} bits x {arguments.dimension}, {(source / 'big.json').stat().st_size:,} bytes,"
              f" written in {time.perf_counter() - started:.1f} s", flush=True)
        started = time.perf_counter()
        run([sys.executable, "-m", "host", "publish", str(source), PREFIX, "--compiled", "--quiet"], env)
        print(f"published (compiled and uploaded) in {time.perf_counter() - started:.1f} s", flush=True)
        manifest_path = work / "manifest.json"
        run([sys.executable, "-c", "import boto3, sys; boto3.client('s3').download_file("
             f"'{BUCKET}', 'set/manifest.json', sys.argv[1])", str(manifest_path)], env)
        manifest = json.loads(manifest_path.read_text())
        total = sum(blob["size"] for blob in {blob["sha256"]: blob for library in manifest["libraries"]
                                               for blob in [library, *library["compiled"]["files"]]}.values())
        print(f"the set: {total:,} bytes in {1 + len(manifest['libraries'][0]['compiled']['files'])} objects", flush=True)
        rows: dict[str, list[float]] = {"reference 1 thread": [], "reference 4 threads": [],
                                         "reference 4 threads, spawn to done": [], "replica spawn to ready": []}
        for attempt in range(arguments.runs):
            for threads in (1, 4):
                folder = work / f"reference-{attempt}-{threads}"
                folder.mkdir()
                started = time.perf_counter()
                done = run([sys.executable, "-c", REFERENCE, str(manifest_path), str(folder), str(threads)], env)
                wall = time.perf_counter() - started
                rows[f"reference {threads} thread{'s' if threads > 1 else ''}"].append(float(done.stdout.strip()))
                if threads == 4:
                    rows["reference 4 threads, spawn to done"].append(wall)
                shutil.rmtree(folder)
            cache = work / f"replica-{attempt}"
            host = spawn_host(PREFIX, "--cache-dir", str(cache), "--embedder", "none", "--watch-interval", "0",
                              cwd=work, env=env)
            try:
                ready = host.wait_until_ready("/readyz", timeout=600)
                assert "compiled big" not in host.log(), "the replica compiled instead of using the published store"
            finally:
                host.stop()
            rows["replica spawn to ready"].append(ready)
            shutil.rmtree(cache)
            print(f"run {attempt + 1}: " + ", ".join(f"{name} {values[-1]:.2f} s" for name, values in rows.items()),
                  flush=True)
        medians = {name: statistics.median(values) for name, values in rows.items()}
        download = min(medians["reference 1 thread"], medians["reference 4 threads"])
        goal = 1.5 * download + 1
        print("\nmedians: " + ", ".join(f"{name} {value:.2f} s" for name, value in medians.items()))
        print(f"goal: ready within 1.5 x {download:.2f} + 1 = {goal:.2f} s; replica {medians['replica spawn to ready']:.2f} s"
              f" ({'met' if medians['replica spawn to ready'] <= goal else 'NOT met'}); replica / download "
              f"{medians['replica spawn to ready'] / download:.2f}x")
    finally:
        moto.terminate()
        moto.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
